"""One cleaning of one partition: its plan, taken on the log owner's terms, and its blocking pass.

`plan_cleaning(log, ...)` runs on the broker's event loop between awaits (as the log manager's
background work calls a log, `runtime.log.manager` says why that is safe): it snapshots what
the pass needs — the segments of the cleanable range as `SourceSegment` values (base offset,
size, next offset, largest timestamp), the HW, the aborted transactions of the range from the
log's transaction index, the topic settings — into a frozen `CleaningTask`. The task also holds
the `Log` and `LogSegment` objects of the range, but only as identity tokens for the swap's
checks (`runtime.log.cleaner.swap`): the pass never touches them.

`run_cleaning(task)` is the blocking pass, run in a worker thread: the key -> latest offset
map over the range's files (`runtime.log.cleaner.offset_map`, bounded), then the shared writer
(`runtime.log.cleaner.write`, the offline Spark job's code) writes the cleaned segments into
the partition directory as ``<name>.cleaned`` files. It opens the source files itself and reads
each only up to its planned size; it writes only ``.cleaned`` files, which nothing else in a
running broker reads or writes (a loader removes them after a crash). On any failure it removes
what it wrote.

Why a thread and not a worker process: the pass shares nothing with the event loop but files,
so either would do; a thread needs no pickling of the plan nor a process pool to start and stop
with the broker, and the hot parts (reads, CRC-32C, decompression, writes, fsync) release the
GIL. The record decoding in between holds it, in slices of the interpreter's switch interval,
so the event loop keeps serving, a little slower while a pass runs (a process would avoid
that, at the cost above).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime.log.cleaner.offset_map import build_offset_map
from runtime.log.cleaner.source import SourceSegment
from runtime.log.cleaner.write import CleanedSegment, CleanStats, write_cleaned_partition
from runtime.log.config import LogConfig
from runtime.log.log import Log
from runtime.log.segment import CLEANED_SUFFIX, LogSegment, offset_from_file_name
from runtime.log.transaction_index import AbortedTxn
from wire.topic import TopicPartition


@dataclass(frozen=True, slots=True)
class CleaningTask:
    """What one pass cleans (see the module docstring)."""

    topic_partition: TopicPartition
    directory: Path
    log: Log  # identity token for the swap's checks; never read off the owner's task
    segments: tuple[LogSegment, ...]  # the range's segments, the same (identity tokens too)
    sources: tuple[SourceSegment, ...]  # the same segments as values: what the pass reads
    first_dirty_offset: int
    high_watermark: int
    aborted: tuple[AbortedTxn, ...]
    now_ms: int
    log_config: LogConfig
    max_map_entries: int

    @property
    def end_offset(self) -> int:
        return self.sources[-1].next_offset


@dataclass(frozen=True, slots=True)
class CleanedRange:
    """What a pass wrote: `segments` (``.cleaned`` files in the partition directory) replace
    the first `len(sources)` segments of the task (a prefix when the offset map was full)."""

    sources: tuple[SourceSegment, ...]
    segments: tuple[CleanedSegment, ...]
    stats: CleanStats
    map_entries: int
    buffer_utilization: float
    cut_short: bool

    @property
    def end_offset(self) -> int:
        return self.sources[-1].next_offset


def segment_facts(segment: LogSegment) -> SourceSegment:
    """A live segment as a `SourceSegment` (on the owner's task: reads its file and index)."""
    return SourceSegment(
        segment.base_offset, segment.size, segment.read_next_offset(), segment.largest_timestamp
    )


def plan_cleaning(
    tp: TopicPartition,
    log: Log,
    segments: Sequence[LogSegment],
    *,
    first_dirty_offset: int,
    now_ms: int,
    max_map_entries: int,
) -> CleaningTask:
    """The task for `segments` (a prefix of `log`'s, never the active one, wholly below its
    HW and LSO: the manager chose them)."""
    sources = tuple(segment_facts(s) for s in segments)
    end = sources[-1].next_offset
    aborted = tuple(log.collect_aborted_transactions(sources[0].base_offset, end))
    return CleaningTask(
        tp,
        log.directory,
        log,
        tuple(segments),
        sources,
        first_dirty_offset,
        log.high_watermark,
        aborted,
        now_ms,
        log.config,
        max_map_entries,
    )


def run_cleaning(task: CleaningTask) -> CleanedRange | None:
    """The blocking pass (a worker thread). None when the range holds nothing to write (only
    empty segments). Raises CompactError (uncleanable input) or OSError; either way the
    ``.cleaned`` files it wrote are gone."""
    remove_cleaned_files(task.directory)  # a discarded earlier pass's, if any
    mapped = build_offset_map(task.directory, task.sources, task.aborted, task.max_map_entries)
    if not mapped.sources:
        return None
    try:
        written = write_cleaned_partition(
            task.directory,
            mapped.sources,
            mapped.survivors,
            task.directory,
            now_ms=task.now_ms,
            delete_retention_ms=task.log_config.delete_retention_ms,
            log_config=task.log_config,
            aborted_batches=mapped.aborted_batches,
            suffix=CLEANED_SUFFIX,
        )
    except BaseException:
        remove_cleaned_files(task.directory)
        raise
    return CleanedRange(
        mapped.sources,
        tuple(written.segments),
        written.stats,
        mapped.entries,
        mapped.buffer_utilization,
        mapped.cut_short,
    )


def remove_cleaned_files(directory: Path) -> None:
    """Unlink every ``<segment file>.cleaned`` in `directory` (a pass's output nobody took)."""
    with contextlib.suppress(FileNotFoundError):
        for path in directory.iterdir():
            if path.name.endswith(CLEANED_SUFFIX) and _is_segment_file(path.name):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()


def _is_segment_file(name: str) -> bool:
    try:
        offset_from_file_name(name)
    except ValueError:
        return False
    return True
