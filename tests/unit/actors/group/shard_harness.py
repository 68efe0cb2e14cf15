"""Helpers for the GroupShard tests (test_shard, test_membership, test_offsets, and the router's
test_coordinator): an in-memory offsets log that keeps real record batches (so a new shard
loads exactly what an old one wrote), waiting on a manual clock, and the requests members send."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from actors.group.config import GroupCoordinatorConfig
from actors.group.shard import Beat, Commit, FetchOffsets, GroupShard, Join, Leave, LogChunk, Sync
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
    SyncGroupRequest,
    SyncGroupRequestAssignment,
)
from wire.records import iter_batches, patch_batch, read_header

T = TypeVar("T")
SESSION_MS = 10_000
CONFIG = GroupCoordinatorConfig(
    group_initial_rebalance_delay_ms=100,
    group_min_session_timeout_ms=1_000,
    offsets_retention_minutes=1,
    offsets_retention_check_interval_ms=1_000,
)


class MemoryOffsetsLog:
    """One partition's log in memory: batches get offsets on append; reads return up to the
    high watermark (everything appended, or less while `hold_hw` is set).

    What a loading shard can meet is scripted: `hold_hw` (a new leader whose HW is still below
    its log end: `wait_committed` gives up with OFFSET_NOT_AVAILABLE, as the broker's does after
    its polls), `read_error_from` / `read_error` (reads from that offset fail, as a storage error
    or a lost leadership answers), `committed_gates` (a partition's `wait_committed` waits for its
    event, as the broker's polls while the HW catches up), `read_gate` (every read waits) and
    `append_gate` (every append waits, as one waiting for its acks=all replication does)."""

    def __init__(self) -> None:
        self.log = bytearray()
        self.next_offset = 0
        self.fail_with = ErrorCode.NONE
        self.read_gate: asyncio.Event | None = None
        self.append_gate: asyncio.Event | None = None
        self.committed_gates: dict[int, asyncio.Event] = {}
        self.hold_hw: int | None = None
        self.read_error_from: int | None = None
        self.read_error = ErrorCode.KAFKA_STORAGE_ERROR
        self.appends = 0
        self.committed_waits = 0  # calls of wait_committed: one per load attempt
        self.failed_reads = 0
        self.blocked_loads = 0  # loads parked in wait_committed or a read right now

    async def append(self, partition: int, records: bytes) -> ErrorCode:
        await asyncio.sleep(0)  # replication takes a loop turn at least
        if self.append_gate is not None:
            await self.append_gate.wait()
        if self.fail_with is not ErrorCode.NONE:
            return self.fail_with
        batch = bytearray(records)
        header = read_header(batch)
        patch_batch(batch, 0, base_offset=self.next_offset, partition_leader_epoch=0)
        self.next_offset += header.last_offset_delta + 1
        self.log += batch
        self.appends += 1
        return ErrorCode.NONE

    async def wait_committed(self, partition: int) -> ErrorCode:
        """Committed at once, unless the partition is gated or its HW is held back."""
        self.committed_waits += 1
        gate = self.committed_gates.get(partition)
        if gate is not None:
            await self._blocked(gate)
        return ErrorCode.NONE if self.hold_hw is None else ErrorCode.OFFSET_NOT_AVAILABLE

    async def read(self, partition: int, offset: int, max_bytes: int) -> LogChunk | ErrorCode:
        if self.read_gate is not None:
            await self._blocked(self.read_gate)
        if self.read_error_from is not None and offset >= self.read_error_from:
            self.failed_reads += 1
            return self.read_error
        high_watermark = self.next_offset if self.hold_hw is None else self.hold_hw
        data = bytes(self.log)
        chunk = bytearray()
        next_offset = offset
        for position, header in iter_batches(data):
            if header.last_offset < offset:
                continue
            if header.last_offset >= high_watermark:
                break
            if chunk and len(chunk) + header.size_bytes > max_bytes:
                break
            chunk += data[position : position + header.size_bytes]
            next_offset = header.last_offset + 1
        return LogChunk(bytes(chunk), next_offset, high_watermark, 0)

    async def _blocked(self, gate: asyncio.Event) -> None:
        self.blocked_loads += 1
        try:
            await gate.wait()
        finally:
            self.blocked_loads -= 1


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(2_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


async def turns(count: int = 100) -> None:
    """Let the loop run `count` turns: for asserting that something did NOT happen."""
    for _ in range(count):
        await asyncio.sleep(0)


async def result(future: asyncio.Future[T]) -> T:
    await until(future.done, "an answer")
    return future.result()


async def start_shard(clock: ManualClock, offsets_log: MemoryOffsetsLog) -> GroupShard:
    shard = GroupShard(0, offsets_log, CONFIG, clock=clock)
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
