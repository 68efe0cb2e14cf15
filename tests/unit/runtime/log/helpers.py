"""Batch builders and small utilities shared by the storage tests."""

from __future__ import annotations

import warnings
from pathlib import Path

from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.log import Log
from wire.batch_builder import build_batch
from wire.record_reader import iter_records
from wire.records import iter_batches

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas through a deprecated importlib API on import;
    # pytest turns warnings into errors, and this one is not ours to fix.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

WALL_MS = 1_700_000_000_000


def batch(count: int = 3, *, value_size: int = 20, ts: int = WALL_MS, tag: int = 0) -> bytes:
    """An uncompressed producer batch of `count` records with base offset 0."""
    records = [
        (b"k%d-%d" % (tag, i), bytes([65 + (tag + i) % 26]) * value_size) for i in range(count)
    ]
    return build_batch(records, base_timestamp=ts)


def kafka_python_batch(count: int = 3, *, ts: int = WALL_MS, compression: int = 0) -> bytes:
    """A batch from kafka-python's independent encoder."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i in range(count):
        builder.append(i, ts + i, b"key-%d" % i, b"value-%d" % i, [("h", b"x")])
    return bytes(builder.build())


def offsets_of(data: bytes | memoryview) -> list[int]:
    return [record.offset for pos, _ in iter_batches(data) for record in iter_records(data, pos)]


def batch_bases(data: bytes | memoryview) -> list[int]:
    return [header.base_offset for _, header in iter_batches(data)]


def open_log(directory: Path, config: LogConfig, clock: ManualClock, **kwargs: object) -> Log:
    return Log.open(directory, config, clock, **kwargs)  # type: ignore[arg-type]
