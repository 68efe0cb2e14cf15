"""Deleting consumer groups, or some of a group's committed offsets, for one shard: DeleteGroups
and OffsetDelete (Kafka's GroupCoordinator.handleDeleteGroups and handleDeleteOffsets).

Functions of the shard's `ShardState`, called only from the `GroupShard`'s handlers (so only the
shard's task changes what they touch; see state.py).

* **DeleteGroups** answers each group:
  INVALID_GROUP_ID for the empty id (ketch never has such a group: its OffsetCommit refuses the
  empty id, which Kafka still takes from old clients); GROUP_ID_NOT_FOUND for a group the shard
  does not know; NON_EMPTY_GROUP for one with members (PreparingRebalance, CompletingRebalance,
  Stable); UNSTABLE_OFFSET_COMMIT for an Empty group with a transaction's offsets pending (below);
  NONE once the group and all its committed offsets are gone: a tombstone for each offset, and
  for the group's record when it has one (generation > 0, as Kafka writes it).
* **OffsetDelete** answers the group as a whole with INVALID_GROUP_ID, GROUP_ID_NOT_FOUND, or
  NON_EMPTY_GROUP for a group with members whose protocol type is not "consumer" (their
  subscriptions cannot be read); otherwise each partition: GROUP_SUBSCRIBED_TO_TOPIC when a
  member subscribes to its topic (every topic counts as subscribed when a member's subscription
  cannot be read, as in Kafka), UNSTABLE_OFFSET_COMMIT when a transaction's offset of it is
  pending, else NONE, its committed offset (if any) deleted with a tombstone. An Empty group
  has no subscriptions: all its partitions are deleted. An Empty group left with no offsets is
  forgotten, as expiry forgets one (with its record's tombstone).

Writes: the state changes at once, so a join or a commit handled next sees the group or the
offset gone, and what it writes lands after the tombstones in the log. The tombstones are
written with acks=all and the request is answered when they are replicated, so a deletion
answered NONE is in the log and survives a coordinator failover: the next leader loads the
tombstones. A failed write puts back what was taken out (`ShardState.undelete`) and answers
what a failed commit would (`store_error`: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, ...),
which clients retry. A commit still being written when its offset was deleted stays deleted
(its record precedes the tombstone: state.py's `deleted`).

Why a transaction's pending offsets refuse the deletion instead of going with it: their marker
comes after the tombstone in the log, and a loading shard applies the marker's offsets over
the tombstone, so the deletion would not survive a failover. The transaction ends (committed,
aborted or timed out) and the client retries. Kafka's older coordinator drops them in memory
only (the same failover gap); its newer one also drops them when loading, which ketch's load
does not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Final

from actors.group import consumer_lifecycle
from actors.group.messages import TombstonesStored
from actors.group.metadata import Group, GroupState
from actors.group.state import Removed, ShardState, settle, store_error
from wire.errors import ErrorCode
from wire.group_records import GroupKey, Key, OffsetKey, OffsetValue, Value, build_group_batch
from wire.kafka.consumer_protocol import read_subscription
from wire.messages import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)

log = logging.getLogger(__name__)

CONSUMER_PROTOCOL_TYPE: Final = "consumer"

# -- DeleteGroups ----------------------------------------------------------------------------------


def delete_groups(
    state: ShardState, group_ids: Sequence[str]
) -> asyncio.Future[dict[str, ErrorCode]]:
    """Each group's outcome (by id), settled once the tombstones are written."""
    answer: asyncio.Future[dict[str, ErrorCode]] = asyncio.get_running_loop().create_future()
    outcome: dict[str, ErrorCode] = {}
    removed: list[Removed] = []
    order = state.next_write_order()
    for group_id in group_ids:
        if group_id in state.consumer.groups:  # KIP-848's: its own records go first
            refusal = consumer_lifecycle.delete_group(state, group_id)
            if refusal is not None:
                outcome[group_id] = refusal
                continue
        refusal = _group_refusal(state, group_id)
        if refusal is not None:
            outcome[group_id] = refusal
            continue
        group = state.groups.pop(group_id)
        state.waiting.pop(group_id, None)  # an Empty group's: only alarms, which find it gone
        taken = _take(state, group_id, list(state.offsets.get(group_id, {})), order)
        removed.append(Removed(group_id, group, tuple(taken)))

    def answered(error: ErrorCode) -> None:
        for entry in removed:
            outcome[entry.group_id] = error
        settle(answer, {group_id: outcome[group_id] for group_id in group_ids})

    _write_tombstones(state, removed, order, answered)
    return answer


def _group_refusal(state: ShardState, group_id: str) -> ErrorCode | None:
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID
    group = state.groups.get(group_id)
    if group is None or group.is_in(GroupState.DEAD):
        return ErrorCode.GROUP_ID_NOT_FOUND
    if not group.is_in(GroupState.EMPTY):
        return ErrorCode.NON_EMPTY_GROUP
    if group_id in state.pending_txn:
        return ErrorCode.UNSTABLE_OFFSET_COMMIT
    return None


# -- OffsetDelete ----------------------------------------------------------------------------------


def delete_offsets(
    state: ShardState, request: OffsetDeleteRequest
) -> asyncio.Future[OffsetDeleteResponse]:
    """The answer, settled once the tombstones are written."""
    answer: asyncio.Future[OffsetDeleteResponse] = asyncio.get_running_loop().create_future()
    group_id = request.group_id
    group = state.groups.get(group_id)
    subscribed = _subscribed(group_id, group)
    if isinstance(subscribed, ErrorCode):
        settle(answer, OffsetDeleteResponse(error_code=subscribed))
        return answer
    assert group is not None  # _subscribed refuses an unknown group
    pending = state.pending_partitions(group_id)
    order = state.next_write_order()
    refused: dict[tuple[str, int], ErrorCode] = {}
    eligible: list[tuple[str, int]] = []
    for topic in request.topics:
        for part in topic.partitions:
            tp = (topic.name, part.partition_index)
            if subscribed(topic.name):
                refused[tp] = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            elif tp in pending:
                refused[tp] = ErrorCode.UNSTABLE_OFFSET_COMMIT
            else:
                eligible.append(tp)
    taken = _take(state, group_id, eligible, order)
    forgotten = None
    if eligible and _forgettable(state, group):
        forgotten = state.groups.pop(group_id)
        state.waiting.pop(group_id, None)
    removed = Removed(group_id, forgotten, tuple(taken))

    def answered(error: ErrorCode) -> None:
        settle(answer, _offsets_answer(request, refused, error))

    _write_tombstones(state, [removed], order, answered)
    return answer


def _subscribed(group_id: str, group: Group | None) -> Callable[[str], bool] | ErrorCode:
    """Whether a member subscribes to a topic, or the group's error (Kafka's order of checks)."""
    if not group_id:
        return ErrorCode.INVALID_GROUP_ID
    if group is None or group.is_in(GroupState.DEAD):
        return ErrorCode.GROUP_ID_NOT_FOUND
    if group.is_in(GroupState.EMPTY):
        return lambda _topic: False
    if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return ErrorCode.NON_EMPTY_GROUP
    topics = subscribed_topics(group)
    if topics is None:
        return lambda _topic: True
    return topics.__contains__


def subscribed_topics(group: Group) -> frozenset[str] | None:
    """The topics the group's members subscribe to (their current subscriptions, in the
    group's chosen protocol), or None when one cannot be read: no protocol chosen yet, a
    member without it, or a blob that is not a consumer subscription."""
    protocol = group.protocol
    if protocol is None:
        return None
    topics: set[str] = set()
    for member in group.members.values():
        try:
            blob = member.metadata_for(protocol)
        except KeyError:
            return None
        subscription = read_subscription(blob)
        if subscription is None:
            return None
        topics.update(subscription)
    return frozenset(topics)


def _forgettable(state: ShardState, group: Group) -> bool:
    return (
        group.is_in(GroupState.EMPTY)
        and group.group_id not in state.offsets
        and group.group_id not in state.pending_txn
    )


def _offsets_answer(
    request: OffsetDeleteRequest, refused: dict[tuple[str, int], ErrorCode], error: ErrorCode
) -> OffsetDeleteResponse:
    """Each partition of the request: its refusal, else the write's outcome."""
    return OffsetDeleteResponse(
        topics=[
            OffsetDeleteResponseTopic(
                name=topic.name,
                partitions=[
                    OffsetDeleteResponsePartition(
                        partition_index=p.partition_index,
                        error_code=refused.get((topic.name, p.partition_index), error),
                    )
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


# -- the tombstones --------------------------------------------------------------------------------


def _take(
    state: ShardState, group_id: str, partitions: Sequence[tuple[str, int]], order: int
) -> list[tuple[tuple[str, int], OffsetValue, int]]:
    """Delete the group's committed offsets of `partitions` (tombstones at `order`); what was
    committed, with each offset's own order, for putting it back."""
    taken = []
    for tp in partitions:
        previous = state.delete_committed(group_id, tp, order)
        if previous is not None:
            value, previous_order = previous
            taken.append((tp, value, previous_order))
    return taken


def _write_tombstones(
    state: ShardState, removed: Sequence[Removed], order: int, answer: Callable[[ErrorCode], None]
) -> None:
    """Write the tombstones of what `removed` took out, then `tombstones_stored` answers; with
    nothing stored to delete (groups that were never written), answer at once."""
    tombstones: list[tuple[Key, Value | None]] = []
    for entry in removed:
        tombstones.extend((OffsetKey(entry.group_id, *tp), None) for tp, _, _ in entry.offsets)
        if entry.group is not None and entry.group.generation > 0:
            tombstones.append((GroupKey(entry.group_id), None))
    done = tuple(removed)
    if not tombstones:
        tombstones_stored(state, TombstonesStored(done, order, ErrorCode.NONE, answer))
        return
    batch = build_group_batch(tombstones, timestamp_ms=state.wall_ms())
    state.write(batch, lambda error: TombstonesStored(done, order, error, answer))


def tombstones_stored(state: ShardState, message: TombstonesStored) -> None:
    """The tombstones are replicated: what they delete is gone for good. Or the write failed:
    what was taken out goes back, and the request hears the error."""
    if message.error is not ErrorCode.NONE:
        log.warning("%s: writing deletion tombstones failed: %s", state.name, message.error.name)
        for entry in message.removed:
            state.undelete(entry, message.order)
        message.answer(store_error(message.error))
        return
    for entry in message.removed:
        if entry.group is not None:
            entry.group.transition(GroupState.DEAD, state.wall_ms())
        if entry.offsets or entry.group is not None:
            log.info(
                "%s: deleted %s%s",
                state.name,
                f"group {entry.group_id} and " if entry.group is not None else "",
                f"{len(entry.offsets)} committed offsets of {entry.group_id}",
            )
    message.answer(ErrorCode.NONE)
