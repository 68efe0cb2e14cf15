"""A log dir that fails in the LogManager's own I/O (its background work, the high-watermark
checkpoint) takes the same way as one failing under a partition actor: the LogManager reports it
on its failure channel, the ReplicaManager takes every partition of the dir OFFLINE (requests get
KAFKA_STORAGE_ERROR, the leadership hook hears of it), a LeaderAndIsr for them answers
KAFKA_STORAGE_ERROR, and the other dir is served on. While a dir is offline, a LeaderAndIsr for
a partition without a log here is refused unless the partition is new.

The I/O error is real: the checkpoint's temporary file is a directory (EISDIR on write).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.views import Role
from runtime.log.checkpoints import (
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    TMP_SUFFIX,
    OffsetCheckpointFile,
)
from tests.unit.actors.replication.replica_manager_harness import (
    BROKER_ID,
    HW_CHECKPOINT_MS,
    Broker,
    advance,
    batch,
    close_broker,
    only_produce_answer,
    open_broker,
    partition_state,
    produce_request,
    settle,
)
from wire.errors import ErrorCode
from wire.messages import LeaderAndIsrPartitionState, LeaderAndIsrResponse
from wire.topic import TopicPartition

TP0, TP1, TP2, TP3 = (TopicPartition("orders", i) for i in range(4))
# LogManagerConfig's default log.flush.offset.checkpoint.interval.ms (the harness keeps it).
RECOVERY_CHECKPOINT_MS = 60_000


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    """Two log dirs: TP0 and TP2 in the first, TP1 in the second (least loaded first)."""
    opened = await open_broker(tmp_path, log_dirs=2)
    try:
        await opened.leader_and_isr(*(lead(tp) for tp in (TP0, TP1, TP2)))
        first, second = opened.log_manager.log_dirs
        assert [opened.log_manager.log_dir_of(tp) for tp in (TP0, TP1, TP2)] == [
            first,
            second,
            first,
        ]
        yield opened
    finally:
        await close_broker(opened)


def lead(tp: TopicPartition, epoch: int = 1, *, is_new: bool = False) -> LeaderAndIsrPartitionState:
    return partition_state(BROKER_ID, epoch, [BROKER_ID], tp=tp, is_new=is_new)


def break_checkpoint(directory: Path, name: str) -> None:
    (directory / (name + TMP_SUFFIX)).mkdir()


async def produce(broker: Broker, tp: TopicPartition) -> ErrorCode:
    request = produce_request(batch(), acks=1)
    topic = request.topic_data[0]
    moved = [type(p)(index=tp.partition, records=p.records) for p in topic.partition_data]
    request = type(request)(
        acks=request.acks,
        timeout_ms=request.timeout_ms,
        topic_data=[type(topic)(name=tp.topic, partition_data=moved)],
    )
    return ErrorCode(only_produce_answer(await broker.path.produce(request)).error_code)


def role(broker: Broker, tp: TopicPartition) -> Role | None:
    actor = broker.manager.partition(tp)
    return None if actor is None else actor.view.role


def errors_of(response: LeaderAndIsrResponse) -> list[ErrorCode]:
    return [ErrorCode(e.error_code) for e in response.partition_errors]


async def test_a_failed_high_watermark_checkpoint_takes_its_dirs_partitions_offline(
    broker: Broker,
) -> None:
    first, second = broker.log_manager.log_dirs
    for tp in (TP0, TP1):
        assert await produce(broker, tp) == ErrorCode.NONE
    break_checkpoint(first, REPLICATION_OFFSET_CHECKPOINT)

    await advance(broker.clock, HW_CHECKPOINT_MS)
    await settle(lambda: role(broker, TP0) is Role.OFFLINE and role(broker, TP2) is Role.OFFLINE)
    assert broker.log_manager.live_log_dirs == (second,)
    assert await produce(broker, TP0) == ErrorCode.KAFKA_STORAGE_ERROR
    assert ([], [TP0, TP2]) in broker.leadership_changes
    assert broker.log_manager.offline_directory_ids() == broker.log_manager.directory_ids()[:1]
    # The other dir serves on, and its HW checkpoint is still written on the interval.
    assert await produce(broker, TP1) == ErrorCode.NONE
    await advance(broker.clock, HW_CHECKPOINT_MS)
    assert OffsetCheckpointFile(second / REPLICATION_OFFSET_CHECKPOINT).read() == {TP1: 2}
    assert broker.all_dirs_offline == []


async def test_a_failed_background_checkpoint_answers_storage_errors_to_the_controller(
    broker: Broker,
) -> None:
    first, _ = broker.log_manager.log_dirs
    break_checkpoint(first, RECOVERY_POINT_CHECKPOINT)
    alarms = broker.clock.pending_alarms
    background = asyncio.get_running_loop().create_task(broker.log_manager.run())
    try:
        # Its five periodic tasks sleep on the clock before it moves.
        await settle(lambda: broker.clock.pending_alarms == alarms + 5)
        await advance(broker.clock, RECOVERY_CHECKPOINT_MS)
        await settle(lambda: role(broker, TP2) is Role.OFFLINE)
        assert role(broker, TP0) is Role.OFFLINE
        assert role(broker, TP1) is Role.LEADER
        # The controller's refresh after the heartbeat learns which replicas are offline. TP3
        # has no log here and is not new: it may have been in the failed dir. New, it is made.
        answer = await broker.leader_and_isr(lead(TP0, 2), lead(TP1, 2), lead(TP2, 2), lead(TP3))
        assert errors_of(answer) == [
            ErrorCode.KAFKA_STORAGE_ERROR,
            ErrorCode.NONE,
            ErrorCode.KAFKA_STORAGE_ERROR,
            ErrorCode.KAFKA_STORAGE_ERROR,
        ]
        answer = await broker.leader_and_isr(lead(TP3, is_new=True))
        assert errors_of(answer) == [ErrorCode.NONE]
        assert not background.done(), "the background work goes on for the other dir"
    finally:
        background.cancel()
        await asyncio.gather(background, return_exceptions=True)


async def test_a_broker_whose_only_dir_fails_in_the_background_must_stop(tmp_path: Path) -> None:
    broker = await open_broker(tmp_path)
    try:
        await broker.leader_and_isr(lead(TP0))
        break_checkpoint(broker.log_dir, REPLICATION_OFFSET_CHECKPOINT)
        await advance(broker.clock, HW_CHECKPOINT_MS)
        await settle(lambda: broker.all_dirs_offline == [None])
        assert role(broker, TP0) is Role.OFFLINE
    finally:
        await close_broker(broker)
