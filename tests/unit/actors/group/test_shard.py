"""The group coordinator of one offsets partition, on a manual clock over an in-memory log that
keeps real record batches (so a new shard loads exactly what an old one wrote)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import pytest

from actors.group.config import GroupCoordinatorConfig
from actors.group.metadata import GroupState
from actors.group.shard import (
    Beat,
    Commit,
    Describe,
    FetchOffsets,
    GroupShard,
    Join,
    Leave,
    ListAll,
    LogChunk,
    RemoveOffsets,
    Sync,
)
from runtime.clock import ManualClock
from wire.errors import ErrorCode
from wire.messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from wire.records import iter_batches, patch_batch, read_header

T = TypeVar("T")
SEED = 11
SESSION_MS = 10_000
CONFIG = GroupCoordinatorConfig(
    group_initial_rebalance_delay_ms=100,
    group_min_session_timeout_ms=1_000,
    offsets_retention_minutes=1,
    offsets_retention_check_interval_ms=1_000,
)


class MemoryOffsetsLog:
    """One partition's log in memory: batches get offsets on append; reads return up to the
    high watermark (everything appended, or less while `hold_hw` is set)."""

    def __init__(self) -> None:
        self.log = bytearray()
        self.next_offset = 0
        self.fail_with = ErrorCode.NONE
        self.read_gate: asyncio.Event | None = None
        self.appends = 0

    async def append(self, partition: int, records: bytes) -> ErrorCode:
        await asyncio.sleep(0)  # replication takes a loop turn at least
        if self.fail_with is not ErrorCode.NONE:
            return self.fail_with
        batch = bytearray(records)
        header = read_header(batch)
        patch_batch(batch, 0, base_offset=self.next_offset, partition_leader_epoch=0)
        self.next_offset += header.last_offset_delta + 1
        self.log += batch
        self.appends += 1
        return ErrorCode.NONE

    async def wait_committed(self, partition: int) -> None:
        """Everything appended here is committed at once."""

    async def read(self, partition: int, offset: int, max_bytes: int) -> LogChunk | ErrorCode:
        if self.read_gate is not None:
            await self.read_gate.wait()
        data = bytes(self.log)
        chunk = bytearray()
        next_offset = offset
        for position, header in iter_batches(data):
            if header.last_offset < offset:
                continue
            if chunk and len(chunk) + header.size_bytes > max_bytes:
                break
            chunk += data[position : position + header.size_bytes]
            next_offset = header.last_offset + 1
        return LogChunk(bytes(chunk), next_offset, self.next_offset, 0)


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(2_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what} (seed={SEED})")


async def result(future: asyncio.Future[T]) -> T:
    await until(future.done, "an answer")
    return future.result()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def offsets_log() -> MemoryOffsetsLog:
    return MemoryOffsetsLog()


@pytest.fixture
async def shard(clock: ManualClock, offsets_log: MemoryOffsetsLog) -> AsyncIterator[GroupShard]:
    started = await start_shard(clock, offsets_log)
    yield started
    await started.stop()


async def start_shard(clock: ManualClock, offsets_log: MemoryOffsetsLog) -> GroupShard:
    shard = GroupShard(0, offsets_log, CONFIG, clock=clock, seed=SEED)
    await shard.start()
    await until(lambda: not shard.loading, "loaded")
    return shard


def join_request(member_id: str = "", *protocols: str, group: str = "g") -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        session_timeout_ms=SESSION_MS,
        rebalance_timeout_ms=20_000,
        member_id=member_id,
        protocol_type="consumer",
        protocols=[
            JoinGroupRequestProtocol(name=name, metadata=name.encode())
            for name in protocols or ("range",)
        ],
    )


async def join(shard: GroupShard, member_id: str = "", client: str = "c") -> Any:
    return await shard.ask(Join(join_request(member_id), client, "/127.0.0.1"))


async def new_member(
    shard: GroupShard, client: str
) -> tuple[str, asyncio.Future[JoinGroupResponse]]:
    """A v4+ join: MEMBER_ID_REQUIRED with an id, then the join with it (pending)."""
    first = await result(await join(shard, "", client))
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id.startswith(f"{client}-")
    return first.member_id, await join(shard, first.member_id, client)


def sync(generation: int, member_id: str, assignments: dict[str, bytes] | None = None) -> Sync:
    return Sync(
        SyncGroupRequest(
            group_id="g",
            generation_id=generation,
            member_id=member_id,
            assignments=[
                SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
        )
    )


def beat(generation: int, member_id: str) -> Beat:
    return Beat(HeartbeatRequest(group_id="g", generation_id=generation, member_id=member_id))


async def stable_group(
    shard: GroupShard, clock: ManualClock, clients: list[str]
) -> tuple[int, list[str]]:
    """Members join, the initial delay passes, the leader assigns, everyone syncs."""
    joined = [await new_member(shard, client) for client in clients]
    clock.advance(CONFIG.group_initial_rebalance_delay_ms)
    answers = [await result(future) for _, future in joined]
    generation = answers[0].generation_id
    assert {a.generation_id for a in answers} == {generation}
    leader = answers[0].leader
    ids = [member_id for member_id, _ in joined]
    syncs = [
        await shard.ask(sync(generation, m, {x: x.encode() for x in ids} if m == leader else None))
        for m in ids
    ]
    for member_id, future in zip(ids, syncs, strict=True):
        assert (await result(future)).assignment == member_id.encode()
    return generation, ids


def leave(member_id: str) -> Leave:
    return Leave(LeaveGroupRequest(group_id="g", members=[MemberIdentity(member_id=member_id)]))


def commit(generation: int, member_id: str, offsets: dict[int, int], group: str = "g") -> Commit:
    return Commit(
        OffsetCommitRequest(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            topics=[
                OffsetCommitRequestTopic(
                    name="orders",
                    partitions=[
                        OffsetCommitRequestPartition(partition_index=p, committed_offset=o)
                        for p, o in offsets.items()
                    ],
                )
            ],
        )
    )


async def committed(shard: GroupShard, group: str = "g") -> dict[int, int]:
    response = await shard.ask(FetchOffsets(OffsetFetchRequest(group_id=group)))
    return {p.partition_index: p.committed_offset for t in response.topics for p in t.partitions}


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
    successor = GroupShard(0, offsets_log, CONFIG, clock=clock, seed=SEED + 1)
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


async def test_without_an_initial_delay_a_lone_member_is_answered_at_once(
    clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    shard = GroupShard(
        0,
        offsets_log,
        GroupCoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1),
        clock=clock,
        seed=SEED,
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
