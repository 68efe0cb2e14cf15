"""Checkpoint files, in Kafka's text layouts, written atomically.

Offset checkpoints (``replication-offset-checkpoint``, ``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint``; one of each per log dir)::

    0                       <- version
    2                       <- number of entries
    my-topic 0 1234         <- "topic partition offset", one line per entry
    my-topic 1 99

``leader-epoch-checkpoint`` (one per partition directory)::

    0                       <- version
    2                       <- number of entries
    3 0                     <- "epoch startOffset", ascending
    5 880

``partition.metadata`` (one per partition directory; no trailing newline, as Kafka writes it)::

    version: 0
    topic_id: <topic id>

Crash policy: a write goes to ``<name>.tmp``, is fsynced, renamed over the old file, and the
directory is fsynced, so after a crash at any point the file holds either the old or the new
content in full; a stale ``.tmp`` is ignored and overwritten by the next write. A file that does
not parse raises `CorruptCheckpointError` (never a silent default); a missing file reads as empty.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from runtime.log.errors import CorruptCheckpointError
from wire.topic import TopicPartition

CURRENT_VERSION: Final = 0
TMP_SUFFIX: Final = ".tmp"

REPLICATION_OFFSET_CHECKPOINT: Final = "replication-offset-checkpoint"
RECOVERY_POINT_CHECKPOINT: Final = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT: Final = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT: Final = "cleaner-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT: Final = "leader-epoch-checkpoint"
PARTITION_METADATA: Final = "partition.metadata"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` so that a crash leaves the old or the new file, whole."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        data = text.encode()
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _read_entry_lines(path: Path) -> list[list[str]]:
    """Version check, count check, and the entry lines split on whitespace."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"{path}: not text ({exc})") from None
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{path}: missing version or count line")
    if lines[0].strip() != str(CURRENT_VERSION):
        raise CorruptCheckpointError(f"{path}: unrecognized version {lines[0]!r}")
    try:
        count = int(lines[1].strip())
    except ValueError:
        raise CorruptCheckpointError(f"{path}: bad entry count {lines[1]!r}") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if count != len(entries):
        raise CorruptCheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    return entries


def _format(entries: list[str]) -> str:
    return "".join(f"{line}\n" for line in [str(CURRENT_VERSION), str(len(entries)), *entries])


class OffsetCheckpointFile:
    """``topic partition offset`` entries, one per partition of a log dir."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offsets: Mapping[TopicPartition, int]) -> None:
        lines = [f"{tp.topic} {tp.partition} {offset}" for tp, offset in sorted(offsets.items())]
        write_atomically(self.path, _format(lines))

    def read(self) -> dict[TopicPartition, int]:
        result: dict[TopicPartition, int] = {}
        for fields in _read_entry_lines(self.path):
            try:
                topic, partition, offset = fields
                result[TopicPartition(topic, int(partition))] = int(offset)
            except ValueError:
                raise CorruptCheckpointError(f"{self.path}: malformed line {fields!r}") from None
        return result


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    epoch: int
    start_offset: int


class LeaderEpochCheckpointFile:
    """``epoch startOffset`` entries of one partition."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, entries: Iterable[EpochEntry]) -> None:
        write_atomically(self.path, _format([f"{e.epoch} {e.start_offset}" for e in entries]))

    def read(self) -> list[EpochEntry]:
        result: list[EpochEntry] = []
        for fields in _read_entry_lines(self.path):
            try:
                epoch, start_offset = fields
                result.append(EpochEntry(int(epoch), int(start_offset)))
            except ValueError:
                raise CorruptCheckpointError(f"{self.path}: malformed line {fields!r}") from None
        return result


class PartitionMetadataFile:
    """``partition.metadata``: the topic id a partition directory belongs to."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, topic_id: str) -> None:
        if not topic_id or any(c.isspace() for c in topic_id):
            raise ValueError(f"illegal topic id {topic_id!r}")
        write_atomically(self.path, f"version: {CURRENT_VERSION}\ntopic_id: {topic_id}")

    def read(self) -> str | None:
        """The topic id, or None when the file does not exist."""
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return None
        except UnicodeDecodeError:
            raise CorruptCheckpointError(f"{self.path}: not text") from None
        fields = dict(_split_field(self.path, line) for line in lines if line.strip())
        if fields.get("version") != str(CURRENT_VERSION) or "topic_id" not in fields:
            raise CorruptCheckpointError(f"{self.path}: expected version 0 and a topic_id")
        return fields["topic_id"]


def _split_field(path: Path, line: str) -> tuple[str, str]:
    name, sep, value = line.partition(":")
    if not sep or not value.strip():
        raise CorruptCheckpointError(f"{path}: malformed line {line!r}")
    return name.strip(), value.strip()
