from __future__ import annotations

from pathlib import Path

import pytest

from runtime.log.checkpoints import EpochEntry, LeaderEpochCheckpointFile
from runtime.log.epoch_cache import LeaderEpochCache


def make(tmp_path: Path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache(LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint"))
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def test_assign_persists_and_reloads(tmp_path: Path) -> None:
    make(tmp_path, (1, 0), (2, 10), (4, 30))
    reloaded = make(tmp_path)
    assert reloaded.entries == (EpochEntry(1, 0), EpochEntry(2, 10), EpochEntry(4, 30))
    assert reloaded.latest_epoch == 4


def test_assign_same_epoch_is_noop_and_non_monotonic_entries_are_dropped(tmp_path: Path) -> None:
    cache = make(tmp_path, (1, 0), (2, 10))
    cache.assign(2, 15)
    assert cache.entries == (EpochEntry(1, 0), EpochEntry(2, 10))
    cache.assign(3, 5)  # a lower start offset than epoch 2's: epoch 2 goes
    assert cache.entries == (EpochEntry(1, 0), EpochEntry(3, 5))
    cache.assign(2, 20)  # a lower epoch than the latest: the latest goes
    assert cache.entries == (EpochEntry(1, 0), EpochEntry(2, 20))
    with pytest.raises(ValueError, match="invalid"):
        cache.assign(-1, 3)


def test_end_offset_for_epoch(tmp_path: Path) -> None:
    cache = make(tmp_path, (2, 5), (4, 20), (7, 50))
    assert cache.end_offset_for(7, log_end_offset=80) == (7, 80)  # latest: the LEO
    assert cache.end_offset_for(4, 80) == (4, 50)
    assert cache.end_offset_for(5, 80) == (4, 50)  # unknown epoch: the one below, next start
    assert cache.end_offset_for(1, 80) == (1, 5)  # older than all kept
    assert cache.end_offset_for(9, 80) == (-1, -1)
    assert cache.end_offset_for(-1, 80) == (-1, -1)
    assert make(tmp_path / "x").end_offset_for(3, 10) == (-1, -1)


def test_truncate_from_end_and_start(tmp_path: Path) -> None:
    cache = make(tmp_path, (1, 0), (2, 10), (3, 20))
    cache.truncate_from_end(20)
    assert cache.entries == (EpochEntry(1, 0), EpochEntry(2, 10))
    cache.truncate_from_end(25)  # nothing starts at or after 25
    assert cache.latest_epoch == 2
    cache.truncate_from_start(12)
    assert list(cache.entries) == [EpochEntry(2, 12)]
    assert list(make(tmp_path).entries) == [EpochEntry(2, 12)]
    assert cache.epoch_for_offset(11) is None
    assert cache.epoch_for_offset(100) == 2
