"""Kafka's range assignor (`RangeAssignor`, protocol name "range"), run by a group's leader.

For each topic on its own: the members subscribed to it, sorted by member id, split its
partitions into contiguous ranges, the first `partitions % members` members getting one more.
With topic t of 5 partitions and members a, b:

    a: t-0, t-1, t-2        b: t-3, t-4

A member subscribed to nothing the others know still gets an entry (an empty assignment), so the
leader's SyncGroup names every member. A topic without metadata (unknown, or deleted since the
member subscribed) assigns nothing. Kafka's rack-aware variant is not done: no member sends a
rack.

Pure functions: the caller (client/group_member.py) owns the inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from wire.topic import TopicPartition

RANGE: Final = "range"


def range_assign(
    subscriptions: Mapping[str, Sequence[str]], partition_counts: Mapping[str, int]
) -> dict[str, list[TopicPartition]]:
    """member id -> its partitions (in topic, then partition order), for every member."""
    plan: dict[str, list[TopicPartition]] = {member: [] for member in sorted(subscriptions)}
    topics = sorted({topic for subscribed in subscriptions.values() for topic in subscribed})
    for topic in topics:
        count = partition_counts.get(topic, 0)
        members = sorted(m for m, subscribed in subscriptions.items() if topic in subscribed)
        if count <= 0 or not members:
            continue
        each, extra = divmod(count, len(members))
        start = 0
        for index, member in enumerate(members):
            length = each + (1 if index < extra else 0)
            plan[member] += [TopicPartition(topic, p) for p in range(start, start + length)]
            start += length
        assert start == count, (topic, start, count)  # every partition exactly once
    return plan
