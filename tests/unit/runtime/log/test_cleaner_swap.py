"""The swap of a live cleaning pass (runtime/log/cleaner/swap.py): its checks, a crash at every
step, and a reader in the middle of it. Seeded writes on a `ManualClock`."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from runtime.clock import ManualClock
from runtime.log.cleaner.cleaner import LogCleaner
from runtime.log.cleaner.config import CleanerConfig
from runtime.log.cleaner.manager import cleanable_range
from runtime.log.cleaner.swap import SwapOutcome, swap_cleaned_segments
from runtime.log.cleaner.task import (
    CleanedRange,
    CleaningTask,
    plan_cleaning,
    run_cleaning,
)
from runtime.log.log import Log
from runtime.log.segment import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX
from tests.unit.runtime.log.cleaner_helpers import (
    TP,
    OneLogHost,
    inline,
    latest_by_key,
    open_compacted,
    read_all,
    write_updates,
)
from wire.record_reader import iter_records
from wire.records import iter_batches

SEED = 2401


class SimulatedCrash(Exception):
    pass


def _dirty_log(tmp_path: Path, clock: ManualClock, batches: int = 160, keys: int = 60) -> Log:
    """Enough keys that the cleaned range still spans several segments."""
    log = open_compacted(tmp_path, clock)
    write_updates(log, clock, random.Random(SEED), batches, keys)
    return log


def _pass(log: Log, clock: ManualClock) -> tuple[CleaningTask, CleanedRange]:
    to_clean = cleanable_range(TP, log, None, clock.wall_ms())
    task = plan_cleaning(
        TP,
        log,
        to_clean.segments,
        first_dirty_offset=to_clean.first_dirty_offset,
        now_ms=clock.wall_ms(),
        max_map_entries=1000,
    )
    cleaned = run_cleaning(task)
    assert cleaned is not None
    return task, cleaned


def _suffixed(directory: Path, suffix: str) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(suffix))


def test_a_swap_keeps_every_key_latest_value_and_shrinks_the_log(tmp_path: Path) -> None:
    clock = ManualClock()
    log = _dirty_log(tmp_path, clock)
    before = read_all(log)
    size_before = log.size_bytes
    task, cleaned = _pass(log, clock)
    assert _suffixed(log.directory, CLEANED_SUFFIX)
    assert swap_cleaned_segments(log, task, cleaned).swapped
    after = read_all(log)
    assert latest_by_key(after) == latest_by_key(before)
    assert log.size_bytes < size_before / 2
    # Offsets never change: each surviving record is one of the originals.
    assert set(after) <= set(before)
    assert not _suffixed(log.directory, CLEANED_SUFFIX)
    assert not _suffixed(log.directory, SWAP_SUFFIX)
    log.close()


async def test_a_truncation_between_cleaning_and_swap_discards_the_pass(tmp_path: Path) -> None:
    clock = ManualClock()
    log = _dirty_log(tmp_path, clock)
    cut = log.segments[2].base_offset + 1  # inside the cleanable range

    async def truncate_then_swap(task: CleaningTask, cleaned: CleanedRange) -> SwapOutcome:
        # A new leader told this replica to truncate while its pass ran.
        assert _suffixed(log.directory, CLEANED_SUFFIX)
        log.truncate_to(cut)
        return swap_cleaned_segments(log, task, cleaned)

    cleaner = LogCleaner(
        OneLogHost(log), CleanerConfig(), clock, swap=truncate_then_swap, run_blocking=inline
    )
    result = await cleaner.clean_once()
    assert result is not None
    assert not result.swapped
    assert "segment" in result.reason
    assert cleaner.stats.discarded == 1
    assert cleaner.stats.passes == 0
    assert log.log_end_offset == cut or log.log_end_offset < cut
    assert not _suffixed(log.directory, CLEANED_SUFFIX)  # the cleaner removed its output
    # Nothing was checkpointed: the next pass starts from the log start again.
    assert cleaner.manager.checkpoints(tmp_path) == {}
    log.close()


def test_retention_or_another_swap_since_the_plan_discards(tmp_path: Path) -> None:
    clock = ManualClock()
    log = _dirty_log(tmp_path, clock)
    task, cleaned = _pass(log, clock)
    # The log start moves past the first segment, which retention then retires.
    log.maybe_increment_log_start_offset(log.segments[1].base_offset)
    assert log.delete_old_segments() == 1
    outcome = swap_cleaned_segments(log, task, cleaned)
    assert not outcome.swapped
    assert "replaced or retired" in outcome.reason
    log.close()


def test_a_closed_log_discards(tmp_path: Path) -> None:
    clock = ManualClock()
    log = _dirty_log(tmp_path, clock)
    task, cleaned = _pass(log, clock)
    log.close()
    assert not swap_cleaned_segments(log, task, cleaned).swapped


def _crash_points(tmp_path: Path) -> list[str]:
    """Every step the swap announces, from one complete run."""
    clock = ManualClock()
    log = _dirty_log(tmp_path / "probe", clock)
    task, cleaned = _pass(log, clock)
    steps: list[str] = []
    assert swap_cleaned_segments(log, task, cleaned, step=steps.append).swapped
    log.close()
    return steps


def test_a_crash_at_any_step_of_the_swap_recovers_old_or_new(tmp_path: Path) -> None:
    steps = _crash_points(tmp_path)
    assert len(steps) > 6, steps
    retire = steps.index("retire the old segments")
    # Each kind of step once, and around the commit point (the last .cleaned -> .swap rename):
    # the first renames, the commit, the retirement, the first and last final renames.
    picks = sorted({0, 1, retire - 2, retire - 1, retire, retire + 1, len(steps) - 1})
    for k in picks:
        crash_at = steps[k]
        where = tmp_path / f"crash-{k}"
        clock = ManualClock()
        log = _dirty_log(where, clock)
        before = read_all(log)
        hw = log.high_watermark
        task, cleaned = _pass(log, clock)

        def crash(name: str, at: str = crash_at) -> None:
            if name == at:
                raise SimulatedCrash(name)

        with pytest.raises(SimulatedCrash):
            swap_cleaned_segments(log, task, cleaned, step=crash)
        # The process dies here: the log object is dropped unclosed, its files stay as they are.
        reopened = Log.open(log.directory, log.config, clock, high_watermark=hw)
        after = read_all(reopened)
        assert latest_by_key(after) == latest_by_key(before), (k, crash_at)
        # Each step is announced before it is done: the last .cleaned -> .swap rename commits.
        if k < retire:
            assert after == before, (k, crash_at)  # undone: the old segments
        else:
            assert len(after) < len(before), (k, crash_at)  # finished: the cleaned ones
        for suffix in (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX):
            assert not _suffixed(reopened.directory, suffix), (k, crash_at, suffix)
        reopened.close()


def test_a_crash_during_the_pass_leaves_the_old_log(tmp_path: Path) -> None:
    clock = ManualClock()
    log = _dirty_log(tmp_path, clock)
    before = read_all(log)
    hw = log.high_watermark
    _pass(log, clock)  # .cleaned files written, never swapped: the broker dies now
    reopened = Log.open(log.directory, log.config, clock, high_watermark=hw)
    assert read_all(reopened) == before
    assert not _suffixed(reopened.directory, CLEANED_SUFFIX)
    reopened.close()


def test_a_fetch_in_the_middle_of_a_swap_gets_its_bytes(tmp_path: Path) -> None:
    clock = ManualClock()
    log = _dirty_log(tmp_path, clock)
    first = log.segments[0]
    planned = log.read(0, 1 << 20, max_offset=log.high_watermark)  # a fetch read its bytes
    old_bytes = bytes(planned.records)
    # A reader holding the old segment's file (the cleaner's own pass reads that way).
    fd = os.open(first.log_path, os.O_RDONLY)
    try:
        task, cleaned = _pass(log, clock)
        assert swap_cleaned_segments(log, task, cleaned).swapped
        assert bytes(planned.records) == old_bytes  # the answer planned before is intact
        offsets = [r.offset for p, _ in iter_batches(old_bytes) for r in iter_records(old_bytes, p)]
        assert offsets[0] == 0
        assert os.pread(fd, len(old_bytes), 0) == old_bytes
        # The old files are retired, not gone, until file.delete.delay.ms has passed.
        assert _suffixed(log.directory, DELETED_SUFFIX)
        assert log.take_deleted_segments() == []
        clock.advance(log.config.file_delete_delay_ms)
        Log.delete_segment_files(log.take_deleted_segments())
        assert not _suffixed(log.directory, DELETED_SUFFIX)
        assert os.pread(fd, len(old_bytes), 0) == old_bytes  # an open file outlives its name
    finally:
        os.close(fd)
    log.close()


async def test_a_discarded_pass_cleans_again_and_checkpoints(tmp_path: Path) -> None:
    clock = ManualClock()
    log = _dirty_log(tmp_path, clock)
    before = read_all(log)
    cleaner = LogCleaner(OneLogHost(log), CleanerConfig(), clock, run_blocking=inline)
    result = await cleaner.clean_once()
    assert result is not None
    assert result.swapped
    assert result.cleaned is not None
    assert cleaner.manager.checkpoints(tmp_path) == {TP: result.cleaned.end_offset}
    assert latest_by_key(read_all(log)) == latest_by_key(before)
    assert await cleaner.clean_once() is None  # clean now: nothing dirty enough


def test_a_pass_missing_a_file_is_discarded_before_any_rename(tmp_path: Path) -> None:
    clock = ManualClock()
    log = _dirty_log(tmp_path, clock)
    before = read_all(log)
    task, cleaned = _pass(log, clock)
    index = sorted(log.directory.glob(f"*.index{CLEANED_SUFFIX}"))[-1]
    index.unlink()
    outcome = swap_cleaned_segments(log, task, cleaned)
    assert not outcome.swapped
    assert "incomplete" in outcome.reason
    assert not _suffixed(log.directory, SWAP_SUFFIX)  # nothing a loader could take as a swap
    assert read_all(log) == before
    log.close()
