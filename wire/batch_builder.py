"""Building v2 batches (`build_batch`, `build_records_batch`) — sans-IO.

The layouts are in :mod:`wire.records`' docstring; a built batch passes
:func:`~wire.records.validate_batch`. Arguments outside a field's range raise ``ValueError``
naming the field, before anything is encoded. Pure functions: no shared state.
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
    write_varint,
    write_varlong,
)

__all__ = ["Headers", "KeyValue", "RecordLike", "build_batch", "build_records_batch"]

# Everything after the CRC, as written by the builder (the CRC is computed over these bytes).
_HEADER_TAIL: Final = struct.Struct(">hiqqqhii")
# baseOffset, batchLength, partitionLeaderEpoch, magic, crc: the bytes before the CRC-covered part.
_PREFIX: Final = struct.Struct(">qiibI")
assert _PREFIX.size == ATTRIBUTES_OFFSET


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
