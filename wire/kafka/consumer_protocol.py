"""The consumer protocol's blobs: a member's subscription (its JoinGroup metadata) and its
assignment (the SyncGroup answer), Kafka's ConsumerProtocolSubscription and
ConsumerProtocolAssignment, read and written.

The coordinator looks inside a subscription only for OffsetDelete (a topic a member subscribes to
keeps its offsets, actors/group/deletion.py); `ketch group describe` reads them to show what each
member subscribes to and owns. A blob is an int16 version and that version's
body, non-flexible, with kio's schemas. A version newer than kio's newest is read with the newest
schema, as Kafka's clients do: later versions only append fields. A blob that does not parse
(another protocol type, say `connect`) reads as None; nothing here raises on a client's bytes.

Writing (`write_subscription`, `write_assignment`, for client/group_member.py, whose leader
assigns with the range assignor): version 0 of both, which every Kafka consumer reads (later
versions add owned partitions, the generation and the rack, which only the cooperative and
rack-aware assignors use). Byte layouts, big-endian, strings int16-length-prefixed UTF-8:

    subscription v0: int16 version 0 | int32 topic count | topic... | int32 -1 (null user data)
    assignment v0:   int16 version 0 | int32 topic count |
                     (topic | int32 partition count | int32 partition...)... | int32 -1
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kio.serial import entity_reader

_VERSION: Final = struct.Struct(">h")
_NEWEST: Final = 3  # kio 0.6.5 has v0-v3 of both schemas

Assignment = dict[str, tuple[int, ...]]


def _schemas(name: str, cls_name: str) -> list[Any]:
    return [
        entity_reader(getattr(importlib.import_module(f"kio.schema.{name}.v{v}"), cls_name))
        for v in range(_NEWEST + 1)
    ]


_ASSIGNMENT_READERS: Final = _schemas("consumer_protocol_assignment", "ConsumerProtocolAssignment")
_SUBSCRIPTION_READERS: Final = _schemas(
    "consumer_protocol_subscription", "ConsumerProtocolSubscription"
)


def _read(readers: list[Any], blob: bytes) -> Any | None:
    if len(blob) < _VERSION.size:
        return None
    (version,) = _VERSION.unpack_from(blob)
    if version < 0:
        return None
    try:
        body, _ = readers[min(version, _NEWEST)](blob, _VERSION.size)
    except Exception:  # kio's decode errors, underflow, bad UTF-8: not a consumer blob
        return None
    return body


def read_assignment(blob: bytes) -> Assignment | None:
    """topic -> assigned partitions (sorted), or None if `blob` is no consumer assignment."""
    body = _read(_ASSIGNMENT_READERS, blob)
    if body is None:
        return None
    assigned: dict[str, set[int]] = {}
    for entry in body.assigned_partitions:
        assigned.setdefault(str(entry.topic), set()).update(int(p) for p in entry.partitions)
    return {topic: tuple(sorted(parts)) for topic, parts in sorted(assigned.items())}


def read_subscription(blob: bytes) -> tuple[str, ...] | None:
    """The subscribed topics, or None if `blob` is no consumer subscription."""
    body = _read(_SUBSCRIPTION_READERS, blob)
    if body is None:
        return None
    return tuple(str(topic) for topic in body.topics)


_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_NULL_BYTES: Final = _INT32.pack(-1)
_WRITTEN_VERSION: Final = 0


def _string(text: str) -> bytes:
    data = text.encode()
    if len(data) > 0x7FFF:
        raise ValueError(f"a topic name of {len(data)} bytes does not fit an int16 length")
    return _INT16.pack(len(data)) + data


def write_subscription(topics: Sequence[str]) -> bytes:
    """ConsumerProtocolSubscription v0 of `topics` (in the order given), null user data."""
    parts = [_INT16.pack(_WRITTEN_VERSION), _INT32.pack(len(topics))]
    parts += [_string(topic) for topic in topics]
    parts.append(_NULL_BYTES)
    return b"".join(parts)


def write_assignment(assignment: Mapping[str, Sequence[int]]) -> bytes:
    """ConsumerProtocolAssignment v0: topic -> partitions, topics and partitions sorted (a
    reader sees the same bytes for the same assignment), null user data."""
    parts = [_INT16.pack(_WRITTEN_VERSION), _INT32.pack(len(assignment))]
    for topic in sorted(assignment):
        partitions = sorted(assignment[topic])
        parts.append(_string(topic))
        parts.append(_INT32.pack(len(partitions)))
        parts += [_INT32.pack(p) for p in partitions]
    parts.append(_NULL_BYTES)
    return b"".join(parts)
