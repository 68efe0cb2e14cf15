"""The names of partition directories in a log dir, beyond a live partition's own.

A live partition lives in ``<topic>-<partition>`` (wire/topic.py's TopicPartition text). A
deleted partition's directory is renamed to ``<topic>-<partition>.<32 hex digits>-delete``
(Kafka's layout) and removed in the background; the unique middle part lets a topic be deleted
and recreated while the old files are still going.
"""

from __future__ import annotations

import re
import uuid
from typing import Final

from wire.topic import TopicPartition

DELETE_DIR_SUFFIX: Final = "-delete"
FUTURE_DIR_SUFFIX: Final = "-future"
STRAY_DIR_SUFFIX: Final = "-stray"
_DELETE_RE: Final = re.compile(r"^(.+)-(\d+)\.([0-9a-f]{32})-delete$")


def delete_dir_name(tp: TopicPartition) -> str:
    return f"{tp.dir_name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"


def is_delete_dir(name: str) -> bool:
    return _DELETE_RE.match(name) is not None


def is_ignored_dir(name: str) -> bool:
    """Directories a broker does not load as partitions (future/stray replicas of Kafka's tools)."""
    return name.endswith((FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX))
