"""The server-side assignors of consumer groups (KIP-848): `uniform` balances within one
partition and keeps what members have, `range` gives contiguous ranges; both give every
partition of a subscribed topic to exactly one subscribed member."""

from __future__ import annotations

import random

import pytest

from actors.group.config import GroupCoordinatorConfig
from actors.group.consumer_assignors import MemberSpec, RangeAssignor, UniformAssignor


def spec(*topics: str, current: set[tuple[str, int]] | None = None) -> MemberSpec:
    return MemberSpec(frozenset(topics), frozenset(current or ()))


def check_complete(
    result: dict[str, frozenset[tuple[str, int]]],
    members: dict[str, MemberSpec],
    partitions: dict[str, int],
) -> None:
    seen = [tp for tps in result.values() for tp in tps]
    assert len(seen) == len(set(seen)), "a partition went to two members"
    wanted = {
        (t, p)
        for t, n in partitions.items()
        for p in range(n)
        if any(t in m.subscribed_topics for m in members.values())
    }
    assert set(seen) == wanted
    for member, tps in result.items():
        assert all(t in members[member].subscribed_topics for t, _ in tps)


def test_uniform_balances_a_shared_subscription() -> None:
    members = {m: spec("a", "b") for m in ("m1", "m2", "m3")}
    partitions = {"a": 4, "b": 3}
    result = UniformAssignor().assign(members, partitions)
    check_complete(result, members, partitions)
    assert sorted(len(tps) for tps in result.values()) == [2, 2, 3]


def test_uniform_is_sticky() -> None:
    partitions = {"t": 6}
    first = UniformAssignor().assign({"m1": spec("t"), "m2": spec("t")}, partitions)
    members = {m: spec("t", current=set(first[m])) for m in first}
    members["m3"] = spec("t")
    second = UniformAssignor().assign(members, partitions)
    check_complete(second, members, partitions)
    assert [len(second[m]) for m in ("m1", "m2", "m3")] == [2, 2, 2]
    # The members that stay keep two of their three partitions each: only two move.
    assert second["m1"] <= first["m1"]
    assert second["m2"] <= first["m2"]


def test_uniform_heterogeneous_subscriptions() -> None:
    members = {"m1": spec("a"), "m2": spec("a", "b"), "m3": spec("b")}
    partitions = {"a": 3, "b": 3}
    result = UniformAssignor().assign(members, partitions)
    check_complete(result, members, partitions)
    assert sorted(len(tps) for tps in result.values()) == [2, 2, 2]


@pytest.mark.parametrize("seed", range(20))
def test_uniform_random_cases(seed: int) -> None:
    rng = random.Random(seed)
    topics = [f"t{i}" for i in range(rng.randint(1, 4))]
    partitions = {t: rng.randint(1, 8) for t in topics}
    members = {
        f"m{i}": spec(*rng.sample(topics, rng.randint(1, len(topics))))
        for i in range(rng.randint(1, 5))
    }
    result = UniformAssignor().assign(members, partitions)
    check_complete(result, members, partitions)
    if all(m.subscribed_topics == frozenset(topics) for m in members.values()):
        loads = [len(tps) for tps in result.values()]
        assert max(loads) - min(loads) <= 1, f"seed {seed}: {loads}"


def test_range_gives_contiguous_ranges() -> None:
    members = {"m2": spec("t", "u"), "m1": spec("t", "u")}
    result = RangeAssignor().assign(members, {"t": 5, "u": 2})
    assert result["m1"] == {("t", 0), ("t", 1), ("t", 2), ("u", 0)}
    assert result["m2"] == {("t", 3), ("t", 4), ("u", 1)}


def test_range_only_to_subscribers() -> None:
    members = {"m1": spec("t"), "m2": spec("u")}
    partitions = {"t": 2, "u": 2}
    result = RangeAssignor().assign(members, partitions)
    check_complete(result, members, partitions)
    assert result["m1"] == {("t", 0), ("t", 1)}


def test_assignors_config() -> None:
    config = GroupCoordinatorConfig.from_properties({"group.consumer.assignors": "range, uniform"})
    assert config.consumer_assignors == ("range", "uniform")
    assert GroupCoordinatorConfig().consumer_assignors == ("uniform", "range")
    with pytest.raises(ValueError, match=r"group\.consumer\.assignors"):
        GroupCoordinatorConfig(group_consumer_assignors="sticky")
    with pytest.raises(ValueError, match=r"group\.consumer\.assignors"):
        GroupCoordinatorConfig(group_consumer_assignors=" , ")
