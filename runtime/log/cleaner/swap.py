"""The log owner's side of a live cleaning: check the cleaned range still fits the log, then swap
it in with Kafka's ``.cleaned`` -> ``.swap`` -> rename protocol.

`swap_cleaned_segments(log, task, cleaned)` runs on the task of the log's owner (the partition
actor's handler of its swap message, or the event loop between awaits in tests), so nothing
changes the log while it runs. It first checks, and discards the pass (returning why, the
``.cleaned`` files left to the cleaner to remove) unless all hold:

* the log is the one the pass was planned on, and is neither closed nor deleted;
* its first segments are the very `LogSegment` objects the pass read (identity, so a
  truncation, a retention pass or another swap since the plan, which replace or retire segment
  objects, are seen), each still of the planned size (a truncation inside a segment shrinks it);
* the last of them is not the active segment, and the range ends at or below the log's high
  watermark and its last stable offset (a truncation below the HW lowers the HW too);
* the range starts at or below the cleaner checkpoint it was planned from.

Then the swap, every step durable before the next (a crash anywhere leaves the old or the new
segments, never a mix: `runtime.log.recovery` finishes or undoes it at load, and its rules need
nothing of a stopped broker that a running one's directory lacks — the extra files there, the
active segment and later ones, lie above the swapped range, and ``.deleted`` files of earlier
retention passes are removed as always):

1. each new segment's files ``.cleaned`` -> ``.swap``, segments in descending base offset order,
   fsyncing the directory after each (until the last rename, the commit point, a ``.cleaned``
   file at or below every ``.swap`` one remains and the loader drops the new files);
2. the new segments are opened from their ``.swap`` files and pass their `sanity_check()`;
3. `Log.replace_cleaned_segments`: the old segments leave the log and are renamed ``.deleted``
   (the loader would delete them from here on anyway); their files are unlinked only after
   ``file.delete.delay.ms``, as for retention. Reads never hold a segment's file across a
   message (a fetch reads its bytes with ``pread`` inside the owner's handler), so a fetch that
   read an old segment has its bytes, and a reader with its own descriptor on an old file (the
   cleaner's pass itself) keeps reading it until it closes it, unlink or not;
4. each new segment's files ``.swap`` -> final name (`LogSegment.change_suffix`: the indexes,
   then the ``.log``), ascending, then a directory fsync. A crash in between leaves the first
   new segments final and the rest ``.swap``: the loader's swap range starts at the first
   remaining ``.swap`` log, deletes the final-named index files in it and rebuilds them.

The ``cleaner-offset-checkpoint`` is the manager's, written after the owner answers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from runtime.log.checkpoints import fsync_dir
from runtime.log.cleaner.task import CleanedRange, CleaningTask
from runtime.log.errors import CorruptIndexError
from runtime.log.log import Log
from runtime.log.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    file_name_prefix,
)

StepHook = Callable[[str], None]
# The order of install's step 4 (offline.compact_install): the .log, then the .txnindex.
_KINDS: Final = (LOG_SUFFIX, TXN_INDEX_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
_REQUIRED_KINDS: Final = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)  # the .txnindex may lack


def _no_hook(_: str) -> None:
    return None


@dataclass(frozen=True, slots=True)
class SwapOutcome:
    swapped: bool
    reason: str  # why it was discarded; "" when swapped


SWAPPED: Final = SwapOutcome(True, "")


def check_cleaned_range(log: Log, task: CleaningTask, cleaned: CleanedRange) -> str | None:
    """Why the cleaned range no longer fits `log` (see the module docstring), or None."""
    if log is not task.log or log.closed:
        return "the log was closed, deleted or replaced since the plan"
    count = len(cleaned.sources)
    current = log.segments
    for planned, segment, source in zip(task.segments, current, cleaned.sources, strict=False):
        if planned is not segment:
            return f"segment {source.base_offset} was replaced or retired since the plan"
        if segment.size != source.size_bytes:
            return f"segment {source.base_offset} changed size (truncated) since the plan"
    if count == 0 or count >= len(current):
        return "the range would reach the active segment"
    end = cleaned.end_offset
    if end > log.high_watermark or end > log.last_stable_offset:
        return f"the range ends at {end}, above the high watermark or last stable offset now"
    if cleaned.sources[0].base_offset > task.first_dirty_offset:
        return "the range starts above the cleaner checkpoint it was planned from"
    return None


def swap_cleaned_segments(
    log: Log, task: CleaningTask, cleaned: CleanedRange, *, step: StepHook = _no_hook
) -> SwapOutcome:
    """Check, then swap (module docstring). On the log owner's task only. `step` announces each
    file operation first (tests crash there)."""
    why = check_cleaned_range(log, task, cleaned)
    if why is not None:
        return SwapOutcome(False, why)
    directory = task.directory
    kinds = {s.base_offset: _present_kinds(task, s.base_offset) for s in cleaned.segments}
    for base, present in kinds.items():
        # Every new segment's .log, .index and .timeindex must be there before the first
        # rename: a swap missing a file would commit a partial set (the loader completes any).
        if not all(kind in present for kind in _REQUIRED_KINDS):
            return SwapOutcome(False, f"the cleaned files of segment {base} are incomplete")
    for segment in sorted(cleaned.segments, key=lambda s: s.base_offset, reverse=True):
        prefix = directory / file_name_prefix(segment.base_offset)
        for kind in kinds[segment.base_offset]:
            step(f"rename {prefix.name}{kind}{CLEANED_SUFFIX} -> {SWAP_SUFFIX}")
            os.replace(f"{prefix}{kind}{CLEANED_SUFFIX}", f"{prefix}{kind}{SWAP_SUFFIX}")
            fsync_dir(directory)  # keeps the renames in order: the loader relies on it
    new = [
        LogSegment(directory, s.base_offset, log.config, log.clock, suffix=SWAP_SUFFIX)
        for s in cleaned.segments
    ]
    try:
        for opened in new:
            opened.sanity_check()
    except CorruptIndexError:
        # Past the commit point: the files are sound enough for the loader, which rebuilds the
        # indexes, but this log must not serve them. A broken writer is a bug: stop loudly.
        for opened in new:
            opened.close_handles()
        raise
    step("retire the old segments")
    log.replace_cleaned_segments(task.segments[: len(cleaned.sources)], new)
    for opened in new:
        step(f"rename {file_name_prefix(opened.base_offset)} {SWAP_SUFFIX} -> final")
        opened.change_suffix(SWAP_SUFFIX, "")
    fsync_dir(directory)
    return SWAPPED


def _present_kinds(task: CleaningTask, base_offset: int) -> list[str]:
    """The kinds of files a cleaned segment has as ``.cleaned`` files (all but maybe the
    .txnindex, created with its first entry, when the pass completed)."""
    prefix = task.directory / file_name_prefix(base_offset)
    return [kind for kind in _KINDS if os.path.exists(f"{prefix}{kind}{CLEANED_SUFFIX}")]
