"""DeleteGroups and OffsetDelete (deletion.py) through the shard and the router, on a manual
clock over an in-memory log that keeps real record batches: each refusal Kafka answers, the
deletions themselves, and what a new coordinator loads from the log afterwards (a deletion
answered NONE survives the failover; a failed write leaves the state as it was)."""

from __future__ import annotations

import asyncio

from actors.group.coordinator import GroupCoordinator
from actors.group.metadata import GroupState
from actors.group.shard import (
    Commit,
    DeleteGroups,
    DeleteOffsets,
    FetchOffsets,
    GroupShard,
    Join,
    Sync,
)
from actors.group.state import ShardState
from runtime.clock import ManualClock
from testkit.sim.assignor import subscription_blob
from tests.unit.actors.group.shard_harness import (
    CONFIG,
    SESSION_MS,
    MemoryOffsetsLog,
    commit,
    committed,
    leave,
    result,
    stable_group,
    start_shard,
    turns,
    until,
)
from tests.unit.actors.group.test_txn_offsets import end_txn, txn_commit
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC, OffsetValue, partition_for
from wire.messages import (
    DeleteGroupsRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from wire.topic import TopicPartition

NONE = ErrorCode.NONE

# -- helpers -----------------------------------------------------------------------------------


async def delete(shard: GroupShard, *group_ids: str) -> dict[str, ErrorCode]:
    return await result(await shard.ask(DeleteGroups(group_ids)))


def offset_delete(partitions: dict[str, list[int]], group: str = "g") -> DeleteOffsets:
    return DeleteOffsets(
        OffsetDeleteRequest(
            group_id=group,
            topics=[
                OffsetDeleteRequestTopic(
                    name=topic,
                    partitions=[OffsetDeleteRequestPartition(partition_index=p) for p in parts],
                )
                for topic, parts in partitions.items()
            ],
        )
    )


def outcomes(response: OffsetDeleteResponse) -> dict[tuple[str, int], ErrorCode]:
    return {
        (t.name, p.partition_index): ErrorCode.from_code(p.error_code)
        for t in response.topics
        for p in t.partitions
    }


def commit_to(
    offsets: dict[tuple[str, int], int], *, group: str = "g", generation: int = -1, member: str = ""
) -> OffsetCommitRequest:
    topics: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append(
            OffsetCommitRequestPartition(partition_index=partition, committed_offset=offset)
        )
    return OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )


async def all_committed(shard: GroupShard, group: str = "g") -> dict[tuple[str, int], int]:
    response = await shard.ask(FetchOffsets(OffsetFetchRequest(group_id=group)))
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in response.topics
        for p in t.partitions
    }


async def empty_group(shard: GroupShard, clock: ManualClock) -> None:
    """Group "g": a member joined (generation 1, stored), committed orders-0 and -1, and left
    (generation 2, Empty, stored)."""
    generation, (a,) = await stable_group(shard, clock, ["a"])
    await result(await shard.ask(commit(generation, a, {0: 5, 1: 7})))
    await shard.ask(leave(a))
    await until(lambda: shard.groups["g"].is_in(GroupState.EMPTY), "empty")
    assert shard.groups["g"].generation > 0


async def consumer_member(
    shard: GroupShard,
    clock: ManualClock,
    topics: list[str],
    *,
    protocol_type: str = "consumer",
    group: str = "g",
) -> tuple[int, str]:
    """One member subscribed to `topics` (a real consumer-protocol subscription), Stable."""

    def join(member_id: str) -> Join:
        return Join(
            JoinGroupRequest(
                group_id=group,
                session_timeout_ms=SESSION_MS,
                rebalance_timeout_ms=20_000,
                member_id=member_id,
                protocol_type=protocol_type,
                protocols=[
                    JoinGroupRequestProtocol(name="range", metadata=subscription_blob(topics))
                ],
            ),
            "c",
            "/127.0.0.1",
        )

    first = await result(await shard.ask(join("")))
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    joining = await shard.ask(join(first.member_id))
    clock.advance(CONFIG.group_initial_rebalance_delay_ms)
    joined = await result(joining)
    assert joined.error_code == NONE
    synced = await result(
        await shard.ask(
            Sync(
                SyncGroupRequest(
                    group_id=group,
                    generation_id=joined.generation_id,
                    member_id=joined.member_id,
                    assignments=[
                        SyncGroupRequestAssignment(member_id=joined.member_id, assignment=b"")
                    ],
                )
            )
        )
    )
    assert synced.error_code == NONE
    assert shard.groups[group].is_in(GroupState.STABLE)
    return joined.generation_id, joined.member_id


async def reloaded_from(clock: ManualClock, offsets_log: MemoryOffsetsLog) -> GroupShard:
    """A new coordinator for the partition (a failover): it loads what the log holds."""
    return await start_shard(clock, offsets_log)


# -- DeleteGroups ------------------------------------------------------------------------------


async def test_an_empty_group_is_deleted_with_its_offsets_and_stays_deleted_after_failover(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    await empty_group(shard, clock)
    await result(await shard.ask(commit(-1, "", {3: 30}, group="solo")))  # a simple consumer's
    await result(await shard.ask(commit(-1, "", {0: 1}, group="kept")))
    assert await delete(shard, "g", "solo") == {"g": NONE, "solo": NONE}
    assert "g" not in shard.groups
    assert "solo" not in shard.groups
    assert await committed(shard) == {}
    assert await committed(shard, "solo") == {}
    assert await delete(shard, "g") == {"g": ErrorCode.GROUP_ID_NOT_FOUND}, "gone already"
    await shard.stop()
    reloaded = await reloaded_from(clock, offsets_log)
    try:
        # Without the group record's tombstone "g" would come back Empty at generation 2.
        assert set(reloaded.groups) == {"kept"}
        assert await committed(reloaded) == {}
        assert await committed(reloaded, "solo") == {}
        assert await committed(reloaded, "kept") == {0: 1}
    finally:
        await reloaded.stop()


async def test_groups_that_cannot_be_deleted_are_refused_and_keep_everything(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    generation, (a, _b) = await stable_group(shard, clock, ["a", "b"])
    await result(await shard.ask(commit(generation, a, {0: 5})))
    assert await txn_commit_ok(shard, group="txn")
    appends = offsets_log.appends
    assert await delete(shard, "g", "nobody", "", "txn") == {
        "g": ErrorCode.NON_EMPTY_GROUP,
        "nobody": ErrorCode.GROUP_ID_NOT_FOUND,
        "": ErrorCode.INVALID_GROUP_ID,
        "txn": ErrorCode.UNSTABLE_OFFSET_COMMIT,
    }
    assert offsets_log.appends == appends, "nothing written"
    assert shard.groups["g"].is_in(GroupState.STABLE)
    assert await committed(shard) == {0: 5}
    await end_txn(shard, offsets_log, 4_000, commit=True)
    await until(lambda: "txn" not in shard.pending_txn, "transaction ended")
    assert await delete(shard, "txn") == {"txn": NONE}, "once the transaction has ended"
    assert await committed(shard, "txn") == {}


async def txn_commit_ok(shard: GroupShard, *, group: str) -> bool:
    answer = await result(await shard.ask(txn_commit({0: 10}, group=group)))
    return all(p.error_code == NONE for t in answer.topics for p in t.partitions)


async def test_a_failed_write_deletes_nothing_and_a_retry_deletes(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    await empty_group(shard, clock)
    offsets_log.fail_with = ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert await delete(shard, "g") == {"g": ErrorCode.NOT_COORDINATOR}
    assert shard.groups["g"].is_in(GroupState.EMPTY), "put back"
    assert await committed(shard) == {0: 5, 1: 7}
    # A commit after the put-back is not undone by it, and the group can still be deleted.
    offsets_log.fail_with = ErrorCode.NONE
    await result(await shard.ask(commit(-1, "", {1: 8})))
    assert await committed(shard) == {0: 5, 1: 8}
    assert await delete(shard, "g") == {"g": NONE}
    assert await committed(shard) == {}


async def test_a_commit_written_while_its_group_is_deleted_agrees_with_the_log(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    """A simple consumer's commit is being replicated when its group is deleted: in the log the
    commit comes first, then the tombstones of what was committed before. The partition that
    had an offset stays deleted; the one that had none keeps the new commit; the coordinator
    answers as a new one loading the log does."""
    await result(await shard.ask(commit(-1, "", {0: 3}, group="solo")))
    offsets_log.append_gate = asyncio.Event()
    late = await shard.ask(commit(-1, "", {0: 9, 1: 4}, group="solo"))
    deleting = await shard.ask(DeleteGroups(("solo",)))
    await turns()  # both writes parked at the gate, which then lets them through in order
    offsets_log.append_gate.set()
    assert all(p.error_code == NONE for t in (await result(late)).topics for p in t.partitions)
    assert await result(deleting) == {"solo": NONE}
    assert await committed(shard, "solo") == {1: 4}
    assert shard.groups["solo"].is_in(GroupState.EMPTY), "its offsets bring the group back"
    reloaded = await reloaded_from(clock, offsets_log)
    try:
        assert await committed(reloaded, "solo") == {1: 4}
        assert set(reloaded.groups) == set(shard.groups)
    finally:
        await reloaded.stop()


# -- OffsetDelete ------------------------------------------------------------------------------


async def test_offsets_of_topics_no_member_subscribes_to_are_deleted(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    generation, member = await consumer_member(shard, clock, ["orders"])
    offsets = {("orders", 0): 5, ("audit", 0): 2, ("audit", 1): 3}
    stored = await result(await shard.ask(commit_request(offsets, generation, member)))
    assert all(p.error_code == NONE for t in stored.topics for p in t.partitions)
    answer = await result(await shard.ask(offset_delete({"orders": [0], "audit": [0, 5]})))
    assert answer.error_code == NONE
    assert outcomes(answer) == {
        ("orders", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC,
        ("audit", 0): NONE,
        ("audit", 5): NONE,  # nothing committed there: nothing to delete, as Kafka answers
    }
    kept = {("orders", 0): 5, ("audit", 1): 3}
    assert await all_committed(shard) == kept
    assert shard.groups["g"].is_in(GroupState.STABLE), "the members are untouched"
    await shard.stop()
    reloaded = await reloaded_from(clock, offsets_log)
    try:
        assert await all_committed(reloaded) == kept, "the tombstone is in the log"
    finally:
        await reloaded.stop()


def commit_request(offsets: dict[tuple[str, int], int], generation: int, member: str) -> Commit:
    return Commit(commit_to(offsets, generation=generation, member=member))


async def test_a_subscription_that_cannot_be_read_keeps_every_topic(
    shard: GroupShard, clock: ManualClock
) -> None:
    generation, (a,) = await stable_group(shard, clock, ["a"])  # metadata b"range": no blob
    await result(await shard.ask(commit(generation, a, {0: 5})))
    answer = await result(await shard.ask(offset_delete({"orders": [0]})))
    assert outcomes(answer) == {("orders", 0): ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC}
    assert await committed(shard) == {0: 5}


async def test_a_non_consumer_group_with_members_is_refused_as_a_whole(
    shard: GroupShard, clock: ManualClock
) -> None:
    generation, member = await consumer_member(shard, clock, ["orders"], protocol_type="connect")
    await result(await shard.ask(commit_request({("audit", 0): 2}, generation, member)))
    answer = await result(await shard.ask(offset_delete({"audit": [0]})))
    assert answer.error_code == ErrorCode.NON_EMPTY_GROUP
    assert answer.topics == []
    assert await all_committed(shard) == {("audit", 0): 2}


async def test_an_empty_groups_offsets_are_deleted_and_the_group_forgotten_with_the_last(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    await empty_group(shard, clock)
    answer = await result(await shard.ask(offset_delete({"orders": [0]})))
    assert outcomes(answer) == {("orders", 0): NONE}
    assert await committed(shard) == {1: 7}
    assert "g" in shard.groups
    answer = await result(await shard.ask(offset_delete({"orders": [1]})))
    assert outcomes(answer) == {("orders", 1): NONE}
    assert "g" not in shard.groups, "Empty without offsets: forgotten, as expiry forgets it"
    await shard.stop()
    reloaded = await reloaded_from(clock, offsets_log)
    try:
        assert "g" not in reloaded.groups, "its record's tombstone is in the log"
        assert await committed(reloaded) == {}
    finally:
        await reloaded.stop()


async def test_offset_delete_refusals(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    unknown = await result(await shard.ask(offset_delete({"orders": [0]}, group="nobody")))
    assert unknown.error_code == ErrorCode.GROUP_ID_NOT_FOUND
    no_id = await result(await shard.ask(offset_delete({"orders": [0]}, group="")))
    assert no_id.error_code == ErrorCode.INVALID_GROUP_ID
    await result(await shard.ask(commit(-1, "", {1: 4}, group="txn")))
    assert await txn_commit_ok(shard, group="txn")  # orders-0 pending
    answer = await result(await shard.ask(offset_delete({"orders": [0, 1]}, group="txn")))
    assert outcomes(answer) == {
        ("orders", 0): ErrorCode.UNSTABLE_OFFSET_COMMIT,
        ("orders", 1): NONE,
    }
    assert "txn" in shard.groups, "a group with pending offsets is not forgotten"
    offsets_log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    await result(await shard.ask(commit(-1, "", {2: 6}, group="solo")))  # refused: not written
    offsets_log.fail_with = ErrorCode.NONE
    await result(await shard.ask(commit(-1, "", {2: 6}, group="solo")))
    offsets_log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    failed = await result(await shard.ask(offset_delete({"orders": [2]}, group="solo")))
    assert outcomes(failed) == {("orders", 2): ErrorCode.COORDINATOR_NOT_AVAILABLE}
    assert await committed(shard, "solo") == {2: 6}, "put back"
    assert "solo" in shard.groups


# -- the tombstones' orders --------------------------------------------------------------------


def test_a_deleted_offsets_order_voids_older_commits_until_it_is_forgotten() -> None:
    clock = ManualClock()
    state = ShardState(
        name="s",
        config=CONFIG,
        clock=clock,
        alarm=lambda _ms, _message: NotImplemented,
        write=lambda _batch, _after: None,
    )
    tp = ("orders", 0)
    state.commit_offset("g", tp, OffsetValue(5, "", 0, -1), 3)
    assert state.delete_committed("g", tp, 10) == (OffsetValue(5, "", 0, -1), 3)
    state.commit_offset("g", tp, OffsetValue(6, "", 0, -1), 9)  # written before the tombstone
    assert "g" not in state.offsets
    clock.advance(1.0)
    state.forget_deleted_before(state.now_ms())
    assert state.deleted == {}
    state.commit_offset("g", tp, OffsetValue(7, "", 0, -1), 11)
    assert state.offsets["g"][tp].offset == 7


# -- through the router ------------------------------------------------------------------------


def groups_of_partitions(partitions: int) -> dict[int, str]:
    """A group id for each offsets partition."""
    found: dict[int, str] = {}
    index = 0
    while len(found) < partitions:
        group = f"group-{index}"
        found.setdefault(partition_for(group, partitions), group)
        index += 1
    return found


async def test_the_router_sends_each_group_to_its_shard(offsets_log: MemoryOffsetsLog) -> None:
    clock = ManualClock()
    router = GroupCoordinator(offsets_log, CONFIG, clock=clock, offsets_partitions=lambda: 2)
    await router.start()
    try:
        here, elsewhere = groups_of_partitions(2)[0], groups_of_partitions(2)[1]
        router.on_leadership_change([TopicPartition(OFFSETS_TOPIC, 0)], [])
        await until(lambda: 0 in router.shards and not router.shards[0].loading, "loaded")
        await router.offset_commit(commit_to({("orders", 0): 1}, group=here))
        answer = await router.delete_groups(
            DeleteGroupsRequest(groups_names=[here, elsewhere, here, ""])
        )
        assert [(r.group_id, r.error_code) for r in answer.results] == [
            (here, NONE),
            (elsewhere, ErrorCode.NOT_COORDINATOR),
            ("", ErrorCode.INVALID_GROUP_ID),
        ]
        moved = await router.offset_delete(offset_delete({"orders": [0]}, group=elsewhere).request)
        assert moved.error_code == ErrorCode.NOT_COORDINATOR
        no_id = await router.offset_delete(offset_delete({"orders": [0]}, group="").request)
        assert no_id.error_code == ErrorCode.INVALID_GROUP_ID
    finally:
        await router.stop()


async def test_a_new_coordinator_loads_the_deletions(offsets_log: MemoryOffsetsLog) -> None:
    """Coordinator A deletes a group and some offsets, then loses the partition; coordinator B,
    on another broker (the same replicated log), becomes its leader and loads it."""
    offsets_0 = TopicPartition(OFFSETS_TOPIC, 0)
    first, second = (
        GroupCoordinator(offsets_log, CONFIG, clock=ManualClock(), offsets_partitions=lambda: 1)
        for _ in range(2)
    )
    await first.start()
    await second.start()
    try:
        first.on_leadership_change([offsets_0], [])
        await until(lambda: 0 in first.shards and not first.shards[0].loading, "A loaded")
        await first.offset_commit(commit_to({("orders", 0): 1}, group="gone"))
        await first.offset_commit(commit_to({("orders", 0): 2, ("orders", 1): 3}, group="kept"))
        deleted = await first.delete_groups(DeleteGroupsRequest(groups_names=["gone"]))
        assert deleted.results[0].error_code == NONE
        trimmed = await first.offset_delete(offset_delete({"orders": [1]}, group="kept").request)
        assert outcomes(trimmed) == {("orders", 1): NONE}

        first.on_leadership_change([], [offsets_0])
        second.on_leadership_change([offsets_0], [])
        await until(lambda: 0 in second.shards and not second.shards[0].loading, "B loaded")
        listed = await second.list_groups(ListGroupsRequest())
        assert [g.group_id for g in listed.groups] == ["kept"]
        again = await second.delete_groups(DeleteGroupsRequest(groups_names=["gone"]))
        assert again.results[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
        fetched = await second.offset_fetch(OffsetFetchRequest(group_id="kept"))
        assert [
            (p.partition_index, p.committed_offset) for t in fetched.topics for p in t.partitions
        ] == [(0, 2)]
        fetched = await second.offset_fetch(OffsetFetchRequest(group_id="gone"))
        assert fetched.topics == []
    finally:
        await first.stop()
        await second.stop()
