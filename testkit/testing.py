"""Testing an application against ketch failures: a real multi-process cluster behind
fault-injecting proxies, and the faults to throw at it.

    async with ketch_cluster(brokers=3, kafka=True) as cluster:
        await cluster.create_topic("orders", partitions=3, replication_factor=3,
                                   configs={"min.insync.replicas": "2"})
        producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap})
        ...
        leader = await cluster.leader_of("orders", 0)
        await cluster.kill(leader)                    # kill -9
        ...                                           # the application carries on
        await cluster.restart(leader)
        await cluster.wait_for_isr("orders")
        cluster.partition(leader, "controller")       # both ways; one_way=True for a -> b
        cluster.heal()

pytest users get the same cluster as the `ketch_cluster` fixture (testkit/pytest_plugin.py).

The cluster is testkit/processes.py's ProcessCluster with `proxied=True`: a controller and N
brokers as `ketch controller|broker` processes on 127.0.0.1, each listener (native, and Kafka's
with `kafka`) behind testkit/proxy.py's proxy, which is what clients and the other nodes reach.
Nodes are named as the proxy names them: a broker id, "controller", or "client" (the test and
its Kafka clients).

    kill(node)                 SIGKILL by PID: a crash (no controlled shutdown)
    restart(node)              start it again (killing it first if it runs), wait until it is
                               registered and running
    controlled_shutdown(b)     SIGTERM; waits for exit code 0 (leadership moves away first)
    pause(node, s) / paused()  SIGSTOP, then SIGCONT after s seconds / on leaving the block
    partition(a, b)            cut the links a -> b and b -> a (one_way: a -> b only; see
                               testkit/proxy.py for what a one-way cut does to each side)
    isolate(node)              partition it from every other node and from the clients
    heal()                     every link back, held bytes delivered
    wait_for_isr(topic)        until every partition has a leader and a full ISR (or `size`)
    leader_of(topic, p)        the leader the cluster's metadata names now (`other_than`:
                               wait until the leadership moves)

The default properties (FAILOVER_PROPERTIES) shorten Kafka's timeouts so that a killed or cut
broker is noticed in about a second; `properties` adds to or overrides them. Linux only: the
proxies tell nodes apart by their loopback source addresses (testkit/proxy.py).

Ownership: the cluster runs on the caller's event loop (processes, probes) and the proxies on
their own thread, so a test may block its loop in a synchronous Kafka client call without
stalling the cluster's network. Every wait is bounded; every process is signalled by its PID and
killed on the way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from client.client import Client
from runtime.config import Value
from runtime.net.transport import Address
from testkit.probes import create_topic, partitions_of, wait_until
from testkit.processes import READY_TIMEOUT_S, Child, ProcessCluster, running_cluster
from testkit.proxy import CLIENT, CONTROLLER, FaultyNetwork, Node
from wire.messages import MetadataResponsePartition

__all__ = [
    "CLIENT",
    "CONTROLLER",
    "FAILOVER_PROPERTIES",
    "KetchCluster",
    "Node",
    "ketch_cluster",
]

# Kafka's timeouts scaled down for tests: a session of 1 s (Kafka: 9 s) notices a dead broker in
# about a second; the inter-broker client gives up on a silent peer in 2 s; retries and
# reconnects back off for at most 100 ms; a group starts without Kafka's 3 s wait for members.
FAILOVER_PROPERTIES: Final[Mapping[str, Value]] = {
    "broker.session.timeout.ms": 1_000,
    "broker.heartbeat.interval.ms": 200,
    "replica.lag.time.max.ms": 2_000,
    "request.timeout.ms": 2_000,
    "replica.fetch.wait.max.ms": 100,
    "replica.fetch.backoff.ms": 50,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 100,
    "retry.backoff.ms": 20,
    "retry.backoff.max.ms": 100,
    "controlled.shutdown.retry.backoff.ms": 50,
    "controlled.shutdown.max.retries": 2,
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
}
WAIT_TIMEOUT_S: Final = 30.0


@dataclass
class KetchCluster:
    """A running cluster and its faults (module docstring). Built by `ketch_cluster`."""

    processes: ProcessCluster
    _probe: Client = field(init=False)

    def __post_init__(self) -> None:
        assert self.processes.proxied, "the fault API needs the proxies"
        self._probe = self.processes.client()

    # -- where it is -----------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """The Kafka listeners' `host:port,...` (their proxies), for `bootstrap.servers`."""
        return self.processes.kafka_bootstrap()

    @property
    def addresses(self) -> dict[int, Address]:
        """Broker id -> its native listener (its proxy), for ketch's own client."""
        return dict(self.processes.addresses)

    @property
    def brokers(self) -> list[int]:
        return sorted(self.processes.addresses)

    @property
    def network(self) -> FaultyNetwork:
        """The proxies, for finer faults than partitions (blackhole, delay)."""
        assert self.processes.network is not None, "the cluster is not started"
        return self.processes.network

    @property
    def root(self) -> Path:
        """The cluster's directory: node data in broker-<id>/, logs in logs/<node>.log."""
        return self.processes.root

    def client(self) -> Client:
        """A ketch (native protocol) client through the proxies; the caller closes it."""
        return self.processes.client()

    def logs(self) -> str:
        """Every node's log tail, for a failure message."""
        return self.processes.logs()

    def pid(self, node: Node) -> int | None:
        return self.processes.node(node).pid

    # -- topics ----------------------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        *,
        partitions: int = 1,
        replication_factor: int | None = None,
        configs: Mapping[str, str] | None = None,
        wait: bool = True,
    ) -> None:
        """CreateTopics (replication factor: every broker, at most 3), then, with `wait`,
        wait_for_isr."""
        factor = replication_factor or min(3, len(self.brokers))
        await create_topic(
            self._probe,
            self._addresses(),
            topic,
            partitions=partitions,
            replication_factor=factor,
            configs=configs or {},
        )
        if wait:
            await self.wait_for_isr(topic)

    async def partitions(self, topic: str) -> dict[int, MetadataResponsePartition]:
        """The topic's partitions, each as the broker with the freshest view reports it (the
        highest leader epoch, then the largest ISR), asking every broker at once: a broker cut
        off from the controller, or just restarted, keeps answering from stale metadata."""
        views = await asyncio.gather(
            *(partitions_of(self._probe, [address], topic) for address in self._addresses())
        )
        freshest: dict[int, MetadataResponsePartition] = {}
        for view in views:
            for index, info in view.items():
                best = freshest.get(index)
                if best is None or (info.leader_epoch, len(info.isr_nodes)) > (
                    best.leader_epoch,
                    len(best.isr_nodes),
                ):
                    freshest[index] = info
        return freshest

    async def wait_for_isr(
        self, topic: str, size: int | None = None, *, timeout_s: float = WAIT_TIMEOUT_S
    ) -> dict[int, MetadataResponsePartition]:
        """Until every partition of `topic` has a leader and an ISR of `size` replicas (default:
        all its replicas), in the freshest metadata any broker reports (`partitions`); the
        partitions then."""
        found: dict[int, MetadataResponsePartition] = {}

        async def full() -> bool:
            nonlocal found
            found = await self.partitions(topic)
            return bool(found) and all(
                p.leader_id >= 0
                and len(p.isr_nodes) >= (len(p.replica_nodes) if size is None else size)
                for p in found.values()
            )

        what = f"{topic}: every partition led, with {size or 'all its'} replicas in the ISR"
        await self._wait(full, what, timeout_s)
        return found

    async def leader_of(
        self,
        topic: str,
        partition: int = 0,
        *,
        other_than: int | None = None,
        timeout_s: float = WAIT_TIMEOUT_S,
    ) -> int:
        """The partition's leader as the freshest metadata names it now (`partitions`), waiting
        while there is none (or while it is `other_than`: for a leadership to move). Right after
        a kill it may still name the dead broker, until the controller notices
        (broker.session.timeout.ms)."""
        leader = -1

        async def led() -> bool:
            nonlocal leader
            info = (await self.partitions(topic)).get(partition)
            leader = -1 if info is None else info.leader_id
            return leader >= 0 and leader != other_than

        what = f"{topic}-{partition} led" + ("" if other_than is None else f" by not {other_than}")
        await self._wait(led, what, timeout_s)
        return leader

    # -- processes -------------------------------------------------------------------------------

    async def kill(self, node: Node) -> None:
        """SIGKILL by PID (a crash): no controlled shutdown, no clean-shutdown marker."""
        await self._child(node).kill()

    async def restart(self, node: Node, *, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Start the node again (after kill or controlled_shutdown; a running node is killed
        first), then wait until every broker that runs is registered and running."""
        child = self._child(node)
        if child.running:
            await child.kill()
        await child.start()
        await self.wait_running(timeout_s=timeout_s)

    async def controlled_shutdown(self, broker: int, *, timeout_s: float = 30.0) -> None:
        """SIGTERM: the broker moves its leaderships away, shuts down cleanly and exits 0."""
        code = await self._child(broker).terminate(timeout_s)
        if code != 0:
            raise RuntimeError(f"broker {broker} exited with {code}:\n{self.logs()}")

    async def pause(self, node: Node, seconds: float) -> None:
        """SIGSTOP, then SIGCONT after `seconds`: past broker.session.timeout.ms the controller
        fences a paused broker; past replica.lag.time.max.ms it leaves the ISRs."""
        async with self.paused(node):
            await asyncio.sleep(seconds)

    @contextlib.asynccontextmanager
    async def paused(self, node: Node) -> AsyncIterator[None]:
        """SIGSTOP on entry, SIGCONT on the way out."""
        child = self._child(node)
        child.pause()
        try:
            yield
        finally:
            child.resume()

    async def wait_running(
        self, brokers: list[int] | None = None, *, timeout_s: float = READY_TIMEOUT_S
    ) -> None:
        """Until the controller reports the brokers (default: every one whose process runs)
        registered and running."""
        ids = brokers or [b for b in self.brokers if self.processes.broker(b).running]
        await self.processes.wait_running(ids, timeout_s=timeout_s)

    async def stop(self) -> dict[str, int]:
        """The clean stop (the brokers' controlled shutdowns, then the controller): the exit
        codes by node name. Heals the network first, so the shutdowns can reach the
        controller."""
        self.heal()
        for child in self.processes.children.values():
            child.resume()
        return await self.processes.stop()

    # -- the network -----------------------------------------------------------------------------

    def partition(self, a: Node, b: Node, *, one_way: bool = False) -> None:
        """Cut a -> b, and b -> a unless `one_way`."""
        self.network.cut(a, b)
        if not one_way:
            self.network.cut(b, a)

    def isolate(self, node: Node) -> None:
        """Partition `node` from every other node and from the clients."""
        for other in self._nodes():
            if other != node:
                self.partition(node, other)

    def heal(self) -> None:
        """Every link back, without faults or delays."""
        self.network.heal()

    # -- helpers ---------------------------------------------------------------------------------

    def _nodes(self) -> list[Node]:
        return [CONTROLLER, *self.brokers, CLIENT]

    def _child(self, node: Node) -> Child:
        assert node == CONTROLLER or node in self.brokers, f"no such node: {node!r}"
        return self.processes.node(node)

    def _addresses(self) -> list[Address]:
        return list(self.processes.addresses.values())

    async def _wait(
        self, condition: Callable[[], Awaitable[bool]], what: str, timeout_s: float
    ) -> None:
        try:
            await wait_until(condition, what, timeout_s=timeout_s)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; the nodes' logs:\n{self.logs()}") from None

    async def close(self) -> None:
        await self._probe.close()


@contextlib.asynccontextmanager
async def ketch_cluster(
    brokers: int = 3,
    *,
    kafka: bool = True,
    properties: Mapping[str, Value] | None = None,
    root: Path | None = None,
) -> AsyncIterator[KetchCluster]:
    """A started cluster of `brokers` brokers and a controller behind the proxies (with Kafka
    listeners when `kafka`), in `root` (default: a temporary directory, removed afterwards);
    every process is killed and the proxies closed on the way out."""
    merged = {**FAILOVER_PROPERTIES, **(properties or {})}
    with contextlib.ExitStack() as stack:
        if root is None:
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ketch-cluster-")))
        async with running_cluster(
            root, merged, brokers=brokers, kafka=kafka, proxied=True
        ) as processes:
            cluster = KetchCluster(processes)
            try:
                yield cluster
            finally:
                await cluster.close()
