"""Kafka's default partitioner: murmur2 for keyed records, sticky partitions for null keys.

Keyed records go to `to_positive(murmur2(key)) % partition_count`, byte-for-byte the choice of
Kafka's Java client (`Utils.murmur2` with seed 0x9747b28c, `Utils.toPositive`), so a key lands on
the same partition whether a ketch or a Kafka client produced it.

Records without a key follow KIP-794's built-in partitioner: the producer sticks to one partition
until about `batch.size` bytes went to it, then switches to another partition chosen at random
among those that currently have a leader (all partitions when none has). Sticking fills whole
batches instead of sending one tiny batch per partition; switching by bytes (rather than on every
new batch, as Kafka 2.4's sticky partitioner did) keeps a slow partition from receiving more data
just because its batches stay open longer. The randomness comes from an injected seeded
`random.Random`, so tests and simulations replay exactly.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

_MASK32 = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24


def murmur2(data: bytes) -> int:
    """MurmurHash2 (32-bit) exactly as Kafka's `Utils.murmur2`: a signed 32-bit result.

    Java's int arithmetic wraps at 32 bits and `>>>` is an unsigned shift; here every product is
    masked to 32 bits and the value kept unsigned until the final conversion to a signed int.
    """
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length % 4
    # The Java switch falls through from case 3 to case 1; the multiply happens once for any tail.
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's `Utils.toPositive`: clear the sign bit (not `abs`, which overflows on MIN_VALUE)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, partition_count: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    if partition_count <= 0:
        raise ValueError(f"partition_count must be positive, got {partition_count}")
    return to_positive(murmur2(key)) % partition_count


@dataclass(slots=True)
class _Sticky:
    partition: int
    bytes_produced: int


class DefaultPartitioner:
    """Chooses the partition of each record: murmur2 for keys, sticky-by-bytes for null keys.

    Owned by one producer and used only from its task, so its sticky state needs no lock.
    """

    def __init__(self, *, batch_size: int, rng: random.Random) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self._batch_size = batch_size
        self._rng = rng
        self._sticky: dict[str, _Sticky] = {}

    def partition(
        self,
        topic: str,
        key: bytes | None,
        partition_count: int,
        available: Sequence[int],
        record_size: int,
    ) -> int:
        """Pick a partition for a record of `record_size` bytes.

        `available` lists the partitions that currently have a leader; it only matters for
        null keys, because keyed records must stay on their hash partition even while it is
        leaderless (the producer then waits for a leader rather than reorder the key).
        """
        if partition_count <= 0:
            raise ValueError(f"topic {topic!r} has no partitions")
        if key is not None:
            return partition_for_key(key, partition_count)
        sticky = self._sticky.get(topic)
        if (
            sticky is None
            or sticky.partition >= partition_count
            or sticky.bytes_produced >= self._batch_size
        ):
            previous = None if sticky is None else sticky.partition
            sticky = _Sticky(self._choose(partition_count, available, previous), 0)
            self._sticky[topic] = sticky
        sticky.bytes_produced += record_size
        return sticky.partition

    def _choose(self, partition_count: int, available: Sequence[int], previous: int | None) -> int:
        pool = [p for p in available if 0 <= p < partition_count] or list(range(partition_count))
        if len(pool) > 1 and previous in pool:
            # Switching to the same partition would defeat the point of switching.
            pool.remove(previous)
        return pool[self._rng.randrange(len(pool))]
