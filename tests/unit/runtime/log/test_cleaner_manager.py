"""The live cleaner's choice of log (runtime/log/cleaner/manager.py) and its loop's backoff
(runtime/log/cleaner/cleaner.py), on a `ManualClock`, with seeded writes."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from runtime.clock import ManualClock
from runtime.log.checkpoints import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from runtime.log.cleaner.cleaner import LogCleaner
from runtime.log.cleaner.config import CleanerConfig
from runtime.log.cleaner.manager import LogCleanerManager, cleanable_range
from runtime.log.cleaner.offset_map import build_offset_map
from runtime.log.cleaner.source import CompactError
from runtime.log.cleaner.task import segment_facts
from runtime.log.log import Log
from tests.unit.runtime.log.cleaner_helpers import (
    TP,
    OneLogHost,
    inline,
    open_compacted,
    write_updates,
)
from wire.topic import TopicPartition

SEED = 24


def _logs(log: Log) -> dict[Path, dict[TopicPartition, Log]]:
    return {log.directory.parent: {TP: log}}


def test_range_stops_at_the_active_segment_and_the_high_watermark(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_compacted(tmp_path, clock)
    write_updates(log, clock, random.Random(SEED), 100)
    segments = log.segments
    assert len(segments) > 3
    whole = cleanable_range(TP, log, None, clock.wall_ms())
    assert whole.segments == segments[:-1]  # never the active one
    assert whole.first_dirty_offset == 0
    assert whole.cleanable_ratio == 1.0  # nothing cleaned yet
    # The HW inside the third segment: only the two below it are cleanable.
    log.update_high_watermark(segments[2].base_offset + 1)
    capped = cleanable_range(TP, log, None, clock.wall_ms())
    assert capped.segments == segments[:2]
    log.close()


def test_dirty_ratio_against_min_cleanable_dirty_ratio(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_compacted(tmp_path, clock)
    write_updates(log, clock, random.Random(SEED), 100)
    manager = LogCleanerManager()
    # Checkpoint near the end: a small dirty part, a ratio below the default 0.5.
    segments = log.segments
    checkpoint = segments[-3].base_offset
    OffsetCheckpointFile(tmp_path / CLEANER_OFFSET_CHECKPOINT).write({TP: checkpoint})
    candidate = cleanable_range(TP, log, checkpoint, clock.wall_ms())
    assert 0 < candidate.cleanable_ratio < 0.5, candidate
    assert manager.grab_filthiest(_logs(log), clock.wall_ms()) is None
    assert manager.max_dirty_ratio == pytest.approx(candidate.cleanable_ratio)
    # The same log under a lower threshold is chosen, and held until done.
    log.config = log.config.with_overrides({"min.cleanable.dirty.ratio": 0.05})
    grabbed = manager.grab_filthiest(_logs(log), clock.wall_ms())
    assert grabbed is not None
    assert grabbed[1].first_dirty_offset == checkpoint
    assert manager.grab_filthiest(_logs(log), clock.wall_ms()) is None  # in progress
    manager.done_cleaning(tmp_path, TP, None)
    assert manager.grab_filthiest(_logs(log), clock.wall_ms()) is not None
    log.close()


def test_the_dirtiest_log_goes_first(tmp_path: Path) -> None:
    clock = ManualClock()
    rng = random.Random(SEED)
    a = Log.open(tmp_path / "a-0", open_compacted(tmp_path, clock).config, clock)
    b = Log.open(tmp_path / "b-0", a.config, clock)
    for log in (a, b):
        write_updates(log, clock, rng, 80)
    logs = {tmp_path: {TopicPartition("a", 0): a, TopicPartition("b", 0): b}}
    # a's checkpoint halfway: a is less dirty than b (never cleaned).
    manager = LogCleanerManager()
    manager.checkpoints(tmp_path)[TopicPartition("a", 0)] = a.segments[3].base_offset
    grabbed = manager.grab_filthiest(logs, clock.wall_ms())
    assert grabbed is not None
    assert grabbed[1].topic_partition == TopicPartition("b", 0)
    for log in (a, b):
        log.close()


def test_min_compaction_lag_keeps_young_segments_out(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_compacted(tmp_path, clock, **{"min.compaction.lag.ms": 50})
    write_updates(log, clock, random.Random(SEED), 100)  # 1 ms a batch: the last 50 are young
    young = cleanable_range(TP, log, None, clock.wall_ms())
    assert young.segments
    lag_limit = clock.wall_ms() - 50
    assert all(s.largest_timestamp <= lag_limit for s in young.segments)
    assert len(young.segments) < len(log.segments) - 1
    clock.advance(50)
    aged = cleanable_range(TP, log, None, clock.wall_ms())
    assert aged.segments == log.segments[:-1]
    log.close()


def test_max_compaction_lag_forces_a_clean_below_the_ratio(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_compacted(tmp_path, clock, **{"max.compaction.lag.ms": 1000})
    write_updates(log, clock, random.Random(SEED), 100)
    checkpoint = log.segments[-3].base_offset
    manager = LogCleanerManager()
    manager.checkpoints(tmp_path)[TP] = checkpoint
    assert manager.grab_filthiest(_logs(log), clock.wall_ms()) is None  # ratio too low
    clock.advance(1000)  # the first dirty segment's first batch is now overdue
    grabbed = manager.grab_filthiest(_logs(log), clock.wall_ms())
    assert grabbed is not None
    assert grabbed[1].needs_compaction_now
    log.close()


def test_policy_delete_and_uncleanable_logs_are_skipped(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_compacted(tmp_path, clock)
    write_updates(log, clock, random.Random(SEED), 60)
    manager = LogCleanerManager()
    manager.mark_uncleanable(TP, "test")
    assert manager.grab_filthiest(_logs(log), clock.wall_ms()) is None
    manager.forget_gone({})  # the log left the broker: the mark goes
    log.config = log.config.with_overrides({"cleanup.policy": "delete"})
    assert manager.grab_filthiest(_logs(log), clock.wall_ms()) is None
    log.config = log.config.with_overrides({"cleanup.policy": "compact,delete"})
    assert manager.grab_filthiest(_logs(log), clock.wall_ms()) is not None
    log.close()


async def test_the_cleaner_backs_off_when_nothing_is_dirty(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_compacted(tmp_path, clock)
    cleaner = LogCleaner(
        OneLogHost(log), CleanerConfig(backoff_ms=15_000), clock, run_blocking=inline
    )
    task = asyncio.create_task(cleaner.run())
    for _ in range(5):
        await asyncio.sleep(0)
    assert cleaner.stats.last_run_monotonic_ms == 0
    clock.advance(14_999)
    for _ in range(5):
        await asyncio.sleep(0)
    assert cleaner.stats.last_run_monotonic_ms == 0  # still backing off
    # Dirty now, but the worker sleeps on (the writer's own clock leaves the cleaner's alone).
    write_updates(log, ManualClock(), random.Random(SEED), 60)
    for _ in range(5):
        await asyncio.sleep(0)
    assert cleaner.stats.passes == 0
    clock.advance(1)  # the backoff is over
    for _ in range(20):
        await asyncio.sleep(0)
    assert cleaner.stats.last_run_monotonic_ms == 15_000
    assert cleaner.stats.passes == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    log.close()


async def test_disabled_cleaner_runs_nothing(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_compacted(tmp_path, clock)
    write_updates(log, clock, random.Random(SEED), 60)
    cleaner = LogCleaner(OneLogHost(log), CleanerConfig(enable=False), clock, run_blocking=inline)
    await cleaner.run()  # returns at once
    assert cleaner.stats.passes == 0
    assert cleaner.stats.last_run_monotonic_ms == -1
    log.close()


def test_a_full_offset_map_cleans_a_prefix_of_whole_segments(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_compacted(tmp_path, clock)
    write_updates(log, clock, random.Random(SEED), 100, keys=300)  # mostly distinct keys
    sources = tuple(segment_facts(s) for s in cleanable_range(TP, log, None, 0).segments)
    whole = build_offset_map(log.directory, sources, (), max_entries=10_000)
    assert not whole.cut_short
    assert whole.sources == sources
    bounded = build_offset_map(log.directory, sources, (), max_entries=whole.entries // 2)
    assert bounded.cut_short
    assert 0 < len(bounded.sources) < len(sources)
    assert bounded.sources == sources[: len(bounded.sources)]
    assert bounded.entries <= whole.entries // 2
    with pytest.raises(CompactError, match=r"dedupe\.buffer\.size"):
        build_offset_map(log.directory, sources, (), max_entries=1)
    log.close()


async def test_a_segment_too_big_for_the_buffer_makes_the_partition_uncleanable(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    log = open_compacted(tmp_path, clock)
    write_updates(log, clock, random.Random(SEED), 60)
    config = CleanerConfig(dedupe_buffer_size=27)  # one 24-byte entry at load factor 0.9
    assert config.max_map_entries == 1
    cleaner = LogCleaner(OneLogHost(log), config, clock, run_blocking=inline)
    result = await cleaner.clean_once()
    assert result is not None
    assert not result.swapped
    assert result.reason.startswith("uncleanable")
    assert cleaner.stats.uncleanable_partitions == 1
    assert await cleaner.clean_once() is None  # not tried again
    log.close()


async def test_a_buffer_full_within_the_clean_part_makes_the_partition_uncleanable(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    log = open_compacted(tmp_path, clock, **{"min.cleanable.dirty.ratio": 0.01})
    write_updates(log, clock, random.Random(SEED), 100, keys=300)
    sources = tuple(segment_facts(s) for s in cleanable_range(TP, log, None, 0).segments)
    first = build_offset_map(log.directory, sources[:1], (), max_entries=10_000).entries
    # Room for the first segment's keys and one more: every pass would stop after it, while
    # the checkpoint says everything up to the last two segments is clean already.
    config = CleanerConfig(dedupe_buffer_size=(first + 1) * 24 * 10 // 9 + 1)
    assert config.max_map_entries == first + 1
    cleaner = LogCleaner(OneLogHost(log), config, clock, run_blocking=inline)
    cleaner.manager.checkpoints(tmp_path)[TP] = sources[-2].base_offset
    result = await cleaner.clean_once()
    assert result is not None
    assert not result.swapped
    assert "clean part alone" in result.reason
    assert TP in cleaner.manager.uncleanable
    log.close()
