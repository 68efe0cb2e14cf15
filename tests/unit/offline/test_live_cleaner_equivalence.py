"""A broker's live cleaning pass (runtime/log/cleaner/) writes exactly what the offline job's
reference pass (`offline.compact_plan` + `survivors_by_scan` + the shared writer, what each
Spark task runs) writes, byte for byte, on a partition with committed, aborted and open
transactions (compact_helpers.build_transactional_partition, seeded): the same range (stopping
before the open transaction), the same aborted batches (the live side takes them from the
broker's transaction index, the offline side from the markers), the same survivors."""

from __future__ import annotations

from pathlib import Path

import pytest

from offline.compact_plan import CompactConfig, plan_partition
from offline.compact_write import survivors_by_scan, write_cleaned_partition
from runtime.clock import ManualClock
from runtime.log.cleaner.cleaner import LogCleaner
from runtime.log.cleaner.config import CleanerConfig
from runtime.log.log import Log
from runtime.log.segment import LOG_SUFFIX, file_name_prefix
from tests.unit.offline.compact_helpers import (
    WALL_MS,
    build_transactional_partition,
    reopen_txn_partition,
)
from tests.unit.runtime.log.cleaner_helpers import inline
from wire.topic import TopicPartition

NOW_MS = WALL_MS + 10_000


class _Host:
    def __init__(self, tp: TopicPartition, log: Log) -> None:
        self.tp, self.log = tp, log

    def logs_by_dir(self) -> dict[Path, dict[TopicPartition, Log]]:
        return {self.log.directory.parent: {self.tp: self.log}}

    def is_live(self, directory: Path) -> bool:
        return True

    def fail_dir(self, directory: Path, error: OSError) -> None:
        raise AssertionError(error)


def _segment_bytes(directory: Path, bases: list[int]) -> list[bytes]:
    return [(directory / f"{file_name_prefix(b)}{LOG_SUFFIX}").read_bytes() for b in bases]


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_the_live_pass_writes_what_the_offline_pass_writes(tmp_path: Path, seed: int) -> None:
    live = build_transactional_partition(tmp_path / "live", 0, seed)
    offline = build_transactional_partition(tmp_path / "offline", 0, seed)

    probe = reopen_txn_partition(offline, clean=True)  # for the partition's LogConfig
    cfg = CompactConfig(cleanup_policy="compact", log=probe.config)
    probe.close()
    plan = plan_partition(offline.directory, offline.high_watermark, cfg, NOW_MS)
    assert plan.stop_kind == "open transaction", plan.stop_reason
    survivors = survivors_by_scan(plan.directory, plan.sources, plan.aborted_batches)
    staged = write_cleaned_partition(
        plan.directory,
        plan.sources,
        survivors,
        tmp_path / "staging",
        now_ms=NOW_MS,
        delete_retention_ms=cfg.delete_retention_ms,
        log_config=cfg.log,
        aborted_batches=plan.aborted_batches,
    )

    log = reopen_txn_partition(live, clean=True)
    tp = TopicPartition.from_dir_name(live.directory.name)
    clock = ManualClock(0, wall_offset_ms=NOW_MS)
    cleaner = LogCleaner(_Host(tp, log), CleanerConfig(), clock, run_blocking=inline)
    result = await cleaner.clean_once()
    assert result is not None
    assert result.swapped, result.reason
    assert result.cleaned is not None
    assert result.cleaned.end_offset == plan.clean_end_offset
    assert result.cleaned.stats == staged.stats
    bases = [s.base_offset for s in staged.segments]
    assert [s.base_offset for s in log.segments[: len(bases)]] == bases
    log.close()
    assert _segment_bytes(live.directory, bases) == _segment_bytes(tmp_path / "staging", bases)
