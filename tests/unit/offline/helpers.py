"""A small cluster data dir written by the storage engine, for the offline tests.

Layout (as `ketch up` writes it): ``<root>/broker-<id>/`` log dirs, each with every partition of
every topic (replication factor = broker count), HW checkpoints, and the clean-shutdown marker;
``<root>/topic-configs.json`` marks the compacted topic.

* ``events`` (partitions 0..2): broker-0 is the leader and writes with `Log.append_as_leader`
  (leader epoch 1 for the first half, then 3); the followers copy the leader's bytes with
  `Log.append_as_follower`, several batches per append, as a replica fetcher does. Batches come
  from `wire.batch_builder.build_batch` with every codec in turn and from kafka-python's independent
  encoder (uncompressed and gzip). The HW is two batches short of the log end. Our batches are
  an idempotent producer's (`EVENT_PRODUCER_ID`; epoch 0, then 1 from the second half, each
  partition's sequences contiguous from 0 in each epoch), kafka-python's have no producer.
* ``table`` (partition 0, cleanup.policy=compact): keyed batches whose offsets have gaps, as a
  compacted log does; broker-2 holds a further-compacted copy (fewer records, the same latest
  record per key).

Everything is deterministic from `seed` (values from `random.Random(seed)`), and the clock is a
`ManualClock`.
"""

from __future__ import annotations

import json
import random
import struct
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from runtime.clock import ManualClock
from runtime.log.config import LogConfig, LogManagerConfig
from runtime.log.log import Log
from runtime.log.manager import LogManager
from wire.batch_builder import build_batch, build_records_batch
from wire.record_reader import iter_records
from wire.records import BatchHeader, CompressionType, Record, iter_batches, validate_batch
from wire.topic import TopicPartition

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas through a deprecated importlib API on import.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

WALL_MS = 1_700_000_000_000
EVENTS = "events"
TABLE = "table"
QUIET = "quiet"
EVENT_PARTITIONS = 3
EVENT_BATCHES = 24
EVENT_PRODUCER_ID = 4_000
CONFIG = LogConfig(segment_bytes=12_000, index_interval_bytes=1_500)
_CODECS = (
    CompressionType.NONE,
    CompressionType.GZIP,
    CompressionType.SNAPPY,
    CompressionType.LZ4,
    CompressionType.ZSTD,
)


@dataclass
class BuiltCluster:
    root: Path
    brokers: list[Path]
    high_watermarks: dict[TopicPartition, int] = field(default_factory=dict)
    log_end_offsets: dict[TopicPartition, int] = field(default_factory=dict)
    # Per partition, (base offset, last offset, leader epoch) of each batch of the leader's log.
    batches: dict[TopicPartition, list[tuple[int, int, int]]] = field(default_factory=dict)
    latest_by_key: dict[bytes, tuple[int, bytes | None]] = field(default_factory=dict)
    record_count: int = 0


def kafka_python_batch(
    rng: random.Random, count: int, ts: int, compression: int
) -> tuple[bytes, int]:
    builder = DefaultRecordBatchBuilder(2, compression, 0, -1, -1, -1, 1 << 20)
    for i in range(count):
        # Compressible values: kafka-python stores a batch uncompressed when the codec would
        # not make it smaller.
        value = bytes([65 + rng.randrange(26)]) * 300
        builder.append(i, ts + i, b"kp-%d" % i, value, [("h", b"x")])
    return bytes(builder.build()), count


@dataclass
class EventProducer:
    """One partition's sequences of the idempotent producer that writes events."""

    epoch: int = 0
    next_sequence: int = 0


def event_batch(
    rng: random.Random, index: int, partition: int, producer: EventProducer
) -> tuple[bytes, int]:
    """The index-th producer batch of a partition: kafka-python's every fifth (no producer id),
    else ours (the idempotent producer's next sequences)."""
    ts = WALL_MS + index * 10
    count = 3 + rng.randrange(5)
    if index % 5 == 4:
        return kafka_python_batch(rng, count, ts, compression=(index // 5) % 2)
    records = [
        (b"p%d-k%d" % (partition, rng.randrange(50)), rng.randbytes(200 + rng.randrange(200)))
        for _ in range(count)
    ]
    headers = [[("trace", b"%d" % index)] for _ in range(count)]
    codec = _CODECS[(index + index // 5) % len(_CODECS)]
    sequence = producer.next_sequence
    producer.next_sequence += count
    data = build_batch(
        records, base_timestamp=ts, compression=codec, headers=headers,
        producer_id=EVENT_PRODUCER_ID, producer_epoch=producer.epoch, base_sequence=sequence,
    )  # fmt: skip
    return data, count


def segment_bytes_of(log: Log) -> bytes:
    return b"".join(segment.log_path.read_bytes() for segment in log.segments)


def _replicate(leader: Log, follower: Log, per_append: int) -> None:
    data = segment_bytes_of(leader)
    positions = [pos for pos, _ in iter_batches(data, validate=False)] + [len(data)]
    for i in range(0, len(positions) - 1, per_append):
        j = min(i + per_append, len(positions) - 1)
        follower.append_as_follower(data[positions[i] : positions[j]])


def _table_batches(
    rng: random.Random,
) -> tuple[list[bytes], list[bytes], dict[bytes, tuple[int, bytes | None]]]:
    """Batches of the compacted topic (offsets with gaps) and a further-compacted copy."""
    offset = 0
    full: list[bytes] = []
    records_all: list[list[Record]] = []
    for index in range(10):
        records = []
        for _ in range(4):
            key = b"key-%d" % rng.randrange(8)
            value = None if rng.random() < 0.1 else rng.randbytes(100)
            records.append(Record(offset, WALL_MS + offset, key, value))
            offset += 1 + rng.randrange(3)  # the gaps a cleaner leaves
        records_all.append(records)
        full.append(build_records_batch(records, partition_leader_epoch=2 + index // 5))
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for records in records_all:
        for record in records:
            assert record.key is not None
            latest[record.key] = (record.offset, record.value)
    keep = {off for off, _ in latest.values()}
    compacted: list[bytes] = []
    for index, records in enumerate(records_all):
        # Only the first half is "cleaned" (below the cleaner point): later records stay.
        kept = [r for r in records if index >= 5 or r.offset in keep]
        last_delta = records[-1].offset - records[0].offset
        compacted.append(
            build_records_batch(
                kept or records[-1:],
                base_offset=records[0].offset,
                last_offset_delta=last_delta,
                partition_leader_epoch=2 + index // 5,
            )
        )
    return full, compacted, latest


def build_cluster(root: Path, *, brokers: int = 3, seed: int = 0) -> BuiltCluster:
    rng = random.Random(seed)
    clock = ManualClock()
    dirs = [root / f"broker-{b}" for b in range(brokers)]
    managers = [
        LogManager(LogManagerConfig(log_dirs=(str(d),), default=CONFIG), clock) for d in dirs
    ]
    for manager in managers:
        manager.open()
    built = BuiltCluster(root, dirs)
    for partition in range(EVENT_PARTITIONS):
        tp = TopicPartition(EVENTS, partition)
        logs = [m.get_or_create_log(tp, topic_id="events-id") for m in managers]
        bounds = []
        producer = EventProducer()
        for index in range(EVENT_BATCHES):
            if index == EVENT_BATCHES // 2:  # a new producer epoch starts its sequences at 0
                producer = EventProducer(epoch=1)
            data, count = event_batch(rng, index, partition, producer)
            epoch = 1 if index < EVENT_BATCHES // 2 else 3
            info = logs[0].append_as_leader(data, leader_epoch=epoch)
            bounds.append((info.first_offset, info.last_offset, epoch))
            built.record_count += count
        for follower in logs[1:]:
            _replicate(logs[0], follower, per_append=3)
        built.batches[tp] = bounds
        built.log_end_offsets[tp] = logs[0].log_end_offset
        built.high_watermarks[tp] = bounds[-2][0]  # the last two batches not yet committed
    table = TopicPartition(TABLE, 0)
    full, compacted, latest = _table_batches(rng)
    for b, manager in enumerate(managers):
        log = manager.get_or_create_log(table, topic_id="table-id")
        for data in compacted if b == 2 else full:
            log.append_as_follower(data)
        built.log_end_offsets[table] = log.log_end_offset
    built.high_watermarks[table] = built.log_end_offsets[table]
    built.latest_by_key = latest
    # A topic created but never written (as `ketch up` leaves one): HW 0 on an empty log.
    quiet = TopicPartition(QUIET, 0)
    for manager in managers:
        manager.get_or_create_log(quiet, topic_id="quiet-id")
    built.high_watermarks[quiet] = 0
    for manager in managers:
        manager.write_high_watermarks(built.high_watermarks)
        manager.shutdown()
    (root / "topic-configs.json").write_text(json.dumps({TABLE: {"cleanup.policy": "compact"}}))
    return built


def patch_int(path: Path, position: int, fmt: str, value: int) -> None:
    """Overwrite a big-endian integer in a file (for injected corruption)."""
    data = bytearray(path.read_bytes())
    struct.pack_into(fmt, data, position, value)
    path.write_bytes(bytes(data))


# -- injected corruption ----------------------------------------------------------------------


def segment_paths(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"))


def batches_in(log_path: Path) -> list[tuple[int, BatchHeader]]:
    return list(iter_batches(log_path.read_bytes(), validate=False))


def flip_byte(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate_tail(path: Path, drop_bytes: int) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - drop_bytes])


def replace_batch(path: Path, position: int, new_batch: bytes) -> None:
    """Overwrite the batch at `position` with a batch of the same size."""
    data = bytearray(path.read_bytes())
    old_size = struct.unpack_from(">i", data, position + 8)[0] + 12
    assert len(new_batch) == old_size, (len(new_batch), old_size)
    data[position : position + old_size] = new_batch
    path.write_bytes(bytes(data))


def with_changed_value(batch: bytes, offset: int) -> bytes:
    """The same batch (offsets, epoch, size) with the value of the record at `offset` changed
    to other bytes of the same length, and a correct CRC: a valid batch that differs."""
    header = validate_batch(batch)
    records = [
        Record(r.offset, r.timestamp, r.key, bytes(b ^ 0x5A for b in r.value), r.headers)
        if r.offset == offset and r.value is not None
        else r
        for r in iter_records(batch)
    ]
    return build_records_batch(
        records,
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        partition_leader_epoch=header.partition_leader_epoch,
        compression=header.compression,
        base_timestamp=header.base_timestamp,
        max_timestamp=header.max_timestamp,
        timestamp_type=header.timestamp_type,
    )
