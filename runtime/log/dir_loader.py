"""Opening log dirs at startup, for the `LogManager` (runtime/log/manager.py): a dir's lock, and
its logs read in a loader thread of their own.

* ``.lock`` is held with ``flock(LOCK_EX | LOCK_NB)`` while a process uses the dir, so a second
  broker on the same dir refuses to start (`LogDirLockedError`). The lock dies with the process.
* Reading a dir: its clean-shutdown marker, its offset checkpoints (one that does not parse is
  ignored with a warning, since each fallback is safe: recovery from offset 0, log start from the
  first segment, HW at the log start), then one `Log` per partition directory (recovering it
  after an unclean shutdown); ``-delete`` directories are collected for removal. An OSError
  there is kept in the result, with the logs opened so far closed: the manager decides (a
  broker's dir starts offline). A directory that is not a partition's raises `LogDirError`: a
  configuration error, not a disk's.

Ownership: each loader thread builds its own `DirContents` and touches nothing else; the
manager takes the results on its own thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import logging
import os
import random
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from runtime.clock import Clock
from runtime.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from runtime.log.config import LogConfig
from runtime.log.errors import CorruptCheckpointError, LogDirError, LogDirLockedError
from runtime.log.log import Log
from runtime.log.partition_dir import is_delete_dir, is_ignored_dir
from wire.topic import TopicPartition

LOCK_FILE: Final = ".lock"
CLEAN_SHUTDOWN_FILE: Final = ".kafka_cleanshutdown"

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class DirContents:
    """One log dir as its loader thread read it, before it joins the manager's tables."""

    directory: Path
    clean_shutdown: bool = False
    logs: dict[TopicPartition, Log] = field(default_factory=dict)
    doomed: list[tuple[int, Path]] = field(default_factory=list)  # (due monotonic ms, dir)
    error: OSError | None = None  # the dir failed while loading (its logs are closed)


def lock_dir(directory: Path) -> int:
    """Create the dir if needed and take its lock; the descriptor holds it."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise LogDirLockedError(f"{directory} is in use by another process") from None
    except OSError:
        os.close(fd)
        raise
    return fd


def read_dirs(
    dirs: Sequence[Path],
    seeds: Sequence[float],
    config_for: Callable[[str], LogConfig],
    clock: Clock,
) -> list[DirContents]:
    """Read each dir in its own worker thread (dirs are separate disks, and a recovery scan
    reads every unflushed byte); results in the order of `dirs`."""
    if not dirs:
        return []
    read = functools.partial(read_dir, config_for=config_for, clock=clock)
    if len(dirs) == 1:
        return [read(dirs[0], seeds[0])]  # nothing to overlap: no thread to start
    with ThreadPoolExecutor(len(dirs), thread_name_prefix="log-dir-load") as pool:
        return list(pool.map(read, dirs, seeds))


def read_dir(
    directory: Path, seed: float, *, config_for: Callable[[str], LogConfig], clock: Clock
) -> DirContents:
    contents = DirContents(directory)
    try:
        _load_logs(contents, random.Random(seed), config_for, clock)
    except OSError as error:
        release(contents.logs.values())
        contents.logs.clear()
        contents.doomed.clear()
        contents.error = error
    return contents


def _load_logs(
    contents: DirContents,
    rng: random.Random,
    config_for: Callable[[str], LogConfig],
    clock: Clock,
) -> None:
    directory = contents.directory
    contents.clean_shutdown = clean = (directory / CLEAN_SHUTDOWN_FILE).exists()
    recovery_points = read_or_empty(directory / RECOVERY_POINT_CHECKPOINT)
    start_offsets = read_or_empty(directory / LOG_START_OFFSET_CHECKPOINT)
    high_watermarks = read_or_empty(directory / REPLICATION_OFFSET_CHECKPOINT)
    due_ms = clock.monotonic_ms()
    for child in sorted(directory.iterdir()):
        if not child.is_dir() or is_ignored_dir(child.name):
            continue
        if is_delete_dir(child.name):
            contents.doomed.append((due_ms, child))
            continue
        try:
            tp = TopicPartition.from_dir_name(child.name)
        except ValueError:
            raise LogDirError(f"{child} is not a partition directory") from None
        contents.logs[tp] = Log.open(
            child,
            config_for(tp.topic),
            clock,
            log_start_offset=start_offsets.get(tp, 0),
            recovery_point=recovery_points.get(tp, 0),
            high_watermark=high_watermarks.get(tp),
            had_clean_shutdown=clean,
            rng=random.Random(rng.random()),
        )


def release(logs: Iterable[Log]) -> None:
    """Close the logs' file handles without writing anything (a failed dir, or a crash)."""
    for log in logs:
        for segment in log.segments:
            with contextlib.suppress(OSError):
                segment.close_handles()


def read_or_empty(path: Path) -> dict[TopicPartition, int]:
    """A checkpoint, or nothing if it does not parse. Every fallback is conservative: recovery
    from offset 0 (a full scan), log start from the first segment, HW at the log start."""
    try:
        return OffsetCheckpointFile(path).read()
    except CorruptCheckpointError as exc:
        logger.warning("ignoring unreadable checkpoint: %s", exc)
        return {}
