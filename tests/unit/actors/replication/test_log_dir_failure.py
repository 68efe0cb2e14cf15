"""A log I/O error fails its whole log dir (Kafka's LogDirFailureHandler): every partition of
the dir goes offline on this broker, new ones are refused there, the other dirs keep serving,
and a broker with no live dir left says so."""

from __future__ import annotations

from pathlib import Path

from actors.views import Role
from tests.unit.actors.replication.replica_manager_harness import (
    BROKER_ID,
    Broker,
    batch,
    close_broker,
    fail_writes,
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


def lead(*tps: TopicPartition) -> list[LeaderAndIsrPartitionState]:
    return [partition_state(BROKER_ID, 1, [BROKER_ID], tp=tp) for tp in tps]


def role(broker: Broker, tp: TopicPartition) -> Role | None:
    actor = broker.manager.partition(tp)
    return None if actor is None else actor.view.role


def errors_of(response: LeaderAndIsrResponse) -> list[ErrorCode]:
    return [ErrorCode(e.error_code) for e in response.partition_errors]


async def test_an_io_error_takes_every_partition_of_its_log_dir_offline(tmp_path: Path) -> None:
    broker = await open_broker(tmp_path, log_dirs=2)
    try:
        # The least loaded dir takes each new log: TP0 and TP2 in the first, TP1 in the second.
        await broker.leader_and_isr(
            *(partition_state(BROKER_ID, 1, [BROKER_ID], tp=tp) for tp in (TP0, TP1, TP2))
        )
        first, second = broker.log_manager.log_dirs
        assert broker.log_manager.log_dir_of(TP2) == first
        assert broker.log_manager.log_dir_of(TP1) == second
        fail_writes(broker, TP0)
        assert await produce(broker, TP0) == ErrorCode.KAFKA_STORAGE_ERROR

        await settle(
            lambda: (a := broker.manager.partition(TP2)) is not None and a.view.role is Role.OFFLINE
        )
        assert broker.log_manager.live_log_dirs == (second,)
        assert await produce(broker, TP2) == ErrorCode.KAFKA_STORAGE_ERROR
        assert ([], [TP0, TP2]) in broker.leadership_changes
        # The other dir serves on.
        assert await produce(broker, TP1) == ErrorCode.NONE
        # The controller's next LeaderAndIsr learns which replicas are offline; a new partition
        # (is_new: just created) goes to the live dir.
        answer = await broker.leader_and_isr(
            partition_state(BROKER_ID, 2, [BROKER_ID], tp=TP2),
            partition_state(BROKER_ID, 2, [BROKER_ID], tp=TP1),
            partition_state(BROKER_ID, 1, [BROKER_ID], tp=TP3, is_new=True),
        )
        assert errors_of(answer) == [ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NONE, ErrorCode.NONE]
        assert broker.log_manager.log_dir_of(TP3) == second
        assert broker.all_dirs_offline == []
    finally:
        await close_broker(broker)


async def test_a_partition_of_an_offline_dir_is_refused_not_recreated_elsewhere(
    tmp_path: Path,
) -> None:
    broker = await open_broker(tmp_path, log_dirs=2)
    try:
        await broker.leader_and_isr(
            *(partition_state(BROKER_ID, 1, [BROKER_ID], tp=tp) for tp in (TP0, TP1))
        )
        # TP0's replica is dropped here (StopReplica with delete would remove its log; a stray
        # stop keeps it), then its dir fails through another partition of the dir.
        await broker.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID], tp=TP2))
        await broker.stop_replica(delete=False, tp=TP2)
        fail_writes(broker, TP0)
        assert await produce(broker, TP0) == ErrorCode.KAFKA_STORAGE_ERROR
        await settle(lambda: len(broker.log_manager.live_log_dirs) == 1)
        answer = await broker.leader_and_isr(partition_state(BROKER_ID, 2, [BROKER_ID], tp=TP2))
        assert errors_of(answer) == [ErrorCode.KAFKA_STORAGE_ERROR]
        assert broker.log_manager.get_log(TP2) is None
    finally:
        await close_broker(broker)


async def test_a_broker_whose_last_log_dir_failed_must_stop(tmp_path: Path) -> None:
    broker = await open_broker(tmp_path)
    try:
        await broker.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID], tp=TP0))
        fail_writes(broker, TP0)
        assert await produce(broker, TP0) == ErrorCode.KAFKA_STORAGE_ERROR
        await settle(lambda: broker.all_dirs_offline == [None])
        assert broker.log_manager.live_log_dirs == ()
    finally:
        await close_broker(broker)
