"""The group coordinator of one offsets partition, on a manual clock over an in-memory log that
keeps real record batches (so a new shard loads exactly what an old one wrote): loading from
the log, serving Describe and ListGroups, and unloading."""

from __future__ import annotations

import asyncio

from actors.group.metadata import GroupState
from actors.group.shard import Describe, GroupShard, ListAll
from runtime.clock import ManualClock
from tests.unit.actors.group.shard_harness import (
    CONFIG,
    MemoryOffsetsLog,
    beat,
    commit,
    committed,
    join,
    new_member,
    result,
    stable_group,
    start_shard,
    until,
)
from wire.errors import ErrorCode


async def test_a_new_leader_loads_groups_and_offsets(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    generation, (a, b) = await stable_group(shard, clock, ["a", "b"])
    await result(await shard.ask(commit(generation, a, {0: 5, 1: 7})))
    await result(await shard.ask(commit(generation, b, {1: 8})))
    await result(await shard.ask(commit(-1, "", {0: 1}, group="solo")))
    waiting = await join(shard, "", "late")  # answered when the shard unloads
    await shard.stop()
    assert (await result(waiting)).error_code in (
        ErrorCode.MEMBER_ID_REQUIRED,
        ErrorCode.NOT_COORDINATOR,
    )

    offsets_log.read_gate = asyncio.Event()
    successor = GroupShard(0, offsets_log, CONFIG, clock=clock)
    await successor.start()
    try:
        await asyncio.sleep(0)
        assert successor.loading, "requests meanwhile are answered COORDINATOR_LOAD_IN_PROGRESS"
        offsets_log.read_gate.set()
        await until(lambda: not successor.loading, "loaded")
        assert await committed(successor) == {0: 5, 1: 8}
        assert await committed(successor, "solo") == {0: 1}
        group = successor.groups["g"]
        assert (group.state, group.generation, group.leader) == (GroupState.STABLE, generation, a)
        assert group.members[b].assignment == b.encode()
        assert (await successor.ask(beat(generation, b))).error_code == ErrorCode.NONE
        [described] = await successor.ask(Describe(("g",)))
        assert (described.group_state, len(described.members)) == ("Stable", 2)
        listed = await successor.ask(ListAll())
        assert {(x.group_id, x.group_state) for x in listed} == {("g", "Stable"), ("solo", "Empty")}
    finally:
        await successor.stop()


async def test_unloading_answers_waiting_members_not_coordinator(
    clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    shard = await start_shard(clock, offsets_log)
    member_id, pending = await new_member(shard, "a")
    await shard.stop()
    answer = await result(pending)
    assert (answer.error_code, answer.member_id) == (ErrorCode.NOT_COORDINATOR, member_id)


async def test_a_reloaded_shard_never_hands_out_an_id_its_loaded_group_holds(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    """Member ids are unique across shard instances (client id + UUID, as Kafka): the same
    broker loading the partition again (a restart, leadership back) once drew the same ids in
    the same order, so a joiner could get the id of a member still in the loaded group."""
    _, (a,) = await stable_group(shard, clock, ["a"])
    await shard.stop()
    successor = await start_shard(clock, offsets_log)
    try:
        assert list(successor.groups["g"].members) == [a]
        joiner, pending = await new_member(successor, "a")
        assert joiner != a
        assert set(successor.groups["g"].members) == {a, joiner}
        pending.cancel()
    finally:
        await successor.stop()
