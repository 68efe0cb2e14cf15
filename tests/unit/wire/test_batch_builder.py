"""wire.batch_builder: what `build_batch` and `build_records_batch` write reads back as given
(keys, values, headers, timestamps, offsets with their gaps, every codec, the empty batch), and
inconsistent arguments are refused before anything is encoded; `build_producer_batch` writes the
same bytes as `build_batch`."""

from __future__ import annotations

import random

import pytest

from wire.batch_builder import (
    build_batch,
    build_producer_batch,
    build_records_batch,
    zigzag_varint,
)
from wire.record_reader import iter_records
from wire.records import CompressionType, Record, read_header, validate_batch
from wire.varint import write_varlong

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


# ---------------------------------------------------------------------------- producer batches


def test_producer_batch_is_byte_for_byte_build_batch() -> None:
    """Seeded random records (null and empty keys and values, headers, values past the varint
    table, timestamps before the first): the producer's one-pass builder writes what the
    general one writes. The seed is in the assertion message."""
    seed = 2121
    rng = random.Random(seed)
    for trial in range(200):
        count = rng.randint(1, 40)
        keys = [rng.choice([None, b"", b"k" * rng.randint(1, 300)]) for _ in range(count)]
        values = [rng.choice([None, b"", b"v" * rng.randint(1, 20_000)]) for _ in range(count)]
        stamps = [rng.choice([1_000, 1_000 + rng.randint(-50, 40_000), -1]) for _ in range(count)]
        headers: list[list[tuple[str, bytes | None]]] = [
            rng.choice([[], [("h", b"x")], [("a", None), ("ключ", b"")]]) for _ in range(count)
        ]
        producer_id = rng.choice([-1, 7, 1 << 40])
        epoch = rng.choice([-1, 0, 3])
        sequence = rng.choice([-1, 0, (1 << 31) - 1])
        transactional = rng.random() < 0.3
        built = build_producer_batch(
            keys,
            values,
            stamps,
            headers,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=sequence,
            is_transactional=transactional,
        )
        expected = build_batch(
            list(zip(keys, values, strict=True)),
            timestamps=stamps,
            headers=headers,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=sequence,
            is_transactional=transactional,
        )
        assert built == expected, f"seed={seed} trial={trial}"


@pytest.mark.parametrize("codec", list(CompressionType))
def test_producer_batch_compresses_and_reads_back(codec: CompressionType) -> None:
    values = [bytes([i % 251]) * (i * 37 % 3000) for i in range(300)]  # offsets past 255
    batch = build_producer_batch(
        [None] * 300, values, [5_000 + i for i in range(300)], [()] * 300, compression=codec
    )
    header = validate_batch(batch)
    assert header.compression is codec
    assert (header.base_timestamp, header.max_timestamp) == (5_000, 5_299)
    assert [(r.offset, r.value) for r in iter_records(batch)] == list(enumerate(values))


def test_producer_batch_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_producer_batch([], [], [], [])
    with pytest.raises(ValueError, match="2 keys, 1 values"):
        build_producer_batch([None, None], [b"v"], [0], [()])
    with pytest.raises(ValueError, match="producer epoch"):
        build_producer_batch([None], [b"v"], [0], [()], producer_epoch=1 << 15)


@pytest.mark.parametrize("value", [0, 1, 63, 64, 8191, 8192, 16383, 16384, 1 << 40, -1, -(1 << 63)])
def test_zigzag_varints_match_the_varint_writer(value: int) -> None:
    out = bytearray()
    write_varlong(value, out)
    assert zigzag_varint(value) == bytes(out)
