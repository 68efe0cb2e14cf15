"""Committed offsets through the shard (offsets.py) on a manual clock: commits by members and
simple consumers, fetches, expiry after the retention, and deleted partitions' offsets."""

from __future__ import annotations

import asyncio

from actors.group.metadata import GroupState
from actors.group.shard import FetchOffsets, GroupShard, RemoveOffsets
from runtime.clock import ManualClock
from tests.unit.actors.group.shard_harness import (
    SESSION_MS,
    MemoryOffsetsLog,
    beat,
    commit,
    committed,
    join,
    leave,
    new_member,
    result,
    stable_group,
    start_shard,
    until,
)
from wire.errors import ErrorCode
from wire.messages import OffsetFetchRequest, OffsetFetchRequestTopic


async def test_commits_by_members_and_simple_consumers(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    generation, (a, _b) = await stable_group(shard, clock, ["a", "b"])
    answer = await result(await shard.ask(commit(generation, a, {0: 5, 1: 7})))
    assert [p.error_code for t in answer.topics for p in t.partitions] == [0, 0]
    assert await committed(shard) == {0: 5, 1: 7}
    wrong = await result(await shard.ask(commit(generation + 5, a, {0: 9})))
    assert wrong.topics[0].partitions[0].error_code == ErrorCode.ILLEGAL_GENERATION
    outsider = await result(await shard.ask(commit(-1, "", {0: 9})))
    assert outsider.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID
    simple = await result(await shard.ask(commit(-1, "", {3: 30}, group="solo")))
    assert simple.topics[0].partitions[0].error_code == ErrorCode.NONE
    assert await committed(shard, "solo") == {3: 30}
    fetched = await shard.ask(
        FetchOffsets(
            OffsetFetchRequest(
                group_id="g",
                topics=[OffsetFetchRequestTopic(name="orders", partition_indexes=[1, 2])],
            )
        )
    )
    assert [(p.partition_index, p.committed_offset) for p in fetched.topics[0].partitions] == [
        (1, 7),
        (2, -1),
    ]
    offsets_log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    failed = await result(await shard.ask(commit(generation, a, {0: 6})))
    assert failed.topics[0].partitions[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert await committed(shard) == {0: 5, 1: 7}, "a failed write changes nothing"


async def test_simple_consumer_offsets_expire_after_the_retention(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    await result(await shard.ask(commit(-1, "", {0: 3}, group="solo")))
    clock.advance(30_000)
    await asyncio.sleep(0)
    assert await committed(shard, "solo") == {0: 3}
    appends = offsets_log.appends
    clock.advance(31_000)  # past one minute since the commit; the next check expires it
    await until(lambda: "solo" not in shard.offsets, "expired")
    await until(lambda: offsets_log.appends > appends, "tombstones written")
    assert await committed(shard, "solo") == {}
    reloaded = await start_shard(clock, offsets_log)
    try:
        assert await committed(reloaded, "solo") == {}
    finally:
        await reloaded.stop()


async def test_offsets_of_deleted_partitions_are_removed(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    generation, (a, _b) = await stable_group(shard, clock, ["a", "b"])
    await result(await shard.ask(commit(generation, a, {0: 5, 1: 7, 2: 9})))
    await result(await shard.ask(commit(-1, "", {1: 30}, group="solo")))
    appends = offsets_log.appends
    await shard.tell(RemoveOffsets(frozenset({("orders", 1), ("orders", 2), ("audit", 0)})))
    await until(lambda: offsets_log.appends > appends, "tombstones written")
    assert await committed(shard) == {0: 5}, "the live group keeps its other partition"
    assert await committed(shard, "solo") == {}
    assert "solo" not in shard.groups, "a simple consumer left without offsets is forgotten"
    assert "g" in shard.groups
    reloaded = await start_shard(clock, offsets_log)
    try:
        assert await committed(reloaded) == {0: 5}, "the tombstones are in the log"
        assert await committed(reloaded, "solo") == {}
    finally:
        await reloaded.stop()


async def test_a_groups_offsets_expire_once_it_has_been_empty_for_the_retention(
    shard: GroupShard, clock: ManualClock
) -> None:
    generation, (a,) = await stable_group(shard, clock, ["a"])
    await result(await shard.ask(commit(generation, a, {0: 4})))
    for _ in range(18):  # 90 s: older than the retention, but the group still has a member
        clock.advance(SESSION_MS / 2)
        assert (await shard.ask(beat(generation, a))).error_code == ErrorCode.NONE
    assert await committed(shard) == {0: 4}
    await shard.ask(leave(a))
    await until(lambda: shard.groups["g"].state is GroupState.EMPTY, "empty")
    clock.advance(30_000)
    await asyncio.sleep(0)
    assert await committed(shard) == {0: 4}, "empty for less than the retention"
    clock.advance(31_000)
    await until(lambda: "g" not in shard.groups, "group and its offsets expired")
    assert await committed(shard) == {}


async def test_a_member_commits_while_the_group_prepares_a_rebalance_not_while_it_completes(
    shard: GroupShard, clock: ManualClock
) -> None:
    """As in Kafka: an eager consumer commits what it processed before it rejoins (while the
    group is PreparingRebalance), so the partition's next owner starts after it; between the
    joins and the leader's assignment (CompletingRebalance) a commit is refused."""
    generation, (a, b) = await stable_group(shard, clock, ["a", "b"])
    _, third = await new_member(shard, "c")  # a newcomer starts a rebalance
    assert shard.groups["g"].is_in(GroupState.PREPARING_REBALANCE)
    during = await result(await shard.ask(commit(generation, a, {0: 11})))
    assert during.topics[0].partitions[0].error_code == ErrorCode.NONE
    assert await committed(shard) == {0: 11}
    rejoined = [await join(shard, member) for member in (a, b)]
    await result(third)
    for future in rejoined:
        await result(future)
    assert shard.groups["g"].is_in(GroupState.COMPLETING_REBALANCE)
    stale = await result(await shard.ask(commit(generation + 1, a, {0: 12})))
    assert stale.topics[0].partitions[0].error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert await committed(shard) == {0: 11}
