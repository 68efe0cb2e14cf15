"""Folding a log's batches into its producer state (`runtime.log.producer_state`).

`Log` rebuilds the state this way after loading and after a truncation (from the newest usable
snapshot to the log end offset), and folds each follower append batch by batch. Only the batch
headers are read, except for the control batches of idempotent producers (transaction markers),
whose one record says COMMIT or ABORT and the coordinator epoch.

Also here: reading a produced batch's producer fields on the leader's hot path without building
a `BatchHeader`, and the bytes of a transaction marker (`end_txn_marker_batch`), the control
batch a partition leader writes for WriteTxnMarkers.

Pure functions over their arguments; the state belongs to the caller's log, hence to one actor.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Sequence
from typing import Final

from runtime.log.producer_state import (
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    CompletedTxn,
    ProducerStateManager,
)
from runtime.log.segment import LogSegment
from wire.batch_builder import build_batch
from wire.record_reader import iter_records
from wire.records import BatchHeader, CorruptRecordError

logger = logging.getLogger(__name__)

# producerId int64, producerEpoch int16, baseSequence int32: bytes 43..57 of a v2 batch.
_PRODUCER_FIELDS: Final = struct.Struct(">qhi")
_PRODUCER_FIELDS_OFFSET: Final = 43
# A control record's key and value: version int16 and type int16; version int16 and
# coordinator epoch int32 (Kafka's ControlRecordType and EndTransactionMarker).
_CONTROL_KEY: Final = struct.Struct(">hh")
_MARKER_VALUE: Final = struct.Struct(">hi")


def producer_fields(view: memoryview, position: int) -> tuple[int, int, int]:
    """(producer id, producer epoch, base sequence) of the batch at `position`, already
    validated by the caller."""
    fields: tuple[int, int, int] = _PRODUCER_FIELDS.unpack_from(
        view, position + _PRODUCER_FIELDS_OFFSET
    )
    return fields


def control_marker(batch: bytes | bytearray | memoryview) -> tuple[int | None, int | None]:
    """(control type, coordinator epoch) of a control batch's record; (None, None) when the
    batch holds no record (the cleaner emptied it). Raises CorruptRecordError when the record
    is not a control record ketch can read."""
    for record in iter_records(batch, verify_crc=False):
        if record.key is None or len(record.key) < _CONTROL_KEY.size:
            raise CorruptRecordError("control record without a type", 0)
        _, control_type = _CONTROL_KEY.unpack_from(record.key)
        if record.value is None or len(record.value) < _MARKER_VALUE.size:
            return control_type, None
        _, coordinator_epoch = _MARKER_VALUE.unpack_from(record.value)
        return control_type, coordinator_epoch
    return None, None


def end_txn_marker_batch(
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    *,
    commit: bool,
    base_offset: int,
    leader_epoch: int,
    timestamp: int,
) -> bytes:
    """The control batch Kafka writes to end a transaction: one record whose key is (version 0,
    type COMMIT or ABORT) and whose value is (version 0, coordinator epoch), in a transactional
    control batch of the producer, with no sequence."""
    control_type = CONTROL_TYPE_COMMIT if commit else CONTROL_TYPE_ABORT
    return build_batch(
        [(_CONTROL_KEY.pack(0, control_type), _MARKER_VALUE.pack(0, coordinator_epoch))],
        base_offset=base_offset,
        partition_leader_epoch=leader_epoch,
        base_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        is_transactional=True,
        is_control=True,
    )


def fold_batch(
    state: ProducerStateManager, header: BatchHeader, batch: bytes | bytearray | memoryview | None
) -> CompletedTxn | None:
    """Fold one appended batch; `batch` (its bytes) is needed only for a control batch of an
    idempotent producer, and read only then. Returns the transaction a marker completed."""
    if header.producer_id < 0:
        return None
    if not header.is_control:
        state.update_from_batch(header)
        return None
    assert batch is not None, header
    try:
        control_type, coordinator_epoch = control_marker(batch)
    except CorruptRecordError as exc:
        # The batch passed its CRC when it was appended; a marker ketch cannot read (a future
        # control type's layout) ends no transaction it knows of.
        logger.warning(
            "control batch at offset %d not read as a marker: %s", header.base_offset, exc
        )
        control_type = coordinator_epoch = None
    if control_type in (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT) and coordinator_epoch is not None:
        return state.update_from_batch(header, control_type, coordinator_epoch)
    state.update_map_end_offset(header.next_offset)
    return None


def replay(
    state: ProducerStateManager,
    segments: Sequence[LogSegment],
    start: int,
    end: int,
    *,
    on_completed: Callable[[CompletedTxn], None] | None = None,
) -> int:
    """Fold every batch with offsets in [start, end) into `state`, telling `on_completed` of
    each transaction a marker ends; returns how many batches of idempotent producers were
    folded."""
    folded = 0
    for index, segment in enumerate(segments):
        following = segments[index + 1].base_offset if index + 1 < len(segments) else None
        if following is not None and following <= start:
            continue
        if segment.base_offset >= end:
            break
        for position, header in segment.batch_headers_from(start):
            if header.base_offset >= end:
                break
            if header.producer_id >= 0:
                batch = (
                    segment.read_batch_at(position, header.size_bytes)
                    if header.is_control
                    else None
                )
                completed = fold_batch(state, header, batch)
                if completed is not None and on_completed is not None:
                    on_completed(completed)
                folded += 1
    state.update_map_end_offset(end)
    return folded
