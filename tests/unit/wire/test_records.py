"""wire.records: header parsing, CRC validation, patching, batch iteration, record round trips."""

from __future__ import annotations

import itertools
import struct

import pytest
from crc32c import crc32c

from wire.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CompressionType,
    CorruptRecordError,
    Record,
    build_batch,
    build_records_batch,
    iter_batches,
    iter_records,
    patch_batch,
    read_header,
    validate_batch,
)

HEADER = struct.Struct(">qiibIhiqqqhii")


def recrc(batch: bytes | bytearray, pos: int = 0) -> bytearray:
    """Return a copy of ``batch`` whose CRC matches its (possibly edited) contents."""
    out = bytearray(batch)
    (length,) = struct.unpack_from(">i", out, pos + 8)
    struct.pack_into(">I", out, pos + 17, crc32c(bytes(out[pos + 21 : pos + 12 + length])))
    return out


def edit_header(batch: bytes, **fields: int) -> bytearray:
    """Rewrite header fields by BatchHeader name and fix the CRC."""
    values = dict(zip(BatchHeader.__slots__, HEADER.unpack_from(batch), strict=True))
    values.update(fields)
    out = bytearray(batch)
    HEADER.pack_into(out, 0, *values.values())
    return recrc(out)


def sample_batch(**kwargs: object) -> bytes:
    records = [(b"key-0", b"value-0"), (None, b"value-1"), (b"key-2", None)]
    return build_batch(records, timestamps=[1_000, 999, 1_005], **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- constants, header


def test_overhead_constants_match_the_layout() -> None:
    assert LOG_OVERHEAD == 12
    assert RECORD_BATCH_OVERHEAD == 61 == HEADER.size


def test_read_header_returns_every_field_and_derived_properties() -> None:
    batch = build_batch(
        [(b"a", b"1"), (b"b", b"2")],
        base_offset=100,
        partition_leader_epoch=7,
        timestamps=[50, 70],
        producer_id=42,
        producer_epoch=3,
        base_sequence=9,
        is_transactional=True,
        compression=CompressionType.GZIP,
    )
    header = read_header(batch)
    assert header.base_offset == 100
    assert header.batch_length == len(batch) - LOG_OVERHEAD
    assert header.partition_leader_epoch == 7
    assert header.magic == 2
    assert header.crc == crc32c(batch[21:])
    assert header.last_offset_delta == 1
    assert (header.base_timestamp, header.max_timestamp) == (50, 70)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 9)
    assert header.records_count == 2
    assert header.last_offset == 101
    assert header.next_offset == 102
    assert header.size_bytes == len(batch)
    assert header.compression is CompressionType.GZIP
    assert header.timestamp_type == 0
    assert header.is_transactional
    assert not header.is_control
    assert not header.has_delete_horizon


def test_attribute_bits() -> None:
    header = read_header(sample_batch(is_control=True, timestamp_type=1))
    assert header.attributes == 0x20 | 0x08
    assert header.is_control
    assert header.timestamp_type == 1
    assert not header.is_transactional
    for codec in CompressionType:
        assert read_header(sample_batch(compression=codec)).compression is codec


def test_fast_header_construction_equals_the_dataclass_constructor() -> None:
    batch = sample_batch(base_offset=3, producer_id=5)
    fields = HEADER.unpack_from(batch)
    parsed = read_header(batch)
    assert parsed == BatchHeader(*fields)
    assert hash(parsed) == hash(BatchHeader(*fields))
    with pytest.raises(AttributeError):
        parsed.base_offset = 1  # type: ignore[misc]


def test_read_header_at_a_position_inside_a_larger_buffer() -> None:
    first = sample_batch(base_offset=0)
    second = sample_batch(base_offset=3)
    buf = memoryview(first + second)
    assert read_header(buf, len(first)).base_offset == 3
    assert validate_batch(buf, len(first)).base_offset == 3


@pytest.mark.parametrize("size", range(RECORD_BATCH_OVERHEAD))
def test_truncated_header_is_reported(size: int) -> None:
    batch = sample_batch()
    with pytest.raises(CorruptRecordError, match="truncated header") as info:
        read_header(batch[:size])
    assert info.value.position == 0


def test_bad_magic_is_reported_even_in_a_short_header() -> None:
    batch = bytearray(sample_batch())
    batch[16] = 1
    with pytest.raises(CorruptRecordError, match="bad magic 1"):
        read_header(batch)
    with pytest.raises(CorruptRecordError, match="bad magic 1"):
        read_header(batch[:30])


def test_batch_length_below_minimum() -> None:
    batch = bytearray(sample_batch())
    struct.pack_into(">i", batch, 8, 48)
    with pytest.raises(CorruptRecordError, match="batch length 48 below the minimum 49"):
        read_header(batch)
    struct.pack_into(">i", batch, 8, -5)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        read_header(batch)


def test_length_beyond_buffer() -> None:
    batch = sample_batch()
    with pytest.raises(CorruptRecordError, match="length beyond buffer") as info:
        read_header(batch[:-1])
    assert info.value.position == 0
    assert "batch at byte 0" in str(info.value)


def test_unknown_codec_id_is_rejected() -> None:
    batch = edit_header(sample_batch(), attributes=5)
    with pytest.raises(CorruptRecordError, match="unknown compression codec id 5"):
        read_header(batch)


def test_read_header_does_not_check_the_crc_but_validate_does() -> None:
    batch = bytearray(sample_batch())
    batch[-1] ^= 0x01
    read_header(batch)
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        validate_batch(batch)


def test_negative_position_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="negative buffer position"):
        read_header(sample_batch(), -1)


@pytest.mark.parametrize("index", range(21, 61))
def test_crc_covers_every_header_byte_after_the_crc(index: int) -> None:
    batch = bytearray(sample_batch())
    batch[index] ^= 0x40
    with pytest.raises(CorruptRecordError):
        validate_batch(batch)


def test_validate_accepts_bytes_bytearray_and_memoryview() -> None:
    batch = sample_batch()
    expected = read_header(batch)
    for buf in (batch, bytearray(batch), memoryview(batch), memoryview(bytearray(batch))):
        assert validate_batch(buf) == expected


# ---------------------------------------------------------------------------- patching


def test_patch_rewrites_only_base_offset_and_epoch_and_keeps_crc_valid() -> None:
    original = sample_batch(base_offset=0, partition_leader_epoch=-1)
    buf = bytearray(b"\xff" * 5 + original + b"\xee" * 5)
    patch_batch(buf, 5, base_offset=1_234_567_890_123, partition_leader_epoch=77)
    header = validate_batch(buf, 5)
    assert header.base_offset == 1_234_567_890_123
    assert header.partition_leader_epoch == 77
    assert header.last_offset == 1_234_567_890_125
    changed = [i for i in range(len(buf)) if buf[i] != (b"\xff" * 5 + original + b"\xee" * 5)[i]]
    assert changed
    assert all(5 <= i < 13 or 17 <= i < 21 for i in changed)
    assert [r.offset for r in iter_records(buf, 5)] == [
        1_234_567_890_123,
        1_234_567_890_124,
        1_234_567_890_125,
    ]


def test_patch_through_a_memoryview() -> None:
    buf = bytearray(sample_batch())
    patch_batch(memoryview(buf), 0, base_offset=9, partition_leader_epoch=2)
    assert validate_batch(buf).base_offset == 9


def test_patch_rejects_out_of_range_values_and_short_buffers() -> None:
    buf = bytearray(sample_batch())
    with pytest.raises(ValueError, match="base offset"):
        patch_batch(buf, 0, base_offset=1 << 63, partition_leader_epoch=0)
    with pytest.raises(ValueError, match="leader epoch"):
        patch_batch(buf, 0, base_offset=0, partition_leader_epoch=1 << 31)
    with pytest.raises(CorruptRecordError, match="truncated header"):
        patch_batch(bytearray(10), 0, base_offset=0, partition_leader_epoch=0)
    with pytest.raises(ValueError, match="negative buffer position"):
        patch_batch(buf, -1, base_offset=0, partition_leader_epoch=0)


# ---------------------------------------------------------------------------- iter_batches


def concatenated(count: int) -> tuple[bytes, list[int]]:
    parts: list[bytes] = []
    positions: list[int] = []
    pos = 0
    for index in range(count):
        batch = build_batch([(None, bytes([index]) * (index * 7))], base_offset=index)
        parts.append(batch)
        positions.append(pos)
        pos += len(batch)
    return b"".join(parts), positions


def test_iter_batches_yields_each_position_and_header() -> None:
    buf, positions = concatenated(5)
    seen = list(iter_batches(buf))
    assert [pos for pos, _ in seen] == positions
    assert [header.base_offset for _, header in seen] == [0, 1, 2, 3, 4]
    assert list(iter_batches(b"")) == []


def test_iter_batches_stops_at_a_torn_tail_with_its_position() -> None:
    buf, positions = concatenated(4)
    torn = buf[:-3]
    batches = iter_batches(torn)
    assert [pos for pos, _ in itertools.islice(batches, 3)] == positions[:3]
    with pytest.raises(CorruptRecordError, match="length beyond buffer") as info:
        next(batches)
    assert info.value.position == positions[3]


def test_iter_batches_stops_at_a_corrupt_batch_in_the_middle() -> None:
    buf, positions = concatenated(4)
    damaged = bytearray(buf)
    damaged[positions[2] + 40] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as info:
        list(iter_batches(damaged))
    assert info.value.position == positions[2]
    # Without validation the CRC is not looked at, so every batch is structurally fine.
    assert len(list(iter_batches(damaged, validate=False))) == 4


def test_iter_batches_reports_trailing_garbage() -> None:
    buf, _ = concatenated(2)
    with pytest.raises(CorruptRecordError, match="bad magic 0") as info:
        list(iter_batches(buf + b"\x00" * 20))
    assert info.value.position == len(buf)
    with pytest.raises(CorruptRecordError, match="truncated header: 10 of 61") as info:
        list(iter_batches(buf + b"\x00" * 10))
    assert info.value.position == len(buf)


# ---------------------------------------------------------------------------- records


def test_records_round_trip_with_keys_values_headers_and_timestamps() -> None:
    batch = build_batch(
        [(b"k1", b"v1"), (None, b""), (b"", None), (b"k4", b"v" * 10_000)],
        base_offset=10,
        timestamps=[5_000, 4_000, -1, 6_000],
        headers=[[("h", b"x"), ("ключ", None)], [], [("", b"")], [("a", b"b")] * 3],
    )
    header = validate_batch(batch)
    assert header.base_timestamp == 5_000
    assert header.max_timestamp == 6_000
    assert list(iter_records(batch)) == [
        Record(10, 5_000, b"k1", b"v1", (("h", b"x"), ("ключ", None))),
        Record(11, 4_000, None, b"", ()),
        Record(12, -1, b"", None, (("", b""),)),
        Record(13, 6_000, b"k4", b"v" * 10_000, (("a", b"b"),) * 3),
    ]


@pytest.mark.parametrize("codec", list(CompressionType))
def test_records_round_trip_through_every_codec(codec: CompressionType) -> None:
    values = [bytes([i % 251]) * (i * 37 % 5000) for i in range(200)]
    batch = build_batch(
        [(str(i).encode(), value) for i, value in enumerate(values)],
        compression=codec,
        base_timestamp=1_700_000_000_000,
    )
    header = validate_batch(batch)
    assert header.compression is codec
    assert header.records_count == 200
    records = list(iter_records(batch))
    assert [r.value for r in records] == values
    assert [r.offset for r in records] == list(range(200))
    assert {r.timestamp for r in records} == {1_700_000_000_000}


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    batch = build_batch(
        [(None, b"a"), (None, b"b")], timestamps=[1, 2], timestamp_type=1, max_timestamp=99
    )
    assert [r.timestamp for r in iter_records(batch)] == [99, 99]


def test_empty_batch() -> None:
    batch = build_batch([], base_offset=5, last_offset_delta=3)
    header = validate_batch(batch)
    assert header.records_count == 0
    assert (header.base_timestamp, header.max_timestamp) == (-1, -1)
    assert header.next_offset == 9
    assert list(iter_records(batch)) == []


def test_build_records_batch_keeps_offsets_and_gaps() -> None:
    kept = [Record(105, 10, b"a", b"1"), Record(108, 12, b"b", None, (("h", b"v"),))]
    batch = build_records_batch(kept, base_offset=100, last_offset_delta=9)
    header = validate_batch(batch)
    assert (header.base_offset, header.last_offset, header.records_count) == (100, 109, 2)
    assert list(iter_records(batch)) == kept
    assert read_header(build_records_batch(kept)).base_offset == 105


def test_record_objects_carry_their_own_timestamps_and_headers() -> None:
    records = [Record(0, 7, b"k", b"v", (("x", None),)), Record(1, 3, None, None)]
    batch = build_batch(records, base_offset=40)
    assert list(iter_records(batch)) == [
        Record(40, 7, b"k", b"v", (("x", None),)),
        Record(41, 3, None, None),
    ]


def test_builder_rejects_inconsistent_arguments() -> None:
    pairs = [(None, b"a"), (None, b"b")]
    with pytest.raises(ValueError, match="timestamps for 2 records"):
        build_batch(pairs, timestamps=[1])
    with pytest.raises(ValueError, match="header lists for 2 records"):
        build_batch(pairs, headers=[[]])
    with pytest.raises(ValueError, match="increasing"):
        build_batch(pairs, offset_deltas=[1, 1])
    with pytest.raises(ValueError, match="last offset delta 0 below"):
        build_batch(pairs, last_offset_delta=0)
    with pytest.raises(ValueError, match="timestamp type"):
        build_batch(pairs, timestamp_type=2)
    with pytest.raises(ValueError, match="producer epoch"):
        build_batch(pairs, producer_epoch=1 << 15)
    with pytest.raises(ValueError, match="base offset"):
        build_batch(pairs, base_offset=-(1 << 63) - 1)
    with pytest.raises(ValueError, match="record objects carry"):
        build_batch([Record(0, 0, None, None)], headers=[[]])
    with pytest.raises(ValueError, match="explicit base_offset"):
        build_records_batch([])


# ---------------------------------------------------------------------------- corrupt records
# Each case edits the record bytes of a one-record batch and fixes the CRC, so that the record
# parser (not the CRC) must notice.


def one_record_batch(body: bytes) -> bytearray:
    """A batch whose single record's bytes (after its length varint) are ``body``."""
    batch = bytearray(build_batch([(None, b"")]))
    record_length = len(body)
    prefix = batch[:RECORD_BATCH_OVERHEAD]
    encoded = bytes([record_length << 1]) + body  # zigzag varint of a small length
    assert record_length < 64
    out = prefix + encoded
    struct.pack_into(">i", out, 8, len(out) - LOG_OVERHEAD)
    return recrc(out)


# attributes, timestamp delta 0, offset delta 0, null key, empty value, no headers
GOOD_BODY = bytes([0, 0, 0, 1, 0, 0])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (GOOD_BODY[:3], "runs past the end"),
        (bytes([0, 0, 0, 3]) + b"\x00", "key has negative length -2 in record 0"),
        (bytes([0, 0, 0, 20, 0, 0]), "key length 10 runs past the end of the record in record 0"),
        (bytes([0, 0, 0, 1, 0, 1]), "negative header count -1 in record 0"),
        (bytes([0, 0, 0, 1, 0, 2, 1]), "negative header key length"),
        (bytes([0, 0, 0, 1, 0, 2, 2, 0xFF, 1]), "header key is not UTF-8 in record 0"),
        (bytes([0, 0, 2, 1, 0, 0]), "offset delta 1 out of order"),
        (bytes([0, 0, 0, 1, 0, 0, 0]), "record declares 7 bytes but its fields use 6 in record 0"),
        (bytes([0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]), "longer than 5 bytes"),
        (b"", "empty record body in record 0"),
    ],
)
def test_corrupt_record_fields_are_named(body: bytes, message: str) -> None:
    assert list(iter_records(one_record_batch(GOOD_BODY))) == [Record(0, -1, None, b"", ())]
    with pytest.raises(CorruptRecordError, match=message):
        list(iter_records(one_record_batch(body)))


def test_record_count_mismatch_both_ways() -> None:
    batch = sample_batch()
    with pytest.raises(CorruptRecordError, match="record count mismatch: header says 4"):
        list(iter_records(edit_header(batch, records_count=4)))
    with pytest.raises(CorruptRecordError, match=r"record count mismatch: \d+ bytes follow"):
        list(iter_records(edit_header(batch, records_count=2)))
    with pytest.raises(CorruptRecordError, match="negative record count"):
        list(iter_records(edit_header(batch, records_count=-1)))


def test_offset_delta_beyond_last_offset_delta() -> None:
    with pytest.raises(CorruptRecordError, match="out of order"):
        list(iter_records(edit_header(sample_batch(), last_offset_delta=1)))


@pytest.mark.parametrize("codec", [c for c in CompressionType if c is not CompressionType.NONE])
def test_garbage_compressed_payload_names_the_codec(codec: CompressionType) -> None:
    batch = build_batch([(None, b"x" * 100)] * 3, compression=codec)
    damaged = bytearray(batch)
    for index in range(RECORD_BATCH_OVERHEAD, len(damaged)):
        damaged[index] = (index * 89) & 0xFF
    with pytest.raises(CorruptRecordError, match=f"bad {codec.name.lower()} data"):
        list(iter_records(recrc(damaged)))


def test_iter_records_checks_the_crc_unless_told_not_to() -> None:
    batch = bytearray(sample_batch())
    batch[18] ^= 0x01  # inside the stored CRC itself
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        list(iter_records(batch))
    assert len(list(iter_records(batch, verify_crc=False))) == 3
