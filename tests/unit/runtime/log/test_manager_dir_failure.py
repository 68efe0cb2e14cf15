"""An I/O error in a log dir fails that dir, not the broker (Kafka's LogDirFailureChannel and
loadLogs): in the manager's background work and checkpoints the dir goes offline and is reported
on the failure channel while the other dirs are served on; at startup the dir starts offline and
the others load; only with no dir left does the start fail.

Errors are real ones from the real code paths: a directory where a file is to be written or
opened (EISDIR), a file where a log dir is to be created (EEXIST).
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from runtime.clock import ManualClock
from runtime.log.checkpoints import (
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    TMP_SUFFIX,
    OffsetCheckpointFile,
)
from runtime.log.config import LogConfig, LogManagerConfig
from runtime.log.errors import LogDirError, LogDirLockedError
from runtime.log.manager import CLEAN_SHUTDOWN_FILE, LogDirOfflineError, LogManager
from wire.topic import TopicPartition

from .helpers import WALL_MS, batch

TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
TP2 = TopicPartition("orders", 2)
SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100)
# The periodic tasks that sleep on the clock (the flush scheduler's default is "never").
BACKGROUND_ALARMS = 4


def manager_for(
    dirs: list[Path], clock: ManualClock, *, node_id: int | None = 0, **kwargs: int
) -> LogManager:
    config = LogManagerConfig(log_dirs=tuple(str(d) for d in dirs), default=SMALL, **kwargs)
    return LogManager(config, clock, node_id=node_id)


def break_checkpoint(directory: Path, name: str) -> None:
    """The checkpoint's temporary file is a directory: the next write of it raises EISDIR."""
    (directory / (name + TMP_SUFFIX)).mkdir()


def break_first_segment(partition_dir: Path) -> None:
    """The partition's first segment file is a directory: opening the log raises EISDIR."""
    segment = partition_dir / ("0" * 20 + ".log")
    segment.unlink()
    segment.mkdir()


async def let_run(clock: ManualClock, advance_ms: int = 0) -> None:
    """Move the clock, then let the background tasks and their worker threads run."""
    clock.advance(advance_ms)
    for _ in range(50):
        await asyncio.sleep(0.002)


async def started(manager: LogManager, clock: ManualClock) -> asyncio.Task[None]:
    task = asyncio.create_task(manager.run())
    for _ in range(500):
        if clock.pending_alarms >= BACKGROUND_ALARMS:
            return task
        await asyncio.sleep(0.002)
    raise AssertionError("background tasks did not start")


async def stopped(task: asyncio.Task[None]) -> None:
    assert not task.done(), "the background work ended"
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# -- while serving --------------------------------------------------------------------------------


async def test_a_background_checkpoint_error_fails_its_dir_and_the_other_dirs_are_served_on(
    tmp_path: Path, clock: ManualClock
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    manager = manager_for([a, b], clock, flush_offset_checkpoint_interval_ms=1000)
    manager.open()
    manager.get_or_create_log(TP0)  # the least loaded dir: a
    log1 = manager.get_or_create_log(TP1)  # then b
    assert manager.log_dir_of(TP0) == a.resolve()
    break_checkpoint(a, RECOVERY_POINT_CHECKPOINT)
    task = await started(manager, clock)

    await let_run(clock, 1000)
    assert manager.live_log_dirs == (b.resolve(),)
    assert manager.get_log(TP0) is None
    assert manager.failure_channel.pending() == 1
    failure = await manager.failure_channel.take()
    assert failure.directory == a.resolve()
    assert failure.partitions == (TP0,)
    assert "Is a directory" in failure.error
    assert manager.offline_directory_ids() == manager.directory_ids()[:1]

    # The next rounds serve b: its recovery point checkpoint moves with its log.
    log1.append_as_leader(batch(3), 0)
    log1.flush()
    await let_run(clock, 1000)
    assert OffsetCheckpointFile(b / RECOVERY_POINT_CHECKPOINT).read() == {TP1: 3}
    assert manager.failure_channel.pending() == 0, "a dir is reported once"
    await stopped(task)
    manager.shutdown()
    assert (b / CLEAN_SHUTDOWN_FILE).exists()
    assert not (a / CLEAN_SHUTDOWN_FILE).exists(), "a failed dir is recovered at its next start"


async def test_a_retention_error_fails_its_dir_and_retention_goes_on_in_the_others(
    tmp_path: Path, clock: ManualClock
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    manager = manager_for([a, b], clock, retention_check_interval_ms=5000)
    manager.open()
    manager.set_topic_config("orders", {"retention.ms": 60_000, "segment.bytes": 1000})
    logs = [manager.get_or_create_log(tp) for tp in (TP0, TP1)]
    for log in logs:
        for i in range(20):
            log.append_as_leader(batch(3, ts=WALL_MS + i, tag=i), 0)
        log.update_high_watermark(log.log_end_offset)
        assert len(log.segments) > 2
    # Retiring TP0's first segment renames its file over a directory that is in the way.
    first = logs[0].segments[0].log_path
    blocker = first.with_name(first.name + ".deleted")
    blocker.mkdir()
    (blocker / "in-the-way").touch()
    task = await started(manager, clock)

    await let_run(clock, 65_000)
    assert manager.live_log_dirs == (b.resolve(),)
    assert (await manager.failure_channel.take()).partitions == (TP0,)
    assert len(logs[1].segments) == 1, "b's retention ran in the same pass"
    await stopped(task)
    manager.shutdown()


async def test_a_removal_error_fails_its_dir_and_the_other_removals_go_on(
    tmp_path: Path, clock: ManualClock
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    manager = manager_for([a, b], clock)
    manager.open()
    manager.get_or_create_log(TP0)  # a
    manager.get_or_create_log(TP1)  # b
    manager.get_or_create_log(TP2)  # a
    doomed_a, doomed_b = manager.delete_log(TP0), manager.delete_log(TP1)
    assert doomed_a is not None
    assert doomed_b is not None
    # By the time it is removed, a's renamed directory is a file: the removal fails (ENOTDIR).
    shutil.rmtree(doomed_a)
    doomed_a.write_text("in the way")
    task = await started(manager, clock)

    await let_run(clock, SMALL.file_delete_delay_ms)
    assert manager.live_log_dirs == (b.resolve(),)
    assert (await manager.failure_channel.take()).partitions == (TP2,)
    assert not doomed_b.exists(), "b's deleted directory was removed in the same pass"
    await stopped(task)
    manager.shutdown()


def test_a_high_watermark_checkpoint_error_fails_only_its_dir(
    tmp_path: Path, clock: ManualClock
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    manager = manager_for([a, b], clock)
    manager.open()
    for tp in (TP0, TP1, TP2):  # a: TP0, TP2; b: TP1
        manager.get_or_create_log(tp)
    break_checkpoint(a, REPLICATION_OFFSET_CHECKPOINT)
    manager.write_high_watermarks({TP0: 5, TP1: 7, TP2: 9})
    assert manager.live_log_dirs == (b.resolve(),)
    assert OffsetCheckpointFile(b / REPLICATION_OFFSET_CHECKPOINT).read() == {TP1: 7}
    assert manager.failure_channel.pending() == 1
    manager.write_high_watermarks({TP1: 8})
    assert OffsetCheckpointFile(b / REPLICATION_OFFSET_CHECKPOINT).read() == {TP1: 8}
    manager.shutdown()


async def test_failures_are_reported_once_per_dir(tmp_path: Path, clock: ManualClock) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    manager = manager_for([a, b], clock)
    manager.open()
    manager.get_or_create_log(TP0)
    break_checkpoint(a, RECOVERY_POINT_CHECKPOINT)
    manager.checkpoint_recovery_points()
    manager.fail_dir(a.resolve(), OSError("again"))
    assert manager.mark_dir_offline(a.resolve()) == []
    assert manager.failure_channel.pending() == 1
    failure = await manager.failure_channel.take()
    assert (failure.directory, failure.partitions) == (a.resolve(), (TP0,))
    manager.shutdown()


def test_while_a_dir_is_offline_only_a_new_log_is_created(
    tmp_path: Path, clock: ManualClock
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    manager = manager_for([a, b], clock)
    manager.open()
    manager.get_or_create_log(TP0)
    manager.mark_dir_offline(a.resolve())
    # TP1 may have been in a: an empty log in b would stand in for its data.
    with pytest.raises(LogDirOfflineError, match="may be in") as refused:
        manager.get_or_create_log(TP1)
    assert refused.value.directory is None, "no single dir to fail"
    created = manager.get_or_create_log(TP1, is_new=True)
    assert manager.log_dir_of(TP1) == b.resolve()
    assert manager.get_or_create_log(TP1) is created, "an existing log is served"
    with pytest.raises(LogDirOfflineError, match="is offline"):
        manager.get_or_create_log(TP0, is_new=True)
    manager.shutdown()


# -- at startup -----------------------------------------------------------------------------------


def make_dirs_with_logs(a: Path, b: Path, clock: ManualClock) -> tuple[bytes, bytes]:
    """A clean shutdown with TP0 in a and TP1 in b; returns the dirs' ids."""
    manager = manager_for([a, b], clock)
    manager.open()
    manager.get_or_create_log(TP0).append_as_leader(batch(2), 0)
    manager.get_or_create_log(TP1).append_as_leader(batch(2), 0)
    ids = manager.directory_ids()
    manager.shutdown()
    return ids[0], ids[1]


def test_a_dir_whose_log_cannot_be_opened_starts_offline_and_the_others_load(
    tmp_path: Path, clock: ManualClock
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    id_a, id_b = make_dirs_with_logs(a, b, clock)
    break_first_segment(a / TP0.dir_name)

    manager = manager_for([a, b], clock)
    loaded = manager.open()
    assert [d.directory for d in loaded] == [b.resolve()]
    assert manager.live_log_dirs == (b.resolve(),)
    assert manager.logs.keys() == {TP1}
    # Registration names both dirs (a is offline, not gone); heartbeats name a as offline.
    assert manager.directory_ids() == (id_a, id_b)
    assert manager.offline_directory_ids() == (id_a,)
    assert manager.failure_channel.pending() == 0, "nothing was in service there"
    with pytest.raises(LogDirOfflineError):
        manager.get_or_create_log(TP0)  # its log is in a: never recreated empty in b
    manager.shutdown()
    # a was not touched: its clean-shutdown marker still says what its logs are.
    assert (a / CLEAN_SHUTDOWN_FILE).exists()


def test_a_log_dir_that_cannot_be_created_starts_offline_without_an_id(
    tmp_path: Path, clock: ManualClock
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("a file where the dir should be")
    manager = manager_for([a, b], clock)
    assert [d.directory for d in manager.open()] == [b.resolve()]
    assert manager.live_log_dirs == (b.resolve(),)
    assert len(manager.directory_ids()) == 1
    assert manager.offline_directory_ids() == (), "no meta.properties, no id to report"
    manager.shutdown()


def test_with_no_loadable_dir_the_start_fails_and_releases_every_lock(
    tmp_path: Path, clock: ManualClock
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_dirs_with_logs(a, b, clock)
    break_first_segment(a / TP0.dir_name)
    break_first_segment(b / TP1.dir_name)
    with pytest.raises(LogDirOfflineError, match="no log dir could be opened"):
        manager_for([a, b], clock).open()
    (b / TP1.dir_name / ("0" * 20 + ".log")).rmdir()
    again = manager_for([a, b], clock)
    assert [d.directory for d in again.open()] == [b.resolve()]
    again.shutdown()


def test_configuration_errors_stay_fatal_beside_a_good_dir(
    tmp_path: Path, clock: ManualClock
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_dirs_with_logs(a, b, clock)
    holder = manager_for([a], clock)
    holder.open()
    with pytest.raises(LogDirLockedError):
        manager_for([a, b], clock).open()
    holder.shutdown()
    with pytest.raises(LogDirError, match="written by node 0"):
        manager_for([a, b], clock, node_id=1).open()
    (b / "not-a-partition").mkdir()
    with pytest.raises(LogDirError, match="not a partition directory"):
        manager_for([a, b], clock).open()


def test_a_reader_sees_every_dir_or_fails(tmp_path: Path, clock: ManualClock) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    make_dirs_with_logs(a, b, clock)
    break_first_segment(a / TP0.dir_name)
    with pytest.raises(IsADirectoryError):
        manager_for([a, b], clock, node_id=None).open()
