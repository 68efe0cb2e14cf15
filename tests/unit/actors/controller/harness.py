"""A controller actor on a ManualClock with a real metadata log and recording request channels.

The channels record what the controller sends per broker, so tests read the requests a broker
would get; StopReplica answers are played back through the recorded callbacks.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from actors.controller.controller import ControllerActor
from actors.controller.messages import (
    AlterPartition,
    ControllerConfig,
    CreateTopics,
    DeleteTopics,
    DescribeCluster,
    Heartbeat,
    RegisterBroker,
)
from actors.controller.outbox import ResponseCallback
from runtime.clock import ManualClock
from runtime.log.metadata_log import MetadataLog
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    AlterPartitionPartitionData,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionTopicData,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationListener,
    BrokerRegistrationRequest,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    Request,
    StopReplicaPartitionError,
    StopReplicaRequest,
    StopReplicaResponse,
)
from wire.metadata_records import PartitionRecord
from wire.topic import TopicPartition

SESSION_MS = 300
HEARTBEAT_MS = 50
SEED = 20261122
BROKERS = (0, 1, 2)


@dataclass
class Sent:
    broker_id: int
    request: Request
    callback: ResponseCallback | None


@dataclass
class RecordingChannels:
    channels: dict[int, Address] = field(default_factory=dict)
    sent: list[Sent] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)

    def add_broker(self, broker_id: int, address: Address) -> None:
        self.channels[broker_id] = address

    def remove_broker(self, broker_id: int) -> None:
        if self.channels.pop(broker_id, None) is not None:
            self.removed.append(broker_id)

    def send(
        self, broker_id: int, request: Request, callback: ResponseCallback | None = None
    ) -> None:
        assert broker_id in self.channels, f"send to broker {broker_id} without a channel"
        self.sent.append(Sent(broker_id, request, callback))

    def take(self) -> list[Sent]:
        sent, self.sent = self.sent, []
        return sent


T = TypeVar("T")


def of_type(sent: Sequence[Sent], kind: type[T], broker_id: int | None = None) -> list[T]:
    return [
        s.request
        for s in sent
        if isinstance(s.request, kind) and (broker_id is None or s.broker_id == broker_id)
    ]


class ControllerHarness:
    def __init__(self, directory: Path, config: ControllerConfig | None = None) -> None:
        self.directory = directory
        self.clock = ManualClock()
        self.channels = RecordingChannels()
        self.config = config or ControllerConfig(
            broker_session_timeout_ms=SESSION_MS,
            broker_heartbeat_interval_ms=HEARTBEAT_MS,
            auto_leader_rebalance_enable=False,
        )
        self.store = MetadataLog(directory)
        self.controller = ControllerActor(
            self.config,
            self.store,
            self.channels,
            clock=self.clock,
            rng=random.Random(SEED),
        )
        self._rng = random.Random(SEED)
        self.incarnations: dict[int, bytes] = {}
        self.epochs: dict[int, int] = {}

    async def start(self) -> None:
        await self.controller.start()
        await self.controller.ask(DescribeCluster())  # answered once on_start has run

    async def stop(self) -> None:
        await self.controller.stop()
        await self.store.close()

    # -- brokers -----------------------------------------------------------------------------

    async def register(
        self,
        broker_id: int,
        *,
        new_process: bool = True,
        log_dirs: Sequence[bytes] = (),
        cluster_id: str = "",
    ) -> ErrorCode:
        """Register `broker_id` (of cluster `cluster_id`; "" for a broker that knows none)."""
        if new_process or broker_id not in self.incarnations:
            self.incarnations[broker_id] = uuid.UUID(
                int=self._rng.getrandbits(128), version=4
            ).bytes
        response = await self.controller.ask(
            RegisterBroker(
                BrokerRegistrationRequest(
                    broker_id=broker_id,
                    cluster_id=cluster_id,
                    incarnation_id=self.incarnations[broker_id],
                    listeners=[
                        BrokerRegistrationListener(
                            name="native", host="127.0.0.1", port=9_000 + broker_id
                        )
                    ],
                    log_dirs=list(log_dirs),
                )
            )
        )
        if response.error is ErrorCode.NONE:
            self.epochs[broker_id] = response.broker_epoch
        return response.error

    async def heartbeat(
        self,
        broker_id: int,
        *,
        want_fence: bool = False,
        want_shut_down: bool = False,
        offline_log_dirs: Sequence[bytes] = (),
    ) -> BrokerHeartbeatResponse:
        return await self.controller.ask(
            Heartbeat(
                BrokerHeartbeatRequest(
                    broker_id=broker_id,
                    broker_epoch=self.epochs.get(broker_id, -1),
                    want_fence=want_fence,
                    want_shut_down=want_shut_down,
                    offline_log_dirs=list(offline_log_dirs),
                )
            )
        )

    async def pass_time(self, ms: int, *, alive: Sequence[int]) -> None:
        """Let `ms` pass in heartbeat-sized steps; only the `alive` brokers heartbeat."""
        for _ in range(ms // HEARTBEAT_MS):
            for broker_id in alive:
                await self.heartbeat(broker_id)
            self.clock.advance(HEARTBEAT_MS)
            await self.settle()

    async def settle(self) -> None:
        """Let told messages (ticks, StopReplica answers) be processed: a few loop turns for
        woken timer tasks to tell the actor, then an ask as a barrier (the mailbox is FIFO, so
        it is answered after everything told before it)."""
        for _ in range(10):
            await asyncio.sleep(0)
        await self.controller.ask(DescribeCluster())

    # -- topics ------------------------------------------------------------------------------

    async def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = 3,
        *,
        configs: dict[str, str] | None = None,
        validate_only: bool = False,
        assignments: Sequence[Sequence[int]] = (),
    ) -> CreateTopicsResponse:
        topic = CreatableTopic(
            name=name,
            num_partitions=-1 if assignments else partitions,
            replication_factor=-1 if assignments else replication_factor,
            assignments=[
                CreatableReplicaAssignment(partition_index=i, broker_ids=list(replicas))
                for i, replicas in enumerate(assignments)
            ],
            configs=[CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
        )
        return await self.controller.ask(
            CreateTopics(CreateTopicsRequest(topics=[topic], validate_only=validate_only))
        )

    async def delete_topics(self, *names: str) -> DeleteTopicsResponse:
        return await self.controller.ask(DeleteTopics(DeleteTopicsRequest(topic_names=list(names))))

    def partition(self, topic: str, index: int = 0) -> PartitionRecord:
        p = self.controller.model.partition_by_name(TopicPartition(topic, index))
        assert p is not None, (topic, index)
        return p

    async def alter_isr(
        self,
        topic: str,
        new_isr: Sequence[int],
        *,
        index: int = 0,
        sender: int | None = None,
        leader_epoch: int | None = None,
        partition_epoch: int | None = None,
        broker_epoch: int | None = None,
    ) -> AlterPartitionResponse:
        p = self.partition(topic, index)
        sender = p.leader if sender is None else sender
        return await self.controller.ask(
            AlterPartition(
                AlterPartitionRequest(
                    broker_id=sender,
                    broker_epoch=self.epochs[sender] if broker_epoch is None else broker_epoch,
                    topics=[
                        AlterPartitionTopicData(
                            topic_name=topic,
                            partitions=[
                                AlterPartitionPartitionData(
                                    partition_index=index,
                                    leader_epoch=(
                                        p.leader_epoch if leader_epoch is None else leader_epoch
                                    ),
                                    partition_epoch=(
                                        p.partition_epoch
                                        if partition_epoch is None
                                        else partition_epoch
                                    ),
                                    new_isr=list(new_isr),
                                )
                            ],
                        )
                    ],
                )
            )
        )

    def answer_stop_replicas(
        self, sent: Sequence[Sent], *, error: ErrorCode = ErrorCode.NONE, attempts: int = 1
    ) -> int:
        """Answer every StopReplica in `sent` as its broker would; returns how many."""
        count = 0
        for s in sent:
            if isinstance(s.request, StopReplicaRequest) and s.callback is not None:
                s.callback(
                    StopReplicaResponse(
                        partition_errors=[
                            StopReplicaPartitionError(
                                topic_name=state.topic_name,
                                partition_index=state.partition_index,
                                error_code=error,
                            )
                            for state in s.request.partition_states
                        ]
                    ),
                    attempts,
                )
                count += 1
        return count


async def cluster(h: ControllerHarness, brokers: tuple[int, ...] = BROKERS) -> None:
    """Register `brokers` and forget what their registration sent."""
    for broker_id in brokers:
        assert await h.register(broker_id) is ErrorCode.NONE
    h.channels.take()


async def kill(h: ControllerHarness, dead: int, alive: tuple[int, ...]) -> None:
    """`dead` stops heartbeating; the others go on until the session has expired."""
    await h.pass_time(SESSION_MS + 2 * HEARTBEAT_MS, alive=alive)
