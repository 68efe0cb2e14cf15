"""Support for the cluster tests (no tests here): N `BrokerNode`s in one process and a tiny
controller stand-in that the test drives by hand.

The controller stand-in plays just enough of issue 6's controller for replication tests:

* it keeps each partition's (leader, leader epoch, ISR, partition epoch, replicas) and the live
  brokers' addresses;
* its `Server` answers AlterPartition the way Kafka's controller validates it (the sender must be
  the leader, the leader epoch and the partition epoch must match, the new ISR must be a subset
  of the replicas), bumps the partition epoch, records the ISR, answers, and then sends
  UpdateMetadata to every live broker;
* its `Client` holds the cluster credential and sends LeaderAndIsr / UpdateMetadata.

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final, TypeVar

from runtime.broker_config import BrokerConfig
from runtime.clock import Clock, ManualClock
from runtime.log.partition_dir import TopicPartition
from runtime.net.client import Client
from runtime.net.client_config import ClientConfig
from runtime.net.memory import LinkConfig, MemoryNetwork
from runtime.net.server import RequestContext, Server
from runtime.net.transport import Address, Transport
from runtime.node import BrokerNode, NodeState
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

T = TypeVar("T")

SECRET: Final = b"ketch-sim-cluster-secret-0123456789"
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
    brokers: dict[int, Address] = field(default_factory=dict)  # live brokers
    partitions: dict[TopicPartition, PartitionRecord] = field(default_factory=dict)
    isr_changes: list[tuple[TopicPartition, list[int]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.server = Server(
            self.transport,
            self.address,
            {ApiKey.ALTER_PARTITION: self._alter_partition},
            clock=self.clock,
            cluster_secret=SECRET,
        )
        self.client = Client(
            [self.address],
            transport=self.transport,
            clock=self.clock,
            client_id="controller",
            config=ClientConfig(request_timeout_ms=5_000, reconnect_backoff_ms=10),
            credential=SECRET,
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
            transport_for("controller"), address_for("controller"), clock
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
