"""The consumer group model: its state table, members, protocol choice and its record."""

from __future__ import annotations

import itertools

import pytest

from actors.group.metadata import (
    Group,
    GroupState,
    IllegalGroupTransition,
    Member,
    Protocol,
    states_named,
)
from wire.group_records import decode_group_value, encode_group_value

S = GroupState
LEGAL = {
    (S.PREPARING_REBALANCE, S.EMPTY),
    (S.EMPTY, S.PREPARING_REBALANCE),
    (S.STABLE, S.PREPARING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.PREPARING_REBALANCE),
    (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE),
    (S.COMPLETING_REBALANCE, S.STABLE),
} | {(state, S.DEAD) for state in S}


def member(member_id: str, *protocols: str, subscription: bytes = b"sub") -> Member:
    return Member(
        member_id=member_id,
        client_id=f"client-{member_id}",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        protocol_type="consumer",
        protocols=tuple(Protocol(name, subscription + name.encode()) for name in protocols),
    )


@pytest.mark.parametrize(("source", "target"), list(itertools.product(S, S)))
def test_the_transition_table_is_kafkas(source: GroupState, target: GroupState) -> None:
    group = Group("g", state=source)
    if (source, target) in LEGAL:
        group.transition(target, now_ms=7)
        assert (group.state, group.state_timestamp_ms) == (target, 7)
    else:
        with pytest.raises(IllegalGroupTransition, match=f"{source.value} -> {target.value}"):
            group.transition(target, now_ms=7)
        assert group.state is source


def test_leader_is_the_oldest_member_and_moves_on_when_it_leaves() -> None:
    group = Group("g")
    for name in ("a", "b", "c"):
        group.add(member(name, "range"))
    assert group.leader == "a"
    assert group.protocol_type == "consumer"
    leaders = []
    for name in ("a", "c", "b"):
        group.remove(name)
        leaders.append(group.leader)
    assert leaders == ["b", "b", None]
    assert group.remove("zzz") is None


def test_who_may_join() -> None:
    group = Group("g")
    assert group.supports("consumer", [Protocol("range", b"")])
    assert not group.supports("consumer", [])
    assert not group.supports("", [Protocol("range", b"")])
    group.add(member("a", "range", "roundrobin"))
    assert group.supports("consumer", [Protocol("roundrobin", b"")])
    assert not group.supports("consumer", [Protocol("sticky", b"")])
    assert not group.supports("connect", [Protocol("range", b"")])


def test_protocol_choice_by_votes_then_the_leaders_preference() -> None:
    group = Group("g")
    group.add(member("a", "range", "roundrobin", "sticky"))
    group.add(member("b", "roundrobin", "range"))
    group.add(member("c", "roundrobin", "sticky", "range"))
    assert group.candidate_protocols() == {"range", "roundrobin"}
    assert group.select_protocol() == "roundrobin"  # b and c vote for it, a for range
    tie = Group("g")
    tie.add(member("a", "range", "roundrobin"))
    tie.add(member("b", "roundrobin", "range"))
    assert tie.select_protocol() == "range"  # one vote each: the leader's first choice


def test_next_generation_completes_or_empties_the_rebalance() -> None:
    group = Group("g", state=S.PREPARING_REBALANCE)
    group.add(member("a", "range"))
    group.init_next_generation(now_ms=5)
    assert (group.generation, group.protocol, group.state) == (1, "range", S.COMPLETING_REBALANCE)
    group.transition(S.PREPARING_REBALANCE, now_ms=6)
    group.remove("a")
    group.init_next_generation(now_ms=7)
    assert (group.generation, group.protocol, group.state) == (2, None, S.EMPTY)


def test_assignments_and_the_record_round_trip() -> None:
    group = Group("g", state=S.PREPARING_REBALANCE)
    group.add(member("a", "range", "sticky"))
    group.add(member("b", "range"))
    group.init_next_generation(now_ms=100)
    group.assign({"a": b"for-a"})  # the leader left b out: it gets an empty assignment
    group.transition(S.STABLE, now_ms=101)
    value = decode_group_value(encode_group_value(group.to_record()))
    assert (value.generation, value.protocol, value.leader) == (1, "range", "a")
    assert [(m.member_id, m.subscription, m.assignment) for m in value.members] == [
        ("a", b"subrange", b"for-a"),
        ("b", b"subrange", b""),
    ]
    loaded = Group.from_record("g", value)
    assert loaded.state is S.STABLE
    assert loaded.members["a"].assignment == b"for-a"
    assert loaded.members["b"].metadata_for("range") == b"subrange"
    empty = Group.from_record("h", Group("h").to_record())
    assert (empty.state, empty.members) == (S.EMPTY, {})


def test_state_filters_use_kafkas_names() -> None:
    assert states_named(["Stable", "empty"]) == {S.STABLE, S.EMPTY}
    with pytest.raises(ValueError, match="unknown group state 'bogus'"):
        states_named(["bogus"])
