"""A stand-in for the controller (issue 6), for in-process clusters in tests and benchmarks.

It plays just enough of the controller for replication to run:

* it keeps each partition's (leader, leader epoch, ISR, partition epoch, replicas) and the live
  brokers' addresses, which its owner sets by hand (create topics, elect leaders, kill brokers);
* its `Server` answers AlterPartition the way Kafka's controller validates it (the sender must be
  the leader, the leader epoch and the partition epoch must match, the new ISR must be a subset
  of the replicas and contain the leader), bumps the partition epoch, records the ISR, answers,
  and then sends UpdateMetadata to every live broker;
* its `Client` holds the cluster credential and sends LeaderAndIsr / UpdateMetadata.

It never decides anything itself (no liveness, no elections): the real controller replaces it.

Ownership and why no lock: everything runs on one event loop; a partition's record is touched
only by the AlterPartition handler and the owner's own calls, neither of which awaits between
reading and writing it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Final

from runtime.clock import Clock
from runtime.log.partition_dir import TopicPartition
from runtime.net.client import Client
from runtime.net.client_config import ClientConfig
from runtime.net.server import RequestContext, Server
from runtime.net.transport import Address, Transport
from wire.errors import ErrorCode
from wire.messages import (
    AlterPartitionPartitionResult,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionTopicResult,
    ApiKey,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
)

CONTROLLER_ID: Final = 3_000
CONTROLLER_EPOCH: Final = 1
LISTENER: Final = "native"
NO_LEADER: Final = -1


@dataclass
class PartitionRecord:
    """The controller's view of one partition (mutated only by the stand-in)."""

    topic_id: bytes
    replicas: list[int]
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int = 0


@dataclass
class ControllerStandIn:
    transport: Transport
    address: Address
    clock: Clock
    secret: bytes
    brokers: dict[int, Address] = field(default_factory=dict)  # live brokers
    partitions: dict[TopicPartition, PartitionRecord] = field(default_factory=dict)
    isr_changes: list[tuple[TopicPartition, list[int]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.server = Server(
            self.transport,
            self.address,
            {ApiKey.ALTER_PARTITION: self._alter_partition},
            clock=self.clock,
            cluster_secret=self.secret,
        )
        self.client = Client(
            [self.address],
            transport=self.transport,
            clock=self.clock,
            client_id="controller",
            config=ClientConfig(request_timeout_ms=5_000, reconnect_backoff_ms=10),
            credential=self.secret,
        )
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        await self.server.start()
        self.address = self.server.address

    async def stop(self) -> None:
        await self.server.stop()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.client.close()

    # -- AlterPartition -----------------------------------------------------------------------

    async def _alter_partition(
        self, request: AlterPartitionRequest, ctx: RequestContext
    ) -> AlterPartitionResponse:
        topics: list[AlterPartitionTopicResult] = []
        for topic in request.topics:
            results = []
            for data in topic.partitions:
                tp = TopicPartition(topic.topic_name, data.partition_index)
                results.append(
                    self._apply_isr(
                        tp,
                        request.broker_id,
                        data.leader_epoch,
                        data.partition_epoch,
                        list(data.new_isr),
                    )
                )
            topics.append(
                AlterPartitionTopicResult(
                    topic_name=topic.topic_name, topic_id=topic.topic_id, partitions=results
                )
            )
        # After the answer, as Kafka's controller does: the other brokers learn the new ISR.
        self._spawn(self.update_metadata())
        return AlterPartitionResponse(topics=topics)

    def _apply_isr(
        self,
        tp: TopicPartition,
        sender: int,
        leader_epoch: int,
        partition_epoch: int,
        new_isr: list[int],
    ) -> AlterPartitionPartitionResult:
        record = self.partitions.get(tp)
        if record is None:
            return _refused(tp, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if sender != record.leader:
            return _refused(tp, ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if leader_epoch != record.leader_epoch:
            return _refused(tp, ErrorCode.FENCED_LEADER_EPOCH)
        if partition_epoch != record.partition_epoch:
            return _refused(tp, ErrorCode.INVALID_UPDATE_VERSION)
        if not set(new_isr) <= set(record.replicas) or record.leader not in new_isr:
            return _refused(tp, ErrorCode.INVALID_REQUEST)
        record.isr = new_isr
        record.partition_epoch += 1
        self.isr_changes.append((tp, list(new_isr)))
        return AlterPartitionPartitionResult(
            partition_index=tp.partition,
            leader_id=record.leader,
            leader_epoch=record.leader_epoch,
            isr=list(record.isr),
            partition_epoch=record.partition_epoch,
        )

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- control requests ---------------------------------------------------------------------

    async def leader_and_isr(
        self, broker_id: int, tps: Iterable[TopicPartition]
    ) -> LeaderAndIsrResponse:
        states = [self._leader_and_isr_state(tp) for tp in tps]
        request = LeaderAndIsrRequest(
            controller_id=CONTROLLER_ID,
            controller_epoch=CONTROLLER_EPOCH,
            partition_states=states,
        )
        response = await self.client.send(self.brokers[broker_id], request)
        assert isinstance(response, LeaderAndIsrResponse), response
        return response

    async def update_metadata(self) -> None:
        """UpdateMetadata with every partition's state to every live broker."""
        request = UpdateMetadataRequest(
            controller_id=CONTROLLER_ID,
            controller_epoch=CONTROLLER_EPOCH,
            partition_states=[self._metadata_state(tp) for tp in sorted(self.partitions)],
            live_brokers=[
                UpdateMetadataBroker(
                    id=broker_id,
                    endpoints=[
                        UpdateMetadataEndpoint(
                            host=address.host, port=address.port, listener=LISTENER
                        )
                    ],
                )
                for broker_id, address in sorted(self.brokers.items())
            ],
        )
        responses = await asyncio.gather(
            *(self.client.send(address, request) for address in self.brokers.values())
        )
        for response in responses:
            assert isinstance(response, UpdateMetadataResponse), response
            assert response.error is ErrorCode.NONE, response

    def _leader_and_isr_state(self, tp: TopicPartition) -> LeaderAndIsrPartitionState:
        record = self.partitions[tp]
        return LeaderAndIsrPartitionState(
            topic_name=tp.topic,
            topic_id=record.topic_id,
            partition_index=tp.partition,
            controller_epoch=CONTROLLER_EPOCH,
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            isr=list(record.isr),
            partition_epoch=record.partition_epoch,
            replicas=list(record.replicas),
        )

    def _metadata_state(self, tp: TopicPartition) -> UpdateMetadataPartitionState:
        record = self.partitions[tp]
        return UpdateMetadataPartitionState(
            topic_name=tp.topic,
            topic_id=record.topic_id,
            partition_index=tp.partition,
            controller_epoch=CONTROLLER_EPOCH,
            leader=record.leader,
            leader_epoch=record.leader_epoch,
            isr=list(record.isr),
            partition_epoch=record.partition_epoch,
            replicas=list(record.replicas),
            offline_replicas=[b for b in record.replicas if b not in self.brokers],
        )


def _refused(tp: TopicPartition, error: ErrorCode) -> AlterPartitionPartitionResult:
    return AlterPartitionPartitionResult(partition_index=tp.partition, error_code=error)
