"""An in-process cluster for benchmarks: N `BrokerNode`s and the controller
(`node.controller.node.ControllerNode`) over real TCP on 127.0.0.1, one event loop.

Topics are created with CreateTopics through a broker (one partition on brokers
0..replication_factor-1, broker 0 leading); the brokers register and heartbeat as in a real
cluster, so a follower that falls behind during a run is handled by the real ISR machinery.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Final

from actors.controller.messages import ControllerConfig
from actors.views import Role
from client.client import Client
from node.broker.config import BrokerConfig
from node.broker.node import BrokerNode
from node.controller.node import ControllerNode
from runtime.clock import Clock
from runtime.net.transport import Address, Transport
from wire.errors import ErrorCode
from wire.messages import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from wire.topic import TopicPartition

SECRET: Final = b"ketch-bench-cluster-secret-0123456789"
LOCALHOST: Final = "127.0.0.1"
LISTENER: Final = "native"
_READY_POLLS: Final = 10_000  # 1 ms apart: a cluster not ready in ~10 s is broken


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
        self.controller = ControllerNode(
            ControllerConfig.from_properties(
                {**self._properties, "auto.leader.rebalance.enable": False}
            ),
            Path(self._tmp.name) / "controller",
            transport=transport,
            clock=clock,
            cluster_secret=SECRET,
            listen=Address(LOCALHOST, 0),
        )

    @property
    def addresses(self) -> list[Address]:
        return [node.address for _, node in sorted(self.nodes.items())]

    def leader(self, tp: TopicPartition) -> BrokerNode:
        record = self.controller.actor.model.partition_by_name(tp)
        assert record is not None, tp
        return self.nodes[record.leader]

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
            await _until(
                lambda: all(n.broker_epoch >= 0 for n in self.nodes.values()),
                "every broker registered",
            )
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
        """One partition on brokers 0..replication_factor-1, broker 0 leading; returns once
        every replica serves its role and every broker knows the leader."""
        assert replication_factor <= self.size, (replication_factor, self.size)
        request = CreateTopicsRequest(
            topics=[
                CreatableTopic(
                    name=topic,
                    num_partitions=-1,
                    replication_factor=-1,
                    assignments=[
                        CreatableReplicaAssignment(
                            partition_index=0, broker_ids=list(range(replication_factor))
                        )
                    ],
                )
            ]
        )
        client = Client(self.addresses, transport=self._transport, clock=self._clock)
        try:
            response = await client.send(self.addresses[0], request)
        finally:
            await client.close()
        assert isinstance(response, CreateTopicsResponse), response
        assert response.topics[0].error_code == ErrorCode.NONE, response
        tp = TopicPartition(topic, 0)
        await _until(lambda: self._serving(tp, replication_factor), f"{tp} served")
        return tp

    def _serving(self, tp: TopicPartition, replication_factor: int) -> bool:
        for broker_id in range(replication_factor):
            actor = self.nodes[broker_id].replica_manager.partition(tp)
            wanted = Role.LEADER if broker_id == 0 else Role.FOLLOWER
            if actor is None or actor.view.role is not wanted:
                return False
        return all(
            (state := n.replica_manager.metadata.partition_state(tp)) is not None
            and state.leader == 0
            for n in self.nodes.values()
        )


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(_READY_POLLS):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise RuntimeError(f"bench cluster: {what} not reached in time")
