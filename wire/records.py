"""Kafka RecordBatch v2 (magic 2): parse, validate, patch, iterate and build — sans-IO.

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

Every malformed input raises :class:`CorruptRecordError` (a ``ValueError``) whose message names
the problem and whose ``position`` is the byte position of the offending batch in the buffer; no
``IndexError``/``struct.error``/codec exception escapes.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final, Protocol, TypeAlias

from crc32c import crc32c

from wire import compression as _codec
from wire.varint import (
    INT16_MAX,
    INT16_MIN,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    Buffer,
    VarintError,
    read_varint,
    read_varlong,
    write_varint,
    write_varlong,
)

__all__ = [
    "LOG_OVERHEAD",
    "MAGIC_V2",
    "MIN_BATCH_LENGTH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "RECORD_BATCH_OVERHEAD",
    "AppendFields",
    "BatchHeader",
    "Buffer",
    "CompressionType",
    "CorruptRecordError",
    "Record",
    "RecordLike",
    "build_batch",
    "build_records_batch",
    "iter_batches",
    "iter_records",
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
_ATTRIBUTES_OFFSET: Final = 21
_EPOCH_OFFSET: Final = 12

_COMPRESSION_MASK: Final = 0x07
_TIMESTAMP_TYPE_BIT: Final = 0x08
_TRANSACTIONAL_BIT: Final = 0x10
_CONTROL_BIT: Final = 0x20
_DELETE_HORIZON_BIT: Final = 0x40
_MAX_CODEC_ID: Final = 4  # zstd; a plain int, as enum member lookups cost on the hot path

# Field order matches BatchHeader's, so the unpacked tuple feeds its constructor directly.
_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
# Everything after the CRC, as written by the builder (the CRC is computed over these bytes).
_HEADER_TAIL: Final = struct.Struct(">hiqqqhii")
_BASE_OFFSET: Final = struct.Struct(">q")
_EPOCH: Final = struct.Struct(">i")
_PREFIX: Final = struct.Struct(">qiibI")
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
        return CompressionType(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> int:
        """0 = create time, 1 = log-append time."""
        return 1 if self.attributes & _TIMESTAMP_TYPE_BIT else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & _CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & _DELETE_HORIZON_BIT)


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
    if fields[5] & _COMPRESSION_MASK > _MAX_CODEC_ID:
        raise CorruptRecordError(f"unknown compression codec id {fields[5] & 7}", pos)
    return _header_from_fields(fields)


def validate_batch(buf: Buffer, pos: int = 0) -> BatchHeader:
    """:func:`read_header` plus the CRC-32C check over attributes..end of the batch."""
    header = read_header(buf, pos)
    view = buf if type(buf) is memoryview else memoryview(buf)
    # A memoryview slice shares the buffer: the CRC runs over the caller's bytes, no copy.
    computed = crc32c(view[pos + _ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + header.batch_length])
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
            and fields[3] & _COMPRESSION_MASK <= _MAX_CODEC_ID
            and crc32c(view[pos + _ATTRIBUTES_OFFSET : pos + LOG_OVERHEAD + length]) == fields[2]
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


class RecordLike(Protocol):
    """What :func:`build_batch` reads from a record object (a :class:`Record` fits)."""

    @property
    def timestamp(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]: ...


Headers: TypeAlias = Sequence[tuple[str, bytes | None]]
KeyValue: TypeAlias = tuple[bytes | None, bytes | None]


# --------------------------------------------------------------------------------------------
# Record iteration


class _RecordReader:
    """Cursor over the record bytes of one batch; every read is bounds-checked.

    Errors are raised as CorruptRecordError carrying the batch position, with the record index
    in the message so a tool can say which record is bad. Messages are only formatted on
    failure: the field names passed in are constants, so the good path builds no strings.
    """

    __slots__ = ("batch_pos", "data", "end", "index", "pos")

    def __init__(self, data: Buffer, pos: int, end: int, batch_pos: int) -> None:
        self.data = data
        self.pos = pos
        self.end = end
        self.batch_pos = batch_pos
        self.index = 0

    def fail(self, message: str) -> CorruptRecordError:
        return CorruptRecordError(f"{message} in record {self.index}", self.batch_pos)

    def varint(self, end: int, what: str) -> int:
        # Most record fields (attributes aside: deltas, short lengths, header counts) fit in
        # one byte; decoding those inline skips two calls per field in deep iteration.
        pos = self.pos
        if pos < end:
            byte = self.data[pos]
            if byte < 0x80:
                self.pos = pos + 1
                return (byte >> 1) ^ -(byte & 1)
        try:
            value, self.pos = read_varint(self.data, pos, end)
        except VarintError as exc:
            raise self.fail(f"bad {what}: {exc}") from None
        return value

    def varlong(self, end: int, what: str) -> int:
        try:
            value, self.pos = read_varlong(self.data, self.pos, end)
        except VarintError as exc:
            raise self.fail(f"bad {what}: {exc}") from None
        return value

    def take(self, size: int, end: int, what: str) -> bytes:
        if size > end - self.pos:
            raise self.fail(f"{what} length {size} runs past the end of the record")
        start = self.pos
        self.pos += size
        return bytes(self.data[start : self.pos])

    def nullable(self, end: int, what: str) -> bytes | None:
        size = self.varint(end, what + " length")
        if size == -1:
            return None
        if size < -1:
            raise self.fail(f"{what} has negative length {size}")
        return self.take(size, end, what)


def _read_record(reader: _RecordReader, header: BatchHeader, prev_delta: int) -> tuple[Record, int]:
    size = reader.varint(reader.end, "record length")
    if size < 0:
        raise reader.fail(f"negative record length {size}")
    body_start = reader.pos
    if size > reader.end - body_start:
        raise reader.fail(f"record length {size} runs past the end of the batch")
    end = body_start + size
    if end == body_start:
        raise reader.fail("empty record body")
    reader.pos += 1  # attributes: unused by magic 2, so any value is accepted as Kafka does
    ts_delta = reader.varlong(end, "timestamp delta")
    offset_delta = reader.varint(end, "offset delta")
    # Compaction may leave gaps, but offsets inside a batch only ever increase and stay within
    # lastOffsetDelta; anything else would give two batches overlapping offsets.
    if not prev_delta < offset_delta <= header.last_offset_delta:
        raise reader.fail(
            f"offset delta {offset_delta} out of order (previous {prev_delta}, "
            f"last offset delta {header.last_offset_delta})"
        )
    key = reader.nullable(end, "key")
    value = reader.nullable(end, "value")
    count = reader.varint(end, "header count")
    if count < 0:
        raise reader.fail(f"negative header count {count}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):  # bounded: each header takes at least 2 bytes of a bounded record
        key_size = reader.varint(end, "header key length")
        if key_size < 0:
            raise reader.fail(f"negative header key length {key_size}")
        raw_key = reader.take(key_size, end, "header key")
        try:
            header_key = raw_key.decode("utf-8")
        except UnicodeDecodeError:
            raise reader.fail("header key is not UTF-8") from None
        headers.append((header_key, reader.nullable(end, "header value")))
    if reader.pos != end:
        raise reader.fail(
            f"record declares {size} bytes but its fields use {reader.pos - body_start}"
        )
    if header.timestamp_type == 1:
        timestamp = header.max_timestamp
    else:
        timestamp = header.base_timestamp + ts_delta
    record = Record(
        offset=header.base_offset + offset_delta,
        timestamp=timestamp,
        key=key,
        value=value,
        headers=tuple(headers),
    )
    return record, offset_delta


def _records_payload(buf: Buffer, pos: int, header: BatchHeader) -> tuple[Buffer, int, int]:
    """Return ``(data, start, end)`` of the (decompressed) record bytes of the batch at pos."""
    view = buf if type(buf) is memoryview else memoryview(buf)
    start = pos + RECORD_BATCH_OVERHEAD
    end = pos + LOG_OVERHEAD + header.batch_length
    codec = header.compression
    if codec is CompressionType.NONE:
        return view, start, end
    try:
        data = _codec.decompress(codec, view[start:end])
    except _codec.CompressionError as exc:
        raise CorruptRecordError(f"bad {codec.name.lower()} data: {exc}", pos) from None
    return data, 0, len(data)


def iter_records(buf: Buffer, pos: int = 0, *, verify_crc: bool = True) -> Iterator[Record]:
    """Yield the records of the batch at ``buf[pos:]``, decompressing as needed.

    The batch is checked as by :func:`validate_batch` (CRC skipped with ``verify_crc=False``, for
    tools that want to look inside a damaged batch); then every record is bounds-checked, the
    record count must match recordsCount, and no bytes may follow the last record.
    """
    header = validate_batch(buf, pos) if verify_crc else read_header(buf, pos)
    if header.records_count < 0:
        raise CorruptRecordError(f"negative record count {header.records_count}", pos)
    data, start, end = _records_payload(buf, pos, header)
    reader = _RecordReader(data, start, end, pos)
    prev_delta = -1
    for index in range(header.records_count):
        reader.index = index
        if reader.pos >= end:
            raise CorruptRecordError(
                f"record count mismatch: header says {header.records_count}, batch holds {index}",
                pos,
            )
        record, prev_delta = _read_record(reader, header, prev_delta)
        yield record
    if reader.pos != end:
        raise CorruptRecordError(
            f"record count mismatch: {end - reader.pos} bytes follow the "
            f"{header.records_count} records the header declares",
            pos,
        )


# --------------------------------------------------------------------------------------------
# Building


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} {value} outside [{low}, {high}]")


def _write_nullable(data: bytes | None, out: bytearray) -> None:
    if data is None:
        write_varint(-1, out)
    else:
        write_varint(len(data), out)
        out += data


def _encode_record(
    out: bytearray,
    body: bytearray,
    timestamp_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers,
) -> None:
    body.clear()
    body.append(0)  # record attributes: unused in magic 2
    write_varlong(timestamp_delta, body)
    write_varint(offset_delta, body)
    _write_nullable(key, body)
    _write_nullable(value, body)
    write_varint(len(headers), body)
    for header_key, header_value in headers:
        _write_nullable(header_key.encode("utf-8"), body)
        _write_nullable(header_value, body)
    write_varint(len(body), out)
    out += body


def _attributes(
    compression: CompressionType, timestamp_type: int, is_transactional: bool, is_control: bool
) -> int:
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp type {timestamp_type} is neither 0 (create) nor 1 (append)")
    attributes = int(compression)
    if timestamp_type:
        attributes |= _TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= _TRANSACTIONAL_BIT
    if is_control:
        attributes |= _CONTROL_BIT
    return attributes


def _split_records(
    records: Sequence[KeyValue] | Sequence[RecordLike],
    timestamps: Sequence[int] | None,
    headers: Sequence[Headers] | None,
    base_timestamp: int | None,
) -> tuple[list[KeyValue], list[int], list[Headers]]:
    """Normalise the builder's inputs into keys/values, timestamps and headers per record."""
    count = len(records)
    if timestamps is not None and len(timestamps) != count:
        raise ValueError(f"{len(timestamps)} timestamps for {count} records")
    if headers is not None and len(headers) != count:
        raise ValueError(f"{len(headers)} header lists for {count} records")
    default_ts = NO_TIMESTAMP if base_timestamp is None else base_timestamp
    pairs: list[KeyValue] = []
    stamps: list[int] = []
    all_headers: list[Headers] = []
    items: Sequence[KeyValue | RecordLike] = records
    for index, item in enumerate(items):
        if isinstance(item, tuple):
            key, value = item
            stamp = default_ts
            record_headers: Headers = () if headers is None else headers[index]
        else:
            if headers is not None:
                raise ValueError("headers= is for (key, value) records; record objects carry own")
            key, value, stamp, record_headers = item.key, item.value, item.timestamp, item.headers
        pairs.append((key, value))
        stamps.append(stamp if timestamps is None else timestamps[index])
        all_headers.append(record_headers)
    return pairs, stamps, all_headers


def build_batch(
    records: Sequence[KeyValue] | Sequence[RecordLike],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    base_timestamp: int | None = None,
    timestamps: Sequence[int] | None = None,
    compression: CompressionType = CompressionType.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = 0,
    headers: Sequence[Headers] | None = None,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
    compression_level: int | None = None,
) -> bytes:
    """Encode one v2 batch.

    ``records`` are ``(key, value)`` pairs (with optional per-record ``headers``) or objects with
    ``key``, ``value``, ``headers`` and ``timestamp`` (e.g. :class:`Record`).

    Timestamps: per record from ``timestamps``, else the record object's, else ``base_timestamp``,
    else -1 (none). The batch's baseTimestamp is ``base_timestamp`` or the first record's, and
    maxTimestamp is ``max_timestamp`` (set it to the append time for log-append time) or the
    largest record timestamp; both are -1 for an empty batch, as Kafka writes them.

    Offsets: record i gets offset delta ``offset_deltas[i]`` (default i); deltas must increase,
    and lastOffsetDelta defaults to the last of them (compaction passes the original batch's to
    keep its offset range). Bad arguments raise ``ValueError``.
    """
    pairs, stamps, all_headers = _split_records(records, timestamps, headers, base_timestamp)
    count = len(pairs)
    deltas = list(range(count)) if offset_deltas is None else list(offset_deltas)
    if len(deltas) != count:
        raise ValueError(f"{len(deltas)} offset deltas for {count} records")
    if any(b <= a for a, b in itertools.pairwise(deltas)) or (deltas and deltas[0] < 0):
        raise ValueError(f"offset deltas must be non-negative and increasing: {deltas}")
    last_delta = (deltas[-1] if deltas else 0) if last_offset_delta is None else last_offset_delta
    if deltas and last_delta < deltas[-1]:
        raise ValueError(f"last offset delta {last_delta} below the last record's {deltas[-1]}")
    base_ts = base_timestamp if base_timestamp is not None else (stamps[0] if stamps else -1)
    max_ts = max_timestamp if max_timestamp is not None else max(stamps, default=NO_TIMESTAMP)
    _check_range("base offset", base_offset, INT64_MIN, INT64_MAX)
    _check_range("partition leader epoch", partition_leader_epoch, INT32_MIN, INT32_MAX)
    _check_range("last offset delta", last_delta, 0, INT32_MAX)
    _check_range("producer epoch", producer_epoch, INT16_MIN, INT16_MAX)
    _check_range("base sequence", base_sequence, INT32_MIN, INT32_MAX)
    _check_range("base timestamp", base_ts, INT64_MIN, INT64_MAX)
    _check_range("max timestamp", max_ts, INT64_MIN, INT64_MAX)
    _check_range("producer id", producer_id, INT64_MIN, INT64_MAX)

    payload = bytearray()
    body = bytearray()
    for (key, value), stamp, record_headers, delta in zip(
        pairs, stamps, all_headers, deltas, strict=True
    ):
        _encode_record(payload, body, stamp - base_ts, delta, key, value, record_headers)
    codec = CompressionType(compression)
    records_bytes: bytes | bytearray = payload
    if codec is not CompressionType.NONE:
        records_bytes = _codec.compress(codec, bytes(payload), compression_level)

    tail = bytearray(
        _HEADER_TAIL.pack(
            _attributes(codec, timestamp_type, is_transactional, is_control),
            last_delta,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    tail += records_bytes
    batch_length = len(tail) + (_ATTRIBUTES_OFFSET - LOG_OVERHEAD)
    _check_range("batch length", batch_length, MIN_BATCH_LENGTH, INT32_MAX)
    prefix = _PREFIX.pack(base_offset, batch_length, partition_leader_epoch, MAGIC_V2, crc32c(tail))
    return prefix + tail


def build_records_batch(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    last_offset_delta: int | None = None,
    partition_leader_epoch: int = -1,
    compression: CompressionType = CompressionType.NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    timestamp_type: int = 0,
    base_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Build a batch that keeps each :class:`Record`'s own offset (e.g. after compaction).

    ``base_offset`` defaults to the first record's offset; offset deltas are taken from the
    records' offsets, so gaps left by removed records survive.
    """
    if base_offset is None:
        if not records:
            raise ValueError("an empty batch needs an explicit base_offset")
        base_offset = records[0].offset
    return build_batch(
        records,
        base_offset=base_offset,
        offset_deltas=[record.offset - base_offset for record in records],
        last_offset_delta=last_offset_delta,
        partition_leader_epoch=partition_leader_epoch,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        timestamp_type=timestamp_type,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
    )
