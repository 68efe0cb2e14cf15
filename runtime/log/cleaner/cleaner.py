"""`LogCleaner`: a broker's live log compaction (Kafka's LogCleaner and its CleanerThreads).

``log.cleaner.threads`` workers run on the broker's event loop until cancelled (the broker node
owns the task of `run()`); with ``log.cleaner.enable=false`` there are none. Each worker, in a
loop:

1. asks the `LogCleanerManager` for the dirtiest compacted log (`grab_filthiest`: dirty ratio
   above ``min.cleanable.dirty.ratio``, or ``max.compaction.lag.ms`` passed) and plans its pass
   (`plan_cleaning`: a snapshot of the cleanable range, on the event loop); with nothing to
   clean it sleeps ``log.cleaner.backoff.ms`` on the injected clock;
2. runs the pass in a worker thread (`run_cleaning`, `runtime.log.cleaner.task` says why a
   thread): the offset map, then ``.cleaned`` segment files in the partition directory;
3. hands the result to the log's owner (`SwapSink`: in a broker a message to the partition
   actor, `actors.replication.cleaner_swap`; `direct_swap` calls the log between awaits, as
   the log manager does), which checks it still fits the log and swaps it in
   (`runtime.log.cleaner.swap`) or discards it;
4. after a swap, moves the log dir's ``cleaner-offset-checkpoint`` to the end of the cleaned
   range; after a discard, removes the ``.cleaned`` files (in a thread).

Failures: a pass that fails on the data (`CompactError`: a record without a key, more keys in a
segment than the offset map holds, a damaged batch) marks the partition uncleanable and the
cleaner goes on with the others (Kafka's uncleanable partitions); a `FileNotFoundError` means
the log moved on under the pass (a segment retired, the partition deleted): the pass is
discarded; any other OSError fails the log dir (`CleanerHost.fail_dir`, as the log manager's
background work does).

`stats` (a `CleanerStats`, read by runtime/metrics/cleaner.py) is written here only. State:
the manager and the stats, owned by this object on the event loop; the threads get frozen
tasks and return new values.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

import anyio

from runtime.clock import Clock
from runtime.log.cleaner.config import CleanerConfig
from runtime.log.cleaner.manager import LogCleanerManager
from runtime.log.cleaner.source import CompactError
from runtime.log.cleaner.swap import SwapOutcome, swap_cleaned_segments
from runtime.log.cleaner.task import (
    CleanedRange,
    CleaningTask,
    plan_cleaning,
    remove_cleaned_files,
    run_cleaning,
)
from runtime.log.log import Log
from wire.topic import TopicPartition

logger = logging.getLogger(__name__)

T = TypeVar("T")
SwapSink = Callable[[CleaningTask, CleanedRange], Awaitable[SwapOutcome]]
RunBlocking = Callable[[Callable[[CleaningTask], T], CleaningTask], Awaitable[T]]


class CleanerHost(Protocol):
    """What the cleaner needs of the `LogManager`."""

    def logs_by_dir(self) -> dict[Path, dict[TopicPartition, Log]]: ...

    def is_live(self, directory: Path) -> bool: ...

    def fail_dir(self, directory: Path, error: OSError) -> None: ...


async def direct_swap(task: CleaningTask, cleaned: CleanedRange) -> SwapOutcome:
    """The swap done by the caller itself, between awaits (no partition actor owns the log)."""
    return swap_cleaned_segments(task.log, task, cleaned)


async def _to_thread(function: Callable[[CleaningTask], T], task: CleaningTask) -> T:
    return await asyncio.to_thread(function, task)


@dataclass(slots=True)
class CleanerStats:
    """Kafka's LogCleaner / LogCleanerManager metrics, as totals and last-pass values."""

    passes: int = 0  # passes swapped in
    discarded: int = 0  # passes whose result the owner refused (the log changed meanwhile)
    failed: int = 0  # passes that failed (uncleanable data, I/O)
    bytes_read: int = 0  # source bytes of the swapped passes ("cleaned bytes")
    bytes_written: int = 0
    records_read: int = 0
    records_written: int = 0
    last_clean_wall_ms: int = -1  # when the last pass was swapped in
    last_run_monotonic_ms: int = -1  # when a worker last looked for work
    last_clean_time_ms: int = 0  # how long the last swapped pass took, plan to swap
    max_clean_time_ms: int = 0
    last_recopy_ratio: float = 0.0  # bytes written / read, of the last swapped pass
    last_buffer_utilization: float = 0.0  # offset map entries / its bound, last pass
    max_dirty_ratio: float = 0.0
    uncleanable_partitions: int = 0


@dataclass(frozen=True, slots=True)
class PassResult:
    """What one `clean_once` did to one partition."""

    topic_partition: TopicPartition
    swapped: bool
    reason: str  # why not swapped; "" when swapped
    cleaned: CleanedRange | None = None


class LogCleaner:
    def __init__(
        self,
        host: CleanerHost,
        config: CleanerConfig,
        clock: Clock,
        *,
        swap: SwapSink = direct_swap,
        run_blocking: RunBlocking[CleanedRange | None] = _to_thread,
        run_remove: Callable[[Path], Awaitable[None]] | None = None,
    ) -> None:
        self._host = host
        self.config = config
        self._clock = clock
        self._swap = swap
        self._run_blocking = run_blocking
        self._run_remove = run_remove if run_remove is not None else _remove_in_thread
        self.manager = LogCleanerManager()
        self.stats = CleanerStats()

    async def run(self) -> None:
        """The workers, until cancelled (none when log.cleaner.enable is false)."""
        if not self.config.enable:
            return
        async with anyio.create_task_group() as group:
            for _ in range(self.config.threads):
                group.start_soon(self._worker)

    async def _worker(self) -> None:
        while True:
            result = await self.clean_once()
            # Straight on after a swap (Kafka's cleaner does); after nothing to do, a discard or
            # a failure, back off, so that a log that keeps refusing cannot spin a worker.
            if result is None or not result.swapped:
                await self._clock.sleep(self.config.backoff_ms / 1000)

    async def clean_once(self) -> PassResult | None:
        """One pass on the dirtiest log; None when no log needs one."""
        self.stats.last_run_monotonic_ms = self._clock.monotonic_ms()
        logs_by_dir = self._host.logs_by_dir()
        present: dict[TopicPartition, Log] = {
            tp: log for logs in logs_by_dir.values() for tp, log in logs.items()
        }
        self.manager.forget_gone(present)
        grabbed = self.manager.grab_filthiest(
            logs_by_dir, self._clock.wall_ms(), is_live=self._host.is_live
        )
        self.stats.max_dirty_ratio = self.manager.max_dirty_ratio
        if grabbed is None:
            return None
        log_dir, to_clean = grabbed
        tp = to_clean.topic_partition
        started_ms = self._clock.monotonic_ms()
        task = plan_cleaning(
            tp,
            to_clean.log,
            to_clean.segments,
            first_dirty_offset=to_clean.first_dirty_offset,
            now_ms=self._clock.wall_ms(),
            max_map_entries=self.config.max_map_entries,
        )
        result = await self._clean(log_dir, task, logs_by_dir.get(log_dir, {}))
        if result.swapped and result.cleaned is not None:
            self._count_swap(result.cleaned, self._clock.monotonic_ms() - started_ms)
        self.stats.uncleanable_partitions = len(self.manager.uncleanable)
        return result

    async def _clean(
        self, log_dir: Path, task: CleaningTask, present: Mapping[TopicPartition, Log]
    ) -> PassResult:
        tp = task.topic_partition
        try:
            cleaned = await self._run_blocking(run_cleaning, task)
        except CompactError as exc:
            logger.warning("log cleaner: %s is uncleanable: %s", tp, exc)
            self.manager.mark_uncleanable(tp, str(exc))
            self.stats.failed += 1
            return PassResult(tp, False, f"uncleanable: {exc}")
        except FileNotFoundError as exc:
            self.manager.done_cleaning(log_dir, tp, None)
            self.stats.discarded += 1
            return PassResult(tp, False, f"the log moved on under the pass: {exc}")
        except OSError as exc:
            self.manager.done_cleaning(log_dir, tp, None)
            self.stats.failed += 1
            self._host.fail_dir(log_dir, exc)
            return PassResult(tp, False, f"I/O error: {exc!r}")
        if cleaned is None:
            self.manager.done_cleaning(log_dir, tp, None)
            return PassResult(tp, False, "nothing to write")
        if cleaned.cut_short and cleaned.end_offset <= task.first_dirty_offset:
            # The offset map filled up within the part already clean: every pass would stop
            # there again, rewriting the same segments. Kafka's cleaner maps only the dirty
            # part; this one maps the whole range (runtime/log/cleaner/offset_map.py).
            await self._run_remove(task.directory)
            why = "the clean part alone holds more keys than log.cleaner.dedupe.buffer.size maps"
            logger.warning("log cleaner: %s is uncleanable: %s", tp, why)
            self.manager.mark_uncleanable(tp, why)
            self.stats.failed += 1
            return PassResult(tp, False, f"uncleanable: {why}")
        try:
            outcome = await self._swap(task, cleaned)
        except BaseException:
            self.manager.done_cleaning(log_dir, tp, None)
            # Here and not in a thread: under cancellation a further await would not run.
            remove_cleaned_files(task.directory)
            raise
        if not outcome.swapped:
            self.stats.discarded += 1
            # Removed before the log is released: a next pass on it writes .cleaned files too.
            await self._run_remove(task.directory)
            self.manager.done_cleaning(log_dir, tp, None)
            logger.info("log cleaner: discarded the pass on %s: %s", tp, outcome.reason)
            return PassResult(tp, False, outcome.reason, cleaned)
        try:
            self.manager.done_cleaning(log_dir, tp, cleaned.end_offset, present)
        except OSError as exc:
            self._host.fail_dir(log_dir, exc)
        return PassResult(tp, True, "", cleaned)

    def _count_swap(self, cleaned: CleanedRange, elapsed_ms: int) -> None:
        stats, counts = self.stats, cleaned.stats
        stats.passes += 1
        stats.bytes_read += counts.bytes_in
        stats.bytes_written += counts.bytes_out
        stats.records_read += counts.records_in
        stats.records_written += counts.records_out
        stats.last_clean_wall_ms = self._clock.wall_ms()
        stats.last_clean_time_ms = elapsed_ms
        stats.max_clean_time_ms = max(stats.max_clean_time_ms, elapsed_ms)
        stats.last_recopy_ratio = counts.bytes_out / counts.bytes_in if counts.bytes_in else 0.0
        stats.last_buffer_utilization = cleaned.buffer_utilization


async def _remove_in_thread(directory: Path) -> None:
    await asyncio.to_thread(remove_cleaned_files, directory)
