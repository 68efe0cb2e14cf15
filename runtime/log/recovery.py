"""Loading a partition directory: finish interrupted swaps, open segments, recover after a crash.

Order of work (Kafka's LogLoader):

1. Stray files. ``*.deleted`` files are leftovers of a deletion and are removed. ``*.cleaned``
   files are an unfinished compaction output and are removed; ``*.swap`` files whose base offset
   is >= the smallest ``.cleaned`` offset belong to an unfinished split and are removed too.
2. Swaps. The remaining ``.swap`` segments were fully written before the rename started, so the
   swap is completed: every non-swap file whose base offset lies in
   ``[min swap base offset, max swap next offset)`` is an old segment being replaced and is
   deleted, then each ``.swap`` suffix is dropped. Hence an offline compaction installed with the
   swap protocol (write ``.cleaned``, rename to ``.swap``, rename old segments to ``.deleted``,
   drop ``.swap``) never leaves a mix of old and new segments, wherever it is interrupted; nor
   does a running broker's cleaner (runtime/log/cleaner/swap.py), whose swaps follow the same
   steps in a directory that also holds the active segment and later ones: they lie above the
   swapped range, which ends at or below the old range's end.
3. Segments. Every ``.log`` file becomes a segment; index files (``.index``, ``.timeindex``,
   ``.txnindex``) without a ``.log`` are removed. A segment whose offset or time index file is
   missing, or whose index files fail `sanity_check()`, is recovered (revalidated, indexes
   rebuilt); if that finds a bad batch, the segment is truncated there and every later segment
   deleted, as in step 4. A missing ``.txnindex`` is normal (created with the first aborted
   transaction).
4. Recovery. After an unclean shutdown every segment from the one holding the recovery point
   onwards is revalidated batch by batch; at the first corrupt or torn batch that segment is
   truncated and every later segment deleted. After a clean shutdown nothing is scanned.
5. Bounds. No segment left: an empty one at the log start offset. A log end offset below the log
   start offset: all segments replaced by an empty one at the log start offset. The recovery
   point becomes the LEO after a clean shutdown, else at most the LEO (recovered bytes are not
   fsynced yet, so the recovery point only advances with a flush).

Recovering a segment empties its transaction index (see `LogSegment.recover`); the report's
`txn_index_reset_from` tells the log from which offset its producer-state replay must append the
aborted transactions again.

Runs synchronously, inside `Log.open`; the log manager runs that in worker threads.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from runtime.clock import Clock
from runtime.log.config import LogConfig
from runtime.log.epoch_cache import LeaderEpochCache
from runtime.log.errors import CorruptIndexError
from runtime.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    SegmentRecovery,
    offset_from_file_name,
)

logger = logging.getLogger(__name__)

# Every file kind of a segment beside its .log, as named without a swap/cleaned/deleted suffix.
_INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_SEGMENT_FILE_SUFFIXES = (LOG_SUFFIX, *_INDEX_SUFFIXES)


@dataclass(frozen=True, slots=True)
class Truncation:
    segment_base_offset: int
    position: int
    reason: str
    truncated_bytes: int


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What loading did to a partition directory."""

    directory: Path
    clean_shutdown: bool
    segments_loaded: int
    segments_recovered: int
    truncation: Truncation | None
    deleted_segments: tuple[int, ...]  # base offsets removed after a corrupt segment
    rebuilt_indexes: tuple[int, ...]  # base offsets whose indexes failed the sanity check
    swaps_completed: tuple[int, ...]  # base offsets of .swap segments installed
    removed_files: tuple[str, ...]  # stray .deleted/.cleaned/.swap/index files removed
    log_end_offset: int
    # The lowest base offset of a segment that was recovered, hence whose transaction index was
    # emptied (that segment may have been deleted since); None when no segment was recovered.
    txn_index_reset_from: int | None = None

    @property
    def truncated_bytes(self) -> int:
        return self.truncation.truncated_bytes if self.truncation else 0


@dataclass(slots=True)
class LoadedSegments:
    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    next_offset: int
    report: RecoveryReport


@dataclass(slots=True)
class _Progress:
    removed: list[str] = field(default_factory=list)
    swaps: list[int] = field(default_factory=list)
    rebuilt: list[int] = field(default_factory=list)
    deleted: list[int] = field(default_factory=list)
    recovered: int = 0
    truncation: Truncation | None = None
    txn_index_reset_from: int | None = None


def _base_offset_or_none(name: str) -> int | None:
    try:
        return offset_from_file_name(name)
    except ValueError:
        return None


def _remove(path: Path, progress: _Progress) -> None:
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
        progress.removed.append(path.name)


def _strip(name: str, suffix: str) -> str:
    return name[: len(name) - len(suffix)]


def _recover(
    segment: LogSegment, epoch_cache: LeaderEpochCache | None, progress: _Progress
) -> SegmentRecovery:
    """`segment.recover`, noting that it emptied the segment's transaction index."""
    reset_from = progress.txn_index_reset_from
    if reset_from is None or segment.base_offset < reset_from:
        progress.txn_index_reset_from = segment.base_offset
    return segment.recover(epoch_cache)


def _collect_swap_files(directory: Path, progress: _Progress) -> list[Path]:
    cleaned: list[Path] = []
    swaps: list[Path] = []
    for path in sorted(directory.iterdir()):
        if not path.is_file() or _base_offset_or_none(path.name) is None:
            continue
        if path.name.endswith(DELETED_SUFFIX):
            _remove(path, progress)
        elif path.name.endswith(CLEANED_SUFFIX):
            cleaned.append(path)
        elif path.name.endswith(SWAP_SUFFIX):
            swaps.append(path)
    min_cleaned = min((offset_from_file_name(p.name) for p in cleaned), default=None)
    valid: list[Path] = []
    for path in swaps:
        if min_cleaned is not None and offset_from_file_name(path.name) >= min_cleaned:
            _remove(path, progress)  # part of a split that never finished
        else:
            valid.append(path)
    for path in cleaned:
        _remove(path, progress)
    return valid


def _complete_swaps(
    directory: Path, swaps: list[Path], config: LogConfig, clock: Clock, progress: _Progress
) -> None:
    log_swaps = [p for p in swaps if _strip(p.name, SWAP_SUFFIX).endswith(LOG_SUFFIX)]
    if not log_swaps:
        for path in swaps:  # index swap files without their log: nothing to install
            _remove(path, progress)
        return
    low, high = None, None
    for path in log_swaps:
        segment = LogSegment(
            directory, offset_from_file_name(path.name), config, clock, suffix=SWAP_SUFFIX
        )
        next_offset = segment.read_next_offset()
        segment.close_handles()
        low = segment.base_offset if low is None else min(low, segment.base_offset)
        high = next_offset if high is None else max(high, next_offset)
        progress.swaps.append(segment.base_offset)
    assert low is not None
    assert high is not None
    for path in sorted(directory.iterdir()):
        base = _base_offset_or_none(path.name)
        # Segment files only: a producer snapshot in the range stays (it describes the log's
        # offsets, which compaction keeps). An old .txnindex goes too: left behind, it would
        # become the transaction index of the new segment at its base offset.
        is_segment_file = path.name.endswith(_SEGMENT_FILE_SUFFIXES)
        if base is not None and is_segment_file and low <= base < high:
            _remove(path, progress)  # an old segment the swap replaces
    for path in sorted(directory.iterdir()):
        if path.name.endswith(SWAP_SUFFIX) and _base_offset_or_none(path.name) is not None:
            os.replace(path, path.with_name(_strip(path.name, SWAP_SUFFIX)))


def _open_segments(
    directory: Path,
    config: LogConfig,
    clock: Clock,
    epoch_cache: LeaderEpochCache | None,
    jitter: Callable[[], int],
    progress: _Progress,
) -> tuple[list[LogSegment], dict[int, SegmentRecovery]]:
    """Open every segment; rebuild (recover) those failing the sanity check. Returns the segments
    and the recovery result of each rebuilt one by base offset."""
    names = {p.name for p in directory.iterdir() if p.is_file()}
    for name in sorted(names):
        is_index = name.endswith(_INDEX_SUFFIXES)
        if is_index and _base_offset_or_none(name) is not None:
            log_name = name.rsplit(".", 1)[0] + LOG_SUFFIX
            if log_name not in names:
                _remove(directory / name, progress)
    segments: list[LogSegment] = []
    rebuilt: dict[int, SegmentRecovery] = {}
    for name in sorted(names):
        base = _base_offset_or_none(name)
        if base is None or not name.endswith(LOG_SUFFIX):
            continue
        segment = LogSegment(directory, base, config, clock, roll_jitter_ms=jitter())
        try:
            segment.sanity_check()
        except CorruptIndexError as exc:
            logger.warning("rebuilding indexes of %s: %s", segment.log_path, exc)
            rebuilt[base] = _recover(segment, epoch_cache, progress)
            progress.rebuilt.append(base)
        segments.append(segment)
    segments.sort(key=lambda s: s.base_offset)
    return segments, rebuilt


def _cut_after(
    segments: list[LogSegment], i: int, result: SegmentRecovery, progress: _Progress
) -> list[LogSegment]:
    """Segment i was truncated by recovery: record it and delete every later segment."""
    segment = segments[i]
    assert result.reason is not None
    assert result.position is not None
    progress.truncation = Truncation(
        segment.base_offset, result.position, result.reason, result.truncated_bytes
    )
    logger.warning(
        "recovery truncated %s at byte %d (%s)", segment.log_path, result.position, result.reason
    )
    for later in segments[i + 1 :]:
        later.delete_files()
        progress.deleted.append(later.base_offset)
    return segments[: i + 1]


def _recover_unflushed(
    segments: list[LogSegment],
    recovery_point: int,
    epoch_cache: LeaderEpochCache | None,
    already: dict[int, SegmentRecovery],
    progress: _Progress,
) -> list[LogSegment]:
    """Revalidate segments from the one holding the recovery point; returns the survivors.

    Segments rebuilt while opening were just validated and are not scanned twice.
    """
    first = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= recovery_point:
            first = i
    for i in range(first, len(segments)):
        segment = segments[i]
        result = already.get(segment.base_offset)
        if result is None:
            result = _recover(segment, epoch_cache, progress)
            progress.recovered += 1
        if result.reason is not None:
            return _cut_after(segments, i, result, progress)
    return segments


def load_segments(
    directory: Path,
    config: LogConfig,
    clock: Clock,
    *,
    log_start_offset: int,
    recovery_point: int,
    had_clean_shutdown: bool,
    epoch_cache: LeaderEpochCache | None,
    jitter: Callable[[], int] = lambda: 0,
) -> LoadedSegments:
    directory.mkdir(parents=True, exist_ok=True)
    progress = _Progress()
    swaps = _collect_swap_files(directory, progress)
    _complete_swaps(directory, swaps, config, clock, progress)
    segments, rebuilt = _open_segments(directory, config, clock, epoch_cache, jitter, progress)
    loaded = len(segments)
    for i, segment in enumerate(segments):
        result = rebuilt.get(segment.base_offset)
        if result is not None and result.reason is not None:
            # A rebuild found a bad batch: nothing after it may stay, even after a clean shutdown.
            segments = _cut_after(segments, i, result, progress)
            break
    if not had_clean_shutdown and segments:
        segments = _recover_unflushed(segments, recovery_point, epoch_cache, rebuilt, progress)
    next_offset = segments[-1].read_next_offset() if segments else log_start_offset
    if segments:
        log_start_offset = max(log_start_offset, segments[0].base_offset)
    if not segments or next_offset < log_start_offset:
        for segment in segments:
            segment.delete_files()
            progress.deleted.append(segment.base_offset)
        segments = [LogSegment(directory, log_start_offset, config, clock, roll_jitter_ms=jitter())]
        next_offset = log_start_offset
    segments[-1].make_active()
    if had_clean_shutdown:
        recovery_point = next_offset
    recovery_point = max(min(recovery_point, next_offset), log_start_offset)
    if epoch_cache is not None:
        epoch_cache.truncate_from_end(next_offset)
        epoch_cache.truncate_from_start(log_start_offset)
    report = RecoveryReport(
        directory=directory,
        clean_shutdown=had_clean_shutdown,
        segments_loaded=loaded,
        segments_recovered=progress.recovered,
        truncation=progress.truncation,
        deleted_segments=tuple(progress.deleted),
        rebuilt_indexes=tuple(progress.rebuilt),
        swaps_completed=tuple(progress.swaps),
        removed_files=tuple(progress.removed),
        log_end_offset=next_offset,
        txn_index_reset_from=progress.txn_index_reset_from,
    )
    return LoadedSegments(segments, log_start_offset, recovery_point, next_offset, report)
