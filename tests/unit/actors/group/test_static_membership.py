"""Static membership (KIP-345) in one shard, on a manual clock over an in-memory log: a restarted
instance replaces its old member id without a rebalance, the old id is fenced, a new instance
rebalances, a session timeout or a LeaveGroup by instance id removes one, and the group's record
carries the instance ids to a coordinator that loads it after a failover."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import TypeVar

from actors.group.metadata import Group, GroupState
from actors.group.shard import Beat, Commit, Describe, GroupShard, Join, Leave, Sync
from runtime.clock import ManualClock
from tests.unit.actors.group.shard_harness import (
    CONFIG,
    SESSION_MS,
    MemoryOffsetsLog,
    beat,
    commit,
    join_request,
    result,
    start_shard,
    sync,
    turns,
)
from wire.errors import ErrorCode
from wire.group_records import (
    GroupKey,
    GroupValue,
    decode_group_value,
    encode_group_value,
    iter_group_records,
)
from wire.messages import JoinGroupResponse, LeaveGroupRequest, MemberIdentity


def static_join(
    instance_id: str, member_id: str = "", *protocols: str, subscription: bytes | None = None
) -> Join:
    """A join naming an instance id; `subscription` replaces every protocol's metadata."""
    request = join_request(member_id, *protocols)
    if subscription is not None:
        request = dataclasses.replace(
            request,
            protocols=[dataclasses.replace(p, metadata=subscription) for p in request.protocols],
        )
    request = dataclasses.replace(request, group_instance_id=instance_id)
    return Join(request, f"client-{instance_id}", "/127.0.0.1")


M = TypeVar("M", Beat, Sync, Commit)


def with_instance(message: M, instance_id: str) -> M:
    """The same request, naming the member's instance id."""
    request = dataclasses.replace(message.request, group_instance_id=instance_id)
    return dataclasses.replace(message, request=request)


async def static_group(shard: GroupShard, clock: ManualClock) -> tuple[int, dict[str, str]]:
    """Instances i-1 and i-2 join (directly: no MEMBER_ID_REQUIRED), i-1 leads and assigns."""
    pending = [await shard.ask(static_join(i)) for i in ("i-1", "i-2")]
    clock.advance(CONFIG.group_initial_rebalance_delay_ms)
    answers: list[JoinGroupResponse] = [await result(f) for f in pending]
    assert [a.error_code for a in answers] == [ErrorCode.NONE, ErrorCode.NONE]
    generation = answers[0].generation_id
    ids = {"i-1": answers[0].member_id, "i-2": answers[1].member_id}
    assert answers[0].leader == ids["i-1"]
    assert {(m.member_id, m.group_instance_id) for m in answers[0].members} == {
        (ids["i-1"], "i-1"),
        (ids["i-2"], "i-2"),
    }
    assignments = {m: m.encode() for m in ids.values()}
    syncs = [
        await shard.ask(sync(generation, m, assignments if m == ids["i-1"] else None))
        for m in ids.values()
    ]
    for future in syncs:
        assert (await result(future)).error_code == ErrorCode.NONE
    assert shard.groups["g"].state is GroupState.STABLE
    return generation, ids


def stored_groups(offsets_log: MemoryOffsetsLog) -> list[GroupValue]:
    """Group g's records in the log, oldest first."""
    return [
        value
        for _, key, value in iter_group_records(bytes(offsets_log.log))
        if isinstance(key, GroupKey) and key.group == "g" and isinstance(value, GroupValue)
    ]


async def test_a_restarted_instance_replaces_its_member_id_without_a_rebalance(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    generation, ids = await static_group(shard, clock)
    old = ids["i-2"]
    answer = await result(await shard.ask(static_join("i-2")))
    assert answer.error_code == ErrorCode.NONE
    assert answer.member_id != old
    assert (answer.generation_id, answer.leader, answer.members) == (generation, ids["i-1"], [])
    group = shard.groups["g"]
    assert (group.state, group.generation) == (GroupState.STABLE, generation)
    assert list(group.members) == [ids["i-1"], answer.member_id]
    # It syncs for its assignment back; the other member never hears of a rebalance.
    synced = await result(await shard.ask(sync(generation, answer.member_id)))
    assert (synced.error_code, synced.assignment) == (ErrorCode.NONE, old.encode())
    assert (await shard.ask(beat(generation, ids["i-1"]))).error_code == ErrorCode.NONE
    # The record names the new id, so a loading coordinator knows it.
    last = stored_groups(offsets_log)[-1]
    assert [(m.member_id, m.group_instance_id) for m in last.members] == [
        (ids["i-1"], "i-1"),
        (answer.member_id, "i-2"),
    ]


async def test_a_restarted_leader_is_answered_as_a_follower(
    shard: GroupShard, clock: ManualClock
) -> None:
    generation, ids = await static_group(shard, clock)
    answer = await result(await shard.ask(static_join("i-1")))
    assert (answer.leader, answer.members) == (ids["i-1"], [])
    assert shard.groups["g"].leader == answer.member_id
    synced = await result(await shard.ask(sync(generation, answer.member_id)))
    assert synced.assignment == ids["i-1"].encode()


async def test_the_replaced_member_id_is_fenced(shard: GroupShard, clock: ManualClock) -> None:
    generation, ids = await static_group(shard, clock)
    old = ids["i-2"]
    new = (await result(await shard.ask(static_join("i-2")))).member_id
    fenced = ErrorCode.FENCED_INSTANCE_ID
    assert (await shard.ask(with_instance(beat(generation, old), "i-2"))).error_code == fenced
    synced = await result(await shard.ask(with_instance(sync(generation, old), "i-2")))
    assert synced.error_code == fenced
    committing = with_instance(commit(generation, old, {0: 3}), "i-2")
    response = await result(await shard.ask(committing))
    assert [p.error_code for t in response.topics for p in t.partitions] == [fenced]
    rejoin = await result(await shard.ask(static_join("i-2", old)))
    assert rejoin.error_code == fenced
    # The current holder is served; an instance id nobody holds is unknown.
    assert (await shard.ask(with_instance(beat(generation, new), "i-2"))).error_code == 0
    stranger = with_instance(beat(generation, new), "i-9")
    assert (await shard.ask(stranger)).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert shard.groups["g"].state is GroupState.STABLE


async def test_a_changed_subscription_on_restart_rebalances(
    shard: GroupShard, clock: ManualClock
) -> None:
    generation, ids = await static_group(shard, clock)
    pending = await shard.ask(static_join("i-2", subscription=b"more topics"))
    await turns()
    assert not pending.done()
    assert shard.groups["g"].state is GroupState.PREPARING_REBALANCE
    beaten = await shard.ask(beat(generation, ids["i-1"]))
    assert beaten.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    leader = await result(await shard.ask(static_join("i-1", ids["i-1"])))
    answer = await result(pending)
    assert answer.generation_id == leader.generation_id == generation + 1
    assert ids["i-2"] not in shard.groups["g"].members


async def test_a_new_static_member_rebalances(shard: GroupShard, clock: ManualClock) -> None:
    generation, ids = await static_group(shard, clock)
    pending = await shard.ask(static_join("i-3"))
    await turns()
    assert shard.groups["g"].state is GroupState.PREPARING_REBALANCE
    rejoined = [await shard.ask(static_join(i, ids[i])) for i in ("i-1", "i-2")]
    answers = [await result(f) for f in (*rejoined, pending)]
    assert {a.generation_id for a in answers} == {generation + 1}
    instances = {m.group_instance_id for m in shard.groups["g"].members.values()}
    assert instances == {"i-1", "i-2", "i-3"}


async def test_a_restart_during_a_rebalance_joins_it_and_fences_the_parked_join(
    shard: GroupShard, clock: ManualClock
) -> None:
    generation, ids = await static_group(shard, clock)
    parked = await shard.ask(static_join("i-2", ids["i-2"], "range", "roundrobin"))
    await turns()
    assert shard.groups["g"].state is GroupState.PREPARING_REBALANCE
    restarted = await shard.ask(static_join("i-2"))
    assert (await result(parked)).error_code == ErrorCode.FENCED_INSTANCE_ID
    await shard.ask(static_join("i-1", ids["i-1"]))
    answer = await result(restarted)
    assert (answer.error_code, answer.generation_id) == (ErrorCode.NONE, generation + 1)


async def test_a_session_timeout_removes_a_static_member(
    shard: GroupShard, clock: ManualClock
) -> None:
    generation, ids = await static_group(shard, clock)
    for _ in range(3):
        clock.advance(SESSION_MS // 2)
        assert (await shard.ask(beat(generation, ids["i-1"]))).error_code in (0, 27)
        await turns()
    group = shard.groups["g"]
    assert list(group.members) == [ids["i-1"]]
    assert group.static_member("i-2") is None
    assert group.state is not GroupState.STABLE  # a rebalance without it


async def test_leave_group_by_instance_id(shard: GroupShard, clock: ManualClock) -> None:
    _, ids = await static_group(shard, clock)
    response = await shard.ask(
        Leave(
            LeaveGroupRequest(
                group_id="g",
                members=[
                    MemberIdentity(member_id="", group_instance_id="i-2"),
                    MemberIdentity(member_id="someone-else", group_instance_id="i-1"),
                    MemberIdentity(member_id="", group_instance_id="i-9"),
                ],
            )
        )
    )
    assert [(m.group_instance_id, m.error_code) for m in response.members] == [
        ("i-2", ErrorCode.NONE),
        ("i-1", ErrorCode.FENCED_INSTANCE_ID),
        ("i-9", ErrorCode.UNKNOWN_MEMBER_ID),
    ]
    group = shard.groups["g"]
    assert list(group.members) == [ids["i-1"]]
    assert group.state is GroupState.PREPARING_REBALANCE


async def test_describe_shows_instance_ids(shard: GroupShard, clock: ManualClock) -> None:
    _, ids = await static_group(shard, clock)
    [described] = await shard.ask(Describe(("g",)))
    assert {(m.member_id, m.group_instance_id) for m in described.members} == {
        (ids["i-1"], "i-1"),
        (ids["i-2"], "i-2"),
    }


async def test_a_failed_store_puts_the_old_member_id_back(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    generation, ids = await static_group(shard, clock)
    offsets_log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    answer = await result(await shard.ask(static_join("i-2")))
    assert answer.error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    group = shard.groups["g"]
    assert list(group.members) == [ids["i-1"], ids["i-2"]]
    assert (await shard.ask(with_instance(beat(generation, ids["i-2"]), "i-2"))).error_code == 0


async def test_a_coordinator_after_a_failover_knows_the_static_members(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    generation, ids = await static_group(shard, clock)
    restarted = (await result(await shard.ask(static_join("i-2")))).member_id
    await shard.stop()
    successor = await start_shard(clock, offsets_log)
    try:
        group = successor.groups["g"]
        assert group.state is GroupState.STABLE
        assert {m.member_id: m.group_instance_id for m in group.members.values()} == {
            ids["i-1"]: "i-1",
            restarted: "i-2",
        }
        # The id the instance had before its restart stays fenced; the new one is served, and
        # the instance restarting once more still needs no rebalance.
        old = with_instance(beat(generation, ids["i-2"]), "i-2")
        assert (await successor.ask(old)).error_code == ErrorCode.FENCED_INSTANCE_ID
        current = with_instance(beat(generation, restarted), "i-2")
        assert (await successor.ask(current)).error_code == ErrorCode.NONE
        # A loaded group knows only the chosen protocol's subscription: a client offering more
        # protocols, with the same subscription, still needs no rebalance.
        again = await result(await successor.ask(static_join("i-2", "", "range", "roundrobin")))
        assert (again.error_code, again.generation_id) == (ErrorCode.NONE, generation)
        assert successor.groups["g"].state is GroupState.STABLE
    finally:
        await successor.stop()


async def test_static_joins_are_never_asked_for_a_member_id(
    shard: GroupShard, clock: ManualClock
) -> None:
    pending = await shard.ask(static_join("i-1"))
    clock.advance(CONFIG.group_initial_rebalance_delay_ms)
    answer = await result(pending)
    assert answer.error_code == ErrorCode.NONE
    assert answer.member_id.startswith("client-i-1-")
    await asyncio.sleep(0)


async def test_the_group_record_round_trips_instance_ids(
    shard: GroupShard, clock: ManualClock
) -> None:
    """GroupMetadataValue v3 carries each member's instance id, dynamic members' as null."""
    await static_group(shard, clock)
    group = shard.groups["g"]
    dynamic = dataclasses.replace(
        next(iter(group.members.values())), member_id="dynamic-1", group_instance_id=None
    )
    group.members[dynamic.member_id] = dynamic
    value = group.to_record()
    assert [m.group_instance_id for m in value.members] == ["i-1", "i-2", None]
    data = encode_group_value(value)
    assert data[:2] == b"\x00\x03"
    loaded = Group.from_record("g", decode_group_value(data))
    assert [m.group_instance_id for m in loaded.members.values()] == ["i-1", "i-2", None]
    assert loaded.static_member("i-2") == group.static_member("i-2")
    del group.members[dynamic.member_id]


async def test_a_restart_offering_another_protocol_first_keeps_the_generation(
    shard: GroupShard, clock: ManualClock
) -> None:
    """Kafka's rule: no rebalance while the generation's protocol would still be chosen."""
    generation, _ = await static_group(shard, clock)
    answer = await result(await shard.ask(static_join("i-2", "", "roundrobin", "range")))
    assert (answer.error_code, answer.generation_id) == (ErrorCode.NONE, generation)
    assert shard.groups["g"].state is GroupState.STABLE
