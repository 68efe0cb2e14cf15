"""Committed offsets for one shard: OffsetCommit and OffsetFetch, loading offset records, expiry
after the retention, removal of deleted partitions' offsets, and the tombstones for both.

Functions of the shard's `ShardState`, called only from the `GroupShard`'s handlers (so only
the shard's task changes `state.offsets`; see state.py). A group's offsets are
`state.offsets[group_id][(topic, partition)]`; a group that has offsets but was never joined (a
simple consumer's, or one whose members are gone) is still in `state.groups`, Empty.

Writes: a commit's records go through the shard with acks=all and are applied to the state
only when they are replicated (`OffsetsStored`), so a failed write changes nothing. Expiry and
removal change the state at once and write tombstones; a failed tombstone write is only logged
(the next leader may then load offsets this one had dropped). Every committed offset is
applied through `ShardState.commit_offset`, which keeps the one whose record came last.

Transactional offset commits (TxnOffsetCommit, their markers, loading them) are txn_offsets.py's;
here OffsetFetch answers UNSTABLE_OFFSET_COMMIT for their partitions when asked for stable
offsets (KIP-447), and a group with such offsets pending is never forgotten as empty.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from actors.group import consumer_lifecycle, membership
from actors.group.messages import OffsetsStored
from actors.group.metadata import Group, GroupState
from actors.group.state import ShardState, settle, store_error
from wire.consumer_group_records import ConsumerGroupKey
from wire.errors import ErrorCode
from wire.group_records import (
    GroupKey,
    GroupValue,
    Key,
    OffsetKey,
    OffsetValue,
    Value,
    build_group_batch,
)
from wire.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)

log = logging.getLogger(__name__)

OFFSET_METADATA_MAX_BYTES: Final = 4096  # Kafka's offset.metadata.max.bytes default

# -- loading ---------------------------------------------------------------------------------------


def load_record(
    state: ShardState,
    key: Key,
    value: Value | None,
    group_values: dict[str, GroupValue | None],
    offset: int,
) -> None:
    """One record (not a transaction's) of the offsets partition at `offset`, read while
    loading (later records override earlier ones, tombstones remove): an offset goes into
    `state.offsets` at once; a group's latest value is kept in `group_values` for the shard to
    rebuild the group from once loaded."""
    if isinstance(key, OffsetKey):
        tp = (key.topic, key.partition)
        if value is None:
            state.forget_committed(key.group, tp)
        else:
            assert isinstance(value, OffsetValue)
            state.commit_offset(key.group, tp, value, offset)
    elif isinstance(key, ConsumerGroupKey):  # a consumer group's (KIP-848: consumer_group.py)
        assert value is None or not isinstance(value, OffsetValue | GroupValue)
        state.consumer.loader.load(key, value)
    else:
        assert value is None or isinstance(value, GroupValue)
        group_values[key.group] = value


# -- OffsetCommit ----------------------------------------------------------------------------------


def commit(state: ShardState, request: OffsetCommitRequest) -> asyncio.Future[OffsetCommitResponse]:
    answer: asyncio.Future[OffsetCommitResponse] = asyncio.get_running_loop().create_future()
    error = _commit_refusal(state, request)
    if error is not None:
        answer.set_result(_commit_answer(request, lambda _t, _p: error))
        return answer
    now = state.wall_ms()
    entries: list[tuple[tuple[str, int], OffsetValue]] = []
    too_large: set[tuple[str, int]] = set()
    for topic in request.topics:
        for part in topic.partitions:
            tp = (topic.name, part.partition_index)
            metadata = part.committed_metadata or ""
            if len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                too_large.add(tp)
                continue
            entries.append(
                (tp, OffsetValue(part.committed_offset, metadata, now, part.committed_leader_epoch))
            )
    if not entries:
        answer.set_result(
            _commit_answer(request, lambda _t, _p: ErrorCode.OFFSET_METADATA_TOO_LARGE)
        )
        return answer
    if request.group_id not in state.consumer.groups:
        state.groups.setdefault(request.group_id, Group(request.group_id))
    batch = build_group_batch(
        [(OffsetKey(request.group_id, t, p), value) for (t, p), value in entries],
        timestamp_ms=now,
    )
    stored = tuple(entries)
    order = state.next_write_order()
    state.write(
        batch,
        lambda error: OffsetsStored(request.group_id, stored, error, answer, request, order),
    )
    if too_large:
        log.info("%s: %d commits refused, metadata too large", state.name, len(too_large))
    return answer


def _commit_refusal(state: ShardState, request: OffsetCommitRequest) -> ErrorCode | None:
    if not request.group_id:
        return ErrorCode.INVALID_GROUP_ID
    consumer_group = state.consumer.groups.get(request.group_id)
    if consumer_group is not None:  # the new protocol's (KIP-848): member epochs are checked
        return consumer_lifecycle.commit_refusal(
            consumer_group, request.member_id, request.generation_id_or_member_epoch
        )
    group = state.groups.get(request.group_id)
    simple = request.generation_id_or_member_epoch < 0 and request.member_id == ""
    if simple:
        # A consumer outside any group commits only while the group has no members.
        if group is not None and group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None
    error = membership.member_error(
        state,
        request.group_id,
        request.member_id,
        request.generation_id_or_member_epoch,
        request.group_instance_id,
    )
    if error is not None:
        return error
    assert group is not None
    # As in Kafka, a member of the current generation may commit while the group prepares a
    # rebalance: an eager consumer commits what it processed before it rejoins (its
    # onPartitionsRevoked), so the next owner starts there instead of reading it again. Only
    # between the joins and the assignment (CompletingRebalance) is a commit refused.
    if group.is_in(GroupState.COMPLETING_REBALANCE):
        return ErrorCode.REBALANCE_IN_PROGRESS
    membership.arm_session(state, group, request.member_id)  # a commit counts as a heartbeat
    return None


def offsets_stored(state: ShardState, message: OffsetsStored) -> None:
    """A commit's records are replicated (or failed): apply them and answer the member."""
    stored = {tp for tp, _ in message.offsets}
    if message.error is ErrorCode.NONE:
        for tp, value in message.offsets:
            state.commit_offset(message.group_id, tp, value, message.order)
        if message.group_id in state.offsets and message.group_id not in state.consumer.groups:
            # Deleted (DeleteGroups) while this was written: the offsets that stand bring the
            # group back Empty, as a loading shard rebuilds it from them.
            state.groups.setdefault(message.group_id, Group(message.group_id))
        code = ErrorCode.NONE
    else:
        code = store_error(message.error)

    def outcome(topic: str, partition: int) -> ErrorCode:
        if (topic, partition) in stored:
            return code
        return ErrorCode.OFFSET_METADATA_TOO_LARGE

    settle(message.answer, _commit_answer(message.request, outcome))


def _commit_answer(
    request: OffsetCommitRequest, outcome: Callable[[str, int], ErrorCode]
) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    OffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=outcome(topic.name, p.partition_index),
                    )
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


# -- OffsetFetch -----------------------------------------------------------------------------------


def fetch(state: ShardState, request: OffsetFetchRequest) -> OffsetFetchResponse:
    """The committed offsets; with `require_stable` (KIP-447: a read_committed consumer's), a
    partition with a transaction's offsets pending is answered UNSTABLE_OFFSET_COMMIT instead,
    and the consumer retries until the transaction has ended."""
    offsets = state.offsets.get(request.group_id, {})
    unstable = state.pending_partitions(request.group_id) if request.require_stable else frozenset()
    wanted: dict[str, list[int]] = {}
    if request.topics is None:
        for name, partition in sorted(offsets):
            wanted.setdefault(name, []).append(partition)
    else:
        for topic in request.topics:
            wanted.setdefault(topic.name, []).extend(topic.partition_indexes)
    return OffsetFetchResponse(
        topics=[
            OffsetFetchResponseTopic(
                name=topic,
                partitions=[
                    _unstable(p) if (topic, p) in unstable else _fetched(offsets.get((topic, p)), p)
                    for p in partitions
                ],
            )
            for topic, partitions in wanted.items()
        ]
    )


def _unstable(partition: int) -> OffsetFetchResponsePartition:
    return OffsetFetchResponsePartition(
        partition_index=partition, metadata="", error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT
    )


def _fetched(value: OffsetValue | None, partition: int) -> OffsetFetchResponsePartition:
    if value is None:
        return OffsetFetchResponsePartition(partition_index=partition, metadata="")
    return OffsetFetchResponsePartition(
        partition_index=partition,
        committed_offset=value.offset,
        committed_leader_epoch=value.leader_epoch,
        metadata=value.metadata,
    )


# -- expiry and removal ----------------------------------------------------------------------------


def expire(state: ShardState) -> None:
    """Offsets of a group Empty for longer than the retention (measured from when it became
    Empty), and a simple consumer's offsets by their commit time, are deleted (tombstones);
    a group left with neither members nor offsets is forgotten."""
    retention = state.config.offsets_retention_ms
    now_wall = state.wall_ms()
    tombstones: list[tuple[Key, Value | None]] = []
    for group_id, offsets in list(state.offsets.items()):
        consumer_group = state.consumer.groups.get(group_id)
        if consumer_group is not None:
            # KIP-848's (Kafka's rule): by commit time, but never a subscribed topic's offset.
            subscribed = consumer_group.subscription_metadata
            expired = [
                tp
                for tp, value in offsets.items()
                if tp[0] not in subscribed and value.commit_timestamp + retention <= now_wall
            ]
            tombstones.extend(_drop_offsets(state, group_id, expired))
            continue
        group = state.groups.get(group_id)
        if group is not None and not group.is_in(GroupState.EMPTY):
            continue
        group_empty_since = group.state_timestamp_ms if group is not None else -1
        simple = group is None or group.protocol_type is None
        if simple:
            # A consumer outside any group: each offset by its own commit time.
            expired = [
                tp
                for tp, value in offsets.items()
                if value.commit_timestamp + retention <= now_wall
            ]
        else:
            # A group's offsets go together, once it has been Empty for the retention.
            expired = list(offsets) if group_empty_since + retention <= now_wall else []
        tombstones.extend(_drop_offsets(state, group_id, expired))
    tombstones.extend(_forget_empty_groups(state))
    _write_tombstones(state, tombstones, "expired")
    consumer_lifecycle.forget_empty_groups(state)


def remove(state: ShardState, partitions: frozenset[tuple[str, int]]) -> None:
    """Every group's offsets of `partitions` (deleted from the cluster) go, with tombstones."""
    tombstones: list[tuple[Key, Value | None]] = []
    for group_id, offsets in list(state.offsets.items()):
        gone = [tp for tp in offsets if tp in partitions]
        tombstones.extend(_drop_offsets(state, group_id, gone))
    # Pending transactional offsets of them go too (Kafka's removeOffsets): nothing will read
    # them, and they would keep their groups from being forgotten.
    for group_id, by_producer in list(state.pending_txn.items()):
        for producer_id, pending in list(by_producer.items()):
            for tp in partitions & pending.keys():
                del pending[tp]
            if not pending:
                del by_producer[producer_id]
        if not by_producer:
            del state.pending_txn[group_id]
    tombstones.extend(_forget_empty_groups(state))
    _write_tombstones(state, tombstones, "of deleted partitions")


def _drop_offsets(
    state: ShardState, group_id: str, partitions: list[tuple[str, int]]
) -> list[tuple[Key, Value | None]]:
    """Forget `partitions` of the group's offsets; their tombstones."""
    for tp in partitions:
        state.forget_committed(group_id, tp)
    return [(OffsetKey(group_id, *tp), None) for tp in partitions]


def _forget_empty_groups(state: ShardState) -> list[tuple[Key, Value | None]]:
    """An Empty group without offsets, committed or pending, is forgotten; a stored one needs
    a tombstone."""
    tombstones: list[tuple[Key, Value | None]] = []
    for group_id, group in list(state.groups.items()):
        if (
            group.is_in(GroupState.EMPTY)
            and group_id not in state.offsets
            and group_id not in state.pending_txn
        ):
            del state.groups[group_id]
            state.waiting.pop(group_id, None)
            if group.generation > 0:
                tombstones.append((GroupKey(group_id), None))
    return tombstones


def _write_tombstones(
    state: ShardState, tombstones: list[tuple[Key, Value | None]], why: str
) -> None:
    if not tombstones:
        return
    batch = build_group_batch(tombstones, timestamp_ms=state.wall_ms())
    log.info("%s: deleting %d offsets-topic entries %s", state.name, len(tombstones), why)
    name = state.name

    def written(error: ErrorCode) -> None:
        # Nothing waits for tombstones: a failure is only logged.
        if error is not ErrorCode.NONE:
            log.warning("%s: writing tombstones %s failed: %s", name, why, error)

    state.write(batch, written)
