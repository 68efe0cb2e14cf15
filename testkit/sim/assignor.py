"""The consumer protocol as a group member writes it: the subscription and assignment blobs
(Kafka's ConsumerProtocolSubscription and ConsumerProtocolAssignment, version 0), and the range
assignor the group's leader runs. `wire.kafka.consumer_protocol` reads these blobs (with kio's
schemas), so what the simulation's members send is what a Kafka consumer would.

Stateless functions.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

from wire.topic import TopicPartition


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def subscription_blob(topics: Sequence[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, null user data."""
    body = b"".join(_string(topic) for topic in topics)
    return struct.pack(">hi", 0, len(topics)) + body + struct.pack(">i", -1)


def assignment_blob(partitions: Sequence[TopicPartition]) -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition]], null user data."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    parts = [struct.pack(">hi", 0, len(by_topic))]
    for topic, numbers in by_topic.items():
        parts.append(_string(topic) + struct.pack(f">i{len(numbers)}i", len(numbers), *numbers))
    parts.append(struct.pack(">i", -1))
    return b"".join(parts)


def range_assignment(
    subscriptions: dict[str, tuple[str, ...]], partitions: dict[str, int]
) -> dict[str, list[TopicPartition]]:
    """Kafka's range assignor: per topic, its partitions in order, split into contiguous ranges
    over the members subscribed to it in member-id order, the first ones one longer."""
    assigned: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
    for topic, count in sorted(partitions.items()):
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if not members:
            continue
        share, extra = divmod(count, len(members))
        start = 0
        for index, member in enumerate(members):
            length = share + (1 if index < extra else 0)
            assigned[member] += [TopicPartition(topic, p) for p in range(start, start + length)]
            start += length
    return assigned
