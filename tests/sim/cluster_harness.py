"""Support for the cluster tests (no tests here): N `BrokerNode`s in one process and a tiny
controller stand-in that the test drives by hand.

The controller is `runtime.controller_standin.ControllerStandIn`, driven by hand.

The `Cluster` creates topics (assignment, LeaderAndIsr to every replica, UpdateMetadata to all),
kills a broker (cuts its links, `crash()`), elects a leader from the ISR by hand, and restarts a
broker from its data directory. It works over a seeded `MemoryNetwork` with a `ManualClock`
(the failover test: `run_until` advances the clock in 1 ms steps while letting the loop run) or
over TCP with any clock (the integration test).

Ownership: everything runs on the test's event loop; the controller's state is touched only by
its AlterPartition handler and the test's own calls, neither of which awaits between reading and
writing a partition's record.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Final, TypeVar

from runtime.broker_config import BrokerConfig
from runtime.clock import Clock, ManualClock
from runtime.controller_standin import LISTENER, ControllerStandIn, PartitionRecord
from runtime.log.partition_dir import TopicPartition
from runtime.net.memory import LinkConfig, MemoryNetwork
from runtime.net.transport import Address, Transport
from runtime.node import BrokerNode, NodeState
from wire.errors import ErrorCode

T = TypeVar("T")

SECRET: Final = b"ketch-sim-cluster-secret-0123456789"


# -- the cluster ---------------------------------------------------------------------------------


TransportFor = Callable[[str], Transport]
AddressFor = Callable[[str], Address]


class Cluster:
    """N brokers and the controller stand-in. `await start()`, drive, `await stop()`."""

    def __init__(
        self,
        data_dir: Path,
        broker_ids: Iterable[int],
        *,
        clock: Clock,
        transport_for: TransportFor,
        address_for: AddressFor,
        properties: Mapping[str, object] | None = None,
        network: MemoryNetwork | None = None,
        seed: int = 0,
    ) -> None:
        self.data_dir = data_dir
        self.broker_ids = sorted(broker_ids)
        self.clock = clock
        self.network = network
        self.seed = seed
        self._transport_for = transport_for
        self._address_for = address_for
        self.properties = dict(properties or {})
        self.controller = ControllerStandIn(
            transport_for("controller"), address_for("controller"), clock, SECRET
        )
        self.nodes: dict[int, BrokerNode] = {}
        self._topic_ids = 0

    @classmethod
    def in_memory(
        cls,
        data_dir: Path,
        size: int,
        *,
        seed: int,
        properties: Mapping[str, object] | None = None,
        link: LinkConfig | None = None,
    ) -> Cluster:
        clock = ManualClock()
        network = MemoryNetwork(seed, clock, default_link=link)
        return cls(
            data_dir,
            range(size),
            clock=clock,
            transport_for=network.transport,
            address_for=lambda name: Address(name, 9092),
            properties=properties,
            network=network,
            seed=seed,
        )

    @staticmethod
    def node_name(broker_id: int) -> str:
        return f"broker-{broker_id}"

    def node(self, broker_id: int) -> BrokerNode:
        return self.nodes[broker_id]

    def log_dir(self, broker_id: int) -> Path:
        return self.data_dir / self.node_name(broker_id)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        await self.controller.start()
        for broker_id in self.broker_ids:
            await self._start_node(broker_id)
        await self.controller.update_metadata()

    async def _start_node(self, broker_id: int) -> BrokerNode:
        name = self.node_name(broker_id)
        properties = {
            **self.properties,
            "broker.id": broker_id,
            "log.dirs": str(self.log_dir(broker_id)),
            "listeners": f"{LISTENER}://{self._address_for(name)}",
        }
        node = BrokerNode(
            BrokerConfig.from_properties(properties),
            transport=self._transport_for(name),
            clock=self.clock,
            cluster_secret=SECRET,
            controller=self.controller.address,
        )
        await node.start()
        self.nodes[broker_id] = node
        self.controller.brokers[broker_id] = node.address
        return node

    async def stop(self) -> None:
        """Clean shutdown of every live broker, then the controller."""
        for node in self.nodes.values():
            if node.state is NodeState.RUNNING:
                await node.stop()
        self.controller.brokers.clear()
        await self.controller.stop()

    # -- the controller's moves, by hand ------------------------------------------------------

    async def create_topic(
        self, topic: str, partitions: int = 1, replication_factor: int = 3
    ) -> list[TopicPartition]:
        """Round-robin assignment as Kafka's default (replica i of partition p on broker
        (p + i) mod N); the first replica leads; LeaderAndIsr to the replicas, then
        UpdateMetadata to all."""
        assert replication_factor <= len(self.broker_ids)
        self._topic_ids += 1
        topic_id = self._topic_ids.to_bytes(16, "big")
        created = []
        for p in range(partitions):
            replicas = [
                self.broker_ids[(p + i) % len(self.broker_ids)] for i in range(replication_factor)
            ]
            tp = TopicPartition(topic, p)
            self.controller.partitions[tp] = PartitionRecord(
                topic_id, replicas, replicas[0], 0, list(replicas)
            )
            created.append(tp)
        await self._send_leader_and_isr(created)
        await self.controller.update_metadata()
        return created

    async def _send_leader_and_isr(self, tps: Iterable[TopicPartition]) -> None:
        wanted = list(tps)
        for broker_id in sorted(self.controller.brokers):
            mine = [tp for tp in wanted if broker_id in self.controller.partitions[tp].replicas]
            if not mine:
                continue
            response = await self.controller.leader_and_isr(broker_id, mine)
            assert response.error is ErrorCode.NONE, response
            for error in response.partition_errors:
                assert error.error_code == ErrorCode.NONE, (broker_id, error)

    def record(self, tp: TopicPartition) -> PartitionRecord:
        return self.controller.partitions[tp]

    def leader_address(self, tp: TopicPartition) -> Address | None:
        return self.controller.brokers.get(self.record(tp).leader)

    async def kill(self, broker_id: int) -> None:
        """The broker's process dies: links cut, every task stopped, no clean-shutdown step."""
        if self.network is not None:
            self.network.kill(self.node_name(broker_id))
        await self.nodes[broker_id].crash()
        del self.controller.brokers[broker_id]
        await self.controller.update_metadata()

    async def elect(self, tp: TopicPartition, new_leader: int | None = None) -> int:
        """A new leader from the live ISR members (the first one, unless named), a new leader
        epoch, dead brokers out of the ISR; LeaderAndIsr to the live replicas, UpdateMetadata."""
        record = self.record(tp)
        live_isr = [b for b in record.isr if b in self.controller.brokers]
        candidates = [b for b in live_isr if b != record.leader]
        leader = new_leader if new_leader is not None else candidates[0]
        assert leader in live_isr, f"{leader} is not a live ISR member of {tp}: {record}"
        self.controller.partitions[tp] = replace(
            record,
            leader=leader,
            leader_epoch=record.leader_epoch + 1,
            isr=live_isr,
            partition_epoch=record.partition_epoch + 1,
        )
        await self._send_leader_and_isr([tp])
        await self.controller.update_metadata()
        return leader

    async def restart(self, broker_id: int) -> BrokerNode:
        """A new node over the dead broker's log dirs; the controller tells it its replicas."""
        assert broker_id not in self.controller.brokers, f"broker {broker_id} is still running"
        node = await self._start_node(broker_id)
        await self.controller.update_metadata()
        tps = [tp for tp, r in self.controller.partitions.items() if broker_id in r.replicas]
        await self._send_leader_and_isr_to(broker_id, tps)
        return node

    async def _send_leader_and_isr_to(self, broker_id: int, tps: list[TopicPartition]) -> None:
        if not tps:
            return
        response = await self.controller.leader_and_isr(broker_id, tps)
        assert response.error is ErrorCode.NONE, response

    # -- driving a ManualClock ----------------------------------------------------------------

    async def run_until(
        self, condition: Callable[[], bool], *, max_ms: int, what: str = "condition"
    ) -> None:
        """Let the loop run and advance the ManualClock 1 ms at a time until `condition()`;
        fails (with the seed) after `max_ms` of simulated time."""
        clock = self.clock
        assert isinstance(clock, ManualClock), "run_until drives a ManualClock"
        for _ in range(max_ms):
            if condition():
                return
            await _let_loop_run()
            if condition():
                return
            clock.advance(1)
        raise AssertionError(f"{what} not reached within {max_ms} ms (seed={self.seed})")

    async def run_for(self, duration_ms: int) -> None:
        """Let the loop run while the ManualClock advances `duration_ms` in 1 ms steps."""
        clock = self.clock
        assert isinstance(clock, ManualClock), "run_for drives a ManualClock"
        for _ in range(duration_ms):
            await _let_loop_run()
            clock.advance(1)
        await _let_loop_run()

    async def drive(self, awaitable: Awaitable[T], *, max_ms: int = 10_000) -> T:
        """Await `awaitable` while advancing the ManualClock (for anything that may wait on
        the clock, e.g. a client's reconnect backoff)."""
        task = asyncio.ensure_future(awaitable)
        try:
            await self.run_until(task.done, max_ms=max_ms, what="operation")
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        return task.result()


async def _let_loop_run(rounds: int = 20) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)
