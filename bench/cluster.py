"""An in-process cluster for benchmarks: N `BrokerNode`s over real TCP on 127.0.0.1 and the
controller stand-in (`runtime.controller_standin`) that lets them replicate.

It creates topics (the first replica leads, the ISR is every replica; LeaderAndIsr to the
replicas, UpdateMetadata to all); the stand-in answers AlterPartition, so a follower that falls
behind for replica.lag.time.max.ms during a run does not stall acks=all. It never elects, kills or
restarts anything.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from runtime.broker_config import BrokerConfig
from runtime.clock import Clock
from runtime.controller_standin import LISTENER, ControllerStandIn, PartitionRecord
from runtime.log.partition_dir import TopicPartition
from runtime.net.transport import Address, Transport
from runtime.node import BrokerNode
from wire.errors import ErrorCode

SECRET: Final = b"ketch-bench-cluster-secret-0123456789"
LOCALHOST: Final = "127.0.0.1"


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
        self.controller = ControllerStandIn(transport, Address(LOCALHOST, 0), clock, SECRET)

    @property
    def addresses(self) -> list[Address]:
        return [node.address for _, node in sorted(self.nodes.items())]

    def leader(self, tp: TopicPartition) -> BrokerNode:
        return self.nodes[self.controller.partitions[tp].leader]

    async def __aenter__(self) -> BenchCluster:
        await self.controller.start()
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
                    controller=self.controller.address,
                )
                await node.start()
                self.nodes[broker_id] = node
                self.controller.brokers[broker_id] = node.address
            await self.controller.update_metadata()
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
            await self.controller.stop()
        finally:
            self._tmp.cleanup()

    async def create_topic(self, topic: str, replication_factor: int) -> TopicPartition:
        """One partition on brokers 0..replication_factor-1, broker 0 leading."""
        assert replication_factor <= self.size, (replication_factor, self.size)
        tp = TopicPartition(topic, 0)
        replicas = list(range(replication_factor))
        topic_id = (len(self.controller.partitions) + 1).to_bytes(16, "big")
        self.controller.partitions[tp] = PartitionRecord(
            topic_id=topic_id, replicas=replicas, leader=0, leader_epoch=0, isr=list(replicas)
        )
        for broker_id in replicas:
            response = await self.controller.leader_and_isr(broker_id, [tp])
            assert response.error is ErrorCode.NONE, response
            for error in response.partition_errors:
                assert error.error_code == ErrorCode.NONE, (broker_id, error)
        await self.controller.update_metadata()
        return tp
