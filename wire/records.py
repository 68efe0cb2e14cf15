"""Kafka RecordBatch v2 (magic 2): the layout, header parsing, validation and patching — sans-IO.

Batch layout (all integers big-endian; offsets are from the start of the batch):

======  ====  =====================  =========================================================
offset  size  field                  notes
======  ====  =====================  =========================================================
0       8     baseOffset             int64; patched by the broker on append (outside the CRC)
8       4     batchLength            int32; bytes *after* this field, so size = batchLength + 12
12      4     partitionLeaderEpoch   int32; patched by the broker on append (outside the CRC)
16      1     magic                  int8; always 2 here
17      4     crc                    uint32; CRC-32C (Castagnoli) of bytes 21..end of the batch
21      2     attributes             int16; bits 0-2 compression (0 none, 1 gzip, 2 snappy,
                                     3 lz4, 4 zstd), bit 3 timestamp type (0 create time,
                                     1 log-append time), bit 4 transactional, bit 5 control,
                                     bit 6 delete horizon set (baseTimestamp is then the
                                     compaction delete horizon); bits 7-15 unused
23      4     lastOffsetDelta        int32; offset of the last record minus baseOffset
27      8     baseTimestamp          int64; timestamp of the first record (-1 when empty)
35      8     maxTimestamp           int64; largest record timestamp, or the log-append time
43      8     producerId             int64; -1 when not idempotent
51      2     producerEpoch          int16
53      4     baseSequence           int32; -1 when not idempotent
57      4     recordsCount           int32
61      ...   records                the records, compressed as one block when bits 0-2 != 0
======  ====  =====================  =========================================================

Hence ``LOG_OVERHEAD`` = 12 (baseOffset + batchLength) and ``RECORD_BATCH_OVERHEAD`` = 61, and a
batchLength below 49 cannot hold a header. Batches are simply concatenated in a log segment or a
produce/fetch payload.

Record layout (varint = zigzag int32, varlong = zigzag int64, see :mod:`wire.varint`):

- length: varint — bytes of the record after this field
- attributes: int8 — unused, written as 0
- timestampDelta: varlong — timestamp minus the batch's baseTimestamp
- offsetDelta: varint — offset minus the batch's baseOffset
- keyLength: varint (-1 = null key), then key bytes
- valueLength: varint (-1 = null value), then value bytes
- headersCount: varint, then per header: keyLength varint (>= 0), key (UTF-8),
  valueLength varint (-1 = null), value bytes

With log-append time (attribute bit 3) every record's timestamp is the batch's maxTimestamp, as in
Kafka. When the batch is compressed, the bytes after recordsCount are one compressed block (see
:mod:`wire.compression`) holding the concatenated records; recordsCount stays uncompressed.

Hot path: the broker's leader append calls :func:`validate_batch_for_append` on every produced
batch — the checks of :func:`validate_batch` answering a plain tuple instead of a
:class:`BatchHeader` — and writes the patched fields as a new 16-byte prefix (or, elsewhere,
:func:`patch_batch` patches in place). All work on a memoryview without copying: one
``struct.unpack_from`` of the 61-byte header and one C CRC32C over a zero-copy slice. The CRC
covers bytes 21..end, so the patched fields (bytes 0-8 and 12-16) never invalidate it.

Reading the records inside a batch is :mod:`wire.record_reader` (:func:`iter_records`), and
building a batch is :mod:`wire.batch_builder` (:func:`build_batch`); both follow the layouts
above and the constants here.

Every malformed input raises :class:`CorruptRecordError` (a ``ValueError``) whose message names
the problem and whose ``position`` is the byte position of the offending batch in the buffer; no
``IndexError``/``struct.error``/codec exception escapes.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final, TypeAlias

from crc32c import crc32c

from wire.varint import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, Buffer

__all__ = [
    "ATTRIBUTES_OFFSET",
    "COMPRESSION_MASK",
    "CONTROL_BIT",
    "DELETE_HORIZON_BIT",
    "LOG_OVERHEAD",
    "MAGIC_V2",
    "MIN_BATCH_LENGTH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "RECORD_BATCH_OVERHEAD",
    "TIMESTAMP_TYPE_BIT",
    "TRANSACTIONAL_BIT",
    "AppendFields",
    "BatchHeader",
    "Buffer",
    "CompressionType",
    "CorruptRecordError",
    "Record",
    "iter_batches",
    "patch_batch",
    "read_header",
    "validate_batch",
    "validate_batch_for_append",
]

LOG_OVERHEAD: Final = 12
RECORD_BATCH_OVERHEAD: Final = 61
MAGIC_V2: Final = 2
MIN_BATCH_LENGTH: Final = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD
NO_TIMESTAMP: Final = -1
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1

_MAGIC_OFFSET: Final = 16
_CRC_OFFSET: Final = 17
ATTRIBUTES_OFFSET: Final = 21  # where the CRC-covered bytes start
_EPOCH_OFFSET: Final = 12

COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_BIT: Final = 0x08
TRANSACTIONAL_BIT: Final = 0x10
CONTROL_BIT: Final = 0x20
DELETE_HORIZON_BIT: Final = 0x40
_MAX_CODEC_ID: Final = 4  # zstd; a plain int, as enum member lookups cost on the hot path

# Field order matches BatchHeader's, so the unpacked tuple feeds its constructor directly.
_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET: Final = struct.Struct(">q")
_EPOCH: Final = struct.Struct(">i")
assert _HEADER.size == RECORD_BATCH_OVERHEAD


class CorruptRecordError(ValueError):
    """A record batch is malformed; ``position`` is the byte position of the batch in the buffer."""

    position: int

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} (batch at byte {position})")
        self.position = position


class CompressionType(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte header of one v2 batch, as stored (no derived or validated fields)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size_bytes(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> CompressionType:
        # read_header rejects codec ids 5-7, so this conversion cannot fail for a parsed header.
        return CompressionType(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> int:
        """0 = create time, 1 = log-append time."""
        return 1 if self.attributes & TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_BIT)


# Filling the slots directly skips the generated frozen __init__, which calls
# object.__setattr__ by name for each of the 13 fields; calling each slot's descriptor, bound
# once as a default argument (a fast local), costs about half as much. On the produce path that
# difference is a quarter of the 3 us budget for a 16 KB batch. BatchHeader has no __post_init__
# and no defaults, so both constructions yield equal objects (the unit tests compare them).
_SLOTS: Final = vars(BatchHeader)


def _header_from_fields(
    fields: tuple[int, ...],
    _new: Any = object.__new__,
    _base_offset: Any = _SLOTS["base_offset"].__set__,
    _batch_length: Any = _SLOTS["batch_length"].__set__,
    _partition_leader_epoch: Any = _SLOTS["partition_leader_epoch"].__set__,
    _magic: Any = _SLOTS["magic"].__set__,
    _crc: Any = _SLOTS["crc"].__set__,
    _attributes: Any = _SLOTS["attributes"].__set__,
    _last_offset_delta: Any = _SLOTS["last_offset_delta"].__set__,
    _base_timestamp: Any = _SLOTS["base_timestamp"].__set__,
    _max_timestamp: Any = _SLOTS["max_timestamp"].__set__,
    _producer_id: Any = _SLOTS["producer_id"].__set__,
    _producer_epoch: Any = _SLOTS["producer_epoch"].__set__,
    _base_sequence: Any = _SLOTS["base_sequence"].__set__,
    _records_count: Any = _SLOTS["records_count"].__set__,
) -> BatchHeader:
    (
        base_offset,
        batch_length,
        partition_leader_epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records_count,
    ) = fields
    header: BatchHeader = _new(BatchHeader)
    _base_offset(header, base_offset)
    _batch_length(header, batch_length)
    _partition_leader_epoch(header, partition_leader_epoch)
    _magic(header, magic)
    _crc(header, crc)
    _attributes(header, attributes)
    _last_offset_delta(header, last_offset_delta)
    _base_timestamp(header, base_timestamp)
    _max_timestamp(header, max_timestamp)
    _producer_id(header, producer_id)
    _producer_epoch(header, producer_epoch)
    _base_sequence(header, base_sequence)
    _records_count(header, records_count)
    return header


def _short_header(buf: Buffer, pos: int, available: int) -> CorruptRecordError:
    # A torn tail often still carries a readable magic byte; report a wrong one as such, since
    # "bad magic" points at garbage while "truncated" points at an interrupted write.
    if available > _MAGIC_OFFSET and buf[pos + _MAGIC_OFFSET] != MAGIC_V2:
        return CorruptRecordError(
            f"bad magic {buf[pos + _MAGIC_OFFSET]} (expected {MAGIC_V2})", pos
        )
    return CorruptRecordError(
        f"truncated header: {available} of {RECORD_BATCH_OVERHEAD} bytes present", pos
    )


def read_header(buf: Buffer, pos: int = 0) -> BatchHeader:
    """Parse the batch header at ``buf[pos:]`` with structural checks only (no CRC).

    Checks: the header is complete, magic is 2, batchLength >= 49, the codec id is known, and the
    whole batch lies within ``buf`` ("length beyond buffer").
    """
    if pos < 0:
        raise ValueError(f"negative buffer position {pos}")
    available = len(buf) - pos
    if available < RECORD_BATCH_OVERHEAD:
        raise _short_header(buf, pos, available)
    fields = _HEADER.unpack_from(buf, pos)
    if fields[3] != MAGIC_V2:
        raise CorruptRecordError(f"bad magic {fields[3]} (expected {MAGIC_V2})", pos)
    batch_length: int = fields[1]
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batch length {batch_length} below the minimum {MIN_BATCH_LENGTH}", pos
        )
    if batch_length > available - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"length beyond buffer: batch needs {batch_length + LOG_OVERHEAD} bytes, "
            f"{available} present",
            pos,
        )
    if fields[5] & COMPRESSION_MASK > _MAX_CODEC_ID:
        raise CorruptRecordError(f"unknown compression codec id {fields[5] & 7}", pos)
    return _header_from_fields(fields)


def validate_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """:func:`read_header` plus the CRC-32C check over attributes..end of the batch."""
    header = read_header(buf, pos)
    view = buf if type(buf) is memoryview else memoryview(buf)
    # A memoryview slice shares the buffer: the CRC runs over the caller's bytes, no copy.
    computed = crc32c(view[pos + ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + header.batch_length])
    if computed != header.crc:
        raise CorruptRecordError(
            f"CRC mismatch: stored {header.crc:#010x}, computed {computed:#010x}", pos
        )
    return header


# The five header fields a leader append needs, in one unpack that skips the other eight:
# batchLength, magic, crc, attributes, lastOffsetDelta, maxTimestamp, recordsCount.
_APPEND_FIELDS: Final = struct.Struct(">8xi4xbIhi8xq14xi")
assert _APPEND_FIELDS.size == RECORD_BATCH_OVERHEAD
AppendFields: TypeAlias = tuple[int, int, int, int, int, int, int]


def validate_batch_for_append(view: memoryview, pos: int) -> AppendFields:
    """:func:`validate_batch` for the produce hot path: the same checks, fewer answers.

    Returns ``(batch_length, magic, crc, attributes, last_offset_delta, max_timestamp,
    records_count)`` — what `Log.append_as_leader` needs, plus the two checked fields that come
    with them in one unpack — as the plain tuple `struct` made. It exists because building the
    frozen :class:`BatchHeader` is about half of `validate_batch`'s cost, once per produced
    batch, while the append reads five of its thirteen fields. It accepts exactly the batches
    `validate_batch` accepts, with equal fields (a property test checks this); on any failure it
    re-runs `validate_batch`, so the error raised is the very same one. `view` must be a
    memoryview (the CRC then runs over a zero-copy slice).
    """
    try:
        fields: AppendFields = _APPEND_FIELDS.unpack_from(view, pos)
    except struct.error:
        pass  # too short for a header: validate_batch says how
    else:
        length = fields[0]
        # One chained test for the good path; pos < 0 is rejected here because unpack_from would
        # read from the end of the buffer, where validate_batch refuses to.
        if (
            pos >= 0
            and fields[1] == MAGIC_V2
            and MIN_BATCH_LENGTH <= length <= len(view) - pos - LOG_OVERHEAD
            and fields[3] & COMPRESSION_MASK <= _MAX_CODEC_ID
            and crc32c(view[pos + ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + length]) == fields[2]
        ):
            return fields
    validate_batch(view, pos)  # raises the error validate_batch gives for this input
    raise AssertionError(f"validate_batch accepted a batch the fast path rejected at {pos}")


def iter_batches(buf: Buffer, *, validate: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each batch concatenated in ``buf``.

    Raises :class:`CorruptRecordError` (with that batch's ``position``) at the first malformed or
    torn batch, after yielding every good batch before it, so log recovery can truncate there.
    """
    view = memoryview(buf)
    check = validate_batch if validate else read_header
    pos = 0
    end = len(view)
    while pos < end:
        header = check(view, pos)
        yield pos, header
        pos += header.batch_length + LOG_OVERHEAD


def patch_batch(
    buf: bytearray | memoryview, pos: int, *, base_offset: int, partition_leader_epoch: int
) -> None:
    """Overwrite baseOffset (bytes 0-8) and partitionLeaderEpoch (bytes 12-16) in place.

    Neither field is covered by the CRC, so a validated batch stays valid.
    """
    if not INT64_MIN <= base_offset <= INT64_MAX:
        raise ValueError(f"base offset {base_offset} outside int64 range")
    if not INT32_MIN <= partition_leader_epoch <= INT32_MAX:
        raise ValueError(f"partition leader epoch {partition_leader_epoch} outside int32 range")
    if pos < 0:
        raise ValueError(f"negative buffer position {pos}")
    if len(buf) - pos < _MAGIC_OFFSET:
        raise CorruptRecordError(
            f"truncated header: {len(buf) - pos} of {RECORD_BATCH_OVERHEAD} bytes present", pos
        )
    _BASE_OFFSET.pack_into(buf, pos, base_offset)
    _EPOCH.pack_into(buf, pos + _EPOCH_OFFSET, partition_leader_epoch)


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a batch, with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
