"""What a leader checks and stamps in a produce request's batches before `Log` appends them.

`Log.append_as_leader` handles the usual request of one batch inline (it is the produce hot
path); a request of several batches, a rejected batch and the key check of compacted topics come
here. The rules, as Kafka's leader applies them:

* each batch passes `wire.records.validate_batch` (structure and CRC-32C);
* it is at most ``max.message.bytes`` (RecordTooLargeError);
* it numbers its records 0..n-1 (lastOffsetDelta = recordsCount - 1) and holds at least one,
  since a producer's batch that did not would let a client burn offsets or hide records from
  offset assignment (InvalidRecordError);
* it is not a control batch: only the broker writes those (InvalidRecordError);
* on a compacted topic every record has a key (InvalidRecordError).

Stamping: each batch is written as a new 16-byte prefix (baseOffset = the next offset,
batchLength unchanged, partitionLeaderEpoch = the leader's epoch; both replaced fields lie
outside the CRC) followed by a view of the rest of the producer's bytes, so nothing is copied.

Pure functions over the caller's bytes: no state.
"""

from __future__ import annotations

import struct
from typing import Final, NoReturn

from runtime.log.errors import InvalidRecordError, RecordTooLargeError
from runtime.log.time_index import NO_TIMESTAMP
from wire.record_reader import iter_records
from wire.records import (
    CONTROL_BIT,
    LOG_OVERHEAD,
    BatchHeader,
    iter_batches,
    validate_batch,
    validate_batch_for_append,
)

# baseOffset, batchLength, partitionLeaderEpoch: the first 16 bytes of a batch, as rewritten by
# the leader (batchLength is copied unchanged; it sits between the two patched fields).
_PATCHED_PREFIX: Final = struct.Struct(">qii")
pack_prefix: Final = _PATCHED_PREFIX.pack
PREFIX_SIZE: Final = _PATCHED_PREFIX.size

Chunks = list[bytes | memoryview]


def patch_batches(
    view: memoryview,
    leader_epoch: int,
    first_offset: int,
    first: tuple[int, int, int],
    max_message_bytes: int,
) -> tuple[Chunks, int, int, int]:
    """`Log.append_as_leader` for a request of several batches, the first already checked
    (``first`` is its batch length, record count and max timestamp). Returns the chunks to
    write (per batch, a patched 16-byte prefix and a view of the rest), the next offset,
    the max timestamp and the offset of the max timestamp."""
    length, count, batch_max_ts = first
    position, end = 0, len(view)
    chunks: Chunks = []
    offset = first_offset
    max_ts, offset_of_max_ts = NO_TIMESTAMP, first_offset
    while True:
        size = length + LOG_OVERHEAD
        chunks.append(pack_prefix(offset, length, leader_epoch))
        chunks.append(view[position + PREFIX_SIZE : position + size])
        offset += count
        if batch_max_ts > max_ts:
            max_ts, offset_of_max_ts = batch_max_ts, offset - 1
        position += size
        if position >= end:
            return chunks, offset, max_ts, offset_of_max_ts
        length, _, _, attributes, last_delta, batch_max_ts, count = validate_batch_for_append(
            view, position
        )
        if (
            length + LOG_OVERHEAD > max_message_bytes
            or count < 1
            or last_delta != count - 1
            or attributes & CONTROL_BIT
        ):
            reject_batch(position, validate_batch(view, position), max_message_bytes)


def reject_batch(position: int, header: BatchHeader, max_message_bytes: int) -> NoReturn:
    """Raise the error for a produced batch that passed `validate_batch` but breaks a leader
    rule (the fast checks found one; this says which)."""
    if header.size_bytes > max_message_bytes:
        raise RecordTooLargeError(
            f"batch at byte {position} is {header.size_bytes} bytes, over "
            f"max.message.bytes {max_message_bytes}"
        )
    # A producer's batch numbers its records 0..n-1; anything else would let a client burn
    # offsets or hide records from offset assignment.
    if header.records_count < 1 or header.last_offset_delta != header.records_count - 1:
        raise InvalidRecordError(
            f"batch at byte {position} has {header.records_count} records but "
            f"last offset delta {header.last_offset_delta}"
        )
    assert header.is_control, header
    raise InvalidRecordError(f"batch at byte {position}: clients cannot write control batches")


def require_keys(view: memoryview) -> None:
    """A compacted topic keeps the latest record per key, so a record without a key could never
    be cleaned: Kafka refuses it (INVALID_RECORD). This reads every record (decompressing), so
    it runs only for compacted topics; the CRC check of the normal path still follows."""
    for position, _ in iter_batches(view):
        for index, record in enumerate(iter_records(view, position)):
            if record.key is None:
                raise InvalidRecordError(
                    f"batch at byte {position}, record {index}: a compacted topic needs a key "
                    "on every record"
                )
