"""The server-side assignors of consumer groups (KIP-848): `uniform` (the default) and `range`.

An assignor is a pure function from the group's members (their subscriptions and current target
assignment) and the subscribed topics' metadata to a new target assignment; the coordinator
(consumer_heartbeat.py) runs it whenever the group epoch passes the assignment epoch. Both are
deterministic: members and topics are visited in sorted order, so a replay gives the same
assignment.

`uniform` has the properties of Kafka's UniformAssignor rather than its exact algorithm: every
partition of a subscribed topic goes to one member subscribed to it; a member keeps the
partitions it has (stickiness) unless it holds more than its share; then partitions move from
the most to the least loaded eligible member until no move brings two members closer than one
partition apart. With one subscription shared by all members (Kafka's homogeneous case) every
member ends with the floor or the ceiling of partitions / members.

`range` is the classic range assignment, per topic: the topic's subscribed members sorted by
member id, each a contiguous range of `partitions // members` partitions and the first
`partitions % members` one more. It is not sticky (Kafka's server-side RangeAssignor keeps a
member's partitions when its range is unchanged, which this gives too as long as the member set
is); members subscribed to the same topics get the same partition numbers of each (co-partitioning).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class MemberSpec:
    """What an assignor knows of one member."""

    subscribed_topics: frozenset[str]  # the subscribed topics that exist
    current: frozenset[TopicPartition]  # its partitions in the current target assignment


class Assignor(Protocol):
    name: str

    def assign(
        self, members: Mapping[str, MemberSpec], partitions: Mapping[str, int]
    ) -> dict[str, frozenset[TopicPartition]]:
        """`partitions`: the partition count of each subscribed topic. One entry per member."""
        ...


class UniformAssignor:
    name = "uniform"

    def assign(
        self, members: Mapping[str, MemberSpec], partitions: Mapping[str, int]
    ) -> dict[str, frozenset[TopicPartition]]:
        owned: dict[str, set[TopicPartition]] = {m: set() for m in sorted(members)}
        taken: set[TopicPartition] = set()
        all_partitions = [
            (topic, p) for topic in sorted(partitions) for p in range(partitions[topic])
        ]
        eligible = {
            tp: [m for m in owned if tp[0] in members[m].subscribed_topics] for tp in all_partitions
        }
        # A member's fair share, for stickiness: it keeps at most the ceiling of what its
        # topics could give it were they spread over their subscribers.
        share = {m: _share(m, members, partitions) for m in owned}
        for member in owned:
            for tp in sorted(members[member].current):
                valid = tp[1] < partitions.get(tp[0], 0) and member in eligible.get(tp, [])
                if valid and tp not in taken and len(owned[member]) < share[member]:
                    owned[member].add(tp)
                    taken.add(tp)
        for tp in all_partitions:
            if tp not in taken and eligible[tp]:
                target = min(eligible[tp], key=lambda m: (len(owned[m]), m))
                owned[target].add(tp)
                taken.add(tp)
        _balance(owned, eligible)
        return {m: frozenset(tps) for m, tps in owned.items()}


def _share(member: str, members: Mapping[str, MemberSpec], partitions: Mapping[str, int]) -> int:
    total = 0.0
    for topic in members[member].subscribed_topics:
        subscribers = sum(1 for spec in members.values() if topic in spec.subscribed_topics)
        total += partitions.get(topic, 0) / subscribers
    return -int(-total // 1)  # ceiling


def _balance(
    owned: dict[str, set[TopicPartition]], eligible: Mapping[TopicPartition, list[str]]
) -> None:
    """Move partitions from a member to an eligible one holding at least two fewer, until none
    can move. Each move lowers the sum of squared loads, so the loop ends; the bound is a
    guard."""
    for _ in range(sum(len(tps) for tps in owned.values()) ** 2 + 1):
        moved = False
        for member in sorted(owned, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(owned[member]):
                candidates = [m for m in eligible[tp] if len(owned[m]) < len(owned[member]) - 1]
                if candidates:
                    target = min(candidates, key=lambda m: (len(owned[m]), m))
                    owned[member].remove(tp)
                    owned[target].add(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return


class RangeAssignor:
    name = "range"

    def assign(
        self, members: Mapping[str, MemberSpec], partitions: Mapping[str, int]
    ) -> dict[str, frozenset[TopicPartition]]:
        owned: dict[str, set[TopicPartition]] = {m: set() for m in members}
        for topic in sorted(partitions):
            subscribers = sorted(
                m for m, spec in members.items() if topic in spec.subscribed_topics
            )
            if not subscribers:
                continue
            count = partitions[topic]
            quota, extra = divmod(count, len(subscribers))
            start = 0
            for i, member in enumerate(subscribers):
                size = quota + (1 if i < extra else 0)
                owned[member].update((topic, p) for p in range(start, start + size))
                start += size
        return {m: frozenset(tps) for m, tps in owned.items()}


ASSIGNORS: Final[Mapping[str, Assignor]] = {
    UniformAssignor.name: UniformAssignor(),
    RangeAssignor.name: RangeAssignor(),
}
