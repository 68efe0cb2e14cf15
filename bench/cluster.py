"""An in-process cluster for benchmarks: N `BrokerNode`s over real TCP on 127.0.0.1 and the
least controller that lets them replicate.

Benchmarks must not import from tests/, so this is a bench-side counterpart of the test
harness's controller stand-in, cut down to what a benchmark needs: it creates topics (the first
replica leads, the ISR is every replica; LeaderAndIsr to the replicas, UpdateMetadata to all)
and answers AlterPartition by accepting the leader's proposal when the epochs match (a follower
that falls behind for replica.lag.time.max.ms during a run would otherwise stall acks=all). It
never elects, kills or restarts anything.

Ownership and why no lock: everything runs on the benchmark's one event loop; the controller's
partition records are read and written only by its AlterPartition handler and `create_topic`,
neither of which awaits between reading and writing a record.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from runtime.broker_config import BrokerConfig
from runtime.clock import Clock
from runtime.log.partition_dir import TopicPartition
from runtime.net.client import Client
from runtime.net.client_config import ClientConfig
from runtime.net.server import RequestContext, Server
from runtime.net.transport import Address, Transport
from runtime.node import BrokerNode
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

SECRET: Final = b"ketch-bench-cluster-secret-0123456789"
CONTROLLER_ID: Final = 3_000
CONTROLLER_EPOCH: Final = 1
LISTENER: Final = "native"
LOCALHOST: Final = "127.0.0.1"


@dataclass
class _Partition:
    topic_id: bytes
    replicas: list[int]
    isr: list[int]
    leader_epoch: int = 0
    partition_epoch: int = 0

    @property
    def leader(self) -> int:
        return self.replicas[0]


class BenchCluster:
    """`async with BenchCluster(size, transport, clock, properties) as cluster:` brokers
    0..size-1 on ephemeral ports, each with its own log dir in a temporary directory."""

    def __init__(
        self,
        size: int,
        *,
        transport: Transport,
        clock: Clock,
        properties: Mapping[str, object] | None = None,
    ) -> None:
        self.size = size
        self._transport = transport
        self._clock = clock
        self._properties = dict(properties or {})
        self._tmp = tempfile.TemporaryDirectory(prefix="ketch-bench-")
        self.nodes: dict[int, BrokerNode] = {}
        self.partitions: dict[TopicPartition, _Partition] = {}
        self._server = Server(
            transport,
            Address(LOCALHOST, 0),
            {ApiKey.ALTER_PARTITION: self._alter_partition},
            clock=clock,
            cluster_secret=SECRET,
        )
        self._client: Client | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def addresses(self) -> list[Address]:
        return [node.address for _, node in sorted(self.nodes.items())]

    def leader(self, tp: TopicPartition) -> BrokerNode:
        return self.nodes[self.partitions[tp].leader]

    async def __aenter__(self) -> BenchCluster:
        await self._server.start()
        controller = self._server.address
        self._client = Client(
            [controller],
            transport=self._transport,
            clock=self._clock,
            client_id="bench-controller",
            config=ClientConfig(request_timeout_ms=10_000, reconnect_backoff_ms=10),
            credential=SECRET,
        )
        try:
            for broker_id in range(self.size):
                properties = {
                    **self._properties,
                    "broker.id": broker_id,
                    "log.dirs": str(Path(self._tmp.name) / f"broker-{broker_id}"),
                    "listeners": f"{LISTENER}://{LOCALHOST}:0",
                }
                node = BrokerNode(
                    BrokerConfig.from_properties(properties),
                    transport=self._transport,
                    clock=self._clock,
                    cluster_secret=SECRET,
                    controller=controller,
                )
                await node.start()
                self.nodes[broker_id] = node
            await self._update_metadata()
        except BaseException:
            await self._shutdown()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._shutdown()

    async def _shutdown(self) -> None:
        # The log dirs go even when a stop fails (a benchmark that crashed mid-run).
        try:
            for node in self.nodes.values():
                await node.stop()
            await self._server.stop()
            tasks = list(self._tasks)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._client is not None:
                await self._client.close()
        finally:
            self._tmp.cleanup()

    async def create_topic(self, topic: str, replication_factor: int) -> TopicPartition:
        """One partition on brokers 0..replication_factor-1, broker 0 leading."""
        assert replication_factor <= self.size, (replication_factor, self.size)
        tp = TopicPartition(topic, 0)
        replicas = list(range(replication_factor))
        topic_id = (len(self.partitions) + 1).to_bytes(16, "big")
        self.partitions[tp] = _Partition(topic_id, replicas, list(replicas))
        request = LeaderAndIsrRequest(
            controller_id=CONTROLLER_ID,
            controller_epoch=CONTROLLER_EPOCH,
            partition_states=[self._leader_and_isr_state(tp)],
        )
        for broker_id in replicas:
            response = await self._send(broker_id, request)
            assert isinstance(response, LeaderAndIsrResponse), response
            assert response.error is ErrorCode.NONE, response
            for error in response.partition_errors:
                assert error.error_code == ErrorCode.NONE, (broker_id, error)
        await self._update_metadata()
        return tp

    async def _send(
        self, broker_id: int, request: LeaderAndIsrRequest | UpdateMetadataRequest
    ) -> object:
        assert self._client is not None
        return await self._client.send(self.nodes[broker_id].address, request)

    def _leader_and_isr_state(self, tp: TopicPartition) -> LeaderAndIsrPartitionState:
        p = self.partitions[tp]
        return LeaderAndIsrPartitionState(
            topic_name=tp.topic,
            topic_id=p.topic_id,
            partition_index=tp.partition,
            controller_epoch=CONTROLLER_EPOCH,
            leader=p.leader,
            leader_epoch=p.leader_epoch,
            isr=list(p.isr),
            partition_epoch=p.partition_epoch,
            replicas=list(p.replicas),
        )

    async def _update_metadata(self) -> None:
        states = []
        for tp, p in sorted(self.partitions.items()):
            states.append(
                UpdateMetadataPartitionState(
                    topic_name=tp.topic,
                    topic_id=p.topic_id,
                    partition_index=tp.partition,
                    controller_epoch=CONTROLLER_EPOCH,
                    leader=p.leader,
                    leader_epoch=p.leader_epoch,
                    isr=list(p.isr),
                    partition_epoch=p.partition_epoch,
                    replicas=list(p.replicas),
                    offline_replicas=[],
                )
            )
        brokers = [
            UpdateMetadataBroker(
                id=broker_id,
                endpoints=[
                    UpdateMetadataEndpoint(
                        host=node.address.host, port=node.address.port, listener=LISTENER
                    )
                ],
            )
            for broker_id, node in sorted(self.nodes.items())
        ]
        request = UpdateMetadataRequest(
            controller_id=CONTROLLER_ID,
            controller_epoch=CONTROLLER_EPOCH,
            partition_states=states,
            live_brokers=brokers,
        )
        for broker_id in self.nodes:
            response = await self._send(broker_id, request)
            assert isinstance(response, UpdateMetadataResponse), response
            assert response.error is ErrorCode.NONE, response

    async def _alter_partition(
        self, request: AlterPartitionRequest, ctx: RequestContext
    ) -> AlterPartitionResponse:
        topics = []
        for topic in request.topics:
            results = []
            for data in topic.partitions:
                tp = TopicPartition(topic.topic_name, data.partition_index)
                p = self.partitions.get(tp)
                if p is None:
                    error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                elif request.broker_id != p.leader:
                    error = ErrorCode.NOT_LEADER_OR_FOLLOWER
                elif (data.leader_epoch, data.partition_epoch) != (
                    p.leader_epoch,
                    p.partition_epoch,
                ):
                    error = ErrorCode.INVALID_UPDATE_VERSION
                elif p.leader not in data.new_isr or not set(data.new_isr) <= set(p.replicas):
                    error = ErrorCode.INVALID_REQUEST
                else:
                    p.isr = list(data.new_isr)
                    p.partition_epoch += 1
                    results.append(
                        AlterPartitionPartitionResult(
                            partition_index=tp.partition,
                            leader_id=p.leader,
                            leader_epoch=p.leader_epoch,
                            isr=list(p.isr),
                            partition_epoch=p.partition_epoch,
                        )
                    )
                    continue
                results.append(
                    AlterPartitionPartitionResult(
                        partition_index=data.partition_index, error_code=error
                    )
                )
            topics.append(
                AlterPartitionTopicResult(
                    topic_name=topic.topic_name, topic_id=topic.topic_id, partitions=results
                )
            )
        # The other brokers learn the new ISR after the answer, as from Kafka's controller.
        task = asyncio.ensure_future(self._update_metadata())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return AlterPartitionResponse(topics=topics)
