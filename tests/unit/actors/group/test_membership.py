"""Group membership through the shard (membership.py) on a manual clock: join, sync,
heartbeat and leave, session timeouts, rebalances and the initial delay."""

from __future__ import annotations

import asyncio

from actors.group.config import GroupCoordinatorConfig
from actors.group.metadata import GroupState
from actors.group.shard import GroupShard, Join
from runtime.clock import ManualClock
from tests.unit.actors.group.shard_harness import (
    CONFIG,
    SESSION_MS,
    MemoryOffsetsLog,
    beat,
    join,
    join_request,
    leave,
    new_member,
    result,
    stable_group,
    sync,
    until,
)
from wire.errors import ErrorCode
from wire.messages import JoinGroupRequest, JoinGroupRequestProtocol


async def test_two_members_join_sync_and_heartbeat(shard: GroupShard, clock: ManualClock) -> None:
    first_id, first = await new_member(shard, "a")
    second_id, second = await new_member(shard, "b")
    clock.advance(50)  # inside the initial delay: nobody is answered yet
    await asyncio.sleep(0)
    assert not first.done()
    clock.advance(60)
    leader_answer, follower_answer = await result(first), await result(second)
    assert leader_answer.generation_id == follower_answer.generation_id == 1
    assert leader_answer.leader == first_id
    assert leader_answer.protocol_name == "range"
    assert [m.member_id for m in leader_answer.members] == [first_id, second_id]
    assert follower_answer.members == []
    follower_sync = await shard.ask(sync(1, second_id))
    await asyncio.sleep(0)
    assert not follower_sync.done(), "the follower waits for the leader's assignment"
    leader_sync = await shard.ask(sync(1, first_id, {first_id: b"p0", second_id: b"p1"}))
    assert (await result(leader_sync)).assignment == b"p0"
    assert (await result(follower_sync)).assignment == b"p1"
    assert shard.groups["g"].state is GroupState.STABLE
    assert (await shard.ask(beat(1, second_id))).error_code == ErrorCode.NONE
    assert (await shard.ask(beat(0, second_id))).error_code == ErrorCode.ILLEGAL_GENERATION
    assert (await shard.ask(beat(1, "nobody"))).error_code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_a_third_member_triggers_a_rebalance(shard: GroupShard, clock: ManualClock) -> None:
    generation, (a, b) = await stable_group(shard, clock, ["a", "b"])
    c, c_join = await new_member(shard, "c")
    assert shard.groups["g"].state is GroupState.PREPARING_REBALANCE
    assert (await shard.ask(beat(generation, a))).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    rejoins = [await join(shard, member, client) for member, client in ((a, "a"), (b, "b"))]
    answers = [await result(f) for f in [*rejoins, c_join]]
    assert {x.generation_id for x in answers} == {generation + 1}
    assert [m.member_id for m in answers[0].members] == [a, b, c]


async def test_a_silent_member_is_removed_at_its_session_timeout(
    shard: GroupShard, clock: ManualClock
) -> None:
    generation, (a, b) = await stable_group(shard, clock, ["a", "b"])
    for _ in range(4):  # a heartbeats, b is silent
        clock.advance(SESSION_MS / 4)
        assert (await shard.ask(beat(generation, a))).error_code in (
            ErrorCode.NONE,
            ErrorCode.REBALANCE_IN_PROGRESS,
        )
    await until(lambda: b not in shard.groups["g"].members, "b removed")
    assert (await shard.ask(beat(generation, a))).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    answer = await result(await join(shard, a, "a"))
    assert (answer.generation_id, [m.member_id for m in answer.members]) == (generation + 1, [a])


async def test_a_member_waiting_in_join_outlives_its_session_timeout(
    shard: GroupShard, clock: ManualClock
) -> None:
    """Only the rebalance timeout bounds a parked JoinGroup: a joiner waits for old members that
    heartbeat but are slow to rejoin (a consumer busy with its last batch) longer than its own
    session timeout, and is in the next generation."""
    generation, (a, b) = await stable_group(shard, clock, ["a", "b"])
    c, c_join = await new_member(shard, "c")
    for _ in range(5):  # 15 s: past c's session timeout, within the 20 s rebalance timeout
        clock.advance(3_000)
        for member in (a, b):
            beat_answer = await shard.ask(beat(generation, member))
            assert beat_answer.error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert not c_join.done()
    rejoins = [await join(shard, member, client) for member, client in ((a, "a"), (b, "b"))]
    answers = [await result(f) for f in [*rejoins, c_join]]
    assert [x.error_code for x in answers] == [ErrorCode.NONE] * 3
    assert {x.generation_id for x in answers} == {generation + 1}
    assert set(shard.groups["g"].members) == {a, b, c}


async def test_leave_rebalances_and_the_last_leave_empties(
    shard: GroupShard, clock: ManualClock
) -> None:
    generation, (a, b) = await stable_group(shard, clock, ["a", "b"])
    left = await shard.ask(leave(b))
    assert [(m.member_id, m.error_code) for m in left.members] == [(b, 0)]
    answer = await result(await join(shard, a, "a"))
    assert answer.generation_id == generation + 1
    await shard.ask(leave(a))
    await until(lambda: shard.groups["g"].state is GroupState.EMPTY, "empty")
    again = await shard.ask(leave(a))
    assert again.members[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID


async def test_refused_joins_and_an_old_client_given_its_id(
    shard: GroupShard, clock: ManualClock
) -> None:
    bad_timeout = JoinGroupRequest(
        group_id="g", session_timeout_ms=10, member_id="", protocol_type="consumer",
        protocols=[JoinGroupRequestProtocol(name="range", metadata=b"")],
    )  # fmt: skip
    answer = await result(await shard.ask(Join(bad_timeout, "c", "h")))
    assert answer.error_code == ErrorCode.INVALID_SESSION_TIMEOUT
    unknown = await result(await join(shard, "made-up"))
    assert unknown.error_code == ErrorCode.UNKNOWN_MEMBER_ID
    # Before JoinGroup v4 a client gets its member id in the answer to its first join.
    pending = await shard.ask(Join(join_request(), "old", "h", False))
    clock.advance(CONFIG.group_initial_rebalance_delay_ms)
    old_client = await result(pending)
    assert old_client.error_code == ErrorCode.NONE
    assert old_client.member_id.startswith("old-")
    assert old_client.generation_id == 1


async def test_without_an_initial_delay_a_lone_member_is_answered_at_once(
    clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    shard = GroupShard(
        0,
        offsets_log,
        GroupCoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1),
        clock=clock,
    )
    await shard.start()
    try:
        await until(lambda: not shard.loading, "loaded")
        member_id, pending = await new_member(shard, "a")
        answer = await result(pending)  # no clock movement needed
        assert (answer.generation_id, answer.leader) == (1, member_id)
        # A known member rejoining with new protocols while Stable rebalances at once as well.
        synced = await shard.ask(sync(1, member_id, {member_id: b"x"}))
        assert (await result(synced)).assignment == b"x"
        rejoin = JoinGroupRequest(
            group_id="g", session_timeout_ms=SESSION_MS, member_id=member_id,
            protocol_type="consumer",
            protocols=[
                JoinGroupRequestProtocol(name="roundrobin", metadata=b""),
                JoinGroupRequestProtocol(name="range", metadata=b""),
            ],
        )  # fmt: skip
        again = await result(await shard.ask(Join(rejoin, "a", "h")))
        assert (again.generation_id, again.protocol_name) == (2, "roundrobin")
    finally:
        await shard.stop()
