"""Decoding fetched bytes: positions, skipped records, control batches, cut-short tails."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.fetched_records import RecordTooLargeError, decode_fetched
from wire.batch_builder import build_batch
from wire.records import CorruptRecordError, patch_batch
from wire.topic import TopicPartition

TP = TopicPartition("t", 0)


def batch(base_offset: int, values: list[bytes], *, control: bool = False) -> bytes:
    data = bytearray(build_batch([(None, v) for v in values], base_timestamp=7, is_control=control))
    patch_batch(data, 0, base_offset=base_offset, partition_leader_epoch=0)
    return bytes(data)


def log(sizes: list[int]) -> tuple[bytes, list[int]]:
    """Consecutive batches of the given record counts; returns bytes and every offset."""
    out = b""
    offset = 0
    for count in sizes:
        out += batch(offset, [b"v%d" % (offset + i) for i in range(count)])
        offset += count
    return out, list(range(offset))


@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=6),
    start=st.integers(0, 30),
    cut=st.integers(0, 2000),
)
def test_any_cut_yields_a_prefix_and_resumes_exactly(
    sizes: list[int], start: int, cut: int
) -> None:
    data, offsets = log(sizes)
    start = min(start, len(offsets))
    position = start
    seen: list[int] = []
    try:
        records, position = decode_fetched(TP, position, data[:cut], limit=cut)
    except RecordTooLargeError:
        assert cut < len(data)  # only a cut inside the first batch may raise
        records = []
    seen += [r.offset for r in records]
    # Whatever the cut, a second fetch from the new position (uncut) completes the log.
    more, final = decode_fetched(TP, position, data, limit=len(data))
    seen += [r.offset for r in more]
    assert seen == offsets[start:]
    assert final == len(offsets)


def test_control_batches_and_gaps_are_stepped_over() -> None:
    data = batch(0, [b"a", b"b"]) + batch(2, [b"\x00"], control=True) + batch(5, [b"c"])
    records, position = decode_fetched(TP, 1, data, limit=len(data))
    assert [(r.offset, r.value) for r in records] == [(1, b"b"), (5, b"c")]
    assert position == 6


def test_a_first_batch_over_the_limit_is_too_large() -> None:
    data = batch(0, [bytes(300)])
    with pytest.raises(RecordTooLargeError, match=r"max\.partition\.fetch\.bytes=100"):
        decode_fetched(TP, 0, data[:100], limit=100)


def test_corrupt_bytes_are_reported() -> None:
    data = bytearray(batch(0, [b"a"]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_fetched(TP, 0, bytes(data), limit=len(data))
    with pytest.raises(CorruptRecordError):
        decode_fetched(TP, 0, bytes(8) + (3).to_bytes(4, "big"), limit=100)
