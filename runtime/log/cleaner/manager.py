"""`LogCleanerManager`: which compacted log the broker's cleaner cleans next (Kafka's
LogCleanerManager), and the ``cleaner-offset-checkpoint`` of each log dir.

Every log with ``cleanup.policy`` holding ``compact`` that this broker hosts is watched, leader
or follower alike: each replica cleans its own copy, as in Kafka. For each, `cleanable_range`
works out (Kafka's cleanableOffsets):

* the first dirty offset: the log dir's cleaner checkpoint for it, or the log start offset when
  there is none or it lies outside ``[log start, LEO]`` (a truncation or a new log since);
* the first uncleanable offset: the least of the active segment's base offset, the last stable
  offset (which is at most the HW: records above it may still be truncated, and an undecided
  transaction's may still be aborted), and the base offset of the first segment at or after the
  first dirty offset with a record newer than ``min.compaction.lag.ms``;
* the cleanable range: the log's first segments, each wholly below the first uncleanable offset
  (so never the active segment); the clean bytes are those of its segments below the first dirty
  offset, the dirty bytes the rest; the dirty ratio is dirty / (clean + dirty);
* whether it must be cleaned now whatever its ratio: its first dirty segment's first batch is
  older than ``max.compaction.lag.ms``.

`grab_filthiest` picks, among the logs not being cleaned and not marked uncleanable, with dirty
bytes, and with a ratio above ``min.cleanable.dirty.ratio`` or a compaction due now, the one
with the highest ratio, and marks it in progress until `done_cleaning`. It also records the
highest ratio it saw (Kafka's max-dirty-percent). A log whose pass failed on its data (a record
without a key, a segment with more keys than the offset map holds) is marked uncleanable
(Kafka's uncleanable partitions) until the log leaves the broker or the broker restarts.

State: owned by the cleaner (`runtime.log.cleaner.cleaner`), on the broker's event loop; the
logs are read between awaits only, as the log manager's background work reads them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from runtime.log.checkpoints import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from runtime.log.errors import CorruptCheckpointError
from runtime.log.log import Log
from runtime.log.segment import LogSegment
from wire.topic import TopicPartition

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LogToClean:
    topic_partition: TopicPartition
    log: Log
    first_dirty_offset: int
    first_uncleanable_offset: int
    segments: tuple[LogSegment, ...]  # the cleanable range: the log's first segments
    clean_bytes: int
    dirty_bytes: int
    needs_compaction_now: bool  # max.compaction.lag.ms passed for its first dirty segment

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.dirty_bytes
        return self.dirty_bytes / total if total else 0.0


def _first_batch_timestamp(segment: LogSegment) -> int | None:
    for _, header in segment.batch_headers_from(segment.base_offset):
        return header.max_timestamp
    return None


def cleanable_range(
    tp: TopicPartition, log: Log, checkpoint: int | None, now_ms: int
) -> LogToClean:
    """What of `log` may be cleaned now (module docstring); `now_ms` is wall time."""
    config = log.config
    segments = log.segments
    start = log.log_start_offset
    first_dirty = start
    if checkpoint is not None and start <= checkpoint <= log.log_end_offset:
        first_dirty = checkpoint
    uncleanable = min(segments[-1].base_offset, log.last_stable_offset)
    lag_limit = now_ms - config.min_compaction_lag_ms
    needs_now = seen_dirty = False
    for i, segment in enumerate(segments[:-1]):
        upper = segments[i + 1].base_offset
        if upper <= first_dirty:
            continue  # wholly clean
        if segment.base_offset >= uncleanable:
            break
        if not seen_dirty:  # the first dirty segment: is its compaction overdue?
            seen_dirty = True
            first_ts = _first_batch_timestamp(segment)
            if first_ts is not None and first_ts >= 0:
                needs_now = now_ms - first_ts > config.max_compaction_lag_ms
        if config.min_compaction_lag_ms > 0 and segment.largest_timestamp > lag_limit:
            uncleanable = min(uncleanable, segment.base_offset)
            break
    chosen: list[LogSegment] = []
    clean = dirty = 0
    for i, segment in enumerate(segments[:-1]):
        upper = segments[i + 1].base_offset
        if upper > uncleanable and segment.read_next_offset() > uncleanable:
            break
        chosen.append(segment)
        if upper <= first_dirty:
            clean += segment.size
        else:
            dirty += segment.size
    return LogToClean(
        tp, log, first_dirty, uncleanable, tuple(chosen), clean, dirty, needs_now and dirty > 0
    )


class LogCleanerManager:
    """The cleaner's choice of log and its checkpoints (module docstring)."""

    def __init__(self) -> None:
        self._checkpoints: dict[Path, dict[TopicPartition, int]] = {}
        self._in_progress: set[TopicPartition] = set()
        self._uncleanable: dict[TopicPartition, str] = {}
        self.max_dirty_ratio = 0.0  # of the last grab (Kafka's max-dirty-percent / 100)

    @property
    def uncleanable(self) -> Mapping[TopicPartition, str]:
        return self._uncleanable

    def checkpoints(self, log_dir: Path) -> dict[TopicPartition, int]:
        """The dir's cleaner checkpoint (read once; a damaged file counts as empty: it is a
        hint of where the next pass may start, so losing it only costs a longer pass)."""
        known = self._checkpoints.get(log_dir)
        if known is None:
            try:
                known = OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).read()
            except CorruptCheckpointError as exc:
                logger.warning("ignoring %s: %s", CLEANER_OFFSET_CHECKPOINT, exc)
                known = {}
            self._checkpoints[log_dir] = known
        return known

    def grab_filthiest(
        self,
        logs_by_dir: Mapping[Path, Mapping[TopicPartition, Log]],
        now_ms: int,
        *,
        is_live: Callable[[Path], bool] = lambda _: True,
    ) -> tuple[Path, LogToClean] | None:
        """The log to clean next, marked in progress; None when none needs it."""
        best: tuple[Path, LogToClean] | None = None
        max_ratio = 0.0
        for log_dir, logs in logs_by_dir.items():
            if not is_live(log_dir):
                continue
            checkpoints = self.checkpoints(log_dir)
            for tp, log in logs.items():
                if not log.config.compact or tp in self._in_progress or log.closed:
                    continue
                if tp in self._uncleanable:
                    continue
                candidate = cleanable_range(tp, log, checkpoints.get(tp), now_ms)
                max_ratio = max(max_ratio, candidate.cleanable_ratio)
                if not candidate.segments or candidate.dirty_bytes == 0:
                    continue
                ratio = candidate.cleanable_ratio
                if ratio <= log.config.min_cleanable_dirty_ratio and not (
                    candidate.needs_compaction_now
                ):
                    continue
                if best is None or ratio > best[1].cleanable_ratio:
                    best = (log_dir, candidate)
        self.max_dirty_ratio = max_ratio
        if best is not None:
            self._in_progress.add(best[1].topic_partition)
        return best

    def done_cleaning(
        self,
        log_dir: Path,
        tp: TopicPartition,
        end_offset: int | None,
        present: Mapping[TopicPartition, Log] | None = None,
    ) -> None:
        """The pass on `tp` ended; with `end_offset`, it cleaned up to there: the checkpoint
        moves (entries of logs no longer `present` in the dir are dropped on the way)."""
        self._in_progress.discard(tp)
        if end_offset is None:
            return
        checkpoints = self.checkpoints(log_dir)
        checkpoints[tp] = end_offset
        if present is not None:
            for gone in [t for t in checkpoints if t not in present]:
                del checkpoints[gone]
        OffsetCheckpointFile(log_dir / CLEANER_OFFSET_CHECKPOINT).write(checkpoints)

    def mark_uncleanable(self, tp: TopicPartition, why: str) -> None:
        self._in_progress.discard(tp)
        self._uncleanable[tp] = why

    def forget_gone(self, present: Mapping[TopicPartition, object]) -> None:
        """Drop the uncleanable marks of logs the broker no longer hosts."""
        for tp in [t for t in self._uncleanable if t not in present]:
            del self._uncleanable[tp]
