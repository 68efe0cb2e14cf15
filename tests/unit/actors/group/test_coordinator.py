"""The broker's group router: shards follow leadership of the offsets partitions, every move
applied however many arrive at once, an unload never waiting for a load, and a shard that
cannot load answering COORDINATOR_LOAD_IN_PROGRESS until a retry loads it whole."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from actors.group.config import GroupCoordinatorConfig
from actors.group.coordinator import GroupCoordinator
from runtime.clock import ManualClock
from tests.unit.actors.group.shard_harness import (
    CONFIG,
    MemoryOffsetsLog,
    commit,
    join_request,
    turns,
    until,
)
from tests.unit.actors.group.test_txn_offsets import txn_commit
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC
from wire.messages import (
    ListGroupsRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    TxnOffsetCommitResponse,
)
from wire.topic import TopicPartition

OFFSETS_0 = TopicPartition(OFFSETS_TOPIC, 0)
OTHER = TopicPartition("orders", 0)
# One batch per read, so a load takes one read per commit and can fail halfway.
SMALL_READS = dataclasses.replace(CONFIG, offsets_load_buffer_size=1)
# The shard's load retry backoff: 100 ms, doubling (shard.py's LOAD_RETRY_BACKOFF_MS).
FIRST_RETRY_MS = 100


@pytest.fixture
def offsets_log() -> MemoryOffsetsLog:
    return MemoryOffsetsLog()


@pytest.fixture
async def coordinator(
    offsets_log: MemoryOffsetsLog,
) -> AsyncIterator[tuple[GroupCoordinator, ManualClock]]:
    clock = ManualClock()
    router = GroupCoordinator(offsets_log, CONFIG, clock=clock, offsets_partitions=lambda: 1)
    await router.start()
    yield router, clock
    await router.stop()


async def test_shards_follow_leadership(
    coordinator: tuple[GroupCoordinator, ManualClock],
) -> None:
    router, _ = coordinator
    joined = await router.join_group(
        join_request(), client_id="c", client_host="h", require_known_member_id=True
    )
    assert joined.error_code == ErrorCode.NOT_COORDINATOR, "no offsets partition led yet"

    router.on_leadership_change([OFFSETS_0, OTHER], [])
    await until(lambda: 0 in router.shards and not router.shards[0].loading, "shard loaded")
    first = await router.join_group(
        join_request(), client_id="c", client_host="h", require_known_member_id=True
    )
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    stored = await router.offset_commit(commit(-1, "", {0: 12}, group="solo").request)
    assert stored.topics[0].partitions[0].error_code == ErrorCode.NONE

    router.on_leadership_change([], [OFFSETS_0])
    await until(lambda: 0 not in router.shards, "shard unloaded")
    fetched = await router.offset_fetch(OffsetFetchRequest(group_id="solo"))
    assert fetched.error_code == ErrorCode.NOT_COORDINATOR
    refused = await router.offset_commit(commit(-1, "", {0: 13}, group="solo").request)
    assert refused.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR

    router.on_leadership_change([OFFSETS_0], [])  # leader again: loads what it wrote
    await until(lambda: 0 in router.shards and not router.shards[0].loading, "reloaded")
    fetched = await router.offset_fetch(OffsetFetchRequest(group_id="solo"))
    assert [p.committed_offset for t in fetched.topics for p in t.partitions] == [12]
    listed = await router.list_groups(ListGroupsRequest())
    assert [g.group_id for g in listed.groups] == ["solo"]


async def test_a_loading_partition_answers_load_in_progress(
    coordinator: tuple[GroupCoordinator, ManualClock], offsets_log: MemoryOffsetsLog
) -> None:
    router, _ = coordinator
    gate = offsets_log
    gate.read_gate = asyncio.Event()
    router.on_leadership_change([OFFSETS_0], [])
    await until(lambda: 0 in router.shards, "shard started")
    fetched = await router.offset_fetch(OffsetFetchRequest(group_id="g"))
    assert fetched.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    gate.read_gate.set()
    await until(lambda: not router.shards[0].loading, "loaded")
    fetched = await router.offset_fetch(OffsetFetchRequest(group_id="g"))
    assert fetched.error_code == ErrorCode.NONE


async def test_a_partition_led_but_not_yet_loading_answers_load_in_progress(
    coordinator: tuple[GroupCoordinator, ManualClock],
) -> None:
    """Between the leadership hook and the actor applying it, the broker leads the partition
    (FindCoordinator names it) but has no shard: a client must wait, not look elsewhere."""
    router, _ = coordinator
    router.on_leadership_change([OFFSETS_0], [])
    assert 0 not in router.shards, "the move is applied by the actor, later"
    fetched = await router.offset_fetch(OffsetFetchRequest(group_id="g"))
    assert fetched.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    await until(lambda: 0 in router.shards and not router.shards[0].loading, "loaded")
    fetched = await router.offset_fetch(OffsetFetchRequest(group_id="g"))
    assert fetched.error_code == ErrorCode.NONE


async def test_deleted_partitions_lose_their_offsets_in_every_shard(
    coordinator: tuple[GroupCoordinator, ManualClock], offsets_log: MemoryOffsetsLog
) -> None:
    router, _ = coordinator
    router.on_leadership_change([OFFSETS_0], [])
    await until(lambda: 0 in router.shards and not router.shards[0].loading, "shard loaded")
    await router.offset_commit(commit(-1, "", {0: 12, 1: 4}, group="solo").request)
    appends = offsets_log.appends
    router.on_partitions_deleted([TopicPartition("orders", 1), OFFSETS_0])
    await until(lambda: offsets_log.appends > appends, "tombstone written")
    fetched = await router.offset_fetch(OffsetFetchRequest(group_id="solo"))
    assert [
        (p.partition_index, p.committed_offset) for t in fetched.topics for p in t.partitions
    ] == [(0, 12)]
    assert 0 in router.shards, "the offsets topic's own partitions are not the groups' concern"


# -- control messages, unloading and failed loads ----------------------------------------------


def offsets(*partitions: int) -> list[TopicPartition]:
    return [TopicPartition(OFFSETS_TOPIC, p) for p in partitions]


@asynccontextmanager
async def router_of(
    offsets_log: MemoryOffsetsLog,
    *,
    partitions: int = 1,
    config: GroupCoordinatorConfig = CONFIG,
    kind: type[GroupCoordinator] = GroupCoordinator,
) -> AsyncIterator[tuple[GroupCoordinator, ManualClock]]:
    clock = ManualClock()
    router = kind(offsets_log, config, clock=clock, offsets_partitions=lambda: partitions)
    await router.start()
    try:
        yield router, clock
    finally:
        for gate in offsets_log.committed_gates.values():
            gate.set()  # a load still parked must not hold the teardown
        await router.stop()


def loaded(router: GroupCoordinator, *partitions: int) -> bool:
    return set(router.shards) == set(partitions) and not any(
        shard.loading for shard in router.shards.values()
    )


def committed_offsets(response: OffsetFetchResponse) -> list[int]:
    return [p.committed_offset for t in response.topics for p in t.partitions]


class TinyMailboxCoordinator(GroupCoordinator):
    mailbox_capacity = 2  # were each move a message, the third of a burst would not fit


async def test_a_burst_of_leadership_moves_is_never_dropped(
    offsets_log: MemoryOffsetsLog,
) -> None:
    async with router_of(offsets_log, partitions=4, kind=TinyMailboxCoordinator) as (router, _):
        # One loop turn, as a LeaderAndIsr burst reaches the hook: the actor runs in between none
        # of them. Each partition's last move is what must hold.
        for partition in range(4):
            router.on_leadership_change(offsets(partition), [])
        router.on_leadership_change([], offsets(0, 1))
        router.on_leadership_change(offsets(0), [])
        await until(lambda: loaded(router, 0, 2, 3), "partitions 0, 2 and 3 led, 1 not")
        await turns()
        assert loaded(router, 0, 2, 3)


async def test_unloading_a_loading_shard_neither_waits_for_its_load_nor_holds_back_others(
    offsets_log: MemoryOffsetsLog,
) -> None:
    # Partition 0's HW never covers its log in this test: its load stays parked (the broker
    # polls for up to 5 s before giving up).
    offsets_log.committed_gates[0] = asyncio.Event()
    async with router_of(offsets_log, partitions=2) as (router, _):
        router.on_leadership_change(offsets(0, 1), [])
        await until(lambda: 1 in router.shards and not router.shards[1].loading, "1 loaded")
        stuck, serving = router.shards[0], router.shards[1]
        assert stuck.loading
        router.on_leadership_change([], offsets(0, 1))
        await until(lambda: not stuck.running and not serving.running, "both shards stopped")
        assert router.shards == {}
        assert offsets_log.blocked_loads == 0, "the load was cancelled, not left parked"


@pytest.mark.parametrize("loading", [False, True], ids=["loaded", "loading"])
async def test_a_partition_no_longer_led_unloads_its_shard(
    offsets_log: MemoryOffsetsLog, loading: bool
) -> None:
    """StopReplica, a stray replica and a failed log reach the ReplicaManager's hook as "no
    longer led", as a LeaderAndIsr move to follower does: the shard unloads on it, loaded or
    still loading, and its waiting members are answered NOT_COORDINATOR."""
    if loading:
        offsets_log.committed_gates[0] = asyncio.Event()
    async with router_of(offsets_log) as (router, _):
        router.on_leadership_change(offsets(0), [])
        await until(lambda: 0 in router.shards and router.shards[0].loading is loading, "led")
        shard = router.shards[0]
        waiting = None
        if not loading:
            first = await router.join_group(
                join_request(), client_id="c", client_host="h", require_known_member_id=True
            )
            waiting = asyncio.get_running_loop().create_task(
                router.join_group(
                    join_request(first.member_id),
                    client_id="c",
                    client_host="h",
                    require_known_member_id=True,
                )
            )
            await turns()
            assert not waiting.done(), "held by the initial rebalance delay"
        router.on_leadership_change([], offsets(0))
        await until(lambda: not shard.running and router.shards == {}, "shard unloaded")
        if waiting is not None:
            assert (await waiting).error_code == ErrorCode.NOT_COORDINATOR
        fetched = await router.offset_fetch(OffsetFetchRequest(group_id="g"))
        assert fetched.error_code == ErrorCode.NOT_COORDINATOR


@pytest.mark.parametrize("kind", ["OffsetCommit", "TxnOffsetCommit"])
async def test_a_commit_in_flight_when_the_shard_unloads_is_answered_not_coordinator(
    offsets_log: MemoryOffsetsLog, kind: str
) -> None:
    """The shard cancels its writes when it unloads; a commit whose write was still waiting for
    replication must be answered (NOT_COORDINATOR: the client asks FindCoordinator again and
    commits there), not left for the client to time out."""
    async with router_of(offsets_log) as (router, _):
        router.on_leadership_change(offsets(0), [])
        await until(lambda: loaded(router, 0), "loaded")
        offsets_log.append_gate = asyncio.Event()  # the write waits for its replicas

        async def send() -> list[int]:
            response: OffsetCommitResponse | TxnOffsetCommitResponse
            if kind == "OffsetCommit":
                response = await router.offset_commit(commit(-1, "", {0: 5}, group="solo").request)
            else:
                response = await router.txn_offset_commit(txn_commit({0: 5}).request)
            return [p.error_code for t in response.topics for p in t.partitions]

        answer = asyncio.get_running_loop().create_task(send())
        await turns()
        assert not answer.done(), "held by the write"
        router.on_leadership_change([], offsets(0))
        await until(answer.done, "the commit answered after the unload")
        codes = answer.result()
        assert codes == [ErrorCode.NOT_COORDINATOR]


async def commit_twice(router: GroupCoordinator, offsets_log: MemoryOffsetsLog) -> int:
    """Group "solo" commits offset 5, then 9, to orders-0; returns the second commit's offset
    in the offsets partition. The router then stops leading it."""
    router.on_leadership_change(offsets(0), [])
    await until(lambda: loaded(router, 0), "loaded")
    await router.offset_commit(commit(-1, "", {0: 5}, group="solo").request)
    second = offsets_log.next_offset
    await router.offset_commit(commit(-1, "", {0: 9}, group="solo").request)
    router.on_leadership_change([], offsets(0))
    await until(lambda: router.shards == {}, "unloaded")
    return second


async def test_a_load_that_hits_a_read_error_answers_load_in_progress_and_retries(
    offsets_log: MemoryOffsetsLog,
) -> None:
    async with router_of(offsets_log, config=SMALL_READS) as (router, clock):
        offsets_log.read_error_from = await commit_twice(router, offsets_log)
        router.on_leadership_change(offsets(0), [])
        await until(lambda: offsets_log.failed_reads == 1, "the load failed halfway")
        await turns()
        fetched = await router.offset_fetch(OffsetFetchRequest(group_id="solo"))
        assert (fetched.error_code, committed_offsets(fetched)) == (
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            [],
        ), "the first commit alone is a stale offset: nothing is served from a partial load"

        clock.advance(FIRST_RETRY_MS - 1)
        await turns()
        assert offsets_log.committed_waits == 2, "no retry before the backoff (1 + 1 attempt)"
        clock.advance(1)
        await until(lambda: offsets_log.failed_reads == 2, "retried, failed again")
        offsets_log.read_error_from = None
        clock.advance(2 * FIRST_RETRY_MS)  # the backoff doubles
        await until(lambda: loaded(router, 0), "loaded whole")
        fetched = await router.offset_fetch(OffsetFetchRequest(group_id="solo"))
        assert (fetched.error_code, committed_offsets(fetched)) == (ErrorCode.NONE, [9])


async def test_a_load_whose_high_watermark_lags_answers_load_in_progress_and_retries(
    offsets_log: MemoryOffsetsLog,
) -> None:
    async with router_of(offsets_log) as (router, clock):
        # The new leader's HW covers the first commit only, and does not catch up within
        # wait_committed's polls: loading up to it would serve offset 5.
        offsets_log.hold_hw = await commit_twice(router, offsets_log)
        router.on_leadership_change(offsets(0), [])
        await until(lambda: offsets_log.committed_waits == 2, "the HW wait gave up")  # 1 + 1
        await turns()
        fetched = await router.offset_fetch(OffsetFetchRequest(group_id="solo"))
        assert (fetched.error_code, committed_offsets(fetched)) == (
            ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
            [],
        )

        offsets_log.hold_hw = None
        clock.advance(FIRST_RETRY_MS)
        await until(lambda: loaded(router, 0), "loaded whole")
        fetched = await router.offset_fetch(OffsetFetchRequest(group_id="solo"))
        assert (fetched.error_code, committed_offsets(fetched)) == (ErrorCode.NONE, [9])


async def test_unloading_ends_the_retries_of_a_failing_load(
    offsets_log: MemoryOffsetsLog,
) -> None:
    async with router_of(offsets_log) as (router, clock):
        offsets_log.read_error_from = 0
        router.on_leadership_change(offsets(0), [])
        await until(lambda: offsets_log.failed_reads == 1, "the load failed")
        shard = router.shards[0]
        router.on_leadership_change([], offsets(0))
        await until(lambda: not shard.running, "unloaded while waiting to retry")
        clock.advance(10 * FIRST_RETRY_MS)
        await turns()
        assert offsets_log.failed_reads == 1, "no retry after the unload"
