"""Reading the records of one v2 batch (`iter_records`), decompressing as needed — sans-IO.

The record layout is in :mod:`wire.records`' docstring. Every record is bounds-checked: the
record count must match recordsCount, offsets inside a batch only increase and stay within
lastOffsetDelta, and no bytes may follow the last record. Every malformed input raises
:class:`~wire.records.CorruptRecordError` carrying the batch's position, with the record's index
in the message; no ``IndexError``/codec exception escapes. Pure functions and a per-call cursor:
no shared state.
"""

from __future__ import annotations

from collections.abc import Iterator

from wire import compression as _codec
from wire.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    Buffer,
    CompressionType,
    CorruptRecordError,
    Record,
    read_header,
    validate_batch,
)
from wire.varint import VarintError, read_varint, read_varlong

__all__ = ["iter_keys", "iter_records"]


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


def _signed(data: Buffer, at: int, end: int) -> tuple[int, int]:
    """A zigzag varint at ``data[at:end]``: one and two bytes inline (record lengths and offset
    deltas of a batch of a few hundred records take two), the rest by wire.varint."""
    if at + 1 < end:
        first = data[at]
        if first < 0x80:
            return (first >> 1) ^ -(first & 1), at + 1
        second = data[at + 1]
        if second < 0x80:
            raw = (first & 0x7F) | (second << 7)
            return (raw >> 1) ^ -(raw & 1), at + 2
    return read_varlong(data, at, end)


def iter_keys(buf: Buffer, pos: int = 0) -> Iterator[tuple[int, bytes | None]]:
    """Yield ``(offset, key)`` of each record of the batch at ``buf[pos:]``, reading only what
    that needs: each record's length, its offset delta and its key (the log cleaner's offset
    map, which sees every record of a compacted log). About a third of `iter_records`' work per
    record: no timestamp, value or headers are decoded, and no `Record` is built.

    The CRC is not checked (the caller's scan validated the batch). Each record must lie within
    the batch and its key within the record, and the records must fill the batch exactly, or
    CorruptRecordError says which record is bad; no other exception escapes.
    """
    header = read_header(buf, pos)
    if header.records_count < 0:
        raise CorruptRecordError(f"negative record count {header.records_count}", pos)
    data, at, end = _records_payload(buf, pos, header)
    base = header.base_offset
    index = 0
    try:
        for index in range(header.records_count):
            length, at = _signed(data, at, end)
            record_end = at + length
            if length < 0 or record_end > end:
                raise CorruptRecordError(f"record {index} runs past the batch", pos)
            # attributes (one byte), then the timestamp delta, skipped
            _, at = _signed(data, at + 1, record_end)
            delta, at = _signed(data, at, record_end)
            key_length, at = _signed(data, at, record_end)
            if key_length < 0:
                key = None
            elif at + key_length > record_end:
                raise CorruptRecordError(f"key of record {index} runs past the record", pos)
            else:
                key = bytes(data[at : at + key_length])
            yield base + delta, key
            at = record_end
    except (VarintError, IndexError) as exc:  # IndexError: a batch shorter than its header says
        raise CorruptRecordError(f"{exc} in record {index}", pos) from None
    if at != end:
        raise CorruptRecordError(
            f"record count mismatch: {end - at} bytes follow the {header.records_count} records "
            "the header declares",
            pos,
        )
