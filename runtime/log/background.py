"""`LogBackgroundWork`: the `LogManager`'s periodic tasks (Kafka's LogManager scheduler tasks), and
what one of them does when its I/O fails.

Every task runs on the injected clock until cancelled (the broker node owns the task of `run()`):

* retention, every ``log.retention.check.interval.ms``: each log's retention pass, then the log
  start offset checkpoint if a segment was retired;
* flush, every ``log.flush.scheduler.interval.ms``: the logs not flushed for their ``flush.ms``;
* recovery point checkpoint, every ``log.flush.offset.checkpoint.interval.ms``: fsync of the
  segments rolled since the last flush, then ``recovery-point-offset-checkpoint``;
* log start offset checkpoint, every ``log.flush.start.offset.checkpoint.interval.ms``;
* deletion, every second: retired segments and deleted partition directories whose
  ``file.delete.delay.ms`` has passed;
* producer expiry, every ``producer.id.expiration.check.interval.ms``: each log forgets the
  idempotent producers that wrote nothing for ``producer.id.expiration.ms`` (by the batches'
  timestamps against the wall clock, as Kafka does) and have no transaction open.

Fsyncs, unlinks and recursive deletes run in worker threads.

Failure policy (Kafka's: an I/O error in a log dir fails that whole dir): each task goes dir by
dir, and an OSError in one dir's step goes to `LogDirHost.fail_dir` (the dir leaves service and
its failure reaches the replica manager, runtime/log/dir_failure.py); the task goes on with the
other dirs, and later rounds serve the dirs still live. (An error escaping a task would end the
task group: every task of every dir, silently until the broker stops.) Any other exception is a
bug and ends the background work.

State: none of its own. It drives the manager through `LogDirHost` from one task on the broker's
event loop, calling a log's synchronous methods between awaits only, as the manager does
(runtime/log/manager.py says why that is safe for the logs' owners).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Final, Protocol

import anyio

from runtime.clock import Clock
from runtime.log.config import LONG_MAX, LogManagerConfig
from runtime.log.log import Log
from wire.topic import TopicPartition

DELETER_INTERVAL_MS: Final = 1000

DirStep = Callable[[Path, Mapping[TopicPartition, Log]], Awaitable[None]]


class LogDirHost(Protocol):
    """What the background work needs of the `LogManager`."""

    @property
    def config(self) -> LogManagerConfig: ...

    def logs_by_dir(self) -> dict[Path, dict[TopicPartition, Log]]: ...

    def is_live(self, directory: Path) -> bool: ...

    def fail_dir(self, directory: Path, error: OSError) -> None: ...

    def checkpoint_recovery_points(self, directory: Path | None = None) -> None: ...

    def checkpoint_log_start_offsets(self, directory: Path | None = None) -> None: ...

    def take_due_deleted_dirs(self) -> list[Path]: ...


class LogBackgroundWork:
    def __init__(self, host: LogDirHost, clock: Clock) -> None:
        self._host = host
        self._clock = clock

    async def run(self) -> None:
        """Run the periodic tasks until cancelled."""

        async def log_start_checkpoint() -> None:
            self._host.checkpoint_log_start_offsets()

        config = self._host.config
        async with anyio.create_task_group() as group:
            group.start_soon(self._every, config.retention_check_interval_ms, self.cleanup_logs)
            group.start_soon(self._every, config.flush_scheduler_interval_ms, self.flush_dirty_logs)
            group.start_soon(
                self._every,
                config.flush_offset_checkpoint_interval_ms,
                self.checkpoint_recovery_points,
            )
            group.start_soon(
                self._every,
                config.flush_start_offset_checkpoint_interval_ms,
                log_start_checkpoint,
            )
            group.start_soon(self._every, DELETER_INTERVAL_MS, self.delete_retired_files)
            group.start_soon(
                self._every,
                config.producer_id_expiration_check_interval_ms,
                self.expire_producers,
            )

    async def _every(self, interval_ms: int, action: Callable[[], Awaitable[object]]) -> None:
        if interval_ms >= LONG_MAX:
            return  # Kafka's "never"
        while True:
            await self._clock.sleep(interval_ms / 1000)
            await action()

    async def _each_dir(self, step: DirStep) -> None:
        """Run `step` on each live dir and its logs; an OSError fails that dir only."""
        for directory, logs in self._host.logs_by_dir().items():
            if not self._host.is_live(directory):
                continue  # failed while an earlier dir's step awaited
            try:
                await step(directory, logs)
            except OSError as error:
                self._host.fail_dir(directory, error)

    async def cleanup_logs(self) -> int:
        """One retention pass over every log; returns the number of segments retired."""
        retired = 0

        async def step(_: Path, logs: Mapping[TopicPartition, Log]) -> None:
            nonlocal retired
            for log in logs.values():
                retired += log.delete_old_segments()

        await self._each_dir(step)
        if retired:
            self._host.checkpoint_log_start_offsets()
        return retired

    async def flush_dirty_logs(self) -> None:
        now_ms = self._clock.monotonic_ms()

        async def step(_: Path, logs: Mapping[TopicPartition, Log]) -> None:
            for log in logs.values():
                if now_ms - log.last_flush_ms >= log.config.flush_ms:
                    await log.flush_async()

        await self._each_dir(step)

    async def checkpoint_recovery_points(self) -> None:
        """fsync segments that were rolled since the last flush, then checkpoint, per dir."""

        async def step(directory: Path, logs: Mapping[TopicPartition, Log]) -> None:
            for log in logs.values():
                rolled_up_to = log.active_segment.base_offset
                if rolled_up_to > log.recovery_point:
                    await log.flush_async(rolled_up_to)
            self._host.checkpoint_recovery_points(directory)

        await self._each_dir(step)

    async def expire_producers(self) -> int:
        """Forget idle producers in every log (memory only: no I/O, so no dir can fail here);
        returns how many."""
        now_ms = self._clock.wall_ms()
        expiration_ms = self._host.config.producer_id_expiration_ms
        return sum(
            log.producer_state.remove_expired(now_ms, expiration_ms)
            for logs in self._host.logs_by_dir().values()
            for log in logs.values()
        )

    async def delete_retired_files(self) -> None:
        """Remove segments and directories whose deletion delay has passed (worker threads)."""

        async def step(_: Path, logs: Mapping[TopicPartition, Log]) -> None:
            segments = [s for log in logs.values() for s in log.take_deleted_segments()]
            await Log.delete_segment_files_async(segments)

        await self._each_dir(step)
        for doomed in self._host.take_due_deleted_dirs():
            log_dir = doomed.parent
            if not self._host.is_live(log_dir):
                continue
            try:
                await asyncio.to_thread(_remove_tree, doomed)
            except OSError as error:
                self._host.fail_dir(log_dir, error)


def _remove_tree(path: Path) -> None:
    # Gone already: nothing left to remove is no disk failure.
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path)
