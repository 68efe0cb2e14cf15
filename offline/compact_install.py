"""Installing cleaned segments into a stopped broker's log dir with Kafka's swap protocol.

Per partition, with the cleaned segments staged elsewhere (`offline.compact_write`) and the
partition directory holding the old segments they replace (a prefix of the log, base offsets
``[first, end)``), in this order, each file operation announced to a `step` hook first (tests
crash there):

1. **Copy** every staged file into the partition directory as ``<name>.cleaned``, fsync each
   file, then the directory. A segment's files are its ``.log``, ``.txnindex`` (only when it
   keeps aborted transactions: `offline.compact_write`), ``.index`` and ``.timeindex``.
2. **Rename** ``.cleaned`` -> ``.swap``, segments in *descending* base offset order, fsyncing the
   directory after each rename. Until the last rename (the commit point) some ``.cleaned``
   file with a base offset <= every ``.swap`` file's remains, and the loader
   (`runtime.log.recovery`, step 1) deletes every ``.swap`` at or above the smallest ``.cleaned``
   and every ``.cleaned``: the old segments stay. From the commit point on, all new segments
   are ``.swap`` files.
3. **Delete** the old segments: rename each file to ``.deleted``, then unlink them. A crash
   here is finished by the loader: it removes ``.deleted`` files and, completing the swap,
   every non-swap file with a base offset in ``[smallest swap base, largest swap next offset)``
   — exactly the replaced range, because the first new segment starts at the first old base
   offset and the last ends at the old end offset (`write_cleaned_partition` asserts both).
4. **Rename** ``.swap`` -> final name, segments in ascending order, the ``.log`` before its
   indexes, then fsync the directory. A crash in between leaves final new segments below the
   remaining ``.swap`` ones, which the loader's range starts above; an index left as ``.swap``
   without its log's ``.swap`` is dropped and rebuilt at load. The ``.txnindex`` is renamed
   right after the ``.log`` and before ``.index``/``.timeindex``: a missing ``.txnindex``
   would load as "no aborted transactions" without complaint, while a missing offset or time
   index makes the loader recover the segment, which rebuilds its transaction index from the
   log (`runtime.log.recovery`). So whenever a crash leaves a new segment's ``.txnindex``
   behind as ``.swap``, its ``.index`` is missing too, and the loader rebuilds both.

Every old segment file goes, the ``.txnindex`` included (step 3, and the loader's swap completion
removes every segment file kind in the replaced range): left behind, an old first segment's
``.txnindex`` would become the index of the new segment with the same base offset.

Hence a crash anywhere leaves the old or the new segments of the partition, never a mix. The
``cleaner-offset-checkpoint`` is written last (atomically, by `OffsetCheckpointFile`); it is a
hint of where the next pass may start, so losing it to a crash is harmless.

Running brokers: the whole run holds the log dir's ``.lock`` with the same non-blocking
``flock`` a broker's `LogManager` takes at start, so installing into a dir a broker holds is
refused, and a broker started meanwhile refuses to start until the install is done. This module
runs in one thread; the lock keeps every other process out of the directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

from offline.compact_plan import CompactError
from runtime.log.checkpoints import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile, fsync_dir
from runtime.log.errors import CorruptCheckpointError
from runtime.log.manager import LOCK_FILE
from runtime.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    file_name_prefix,
)
from wire.topic import TopicPartition

StepHook = Callable[[str], None]
# The .log first, then the .txnindex (see step 4); the copy and the deletion use the same order.
SEGMENT_SUFFIXES: Final = (LOG_SUFFIX, TXN_INDEX_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
# The one kind a segment may lack (created with its first aborted transaction).
OPTIONAL_SUFFIX: Final = TXN_INDEX_SUFFIX


def _no_hook(_: str) -> None:
    return None


@contextlib.contextmanager
def hold_log_dir_lock(data_dir: Path) -> Iterator[None]:
    """Hold the broker's log dir lock for the block; CompactError when a broker holds it."""
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CompactError(
                f"{data_dir} is locked by a running broker; stop the broker before --install "
                "(installing into a running broker is not supported)"
            ) from None
        yield
    finally:
        os.close(fd)  # releases the flock


def _segment_files(directory: Path, base_offset: int, suffix: str = "") -> list[Path]:
    prefix = file_name_prefix(base_offset)
    return [directory / f"{prefix}{kind}{suffix}" for kind in SEGMENT_SUFFIXES]


def _staged_kinds(staging_dir: Path, base_offset: int) -> list[str]:
    """The kinds of files a staged segment has (all but maybe the optional .txnindex)."""
    prefix = file_name_prefix(base_offset)
    return [
        kind
        for kind in SEGMENT_SUFFIXES
        if kind != OPTIONAL_SUFFIX or (staging_dir / f"{prefix}{kind}").exists()
    ]


def _copy_durably(source: Path, target: Path) -> None:
    with source.open("rb") as src, target.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        os.fsync(dst.fileno())


def install_partition(
    partition_dir: Path,
    staging_dir: Path,
    new_base_offsets: Sequence[int],
    old_base_offsets: Sequence[int],
    *,
    step: StepHook = _no_hook,
) -> None:
    """Replace the segments `old_base_offsets` of `partition_dir` by the staged segments
    `new_base_offsets` of `staging_dir` (steps in the module docstring)."""
    assert list(new_base_offsets) == sorted(new_base_offsets), new_base_offsets
    assert new_base_offsets, "nothing to install"
    assert new_base_offsets[0] == min(old_base_offsets), (new_base_offsets, old_base_offsets)
    kinds = {base: _staged_kinds(staging_dir, base) for base in new_base_offsets}
    for base in new_base_offsets:
        prefix = file_name_prefix(base)
        for kind in kinds[base]:
            staged = staging_dir / f"{prefix}{kind}"
            target = partition_dir / f"{prefix}{kind}{CLEANED_SUFFIX}"
            step(f"copy {staged.name} -> {target.name}")
            _copy_durably(staged, target)
    fsync_dir(partition_dir)
    for base in sorted(new_base_offsets, reverse=True):
        prefix = file_name_prefix(base)
        for kind in kinds[base]:
            cleaned = partition_dir / f"{prefix}{kind}{CLEANED_SUFFIX}"
            swap = cleaned.with_name(cleaned.name[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX)
            step(f"rename {cleaned.name} -> {swap.name}")
            os.replace(cleaned, swap)
            fsync_dir(partition_dir)  # keeps the renames in order, as step 2 relies on
    doomed: list[Path] = []
    for base in sorted(old_base_offsets):
        for old in _segment_files(partition_dir, base):
            if not old.exists():
                continue  # e.g. an index the broker never wrote
            deleted = old.with_name(old.name + DELETED_SUFFIX)
            step(f"rename {old.name} -> {deleted.name}")
            os.replace(old, deleted)
            doomed.append(deleted)
    fsync_dir(partition_dir)
    for deleted in doomed:
        step(f"unlink {deleted.name}")
        deleted.unlink()
    for base in new_base_offsets:
        prefix = file_name_prefix(base)
        for kind in kinds[base]:
            swap = partition_dir / f"{prefix}{kind}{SWAP_SUFFIX}"
            final = swap.with_name(swap.name[: -len(SWAP_SUFFIX)])
            step(f"rename {swap.name} -> {final.name}")
            os.replace(swap, final)
    fsync_dir(partition_dir)


def update_cleaner_checkpoint(
    data_dir: Path, offsets: Mapping[TopicPartition, int], *, step: StepHook = _no_hook
) -> None:
    """Merge `offsets` into the log dir's ``cleaner-offset-checkpoint``."""
    checkpoint = OffsetCheckpointFile(data_dir / CLEANER_OFFSET_CHECKPOINT)
    try:
        current = checkpoint.read()
    except CorruptCheckpointError:
        current = {}  # a hint only: rewriting it whole is safe
    current.update(offsets)
    step(f"write {CLEANER_OFFSET_CHECKPOINT}")
    checkpoint.write(current)
