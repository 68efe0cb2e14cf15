"""An in-process cluster: N `BrokerNode`s and the real controller
(`node.controller.node.ControllerNode`) in one process, on one event loop. The simulation tests
(tests/sim/), the in-process benchmarks (bench/replication.py, `ketch bench latency
--in-process`) and integration tests run it.

Brokers register and heartbeat; topics are created with CreateTopics through a broker (which
forwards it to the controller); a killed broker (links cut, `crash()`) is noticed by the
controller when its session times out, and the controller elects. The harness only starts,
kills and restarts processes' worth of parts and waits for what the cluster does.

Two ways to run it:
* simulated (`Cluster.in_memory`, or the constructor with a `ManualClock`): a seeded
  `MemoryNetwork` or TCP, and a `ManualClock` that `run_until` advances in 1 ms steps while
  letting the loop run; liveness settings made for simulated time (FAST_LIVENESS).
* on the wall clock (`tcp_cluster`): TCP on 127.0.0.1, a `SystemClock`, Kafka's own liveness
  defaults, in a temporary directory; `run_until` then polls every millisecond of real time.

A broker may have several log dirs (`log_dirs_per_broker`, for tests of one failing): the first is
the layout's, the others sit beside it as ``broker-<id>.<n>``, where the tools that read the
layout do not look.

Each node's work runs in a context of its own (`testkit.sim.loop.node_context`, named as the
node is on the network): the controller's and each broker's start (and so every task they
start) runs in a task made in it, so a `SimulatedLoop` can freeze one node as SIGSTOP would. On
any other loop the context is only carried along.

Ownership: everything runs on the caller's event loop. The harness reads the controller's model
and the brokers' published views to decide when a condition holds; it never mutates them.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from actors.controller.messages import ControllerConfig
from actors.views import Role
from client.client import Client
from node.broker.config import KAFKA_LISTENER, BrokerConfig
from node.broker.node import BrokerNode, NodeState
from node.controller.node import ControllerNode
from node.layout import CONTROLLER_NODE, Layout, broker_node, sized_properties
from runtime.clock import Clock, ManualClock, SystemClock
from runtime.net.memory import LinkConfig, MemoryNetwork
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address, Transport
from testkit.sim.loop import node_context
from wire.errors import ErrorCode
from wire.messages import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
    Request,
    Response,
)
from wire.metadata_records import PartitionRecord
from wire.topic import TopicPartition

T = TypeVar("T")

SECRET: Final = b"ketch-sim-cluster-secret-0123456789"
LISTENER: Final = "native"
LOCALHOST: Final = "127.0.0.1"
# Liveness fast enough for simulated time: a dead broker is fenced within ~0.4 s. Too fast for
# the wall clock, where a busy loop would fence brokers that are alive: tcp_cluster leaves it out.
FAST_LIVENESS: Final[dict[str, object]] = {
    "broker.heartbeat.interval.ms": 50,
    "broker.session.timeout.ms": 300,
    "controlled.shutdown.retry.backoff.ms": 50,
}


# -- the cluster ---------------------------------------------------------------------------------


TransportFor = Callable[[str], Transport]
AddressFor = Callable[[str], Address]


class Cluster:
    """N brokers and a controller. `await drive(start())`, drive, `await drive(stop())`.

    `properties` go to every node, over `defaults` (FAST_LIVENESS unless given), over
    node.layout.sized_properties for the cluster's size."""

    def __init__(
        self,
        data_dir: Path,
        broker_ids: Iterable[int],
        *,
        clock: Clock,
        transport_for: TransportFor,
        address_for: AddressFor,
        properties: Mapping[str, object] | None = None,
        defaults: Mapping[str, object] = FAST_LIVENESS,
        network: MemoryNetwork | None = None,
        seed: int = 0,
        log_dirs_per_broker: int = 1,
        kafka_listener: bool = False,
    ) -> None:
        self.data_dir = data_dir
        # Each broker also serves the Kafka protocol, on a free port of its native host.
        self.kafka_listener = kafka_listener
        self.broker_ids = sorted(broker_ids)
        self.clock = clock
        self.network = network
        self.seed = seed
        self.log_dirs_per_broker = log_dirs_per_broker
        self._transport_for = transport_for
        self._address_for = address_for
        # A cluster of one or two brokers lowers the internal topics' replication, as `ketch up`
        # does; `defaults` and `properties` win.
        self.properties = {
            **sized_properties(len(self.broker_ids)),
            **defaults,
            **(properties or {}),
        }
        # `ketch up`'s directory names (node/layout.py), so tools made for that layout (`ketch
        # verify`, the Spark jobs) read this cluster's directories too.
        self.layout = Layout(data_dir)
        self.controller = self._controller_node()
        self.nodes: dict[int, BrokerNode] = {}

    def _controller_node(self) -> ControllerNode:
        return ControllerNode(
            ControllerConfig.from_properties(
                {**self.properties, "auto.leader.rebalance.enable": False}
            ),
            self.layout.controller_dir,
            transport=self._transport_for(CONTROLLER_NODE),
            clock=self.clock,
            cluster_secret=SECRET,
            listen=self._address_for(CONTROLLER_NODE),
        )

    @classmethod
    def in_memory(
        cls,
        data_dir: Path,
        size: int,
        *,
        seed: int,
        properties: Mapping[str, object] | None = None,
        link: LinkConfig | None = None,
        log_dirs_per_broker: int = 1,
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
            log_dirs_per_broker=log_dirs_per_broker,
        )

    @staticmethod
    def node_name(broker_id: int) -> str:
        return broker_node(broker_id)

    def node(self, broker_id: int) -> BrokerNode:
        return self.nodes[broker_id]

    def log_dir(self, broker_id: int) -> Path:
        return self.layout.broker_dir(broker_id)

    def log_dirs(self, broker_id: int) -> list[Path]:
        """The broker's log.dirs: `log_dir`, then the extra ones beside it."""
        first = self.log_dir(broker_id)
        extra = [first.with_name(f"{first.name}.{n}") for n in range(1, self.log_dirs_per_broker)]
        return [first, *extra]

    def running(self, broker_id: int) -> bool:
        node = self.nodes.get(broker_id)
        return node is not None and node.state is NodeState.RUNNING

    @property
    def addresses(self) -> list[Address]:
        """The running brokers' listeners (bootstrap addresses for clients)."""
        return [n.address for b, n in sorted(self.nodes.items()) if self.running(b)]

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """The controller, then each broker in turn, each waited for until it has registered.
        A start that fails stops what it started (a benchmark's cluster must not linger)."""
        await _as_node(CONTROLLER_NODE, self.controller.start)
        try:
            for broker_id in self.broker_ids:
                await self._start_node(broker_id)
        except BaseException:
            await self.stop()
            raise

    async def _start_node(self, broker_id: int) -> BrokerNode:
        name = self.node_name(broker_id)
        properties = {
            **self.properties,
            "broker.id": broker_id,
            "log.dirs": ",".join(str(d) for d in self.log_dirs(broker_id)),
            "listeners": self._listeners(name),
        }

        async def launch() -> BrokerNode:
            node = BrokerNode(
                BrokerConfig.from_properties(properties),
                transport=self._transport_for(name),
                clock=self.clock,
                cluster_secret=SECRET,
                controller=self.controller.address,
            )
            await node.start()
            return node

        node = await _as_node(name, launch)
        self.nodes[broker_id] = node
        await self.run_until(
            lambda: self._registered(broker_id),
            max_ms=10_000,
            what=f"broker {broker_id} registered",
        )
        return node

    def _listeners(self, name: str) -> str:
        native = self._address_for(name)
        if not self.kafka_listener:
            return f"{LISTENER}://{native}"
        return f"{LISTENER}://{native},{KAFKA_LISTENER}://{Address(native.host, 0)}"

    def _registered(self, broker_id: int) -> bool:
        node = self.nodes[broker_id]
        broker = self.controller.actor.model.broker(broker_id)
        return (
            broker is not None
            and not broker.fenced
            and node.broker_epoch == broker.broker_epoch
            # The controller's UpdateMetadata (sent on registration) has reached it.
            and node.replica_manager.metadata.is_broker_alive(broker_id)
        )

    async def stop(self) -> None:
        """Clean shutdown (controlled shutdown first) of every live broker, then the
        controller."""
        for broker_id in sorted(self.nodes):
            if self.running(broker_id):
                await self.nodes[broker_id].stop()
        await self.controller.stop()

    async def restart_controller(self) -> None:
        """A new controller process over the same metadata log (the old one stops first)."""
        await self.controller.stop()
        self.controller = self._controller_node()
        await _as_node(CONTROLLER_NODE, self.controller.start)

    # -- topics ------------------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        partitions: int = 1,
        replication_factor: int = 3,
        *,
        configs: Mapping[str, str] | None = None,
    ) -> list[TopicPartition]:
        """CreateTopics through the first running broker, with Kafka's round-robin assignment
        spelled out (replica i of partition p on broker (p + i) mod N, so tests know who leads);
        returns once every replica serves its role and every running broker knows the leader."""
        assert replication_factor <= len(self.broker_ids)
        assignments = [
            CreatableReplicaAssignment(
                partition_index=p,
                broker_ids=[
                    self.broker_ids[(p + i) % len(self.broker_ids)]
                    for i in range(replication_factor)
                ],
            )
            for p in range(partitions)
        ]
        request = CreateTopicsRequest(
            topics=[
                CreatableTopic(
                    name=topic,
                    num_partitions=-1,
                    replication_factor=-1,
                    assignments=assignments,
                    configs=[
                        CreatableTopicConfig(name=k, value=v)
                        for k, v in sorted((configs or {}).items())
                    ],
                )
            ]
        )
        response = await self.admin(request)
        assert isinstance(response, CreateTopicsResponse), response
        (result,) = response.topics
        assert result.error_code == ErrorCode.NONE, result
        created = [TopicPartition(topic, p) for p in range(partitions)]
        await self.run_until(
            lambda: all(self.serving(tp) for tp in created),
            max_ms=10_000,
            what=f"topic {topic} served",
        )
        return created

    async def admin(self, request: Request) -> Response:
        """A client's admin request, sent to a running broker (not the controller)."""
        client = Client(self.addresses, transport=self._transport_for("admin"), clock=self.clock)
        try:
            return await client.send(self.addresses[0], request)
        finally:
            await client.close()

    def record(self, tp: TopicPartition) -> PartitionRecord:
        """The controller's committed state of the partition."""
        record = self.controller.actor.model.partition_by_name(tp)
        assert record is not None, tp
        return record

    def serving(self, tp: TopicPartition) -> bool:
        """The controller's leader leads, its running replicas host the partition with its
        leader epoch, and every running broker's metadata names that leader."""
        record = self.controller.actor.model.partition_by_name(tp)
        if record is None or record.leader < 0 or not self.running(record.leader):
            return False
        for broker_id in record.replicas:
            if not self.running(broker_id):
                continue
            actor = self.nodes[broker_id].replica_manager.partition(tp)
            if actor is None or actor.view.leader_epoch != record.leader_epoch:
                return False
            wanted = Role.LEADER if broker_id == record.leader else Role.FOLLOWER
            if actor.view.role is not wanted:
                return False
        for broker_id in self.nodes:
            if self.running(broker_id):
                known = self.nodes[broker_id].replica_manager.metadata.partition_state(tp)
                if known is None or known.leader != record.leader:
                    return False
        return True

    def leader(self, tp: TopicPartition) -> BrokerNode:
        """The running node the controller names as the partition's leader."""
        leader = self.record(tp).leader
        assert self.running(leader), (tp, leader)
        return self.nodes[leader]

    def leader_address(self, tp: TopicPartition) -> Address | None:
        record = self.controller.actor.model.partition_by_name(tp)
        if record is None or not self.running(record.leader):
            return None
        return self.nodes[record.leader].address

    # -- failures ----------------------------------------------------------------------------

    async def kill(self, broker_id: int) -> None:
        """The broker's process dies: links cut, every task stopped, no clean-shutdown step.
        The controller learns it only when the broker's session times out."""
        if self.network is not None:
            self.network.kill(self.node_name(broker_id))
        await self.nodes[broker_id].crash()

    async def new_leader(self, tp: TopicPartition, old: int, *, max_ms: int = 5_000) -> int:
        """Wait for the controller to elect another leader and for the cluster to serve it."""
        await self.run_until(
            lambda: self.record(tp).leader not in (old, -1) and self.serving(tp),
            max_ms=max_ms,
            what=f"a new leader for {tp}",
        )
        return self.record(tp).leader

    async def restart(self, broker_id: int) -> BrokerNode:
        """A new node (a new process) over the dead broker's log dirs; it registers, and the
        controller tells it its replicas."""
        assert not self.running(broker_id), f"broker {broker_id} is still running"
        return await self._start_node(broker_id)

    # -- driving the clock --------------------------------------------------------------------

    async def run_until(
        self, condition: Callable[[], bool], *, max_ms: int, what: str = "condition"
    ) -> None:
        """Let the loop run and the clock advance 1 ms at a time until `condition()`; fails
        (with the seed) after `max_ms` steps: `max_ms` of simulated time on a ManualClock, at
        least that much real time on the wall clock."""
        for _ in range(max_ms):
            if condition():
                return
            await self._let_loop_run()
            if condition():
                return
            await self._one_ms()
        raise AssertionError(f"{what} not reached within {max_ms} ms (seed={self.seed})")

    async def run_for(self, duration_ms: int) -> None:
        """Let the loop run while the clock advances `duration_ms` in 1 ms steps."""
        for _ in range(duration_ms):
            await self._let_loop_run()
            await self._one_ms()
        await self._let_loop_run()

    async def drive(self, awaitable: Awaitable[T], *, max_ms: int = 10_000) -> T:
        """Await `awaitable` while advancing the clock (for anything that may wait on the
        clock, e.g. a client's reconnect backoff)."""
        task = asyncio.ensure_future(awaitable)
        try:
            await self.run_until(task.done, max_ms=max_ms, what="operation")
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        return task.result()

    async def _let_loop_run(self) -> None:
        # A ManualClock only moves when told: the tasks it woke need loop turns first. On a
        # clock that moves by itself (the wall clock, or the simulation's virtual time, which
        # jumps only once nothing is ready) the 1 ms wait alone lets them run.
        if isinstance(self.clock, ManualClock):
            await _let_loop_run()

    async def _one_ms(self) -> None:
        # A ManualClock moves only when told; the wall clock moves by itself while we sleep.
        if isinstance(self.clock, ManualClock):
            self.clock.advance(1)
        else:
            await asyncio.sleep(0.001)


@contextlib.asynccontextmanager
async def tcp_cluster(
    size: int,
    *,
    properties: Mapping[str, object] | None = None,
    transport: Transport | None = None,
    clock: Clock | None = None,
) -> AsyncIterator[Cluster]:
    """`async with tcp_cluster(3) as cluster:` brokers 0..size-1 started on the wall clock,
    over TCP on ephemeral 127.0.0.1 ports, each with its own log dir in a temporary directory;
    on the way out every node stops cleanly and the directory goes (even when a stop fails)."""
    shared = transport or TcpTransport()
    with tempfile.TemporaryDirectory(prefix="ketch-cluster-") as tmp:
        cluster = Cluster(
            Path(tmp),
            range(size),
            clock=clock or SystemClock(),
            transport_for=lambda _name: shared,
            address_for=lambda _name: Address(LOCALHOST, 0),
            properties=properties,
            defaults={},
        )
        await cluster.start()
        try:
            yield cluster
        finally:
            await cluster.stop()


async def _as_node(name: str, start: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """`await start()` as node `name`'s work (module docstring): in a task of the node's own
    context, so every task it starts is the node's too."""
    return await asyncio.get_running_loop().create_task(start(), context=node_context(name))


async def _let_loop_run(rounds: int = 20) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)
