"""Topic and partition identity in Kafka's text forms.

A partition is named ``<topic>-<partition>`` (Kafka's TopicPartition.toString, also the name of
its directory in a log dir); the topic name may itself contain ``-``, so the partition number is
what follows the *last* ``-``. Topic names follow Kafka's rule: 1-249 characters of
``[a-zA-Z0-9._-]``, and not ``.`` or ``..``. A topic id is printed as Kafka prints a Uuid:
URL-safe base64 without padding.

The rule lives here, once, with its reasons: `topic_name_problem` says why a name is illegal
(Kafka's Topic.validate checks in the same order: empty, ``.``/``..``, length, characters) for
whoever must say why a name is refused (the command line, the controller's CreateTopics
answer); `validate_topic_name` raises it, and TopicPartition enforces it on every partition a
broker creates, so the controller and the storage engine cannot disagree. `topic_name_warning`
is Kafka's warning for a legal name holding both ``.`` and ``_``, which metric names cannot
tell apart.
"""

from __future__ import annotations

import base64
import re
import string
from dataclasses import dataclass
from typing import Final

from wire.messages.fields import ZERO_UUID

MAX_TOPIC_NAME_LENGTH: Final = 249
# The coordinators' topics (wire/group_records.py's OFFSETS_TOPIC, wire/transaction_log.py's
# TRANSACTION_STATE_TOPIC; a test keeps them equal), named here too so that whoever only needs
# to recognise them need not import those modules' record codecs.
INTERNAL_TOPICS: Final = frozenset({"__consumer_offsets", "__transaction_state"})
LEGAL_TOPIC_CHARACTERS: Final = frozenset(string.ascii_letters + string.digits + "._-")
_TOPIC_RE: Final = re.compile(r"[a-zA-Z0-9._-]+")
# An error message quotes at most this much of a name (a 300-character name helps nobody twice).
_QUOTED_NAME_CHARS: Final = 40


def topic_name_problem(topic: str) -> str | None:
    """Why `topic` is not a legal topic name, in a sentence; None when it is legal."""
    # The usual, legal case in one regex match: TopicPartition runs this on every construction.
    fits = len(topic) <= MAX_TOPIC_NAME_LENGTH and topic not in {".", ".."}
    if fits and _TOPIC_RE.fullmatch(topic):
        return None
    if not topic:
        return "a topic name cannot be empty"
    if topic in {".", ".."}:
        return f"a topic cannot be named {topic!r}"
    if len(topic) > MAX_TOPIC_NAME_LENGTH:
        return (
            f"a topic name has at most {MAX_TOPIC_NAME_LENGTH} characters; "
            f"this one has {len(topic)}"
        )
    index, bad = next((i, c) for i, c in enumerate(topic) if c not in LEGAL_TOPIC_CHARACTERS)
    return (
        f"character {index + 1}, {_show_character(bad)}, is not allowed: a topic name holds "
        "only ASCII letters, digits, '.', '_' and '-'"
    )


def validate_topic_name(topic: str) -> None:
    """ValueError("illegal topic name '<name>': <why>") unless `topic` is legal."""
    problem = topic_name_problem(topic)
    if problem is not None:
        raise ValueError(f"illegal topic name {quoted_topic_name(topic)}: {problem}")


def topic_name_warning(topic: str) -> str | None:
    """Kafka's warning for a legal name with both '.' and '_' (None otherwise): metric names
    replace '.' by '_', so such a topic's metrics can merge with another topic's."""
    if "." in topic and "_" in topic:
        return (
            f"topic {quoted_topic_name(topic)} has both '.' and '_': they are alike in metric "
            "names, so its metrics could collide with another topic's; use one or the other"
        )
    return None


def quoted_topic_name(topic: str) -> str:
    """`topic` quoted for a message; a long name is cut after _QUOTED_NAME_CHARS characters."""
    if len(topic) <= _QUOTED_NAME_CHARS:
        return repr(topic)
    return f"{topic[:_QUOTED_NAME_CHARS]!r}..."


def _show_character(char: str) -> str:
    """A character as a reader can spot it: quoted, with its code point unless it is visible
    ASCII (a space, a tab, an accented letter all look alike in a terminal)."""
    if " " < char < "\x7f":
        return repr(char)
    return f"{char!r} (U+{ord(char):04X})"


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
