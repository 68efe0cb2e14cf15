"""Transactional offset commits for one shard (KIP-98, KIP-447): TxnOffsetCommit, the end of a
transaction's offsets at its marker, and reading them back when the shard loads its partition.

Functions of the shard's `ShardState`, called only from the `GroupShard`'s handlers and its
load (so only the shard's task changes `state.pending_txn`; see state.py).

* **TxnOffsetCommit** (Kafka's GroupCoordinator.handleTxnCommitOffsets): the group must be
  known, or is created Empty (a transactional producer need not be a member of the group);
  when the request names a member (generation id >= 0, a member id or a group instance id:
  KIP-447's fencing of a zombie consumer's producer) it must be a current member of that
  generation, as for OffsetCommit; without one nothing is checked. The offsets are written to
  the offsets partition as one transactional batch of the producer (its id and epoch, base
  sequence 0 and the transactional flag, as Kafka's coordinator writes it), acks=all, and are
  *pending*: not served by OffsetFetch until the transaction commits. The partition leader
  checks the batch's producer epoch, so a fenced producer's late commit is refused.
* **The marker** (`complete`, Kafka's onTransactionCompleted): once a COMMIT or ABORT marker of
  the producer is written to this shard's partition, COMMIT makes its pending offsets the
  committed ones (each replacing the committed offset unless that one's record came later in
  the log: see the orders in state.py) and ABORT drops them.
* **Loading** (`load_batches`): a transactional batch's offsets become pending for its producer,
  a COMMIT marker applies them, an ABORT marker drops them, and those still open when the load
  ends stay pending (their marker comes later, through `complete`).
* **OffsetFetch with require_stable** (offsets.py) answers UNSTABLE_OFFSET_COMMIT for a
  partition with pending offsets (`ShardState.pending_partitions`).

Pending offsets live per group, per producer id, per partition (Kafka keeps them on the group
the same way); a group with pending offsets is never forgotten as empty.

What Kafka does and ketch does not: KIP-890's verification that the producer added the offsets
partition to its transaction before committing (AddOffsetsToTxn is trusted, as in Kafka before
3.6); a marker written while a TxnOffsetCommit of the same transaction is still being written
(a client that ended its transaction without waiting for the commit's answer) leaves that
commit out of the transaction here, where Kafka raises an internal error.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from actors.group import consumer_lifecycle, membership, offsets
from actors.group.messages import TxnOffsetsStored
from actors.group.metadata import Group, GroupState
from actors.group.state import PendingTxnOffset, ShardState, settle, store_error
from runtime.log.producer_replay import control_marker
from runtime.log.producer_state import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.group_records import (
    GroupRecordError,
    GroupValue,
    OffsetKey,
    OffsetValue,
    Value,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from wire.messages import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from wire.record_reader import iter_records
from wire.records import BatchHeader, CorruptRecordError, iter_batches

log = logging.getLogger(__name__)

# Kafka's coordinator writes a transactional offset commit with base sequence 0; the leader
# does not check it (the append's origin is the coordinator).
TXN_OFFSET_COMMIT_BASE_SEQUENCE: Final = 0
# Errors of the append the producer must hear as they are (it was fenced), as Kafka passes on
# every code it does not map; the rest map as for OffsetCommit.
_PRODUCER_ERRORS: Final = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED})

# -- TxnOffsetCommit -------------------------------------------------------------------------------


def txn_commit(
    state: ShardState, request: TxnOffsetCommitRequest
) -> asyncio.Future[TxnOffsetCommitResponse]:
    answer: asyncio.Future[TxnOffsetCommitResponse] = asyncio.get_running_loop().create_future()
    error = _refusal(state, request)
    if error is not None:
        answer.set_result(_answer(request, lambda _t, _p: error))
        return answer
    now = state.wall_ms()
    entries: list[tuple[tuple[str, int], OffsetValue]] = []
    for topic in request.topics:
        for part in topic.partitions:
            metadata = part.committed_metadata or ""
            if len(metadata.encode()) > offsets.OFFSET_METADATA_MAX_BYTES:
                continue
            entries.append(
                (
                    (topic.name, part.partition_index),
                    OffsetValue(part.committed_offset, metadata, now, part.committed_leader_epoch),
                )
            )
    if not entries:
        answer.set_result(_answer(request, lambda _t, _p: ErrorCode.OFFSET_METADATA_TOO_LARGE))
        return answer
    group_id, producer_id = request.group_id, request.producer_id
    if group_id not in state.consumer.groups:
        state.groups.setdefault(group_id, Group(group_id))
    order = state.next_write_order()
    pending = state.pending_txn.setdefault(group_id, {}).setdefault(producer_id, {})
    made = []
    for tp, value in entries:
        # A second commit of the partition in one transaction replaces the first (Kafka's).
        entry = PendingTxnOffset(value, order)
        pending[tp] = entry
        made.append((tp, entry))
    batch = build_batch(
        [(encode_key(OffsetKey(group_id, *tp)), encode_value(value)) for tp, value in entries],
        timestamps=[now] * len(entries),
        producer_id=producer_id,
        producer_epoch=request.producer_epoch,
        base_sequence=TXN_OFFSET_COMMIT_BASE_SEQUENCE,
        is_transactional=True,
    )
    stored = tuple(made)
    state.write(
        batch,
        lambda error: TxnOffsetsStored(group_id, producer_id, stored, error, answer, request),
    )
    return answer


def _refusal(state: ShardState, request: TxnOffsetCommitRequest) -> ErrorCode | None:
    if not request.group_id:
        return ErrorCode.INVALID_GROUP_ID
    group = state.groups.get(request.group_id)
    if group is not None and group.is_in(GroupState.DEAD):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    names_member = (
        request.generation_id >= 0
        or request.member_id != ""
        or request.group_instance_id is not None
    )
    if not names_member:
        return None  # an older producer (TxnOffsetCommit v0-2) names no member
    consumer_group = state.consumer.groups.get(request.group_id)
    if consumer_group is not None:  # KIP-848's: the generation is the member epoch
        return consumer_lifecycle.commit_refusal(
            consumer_group, request.member_id, request.generation_id
        )
    return membership.member_error(
        state, request.group_id, request.member_id, request.generation_id, request.group_instance_id
    )


def txn_offsets_stored(state: ShardState, message: TxnOffsetsStored) -> None:
    """A TxnOffsetCommit's batch is replicated (its offsets may now be committed by a marker)
    or failed (they are dropped); answer the producer."""
    by_producer = state.pending_txn.get(message.group_id, {})
    pending = by_producer.get(message.producer_id, {})
    if message.error is ErrorCode.NONE:
        for tp, entry in message.pending:
            if pending.get(tp) is entry:
                entry.written = True
        code = ErrorCode.NONE
    else:
        for tp, entry in message.pending:
            if pending.get(tp) is entry:
                del pending[tp]
        _drop_empty(state, message.group_id, message.producer_id)
        code = message.error if message.error in _PRODUCER_ERRORS else store_error(message.error)
    stored = {tp for tp, _ in message.pending}

    def outcome(topic: str, partition: int) -> ErrorCode:
        if (topic, partition) in stored:
            return code
        return ErrorCode.OFFSET_METADATA_TOO_LARGE

    settle(message.answer, _answer(message.request, outcome))


def _answer(
    request: TxnOffsetCommitRequest, outcome: Callable[[str, int], ErrorCode]
) -> TxnOffsetCommitResponse:
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=outcome(topic.name, p.partition_index),
                    )
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def _drop_empty(state: ShardState, group_id: str, producer_id: int) -> None:
    by_producer = state.pending_txn.get(group_id)
    if by_producer is None:
        return
    if producer_id in by_producer and not by_producer[producer_id]:
        del by_producer[producer_id]
    if not by_producer:
        del state.pending_txn[group_id]


# -- the end of a transaction ----------------------------------------------------------------------


def complete(state: ShardState, producer_id: int, *, commit: bool) -> None:
    """The producer's COMMIT (`commit`) or ABORT marker is in the partition: its pending offsets,
    in every group, are committed or dropped."""
    for group_id in list(state.pending_txn):
        by_producer = state.pending_txn[group_id]
        ended = by_producer.pop(producer_id, None)
        if not by_producer:
            del state.pending_txn[group_id]
        if ended is None or not commit:
            continue
        state.groups.setdefault(group_id, Group(group_id))
        for tp, entry in ended.items():
            if not entry.written:
                # The marker came before the commit's record was written: the record is not
                # part of the transaction the marker ended.
                log.warning(
                    "%s: %s %s-%d: transaction of producer %d ended before its offset was "
                    "written; not committed",
                    state.name,
                    group_id,
                    tp[0],
                    tp[1],
                    producer_id,
                )
                continue
            state.commit_offset(group_id, tp, entry.value, entry.order)


# -- loading ---------------------------------------------------------------------------------------


def load_batches(
    state: ShardState,
    records: bytes | memoryview,
    end: int,
    group_values: dict[str, GroupValue | None],
) -> None:
    """The stored batches of one read below `end` (the high watermark when loading began), in
    log order: plain records through `offsets.load_record`, a transactional batch's offsets as
    pending for its producer, markers ending them. Raises GroupRecordError for a record that
    does not decode (the shard then stops: its partition is not one it can serve)."""
    for position, header in iter_batches(records):
        if header.base_offset >= end:
            return
        if header.is_control:
            _load_marker(state, header, records[position : position + header.size_bytes])
            continue
        transactional = header.is_transactional and header.producer_id >= 0
        for record in iter_records(records, position):
            if record.offset >= end:
                return
            if record.key is None:
                raise GroupRecordError(f"offsets-topic record at offset {record.offset} has no key")
            key = decode_key(record.key)
            value = decode_value(key, record.value)
            if transactional and isinstance(key, OffsetKey):
                _load_pending(state, header.producer_id, key, value, record.offset)
            else:
                offsets.load_record(state, key, value, group_values, record.offset)


def _load_pending(
    state: ShardState, producer_id: int, key: OffsetKey, value: Value | None, order: int
) -> None:
    tp = (key.topic, key.partition)
    pending = state.pending_txn.setdefault(key.group, {}).setdefault(producer_id, {})
    if value is None:
        pending.pop(tp, None)
        _drop_empty(state, key.group, producer_id)
    else:
        assert isinstance(value, OffsetValue), value
        pending[tp] = PendingTxnOffset(value, order, written=True)


def _load_marker(state: ShardState, header: BatchHeader, batch: bytes | memoryview) -> None:
    if header.producer_id < 0:
        return
    try:
        control_type, _ = control_marker(batch)
    except CorruptRecordError as exc:
        # A control record ketch cannot read (a future type): it ends no transaction.
        log.warning("%s: control batch at %d not read: %s", state.name, header.base_offset, exc)
        return
    if control_type in (CONTROL_TYPE_COMMIT, CONTROL_TYPE_ABORT):
        complete(state, header.producer_id, commit=control_type == CONTROL_TYPE_COMMIT)
