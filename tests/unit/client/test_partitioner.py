"""Kafka's default partitioner: murmur2 vectors, agreement with an independent implementation,
and the sticky choice for null keys."""

from __future__ import annotations

import random
import warnings
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from client.partitioner import DefaultPartitioner, murmur2, partition_for_key, to_positive

with warnings.catch_warnings():
    # kafka-python's package import uses a deprecated importlib API; only its hash is used here.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.partitioner.default import murmur2 as kafka_python_murmur2

# Test vectors from Apache Kafka's UtilsTest.testMurmur2 (signed Java ints).
KAFKA_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("data", "expected"), KAFKA_VECTORS)
def test_murmur2_matches_kafka_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafka_python(data: bytes) -> None:
    # kafka-python returns the same 32 bits unsigned.
    assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)
    assert -(2**31) <= murmur2(data) < 2**31


def test_to_positive_clears_sign_bit_not_abs() -> None:
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(5) == 5


def test_partition_for_key_is_positive_hash_modulo() -> None:
    for data, expected in KAFKA_VECTORS:
        assert partition_for_key(data, 7) == (expected & 0x7FFFFFFF) % 7
    with pytest.raises(ValueError, match="positive"):
        partition_for_key(b"k", 0)


def test_keyed_records_ignore_availability() -> None:
    partitioner = DefaultPartitioner(batch_size=100, rng=random.Random(1))
    expected = partition_for_key(b"foobar", 4)
    # Even with the hash partition leaderless, a key stays on its partition to keep its order.
    available = [p for p in range(4) if p != expected]
    assert partitioner.partition("t", b"foobar", 4, available, 10) == expected


def test_null_keys_stick_until_batch_size_bytes_then_switch() -> None:
    seed = 7
    partitioner = DefaultPartitioner(batch_size=100, rng=random.Random(seed))
    chosen = [partitioner.partition("t", None, 3, [0, 1, 2], 30) for _ in range(8)]
    # 30-byte records: four fit before the 100-byte threshold is crossed, then a new partition.
    assert len(set(chosen[:4])) == 1, f"seed={seed} chosen={chosen}"
    assert chosen[4] != chosen[3], f"seed={seed} chosen={chosen}"
    assert len(set(chosen[4:8])) == 1, f"seed={seed} chosen={chosen}"


def test_null_keys_prefer_partitions_with_a_leader() -> None:
    seed = 3
    partitioner = DefaultPartitioner(batch_size=10, rng=random.Random(seed))
    chosen = {partitioner.partition("t", None, 5, [1, 3], 10) for _ in range(50)}
    assert chosen == {1, 3}, f"seed={seed}"


def test_null_keys_spread_over_all_partitions_when_none_available() -> None:
    seed = 11
    partitioner = DefaultPartitioner(batch_size=10, rng=random.Random(seed))
    counts = Counter(partitioner.partition("t", None, 4, [], 10) for _ in range(400))
    assert set(counts) == {0, 1, 2, 3}, f"seed={seed} counts={counts}"


def test_sticky_state_is_per_topic_and_follows_partition_count() -> None:
    partitioner = DefaultPartitioner(batch_size=1000, rng=random.Random(5))
    a = partitioner.partition("a", None, 8, list(range(8)), 1)
    assert partitioner.partition("a", None, 8, list(range(8)), 1) == a
    partitioner.partition("b", None, 8, list(range(8)), 1)
    assert partitioner.partition("a", None, 8, list(range(8)), 1) == a
    # The topic shrank below the sticky partition (metadata changed): pick a valid one.
    assert partitioner.partition("a", None, 1, [0], 1) == 0


def test_partitioner_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        DefaultPartitioner(batch_size=0, rng=random.Random(0))
    partitioner = DefaultPartitioner(batch_size=1, rng=random.Random(0))
    with pytest.raises(ValueError, match="no partitions"):
        partitioner.partition("t", None, 0, [], 1)
