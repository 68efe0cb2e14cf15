"""Partition identity and the names of partition directories in a log dir.

A partition lives in ``<topic>-<partition>`` (the topic name may itself contain ``-``, so the
partition number is what follows the *last* ``-``). A deleted partition's directory is renamed to
``<topic>-<partition>.<32 hex digits>-delete`` (Kafka's layout) and removed in the background; the
unique middle part lets a topic be deleted and recreated while the old files are still going.
Topic names follow Kafka's rule: 1-249 characters of ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Final

DELETE_DIR_SUFFIX: Final = "-delete"
FUTURE_DIR_SUFFIX: Final = "-future"
STRAY_DIR_SUFFIX: Final = "-stray"
MAX_TOPIC_NAME_LENGTH: Final = 249
_TOPIC_RE: Final = re.compile(r"[a-zA-Z0-9._-]+")
_DELETE_RE: Final = re.compile(r"^(.+)-(\d+)\.([0-9a-f]{32})-delete$")


def validate_topic_name(topic: str) -> None:
    if topic in {"", ".", ".."} or len(topic) > MAX_TOPIC_NAME_LENGTH:
        raise ValueError(f"illegal topic name {topic!r}")
    if not _TOPIC_RE.fullmatch(topic):
        raise ValueError(f"topic name {topic!r} has characters outside [a-zA-Z0-9._-]")


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __post_init__(self) -> None:
        validate_topic_name(self.topic)
        if self.partition < 0:
            raise ValueError(f"negative partition {self.partition}")

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def dir_name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def delete_dir_name(self) -> str:
        return f"{self.dir_name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"

    @classmethod
    def from_dir_name(cls, name: str) -> TopicPartition:
        """Parse ``<topic>-<partition>``; raises ValueError for anything else."""
        topic, sep, number = name.rpartition("-")
        if not sep or not number.isdigit() or number != str(int(number)):
            raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
        return cls(topic, int(number))


def is_delete_dir(name: str) -> bool:
    return _DELETE_RE.match(name) is not None


def is_ignored_dir(name: str) -> bool:
    """Directories a broker does not load as partitions (future/stray replicas of Kafka's tools)."""
    return name.endswith((FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX))
