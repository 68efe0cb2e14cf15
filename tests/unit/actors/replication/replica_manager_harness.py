"""Support for the ReplicaManager tests (no tests here): one broker (id 0) on a ManualClock over
a real LogManager in a tmp dir, a recording FetcherControl and AlterPartition sink, and builders
for the controller's and clients' requests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from actors.replication.config import ReplicaManagerConfig
from actors.replication.delayed import DelayedOperations
from actors.replication.fetch_state import BrokerEndpoint, InitialFetchState
from actors.replication.replica_manager import ReplicaManager
from actors.replication.replica_manager_messages import (
    HandleLeaderAndIsr,
    HandleStopReplica,
    HandleUpdateMetadata,
)
from actors.replication.request_path import RequestPath
from runtime.clock import ManualClock
from runtime.log.config import LogManagerConfig
from runtime.log.manager import LogManager
from testkit.disk import fail_log_writes
from tests.unit.actors.replication.partition_harness import RecordingSink
from wire.batch_builder import build_batch
from wire.messages import (
    LEADER_AND_ISR_INCREMENTAL,
    FetchPartition,
    FetchRequest,
    FetchResponsePartition,
    FetchTopic,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaResponse,
    TopicConfigs,
    TopicProduceData,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)
from wire.topic import TopicPartition

BROKER_ID = 0
TP = TopicPartition("orders", 0)
LAG_MS = 10_000
HW_CHECKPOINT_MS = 5_000
WALL_MS = 1_700_000_000_000
MAX_BYTES = 1 << 20


def batch(count: int = 1, *, tag: int = 0, base_timestamp: int = WALL_MS) -> bytes:
    records = [(b"k%d-%d" % (tag, i), b"v%d-%d" % (tag, i)) for i in range(count)]
    return build_batch(records, base_timestamp=base_timestamp)


@dataclass
class RecordingFetchers:
    """A FetcherControl that remembers every call and what it would be fetching now."""

    calls: list[tuple[str, object]] = field(default_factory=list)
    fetching: dict[TopicPartition, tuple[BrokerEndpoint, InitialFetchState]] = field(
        default_factory=dict
    )
    idle_shutdowns: int = 0

    def add_partitions(
        self, leader: BrokerEndpoint, partitions: Mapping[TopicPartition, InitialFetchState]
    ) -> None:
        self.calls.append(("add", (leader, dict(partitions))))
        for tp, state in partitions.items():
            self.fetching[tp] = (leader, state)

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        removed = set(partitions)
        self.calls.append(("remove", removed))
        for tp in removed:
            self.fetching.pop(tp, None)

    async def shutdown_idle(self) -> None:
        self.idle_shutdowns += 1

    async def shutdown(self) -> None:
        self.calls.append(("shutdown", None))
        self.fetching.clear()


def partition_state(
    leader: int,
    leader_epoch: int,
    isr: Sequence[int],
    *,
    replicas: Sequence[int] = (BROKER_ID,),
    partition_epoch: int = 0,
    tp: TopicPartition = TP,
    controller_epoch: int = 1,
    topic_id: bytes = bytes(range(16)),
    is_new: bool = False,
) -> LeaderAndIsrPartitionState:
    return LeaderAndIsrPartitionState(
        topic_name=tp.topic,
        topic_id=topic_id,
        partition_index=tp.partition,
        controller_epoch=controller_epoch,
        leader=leader,
        leader_epoch=leader_epoch,
        isr=list(isr),
        partition_epoch=partition_epoch,
        replicas=list(replicas),
        is_new=is_new,
    )


def broker_entry(broker_id: int) -> UpdateMetadataBroker:
    return UpdateMetadataBroker(
        id=broker_id,
        endpoints=[
            UpdateMetadataEndpoint(port=9092 + broker_id, host=f"b{broker_id}", listener="native")
        ],
    )


def update_metadata(
    brokers: Iterable[int],
    states: Iterable[UpdateMetadataPartitionState] = (),
    *,
    controller_epoch: int = 1,
) -> UpdateMetadataRequest:
    return UpdateMetadataRequest(
        controller_id=100,
        controller_epoch=controller_epoch,
        partition_states=list(states),
        live_brokers=[broker_entry(b) for b in brokers],
    )


def produce_request(records: bytes, *, acks: int, timeout_ms: int = 1_000) -> ProduceRequest:
    return ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            TopicProduceData(
                name=TP.topic,
                partition_data=[PartitionProduceData(index=TP.partition, records=records)],
            )
        ],
    )


def fetch_request(
    fetch_offset: int,
    *,
    replica_id: int = -1,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    current_leader_epoch: int = -1,
    tp: TopicPartition = TP,
) -> FetchRequest:
    return FetchRequest(
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        topics=[
            FetchTopic(
                topic=tp.topic,
                partitions=[
                    FetchPartition(
                        partition=tp.partition,
                        current_leader_epoch=current_leader_epoch,
                        fetch_offset=fetch_offset,
                        partition_max_bytes=MAX_BYTES,
                    )
                ],
            )
        ],
    )


def only_produce_answer(response: object) -> PartitionProduceResponse:
    from wire.messages import ProduceResponse

    assert isinstance(response, ProduceResponse), response
    [topic] = response.responses
    [answer] = topic.partition_responses
    return answer


def only_fetch_answer(response: object) -> FetchResponsePartition:
    from wire.messages import FetchResponse

    assert isinstance(response, FetchResponse), response
    [topic] = response.responses
    [answer] = topic.partitions
    return answer


def fail_writes(broker: Broker, tp: TopicPartition) -> None:
    """The disk "fails" under the partition's active segment (`fail_log_writes`)."""
    partition_log = broker.log_manager.get_log(tp)
    assert partition_log is not None
    fail_log_writes(partition_log)


async def settle(condition: Callable[[], bool], *, turns: int = 200) -> None:
    """Let the loop run until `condition` holds (bounded; time does not move)."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition did not hold after the loop ran")


async def advance(clock: ManualClock, delta_ms: int, *, turns: int = 20) -> None:
    """Move time, then let the tasks it woke run."""
    clock.advance(delta_ms)
    for _ in range(turns):
        await asyncio.sleep(0)


@dataclass
class Broker:
    clock: ManualClock
    log_manager: LogManager
    delayed: DelayedOperations
    fetchers: RecordingFetchers
    sink: RecordingSink
    manager: ReplicaManager
    path: RequestPath
    leadership_changes: list[tuple[list[TopicPartition], list[TopicPartition]]]
    log_dir: Path
    deletions: list[list[TopicPartition]]
    # One entry each time the ReplicaManager said no log dir is left.
    all_dirs_offline: list[None]

    async def leader_and_isr(
        self,
        *states: LeaderAndIsrPartitionState,
        controller_epoch: int = 1,
        broker_epoch: int = -1,
        request_type: int = LEADER_AND_ISR_INCREMENTAL,
        topic_configs: Sequence[TopicConfigs] = (),
    ) -> LeaderAndIsrResponse:
        request = LeaderAndIsrRequest(
            controller_id=100,
            controller_epoch=controller_epoch,
            broker_epoch=broker_epoch,
            type=request_type,
            partition_states=list(states),
            topic_configs=list(topic_configs),
        )
        return await self.manager.ask(HandleLeaderAndIsr(request))

    async def stop_replica(
        self,
        *,
        delete: bool,
        leader_epoch: int = -1,
        controller_epoch: int = 1,
        tp: TopicPartition = TP,
    ) -> StopReplicaResponse:
        request = StopReplicaRequest(
            controller_id=100,
            controller_epoch=controller_epoch,
            partition_states=[
                StopReplicaPartitionState(
                    topic_name=tp.topic,
                    partition_index=tp.partition,
                    leader_epoch=leader_epoch,
                    delete_partition=delete,
                )
            ],
        )
        return await self.manager.ask(HandleStopReplica(request))

    async def update_metadata(self, request: UpdateMetadataRequest) -> UpdateMetadataResponse:
        return await self.manager.ask(HandleUpdateMetadata(request))

    async def follower_fetch(self, follower_id: int, fetch_offset: int, epoch: int = -1) -> None:
        """A follower's fetch from its LEO: the leader records the follower's position."""
        answer = only_fetch_answer(
            await self.path.fetch(
                fetch_request(fetch_offset, replica_id=follower_id, current_leader_epoch=epoch)
            )
        )
        assert answer.error_code == 0, answer


async def open_broker(
    root: Path,
    *,
    min_insync_replicas: int = 1,
    message_max_bytes: int = MAX_BYTES,
    log_dirs: int = 1,
) -> Broker:
    """`log_dirs` > 1: more dirs beside `log_dir`, named broker-0.1, broker-0.2, ..."""
    clock = ManualClock()
    log_dir = root / f"broker-{BROKER_ID}"
    extra = [str(root / f"broker-{BROKER_ID}.{i}") for i in range(1, log_dirs)]
    log_manager = LogManager(LogManagerConfig(log_dirs=(str(log_dir), *extra)), clock)
    log_manager.open()
    delayed = DelayedOperations(clock)
    fetchers = RecordingFetchers()
    sink = RecordingSink()
    changes: list[tuple[list[TopicPartition], list[TopicPartition]]] = []
    deletions: list[list[TopicPartition]] = []
    all_dirs_offline: list[None] = []
    manager = ReplicaManager(
        ReplicaManagerConfig(
            BROKER_ID,
            replica_lag_time_max_ms=LAG_MS,
            high_watermark_checkpoint_interval_ms=HW_CHECKPOINT_MS,
            min_insync_replicas=min_insync_replicas,
        ),
        log_manager,
        fetchers,
        delayed,
        sink,
        on_leadership_change=lambda leaders, followers: changes.append(
            (list(leaders), list(followers))
        ),
        on_partitions_deleted=lambda deleted: deletions.append(list(deleted)),
        on_all_log_dirs_offline=lambda: all_dirs_offline.append(None),
        clock=clock,
    )
    await manager.start()
    path = RequestPath(
        manager.partition,
        delayed,
        message_max_bytes=message_max_bytes,
        min_insync_replicas=lambda topic: min_insync_replicas,
    )
    return Broker(
        clock,
        log_manager,
        delayed,
        fetchers,
        sink,
        manager,
        path,
        changes,
        log_dir.resolve(),
        deletions,
        all_dirs_offline,
    )


async def close_broker(broker: Broker) -> None:
    await broker.manager.stop()
    broker.delayed.close()
    broker.log_manager.shutdown()
