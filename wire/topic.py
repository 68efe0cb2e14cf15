"""Topic and partition identity in Kafka's text forms.

A partition is named ``<topic>-<partition>`` (Kafka's TopicPartition.toString, also the name of
its directory in a log dir); the topic name may itself contain ``-``, so the partition number is
what follows the *last* ``-``. Topic names follow Kafka's rule: 1-249 characters of
``[a-zA-Z0-9._-]``, and not ``.`` or ``..``. A topic id is printed as Kafka prints a Uuid:
URL-safe base64 without padding.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Final

from wire.messages.fields import ZERO_UUID

MAX_TOPIC_NAME_LENGTH: Final = 249
_TOPIC_RE: Final = re.compile(r"[a-zA-Z0-9._-]+")


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

    @classmethod
    def from_dir_name(cls, name: str) -> TopicPartition:
        """Parse ``<topic>-<partition>``; raises ValueError for anything else."""
        topic, sep, number = name.rpartition("-")
        if not sep or not number.isdigit() or number != str(int(number)):
            raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
        return cls(topic, int(number))


def uuid_text(uuid: bytes) -> str:
    """Kafka's printed form of a Uuid (topic ids, directory ids): URL-safe base64, no padding."""
    return base64.urlsafe_b64encode(uuid).rstrip(b"=").decode("ascii")


def parse_uuid_text(text: str) -> bytes:
    """The 16 bytes `uuid_text` printed; ValueError for anything else."""
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raise ValueError(f"{text!r} is not URL-safe base64") from None
    if len(raw) != len(ZERO_UUID):
        raise ValueError(f"{text!r} is not a 16-byte id")
    return raw


def topic_id_text(topic_id: bytes) -> str | None:
    """Kafka's printed form of a topic id; None when unset."""
    if topic_id == ZERO_UUID:
        return None
    return uuid_text(topic_id)
