"""Kafka's range assignor (client/range_assignor.py): per topic, contiguous ranges in member id
order, the first members one partition more, every partition exactly once."""

from __future__ import annotations

import random

from client.range_assignor import range_assign
from wire.topic import TopicPartition


def tps(topic: str, *partitions: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in partitions]


def test_ranges_in_member_id_order_per_topic() -> None:
    plan = range_assign({"b": ["t", "u"], "a": ["t"], "c": ["u"]}, {"t": 5, "u": 2})
    assert plan == {
        "a": tps("t", 0, 1, 2),
        "b": [*tps("t", 3, 4), *tps("u", 0)],
        "c": tps("u", 1),
    }


def test_more_members_than_partitions_and_unknown_topics() -> None:
    plan = range_assign({"m1": ["t"], "m2": ["t"], "m3": ["t", "gone"]}, {"t": 2})
    assert plan == {"m1": tps("t", 0), "m2": tps("t", 1), "m3": []}
    assert range_assign({"m1": ["t"]}, {"t": 0}) == {"m1": []}


def test_every_partition_exactly_once_whatever_the_shape() -> None:
    seed = 20240131
    rng = random.Random(seed)
    for _ in range(200):
        topics = [f"t{i}" for i in range(rng.randint(1, 4))]
        counts = {t: rng.randint(0, 9) for t in topics}
        members = {
            f"m{i}": rng.sample(topics, rng.randint(1, len(topics)))
            for i in range(rng.randint(1, 6))
        }
        plan = range_assign(members, counts)
        assert set(plan) == set(members), seed
        owned = [tp for partitions in plan.values() for tp in partitions]
        subscribed = {t for wanted in members.values() for t in wanted}
        expected = [TopicPartition(t, p) for t in sorted(subscribed) for p in range(counts[t])]
        assert sorted(owned) == expected, seed
        for member, partitions in plan.items():
            assert all(tp.topic in members[member] for tp in partitions), seed
        for topic in subscribed:
            sizes = [
                sum(tp.topic == topic for tp in plan[m]) for m in members if topic in members[m]
            ]
            assert max(sizes) - min(sizes) <= 1, seed
