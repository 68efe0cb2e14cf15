"""Building v2 batches (`build_batch`, `build_records_batch`, `build_producer_batch`) — sans-IO.

The layouts are in :mod:`wire.records`' docstring; a built batch passes
:func:`~wire.records.validate_batch`. Arguments outside a field's range raise ``ValueError``
naming the field, before anything is encoded. Pure functions: no shared state (the varint
table below is built once at import and only read).

`build_producer_batch` is the producer's hot path, so it does the least Python work per record:
one pass over the records appends each one's bytes to the bytearray that already holds room for
the 61-byte batch header; the header is then packed in place and the CRC32C (the `crc32c`
package, C) is computed once over the whole CRC-covered range. Every varint a record needs (its
length, timestamp delta, offset delta, key and value lengths) comes from `_ZIGZAG`, the
precomputed zigzag encodings of 0 .. 16383, so a record up to 16 KiB in a batch of up to 16384
records costs a few table lookups and one `b"".join`; larger values take `zigzag_varint`'s loop.
`build_batch` (every other caller: tests, compaction, the coordinators) encodes each record with
the same `_record_bytes`.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from typing import Final, Protocol, TypeAlias

from crc32c import crc32c

from wire import compression as _codec
from wire.records import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    CompressionType,
    Record,
)
from wire.varint import (
    INT16_MAX,
    INT16_MIN,
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    write_varlong,
)

__all__ = [
    "Headers",
    "KeyValue",
    "RecordLike",
    "build_batch",
    "build_producer_batch",
    "build_records_batch",
    "zigzag_varint",
]

# Everything after the CRC, as written by the builder (the CRC is computed over these bytes).
_HEADER_TAIL: Final = struct.Struct(">hiqqqhii")
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc: the bytes before the CRC-covered part.
_PREFIX: Final = struct.Struct(">qiibI")
assert _PREFIX.size == ATTRIBUTES_OFFSET
_HEADER_BYTES: Final = ATTRIBUTES_OFFSET + _HEADER_TAIL.size
assert _HEADER_BYTES == 61


def _unsigned_varint(raw: int) -> bytes:
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


# Zigzag varints of the non-negative values below _SMALL (zigzag: value << 1), built once.
_SMALL: Final = 1 << 14
_ZIGZAG: Final[tuple[bytes, ...]] = tuple(_unsigned_varint(v << 1) for v in range(_SMALL))
_NULL: Final = b"\x01"  # varint -1: a null key or value
_ZERO: Final = b"\x00"  # the record's unused attributes byte, or a count of 0 headers


def zigzag_varint(value: int) -> bytes:
    """`value` (an int64) as a zigzag varint: from the table when 0 <= value < 16384."""
    if 0 <= value < _SMALL:
        return _ZIGZAG[value]
    out = bytearray()
    write_varlong(value, out)
    return bytes(out)


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


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} {value} outside [{low}, {high}]")


def _nullable(data: bytes | None) -> bytes:
    """A key, value or header value with its varint length (-1 for null)."""
    if data is None:
        return _NULL
    return zigzag_varint(len(data)) + data


def _record_bytes(
    timestamp_delta: int,
    offset_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Headers,
) -> bytes:
    """One record, its length varint first (layout in wire/records.py)."""
    if not INT32_MIN <= offset_delta <= INT32_MAX:
        raise ValueError(f"varint value {offset_delta} outside int32 range")
    parts = [
        _ZERO,  # record attributes: unused in magic 2
        zigzag_varint(timestamp_delta),
        zigzag_varint(offset_delta),
        _nullable(key),
        _nullable(value),
        zigzag_varint(len(headers)),
    ]
    for header_key, header_value in headers:
        parts.append(_nullable(header_key.encode("utf-8")))
        parts.append(_nullable(header_value))
    body = b"".join(parts)
    return zigzag_varint(len(body)) + body


def _attributes(
    compression: CompressionType, timestamp_type: int, is_transactional: bool, is_control: bool
) -> int:
    if timestamp_type not in (0, 1):
        raise ValueError(f"timestamp type {timestamp_type} is neither 0 (create) nor 1 (append)")
    attributes = int(compression)
    if timestamp_type:
        attributes |= TIMESTAMP_TYPE_BIT
    if is_transactional:
        attributes |= TRANSACTIONAL_BIT
    if is_control:
        attributes |= CONTROL_BIT
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
    for (key, value), stamp, record_headers, delta in zip(
        pairs, stamps, all_headers, deltas, strict=True
    ):
        payload += _record_bytes(stamp - base_ts, delta, key, value, record_headers)
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
    batch_length = len(tail) + (ATTRIBUTES_OFFSET - LOG_OVERHEAD)
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


def build_producer_batch(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    timestamps: Sequence[int],
    headers: Sequence[Headers],
    *,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    compression: CompressionType = CompressionType.NONE,
    compression_level: int | None = None,
) -> bytes:
    """Encode a producer's batch in one pass: record i is (`keys[i]`, `values[i]`,
    `timestamps[i]`, `headers[i]`) at offset delta i, with create-time timestamps (the batch's
    base timestamp is the first record's); one record at least.

    Byte for byte what `build_batch` writes for the same records (the module docstring says
    how it is faster). Bad arguments raise ``ValueError``, as `build_batch`'s do.
    """
    count = len(values)
    if count == 0:
        raise ValueError("a producer batch holds at least one record")
    if not len(keys) == len(timestamps) == len(headers) == count:
        raise ValueError(
            f"{len(keys)} keys, {count} values, {len(timestamps)} timestamps and "
            f"{len(headers)} header lists"
        )
    _check_range("last offset delta", count - 1, 0, INT32_MAX)
    _check_range("producer epoch", producer_epoch, INT16_MIN, INT16_MAX)
    _check_range("base sequence", base_sequence, INT32_MIN, INT32_MAX)
    _check_range("producer id", producer_id, INT64_MIN, INT64_MAX)
    base_ts = max_ts = timestamps[0]
    _check_range("base timestamp", base_ts, INT64_MIN, INT64_MAX)
    out = bytearray(_HEADER_BYTES)
    table = _ZIGZAG
    small = _SMALL
    join = b"".join
    for index, (key, value, stamp, record_headers) in enumerate(
        zip(keys, values, timestamps, headers, strict=True)
    ):
        if stamp > max_ts:
            max_ts = stamp
        if record_headers or value is None or stamp < base_ts:
            # Off the common path (headers, a null value, an earlier timestamp).
            out += _record_bytes(stamp - base_ts, index, key, value, record_headers)
            continue
        delta = stamp - base_ts
        stamp_varint = table[delta] if delta < small else zigzag_varint(delta)
        index_varint = table[index] if index < small else zigzag_varint(index)
        key_part = _NULL if key is None else _nullable(key)
        size = len(value)
        size_varint = table[size] if size < small else zigzag_varint(size)
        length = 2 + len(stamp_varint) + len(index_varint) + len(key_part) + len(size_varint) + size
        out += join(
            (
                table[length] if length < small else zigzag_varint(length),
                _ZERO,
                stamp_varint,
                index_varint,
                key_part,
                size_varint,
                value,
                _ZERO,
            )
        )
    _check_range("max timestamp", max_ts, INT64_MIN, INT64_MAX)
    codec = CompressionType(compression)
    if codec is not CompressionType.NONE:
        compressed = _codec.compress(codec, bytes(out[_HEADER_BYTES:]), compression_level)
        out = bytearray(_HEADER_BYTES) + compressed
    batch_length = len(out) - LOG_OVERHEAD
    _check_range("batch length", batch_length, MIN_BATCH_LENGTH, INT32_MAX)
    _HEADER_TAIL.pack_into(
        out,
        ATTRIBUTES_OFFSET,
        _attributes(codec, 0, is_transactional, False),
        count - 1,
        base_ts,
        max_ts,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    with memoryview(out) as view:
        crc = crc32c(view[ATTRIBUTES_OFFSET:])
    _PREFIX.pack_into(out, 0, 0, batch_length, -1, MAGIC_V2, crc)
    return bytes(out)
