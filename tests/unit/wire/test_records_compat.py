"""Byte compatibility with an independent RecordBatch v2 implementation (kafka-python).

Batches written by kafka-python's ``DefaultRecordBatchBuilder`` (uncompressed and with each of
the four codecs) must parse, validate and iterate here; batches written here must be read back
by kafka-python's ``DefaultRecordBatch``; and where both encode the same input uncompressed, the
bytes must be identical.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.batch_builder import build_batch
from wire.record_reader import iter_records
from wire.records import CompressionType, Record, iter_batches, patch_batch, validate_batch

with warnings.catch_warnings():
    # kafka-python 3 loads its protocol schemas through a deprecated importlib API on import;
    # pytest turns warnings into errors, and this one is not ours to fix.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

Headers = list[tuple[str, bytes | None]]
Entry = tuple[int, bytes | None, bytes | None, Headers]  # timestamp, key, value, headers

entries = st.lists(
    st.tuples(
        st.integers(1, 1 << 50),
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=200),
        st.lists(st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=10)), max_size=2),
    ),
    min_size=1,
    max_size=15,
)


def kafka_python_batch(
    items: list[Entry],
    codec: CompressionType = CompressionType.NONE,
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=is_transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 24,
    )
    for delta, (timestamp, key, value, headers) in enumerate(items):
        builder.append(delta, timestamp=timestamp, key=key, value=value, headers=headers)
    return bytes(builder.build())


def ours(items: list[Entry], codec: CompressionType = CompressionType.NONE, **kw: Any) -> bytes:
    return build_batch(
        [(key, value) for _, key, value, _ in items],
        timestamps=[timestamp for timestamp, _, _, _ in items],
        headers=[headers for _, _, _, headers in items],
        compression=codec,
        partition_leader_epoch=0,  # what kafka-python writes (the broker sets the real one)
        **kw,
    )


def expected_records(items: list[Entry], base_offset: int = 0) -> list[Record]:
    return [
        Record(base_offset + i, ts, key, value, tuple(headers))
        for i, (ts, key, value, headers) in enumerate(items)
    ]


def compressible(count: int) -> list[Entry]:
    # kafka-python falls back to no compression when it does not pay, so give it repetition.
    return [
        (1_700_000_000_000 + i, f"key-{i % 7}".encode(), b"payload " * (20 + i), [("h", b"v")])
        for i in range(count)
    ]


@settings(max_examples=150)
@given(entries)
def test_uncompressed_bytes_are_identical_to_kafka_python(items: list[Entry]) -> None:
    assert ours(items) == kafka_python_batch(items)


def test_identical_bytes_with_producer_fields() -> None:
    items = compressible(5)
    theirs = kafka_python_batch(
        items, producer_id=123_456, producer_epoch=4, base_sequence=77, is_transactional=True
    )
    mine = ours(
        items, producer_id=123_456, producer_epoch=4, base_sequence=77, is_transactional=True
    )
    assert mine == theirs


@settings(max_examples=100)
@given(entries)
def test_kafka_python_batches_parse_validate_and_iterate(items: list[Entry]) -> None:
    batch = kafka_python_batch(items)
    header = validate_batch(batch)
    assert header.records_count == len(items)
    assert header.last_offset_delta == len(items) - 1
    assert list(iter_records(batch)) == expected_records(items)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_kafka_python_compressed_batches_iterate(codec: CompressionType) -> None:
    items = compressible(300)
    batch = kafka_python_batch(items, codec)
    header = validate_batch(batch)
    assert header.compression is codec
    assert list(iter_records(batch)) == expected_records(items)


@pytest.mark.parametrize("codec", list(CompressionType))
def test_kafka_python_reads_our_batches(codec: CompressionType) -> None:
    items = compressible(300)
    buf = bytearray(ours(items, codec, producer_id=9, producer_epoch=1, base_sequence=0))
    patch_batch(buf, 0, base_offset=5_000, partition_leader_epoch=12)
    theirs = DefaultRecordBatch(bytes(buf))
    assert theirs.validate_crc()
    assert theirs.compression_type == int(codec)
    assert (theirs.base_offset, theirs.leader_epoch, theirs.next_offset) == (5_000, 12, 5_300)
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (9, 1, 0)
    read = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in theirs]
    assert read == [
        (r.offset, r.timestamp, r.key, r.value, list(r.headers))
        for r in expected_records(items, 5_000)
    ]


@settings(max_examples=100)
@given(entries, st.sampled_from(list(CompressionType)))
def test_kafka_python_reads_any_batch_of_ours(items: list[Entry], codec: CompressionType) -> None:
    theirs = DefaultRecordBatch(ours(items, codec))
    assert theirs.validate_crc()
    read = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs]
    assert read == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in expected_records(items)
    ]


def test_concatenated_kafka_python_batches_iterate_as_a_log() -> None:
    parts = [
        kafka_python_batch(compressible(n), codec)
        for n, codec in zip((3, 50, 1, 20, 7), CompressionType, strict=True)
    ]
    buf = bytearray(b"".join(parts))
    next_offset = 0
    for pos, header in list(iter_batches(buf)):
        patch_batch(buf, pos, base_offset=next_offset, partition_leader_epoch=1)
        next_offset += header.last_offset_delta + 1
    offsets = [r.offset for pos, _ in iter_batches(buf) for r in iter_records(buf, pos)]
    assert offsets == list(range(81))
