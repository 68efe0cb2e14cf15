"""A stopped broker's log dir with one compacted topic, written by the storage engine, its
compaction config, and the model of what one cleaning pass keeps; shared by the compaction tests
(test_compact_write.py, test_compact_install.py, test_compact.py here, and Spark's
tests/spark/test_compact.py). Deterministic from a seed; the clock is a `ManualClock`."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from offline.compact_plan import CompactConfig
from runtime.clock import ManualClock
from runtime.log.config import LogManagerConfig
from runtime.log.manager import LogManager
from runtime.log.segment import LOG_SUFFIX
from wire.batch_builder import build_batch
from wire.record_reader import iter_records
from wire.records import BatchHeader, CompressionType, Record, iter_batches
from wire.topic import TopicPartition

WALL_MS = 1_700_000_000_000
TOPIC = "t"
SEGMENT_BYTES = 2048
RETENTION_MS = 1000
COMPACT_PROPS: dict[str, object] = {
    "cleanup.policy": "compact",
    "segment.bytes": SEGMENT_BYTES,
    "index.interval.bytes": 200,
    "delete.retention.ms": RETENTION_MS,
}


@dataclass(frozen=True, slots=True)
class BrokerDir:
    data_dir: Path
    seed: int
    high_watermarks: dict[int, int]
    end_ms: int  # wall time of the last append


def _producer_batch(
    rng: random.Random, ts: int, keys: int, sequence: int | None, *, keyless: bool = False
) -> tuple[bytes, int | None]:
    """A batch, idempotent or not, and the idempotent producer's next sequence. `sequence` is
    that producer's next one in this partition; None before its first batch, which starts at a
    random sequence (the leader accepts any from a producer it has no state for)."""
    count = rng.randint(1, 6)
    records: list[tuple[bytes | None, bytes | None]] = []
    for _ in range(count):
        key = None if keyless else b"k%d" % rng.randrange(keys)
        value = None if rng.random() < 0.15 else rng.randbytes(rng.randint(5, 60))
        records.append((key, value))
    compression = rng.choice([CompressionType.NONE, CompressionType.NONE, CompressionType.GZIP])
    idempotent = rng.random() < 0.5
    if idempotent:
        start = rng.randrange(1000)  # drawn for every idempotent batch: seeds keep their data
        sequence = start if sequence is None else sequence
    data = build_batch(
        records,
        timestamps=[ts + i for i in range(count)],
        compression=compression,
        producer_id=7 if idempotent else -1,
        producer_epoch=2 if idempotent else -1,
        base_sequence=sequence if idempotent and sequence is not None else -1,
    )
    return data, sequence + count if idempotent and sequence is not None else sequence


def build_broker_dir(
    root: Path,
    seed: int,
    *,
    partitions: int = 1,
    batches: int = 80,
    keys: int = 12,
    hw_fraction: float = 0.8,
    props: dict[str, object] | None = None,
    keyless_at: int | None = None,
) -> BrokerDir:
    """A stopped broker's log dir written by the storage engine: `batches` producer batches per
    partition (keys from a small key space, ~15% tombstones, some gzip, some idempotent), one
    millisecond apart, HW checkpoint at `hw_fraction` of the log end, clean shutdown."""
    rng = random.Random(seed)
    data_dir = root / "broker-0"
    clock = ManualClock(0, wall_offset_ms=WALL_MS)
    topic_props = dict(COMPACT_PROPS if props is None else props)
    manager = LogManager(LogManagerConfig(log_dirs=(str(data_dir),)), clock)
    manager.open()
    manager.set_topic_config(TOPIC, topic_props)
    hws: dict[int, int] = {}
    for p in range(partitions):
        log = manager.get_or_create_log(TopicPartition(TOPIC, p))
        sequence: int | None = None
        for i in range(batches):
            clock.advance(1)
            ts = clock.wall_ms()
            data, sequence = _producer_batch(rng, ts, keys, sequence, keyless=i == keyless_at)
            log.append_as_leader(data, 1 + i // 30)
        hws[p] = int(log.log_end_offset * hw_fraction)
    manager.write_high_watermarks({TopicPartition(TOPIC, p): hw for p, hw in hws.items()})
    manager.shutdown()
    return BrokerDir(data_dir, seed, hws, clock.wall_ms())


def read_partition(directory: Path) -> list[tuple[BatchHeader, Record]]:
    """Every (batch header, record) of a partition directory's segments, in offset order."""
    out: list[tuple[BatchHeader, Record]] = []
    for path in sorted(directory.glob(f"*{LOG_SUFFIX}")):
        data = path.read_bytes()
        for pos, header in iter_batches(data):
            out.extend((header, record) for record in iter_records(data, pos))
    return out


def expected_after_pass(
    records: list[Record], end_offset: int, now_ms: int, horizons: dict[int, int]
) -> list[Record]:
    """Model of one pass over records below `end_offset`: the latest per key, tombstones whose
    batch horizon (by offset, from `horizons`) has passed dropped; records above kept."""
    latest = {r.key: r.offset for r in records if r.offset < end_offset}
    last = max((r.offset for r in records if r.offset < end_offset), default=-1)
    kept = []
    for r in records:
        if r.offset >= end_offset:
            kept.append(r)
        elif latest[r.key] == r.offset:
            horizon = horizons.get(r.offset)
            expired = horizon is not None and now_ms >= horizon and r.offset != last
            if not (r.value is None and expired):
                kept.append(r)
    return kept


def config(**overrides: object) -> CompactConfig:
    return CompactConfig.from_properties({**COMPACT_PROPS, **overrides})
