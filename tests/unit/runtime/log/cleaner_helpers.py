"""A compacted `Log` written by a seeded producer, the model of its latest value per key, and a
`CleanerHost` over it: shared by the live cleaner's tests (test_cleaner_*.py)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runtime.clock import ManualClock
from runtime.log.cleaner.task import CleanedRange, CleaningTask
from runtime.log.config import LogConfig
from runtime.log.log import Log
from wire.batch_builder import build_batch
from wire.record_reader import iter_records
from wire.records import iter_batches
from wire.topic import TopicPartition

TP = TopicPartition("compacted", 0)


def compact_config(**overrides: object) -> LogConfig:
    props: dict[str, object] = {
        "cleanup.policy": "compact",
        "segment.bytes": 1024,
        "index.interval.bytes": 128,
        "file.delete.delay.ms": 60_000,
    }
    props.update(overrides)
    return LogConfig.from_properties(props)


def open_compacted(tmp_path: Path, clock: ManualClock, **overrides: object) -> Log:
    return Log.open(tmp_path / TP.dir_name, compact_config(**overrides), clock)


def write_updates(
    log: Log, clock: ManualClock, rng: random.Random, batches: int, keys: int = 8
) -> None:
    """`batches` leader appends of 1-4 updates to keys ``k0..k<keys-1>``, the HW following the
    LEO (acks=all with every replica caught up), the clock 1 ms on per batch."""
    for _ in range(batches):
        count = rng.randint(1, 4)
        records = [
            (b"k%d" % rng.randrange(keys), b"v%d" % rng.randrange(1_000_000)) for _ in range(count)
        ]
        log.append_as_leader(build_batch(records, base_timestamp=clock.wall_ms()), leader_epoch=0)
        log.update_high_watermark(log.log_end_offset)
        clock.advance(1)


def read_all(log: Log, upto: int | None = None) -> list[tuple[int, bytes, bytes | None]]:
    """Every record (offset, key, value) from the log start below `upto` (default: the HW)."""
    end = log.high_watermark if upto is None else upto
    out: list[tuple[int, bytes, bytes | None]] = []
    offset = log.log_start_offset
    while offset < end:
        info = log.read(offset, 1 << 20, max_offset=end)
        data = bytes(info.records)
        if not data:
            break
        for position, header in iter_batches(data):
            for record in iter_records(data, position):
                if record.offset < end and record.key is not None:
                    out.append((record.offset, record.key, record.value))
            offset = header.next_offset
    return out


def latest_by_key(records: list[tuple[int, bytes, bytes | None]]) -> dict[bytes, bytes | None]:
    latest: dict[bytes, bytes | None] = {}
    for _, key, value in records:
        latest[key] = value
    return latest


@dataclass
class OneLogHost:
    """A `CleanerHost` over one log (the log manager's role)."""

    log: Log
    failed: list[OSError] = field(default_factory=list)

    def logs_by_dir(self) -> dict[Path, dict[TopicPartition, Log]]:
        return {self.log.directory.parent: {TP: self.log}} if not self.log.closed else {}

    def is_live(self, directory: Path) -> bool:
        return True

    def fail_dir(self, directory: Path, error: OSError) -> None:
        self.failed.append(error)


async def inline(
    function: Callable[[CleaningTask], CleanedRange | None], task: CleaningTask
) -> CleanedRange | None:
    """The cleaner's `run_blocking` for tests: the pass runs right here, deterministically."""
    return function(task)
