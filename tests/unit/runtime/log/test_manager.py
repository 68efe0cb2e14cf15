from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from runtime.clock import ManualClock
from runtime.log.config import LogConfig, LogManagerConfig
from runtime.log.errors import InconsistentTopicIdError, LogDirError, LogDirLockedError
from runtime.log.manager import CLEAN_SHUTDOWN_FILE, LogManager
from runtime.log.partition_dir import is_delete_dir
from wire.batch_builder import build_batch
from wire.topic import TopicPartition

from .helpers import WALL_MS, batch

TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100)


def manager_for(dirs: list[Path], clock: ManualClock, **kwargs: object) -> LogManager:
    config = LogManagerConfig(log_dirs=tuple(str(d) for d in dirs), default=SMALL, **kwargs)  # type: ignore[arg-type]
    return LogManager(config, clock)


async def wait_until(condition: object, what: str) -> None:
    """Let background tasks (and their worker threads) run until `condition()` holds."""
    for _ in range(500):
        if condition():  # type: ignore[operator]
            return
        await asyncio.sleep(0.002)
    raise AssertionError(f"timed out waiting for {what}")


async def started(manager: LogManager, clock: ManualClock, alarms: int) -> asyncio.Task[None]:
    """Start the background tasks and wait until each periodic one sleeps on the clock."""
    task = asyncio.create_task(manager.run())
    await wait_until(lambda: clock.pending_alarms >= alarms, "background tasks to start")
    return task


async def advance_until(clock: ManualClock, condition: object, step_ms: int, what: str) -> None:
    """Move the clock in steps, letting tasks and threads run, until `condition()` holds."""
    for _ in range(200):
        if condition():  # type: ignore[operator]
            return
        clock.advance(step_ms)
        for _ in range(20):
            await asyncio.sleep(0.001)
    raise AssertionError(f"timed out waiting for {what}")


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_second_manager_on_the_same_dir_is_refused(tmp_path: Path, clock: ManualClock) -> None:
    first = manager_for([tmp_path / "a"], clock)
    first.open()
    second = manager_for([tmp_path / "b", tmp_path / "a"], clock)
    with pytest.raises(LogDirLockedError):
        second.open()
    # A refused start holds no lock: "b" is free again.
    third = manager_for([tmp_path / "b"], clock)
    third.open()
    third.shutdown()
    first.shutdown()
    again = manager_for([tmp_path / "a"], clock)
    again.open()
    again.shutdown()


def test_clean_shutdown_round_trip_and_checkpoints(tmp_path: Path, clock: ManualClock) -> None:
    manager = manager_for([tmp_path / "d1", tmp_path / "d2"], clock)
    assert all(loaded.reports == {} for loaded in manager.open())
    log0 = manager.get_or_create_log(TP0, topic_id="s3fwXAGzTpWm2qi0kZ0c1w")
    log1 = manager.get_or_create_log(TP1)
    assert manager.log_dir_of(TP0) != manager.log_dir_of(TP1)  # spread over dirs
    for i in range(10):
        log0.append_as_leader(batch(2, tag=i), 0)
    log1.append_as_leader(batch(1), 0)
    manager.write_high_watermarks({TP0: 12, TP1: 1})
    manager.shutdown()
    d0 = manager_for([tmp_path / "d1", tmp_path / "d2"], clock).log_dirs[0]
    assert (d0 / CLEAN_SHUTDOWN_FILE).exists()
    assert (d0 / "recovery-point-offset-checkpoint").read_text() == "0\n1\norders 0 20\n"

    reopened = manager_for([tmp_path / "d1", tmp_path / "d2"], clock)
    loaded = reopened.open()
    assert all(d.clean_shutdown for d in loaded)
    assert not (d0 / CLEAN_SHUTDOWN_FILE).exists()  # a crash from now on is unclean
    loaded0 = reopened.get_log(TP0)
    assert loaded0 is not None
    assert loaded0.log_end_offset == 20
    assert loaded0.high_watermark == 12
    assert loaded0.recovery_report.segments_recovered == 0
    assert reopened.topic_id_of(TP0) == "s3fwXAGzTpWm2qi0kZ0c1w"
    assert reopened.read_high_watermarks() == {TP0: 12, TP1: 1}
    with pytest.raises(InconsistentTopicIdError):
        reopened.get_or_create_log(TP0, topic_id="other")
    reopened.shutdown()


def test_crash_means_recovery_from_the_checkpointed_point(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = manager_for([tmp_path / "d"], clock)
    manager.open()
    log = manager.get_or_create_log(TP0)
    for i in range(10):
        log.append_as_leader(batch(2, tag=i), 0)
    log.flush(6)
    manager.checkpoint_recovery_points()
    tail = log.active_segment.log_path
    manager.abandon()  # crash: no flush, no marker
    with open(tail, "r+b") as f:
        f.truncate(f.seek(0, 2) - 3)  # the last write was torn
    reopened = manager_for([tmp_path / "d"], clock)
    (loaded,) = reopened.open()
    assert not loaded.clean_shutdown
    report = loaded.reports[TP0]
    assert report.truncation is not None
    recovered = reopened.get_log(TP0)
    assert recovered is not None
    assert recovered.log_end_offset == 18
    reopened.shutdown()


async def test_open_async_loads_every_dir(tmp_path: Path, clock: ManualClock) -> None:
    manager = manager_for([tmp_path / "a", tmp_path / "b"], clock)
    manager.open()
    for tp in (TP0, TP1):
        manager.get_or_create_log(tp).append_as_leader(batch(2), 0)
    manager.shutdown()
    again = manager_for([tmp_path / "a", tmp_path / "b"], clock)
    loaded = await again.open_async()
    assert sorted(tp for d in loaded for tp in d.reports) == [TP0, TP1]
    await again.shutdown_async()


async def test_deleted_log_is_renamed_then_removed_in_background(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = manager_for([tmp_path / "d"], clock)
    manager.open()
    manager.get_or_create_log(TP0).append_as_leader(batch(2), 0)
    doomed = manager.delete_log(TP0)
    assert doomed is not None
    assert is_delete_dir(doomed.name)
    assert doomed.exists()
    assert not (tmp_path / "d" / TP0.dir_name).exists()
    assert manager.get_log(TP0) is None
    task = await started(manager, clock, alarms=4)
    clock.advance(SMALL.file_delete_delay_ms - 1000)
    await asyncio.sleep(0.01)
    assert doomed.exists()  # file.delete.delay.ms has not passed
    await advance_until(clock, lambda: not doomed.exists(), 1000, "the -delete dir to go")
    await stop(task)
    manager.shutdown()


async def test_retention_task_runs_on_the_clock(tmp_path: Path, clock: ManualClock) -> None:
    manager = manager_for(
        [tmp_path / "d"],
        clock,
        retention_check_interval_ms=5000,
        flush_offset_checkpoint_interval_ms=3000,
    )
    manager.open()
    manager.set_topic_config("orders", {"retention.ms": 60_000, "segment.bytes": 1000})
    log = manager.get_or_create_log(TP0)
    for i in range(20):
        log.append_as_leader(batch(3, ts=WALL_MS + i, tag=i), 0)
    log.update_high_watermark(log.log_end_offset)
    segments = len(log.segments)
    assert segments > 2
    task = await started(manager, clock, alarms=4)
    clock.advance(4999)  # nothing expired yet, and the retention check has not run
    # The recovery point checkpoint ran at 3 s: rolled segments were fsynced.
    await wait_until(lambda: log.recovery_point == log.active_segment.base_offset, "flush")
    assert len(log.segments) == segments
    clock.advance(61_000)  # records are older than retention.ms now
    await wait_until(lambda: len(log.segments) == 1, "retention")
    assert log.log_start_offset == log.active_segment.base_offset
    assert list(log.directory.glob("*.deleted"))
    await advance_until(
        clock, lambda: not list(log.directory.glob("*.deleted")), 5000, "file deletion"
    )
    await stop(task)
    manager.shutdown()


async def test_flush_ms_is_honoured(tmp_path: Path, clock: ManualClock) -> None:
    manager = manager_for([tmp_path / "d"], clock, flush_scheduler_interval_ms=100)
    manager.open()
    manager.set_topic_config("orders", {"flush.ms": 1000})
    log = manager.get_or_create_log(TP0)
    log.append_as_leader(batch(2), 0)
    task = await started(manager, clock, alarms=5)
    await advance_until(clock, lambda: clock.monotonic_ms() >= 900, 100, "900 ms")
    assert log.recovery_point == 0
    await advance_until(clock, lambda: log.recovery_point == 2, 100, "flush.ms flush")
    assert clock.monotonic_ms() <= 1100
    await stop(task)
    manager.shutdown()


def test_truncate_checkpoints_recovery_points(tmp_path: Path, clock: ManualClock) -> None:
    manager = manager_for([tmp_path / "d"], clock)
    manager.open()
    log = manager.get_or_create_log(TP0)
    for i in range(5):
        log.append_as_leader(batch(2, tag=i), 0)
    log.flush()
    manager.truncate_to({TP0: 4})
    text = (tmp_path / "d" / "recovery-point-offset-checkpoint").read_text()
    assert text == "0\n1\norders 0 4\n"
    manager.shutdown()


def test_foreign_directory_in_a_log_dir_is_an_error(tmp_path: Path, clock: ManualClock) -> None:
    (tmp_path / "d" / "not_a_partition").mkdir(parents=True)
    (tmp_path / "d" / "orders-0-future").mkdir()
    manager = manager_for([tmp_path / "d"], clock)
    with pytest.raises(LogDirError, match="not_a_partition"):
        manager.open()
    (tmp_path / "d" / "not_a_partition").rmdir()
    manager.open()  # the failed start released the lock; -future dirs are skipped
    assert manager.logs == {}
    manager.shutdown()


def test_unreadable_checkpoint_falls_back_to_a_full_recovery(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = manager_for([tmp_path / "d"], clock)
    manager.open()
    log = manager.get_or_create_log(TP0)
    for i in range(10):
        log.append_as_leader(batch(2, tag=i), 0)
    log.flush()
    manager.checkpoint_recovery_points()
    manager.abandon()
    (tmp_path / "d" / "recovery-point-offset-checkpoint").write_text("0\n5\ngarbage\n")
    reopened = manager_for([tmp_path / "d"], clock)
    (loaded,) = reopened.open()
    report = loaded.reports[TP0]
    assert report.segments_recovered == report.segments_loaded  # scanned from offset 0
    recovered = reopened.get_log(TP0)
    assert recovered is not None
    assert recovered.log_end_offset == 20
    reopened.shutdown()


async def test_idle_producers_expire_on_the_clock(tmp_path: Path, clock: ManualClock) -> None:
    """producer.id.expiration.ms after its last write, checked every
    producer.id.expiration.check.interval.ms, an idempotent producer's state is forgotten: its
    next batch may start at any sequence (KIP-360), and a busy producer's is kept."""
    manager = manager_for(
        [tmp_path / "d"],
        clock,
        producer_id_expiration_ms=60_000,
        producer_id_expiration_check_interval_ms=10_000,
    )
    manager.open()
    log = manager.get_or_create_log(TP0)

    def write(producer_id: int, sequence: int) -> None:
        records = build_batch(
            [(b"k", b"v")],
            base_timestamp=clock.wall_ms(),
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=sequence,
        )
        log.append_as_leader(records, 0)

    write(1, 0)
    write(2, 0)
    task = await started(manager, clock, alarms=5)
    await advance_until(clock, lambda: clock.wall_ms() >= WALL_MS + 50_000, 10_000, "50 s")
    write(2, 1)  # producer 2 stays busy
    await advance_until(
        clock, lambda: log.producer_state.last_entry(1) is None, 10_000, "producer 1 expired"
    )
    assert log.producer_state.last_entry(2) is not None
    write(1, 500)  # no state left: any sequence is accepted
    await stop(task)
    manager.shutdown()
