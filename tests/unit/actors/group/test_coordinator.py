"""The broker's group router: shards follow leadership of the offsets partitions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from actors.group.coordinator import GroupCoordinator
from runtime.clock import ManualClock
from tests.unit.actors.group.shard_harness import (
    CONFIG,
    MemoryOffsetsLog,
    commit,
    join_request,
    until,
)
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC
from wire.messages import ListGroupsRequest, OffsetFetchRequest
from wire.topic import TopicPartition

OFFSETS_0 = TopicPartition(OFFSETS_TOPIC, 0)
OTHER = TopicPartition("orders", 0)


@pytest.fixture
def offsets_log() -> MemoryOffsetsLog:
    return MemoryOffsetsLog()


@pytest.fixture
async def coordinator(
    offsets_log: MemoryOffsetsLog,
) -> AsyncIterator[tuple[GroupCoordinator, ManualClock]]:
    clock = ManualClock()
    router = GroupCoordinator(
        offsets_log, CONFIG, clock=clock, offsets_partitions=lambda: 1, seed=3
    )
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
