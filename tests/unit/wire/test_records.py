"""wire.records: header parsing, CRC validation, patching, batch iteration (building batches is
tested in test_batch_builder.py, reading their records in test_record_reader.py)."""

from __future__ import annotations

import itertools
import struct

import pytest
from crc32c import crc32c

from tests.unit.wire.batch_helpers import HEADER, edit_header, sample_batch
from wire.batch_builder import build_batch
from wire.record_reader import iter_records
from wire.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CompressionType,
    CorruptRecordError,
    iter_batches,
    patch_batch,
    read_header,
    validate_batch,
)

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
