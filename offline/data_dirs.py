"""What the paths given to the "ketch" data source or an offline job stand for: log dirs,
partition dirs and their live segment files.

A path may be a cluster data dir (holding ``broker-<id>/`` log dirs), a broker log dir, a
partition dir (``<topic>-<partition>``) or a segment file (``<20 digits>.log``). A log dir is
told from a partition dir by the files only a log dir holds (checkpoints, the clean-shutdown
marker, ``.lock``) or by holding directories. Deleted (``-delete``) and ignored directories, and
segment files in the middle of a swap or deletion (``.log.swap``, ``.log.deleted``,
``.log.cleaned``), are not live and are skipped.

Runs on the driver and only lists directories (and reads file sizes); tasks open the files.
Plain values: no state.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from runtime.log.checkpoints import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
)
from runtime.log.manager import CLEAN_SHUTDOWN_FILE
from runtime.log.partition_dir import (
    is_delete_dir,
    is_ignored_dir,
)
from runtime.log.segment import LOG_SUFFIX, offset_from_file_name
from wire.topic import TopicPartition

BROKER_DIR_RE: Final = re.compile(r"broker-\d+")
OFFSET_CHECKPOINTS: Final = (
    REPLICATION_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    CLEANER_OFFSET_CHECKPOINT,
)
# Files that only a broker log dir holds: a dir with one of them is a log dir even when empty.
_LOG_DIR_MARKERS: Final = (*OFFSET_CHECKPOINTS, CLEAN_SHUTDOWN_FILE, ".lock")


@dataclass(frozen=True, slots=True, order=True)
class SegmentFile:
    """One live segment file and where it lives (ordered by log dir, partition, base offset)."""

    broker_dir: str
    topic: str
    partition: int
    segment: int  # base offset, from the file name
    path: str
    size_bytes: int


def _is_segment_file(path: Path) -> bool:
    if not path.name.endswith(LOG_SUFFIX) or path.name.count(".") != 1:
        return False  # .log.deleted / .log.swap / .log.cleaned are not live segments
    try:
        offset_from_file_name(path.name)
    except ValueError:
        return False
    return True


def _is_partition_dir_name(name: str) -> bool:
    if is_delete_dir(name) or is_ignored_dir(name):
        return False
    try:
        TopicPartition.from_dir_name(name)
    except ValueError:
        return False
    return True


def _is_log_dir(path: Path) -> bool:
    return any((path / marker).exists() for marker in _LOG_DIR_MARKERS) or any(
        child.is_dir() for child in path.iterdir()
    )


def broker_dirs_of(data_dir: str | Path) -> list[Path]:
    """The broker log dirs a path stands for: the ``broker-<id>`` dirs of a cluster data dir,
    else the path itself. Raises FileNotFoundError / NotADirectoryError."""
    path = Path(data_dir).resolve()
    if not path.exists():
        raise FileNotFoundError(f"{data_dir}: no such directory")
    if not path.is_dir():
        raise NotADirectoryError(f"{data_dir}: not a directory")
    brokers = sorted(c for c in path.iterdir() if c.is_dir() and BROKER_DIR_RE.fullmatch(c.name))
    return brokers or [path]


def partition_dirs_of(broker_dir: Path) -> list[Path]:
    return sorted(c for c in broker_dir.iterdir() if c.is_dir() and _is_partition_dir_name(c.name))


def _segments_in(broker_dir: Path, partition_dir: Path) -> list[SegmentFile]:
    tp = TopicPartition.from_dir_name(partition_dir.name)
    found = []
    for child in partition_dir.iterdir():
        if child.is_file() and _is_segment_file(child):
            found.append(
                SegmentFile(
                    str(broker_dir),
                    tp.topic,
                    tp.partition,
                    offset_from_file_name(child.name),
                    str(child),
                    child.stat().st_size,
                )
            )
    return sorted(found)


def discover(paths: Iterable[str | Path]) -> list[SegmentFile]:
    """Every live segment file the paths stand for, sorted, without duplicates."""
    found: set[SegmentFile] = set()
    for raw in paths:
        path = Path(raw).resolve()
        if not path.exists():
            raise FileNotFoundError(f"{raw}: no such file or directory")
        if path.is_file():
            if not _is_segment_file(path):
                raise ValueError(f"{raw}: not a segment file (<20 digits>.log)")
            found.update(
                s for s in _segments_in(path.parent.parent, path.parent) if s.path == str(path)
            )
        elif _is_partition_dir_name(path.name) and not _is_log_dir(path):
            found.update(_segments_in(path.parent, path))
        else:
            for broker_dir in broker_dirs_of(path):
                for partition_dir in partition_dirs_of(broker_dir):
                    found.update(_segments_in(broker_dir, partition_dir))
    return sorted(found)
