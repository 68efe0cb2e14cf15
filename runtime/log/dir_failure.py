"""`LogDirFailureChannel`: how a log dir failure that the `LogManager` finds reaches the replica
manager (Kafka's LogDirFailureChannel).

An I/O error in a log dir fails the whole dir. When the error comes up in one of the manager's
own steps (its background work, a checkpoint it writes, a log it deletes; runtime/log/manager.py
lists them), the manager takes the dir out of service at once and reports it here: the dir, the
partitions whose logs it held, and the error. The replica manager's watcher task takes each
report and hands it to its actor, which takes those partitions OFFLINE exactly as after an I/O
error inside a partition actor (actors/replication/replica_manager.py). A failure the replica
manager finds itself (a partition actor's, a log it cannot create) does not pass through here:
it marks the dir offline in the same handler.

A dir is reported at most once per process (a failed dir comes back only with a restart), so the
queue holds at most one report per log dir: `report` neither waits nor drops, and the consumer
sees every failure however busy its mailbox is.

Ownership: the manager reports and one consumer takes, both on the broker's event loop, so the
queue needs no lock.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from wire.topic import TopicPartition


@dataclass(frozen=True, slots=True)
class LogDirFailure:
    directory: Path
    partitions: tuple[TopicPartition, ...]  # whose logs were in the dir when it failed
    error: str  # the I/O error, for the log


class LogDirFailureChannel:
    def __init__(self, log_dirs: int) -> None:
        # Bounded by the number of dirs: one report each at most.
        self._queue: asyncio.Queue[LogDirFailure] = asyncio.Queue(max(1, log_dirs))
        self._reported: set[Path] = set()

    def report(self, failure: LogDirFailure) -> None:
        """Hand over a dir that has just gone offline (the caller took it out of service)."""
        assert failure.directory not in self._reported, f"{failure.directory} reported twice"
        self._reported.add(failure.directory)
        self._queue.put_nowait(failure)

    async def take(self) -> LogDirFailure:
        """The next reported failure, waiting for one."""
        return await self._queue.get()

    def pending(self) -> int:
        """Reports not taken yet (for tests and diagnostics)."""
        return self._queue.qsize()
