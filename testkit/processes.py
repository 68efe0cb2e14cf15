"""A cluster of real processes on 127.0.0.1: a controller and N brokers, each `python -m cli.main
controller|broker` (the command line contract of DESIGN.md), in `ketch up`'s layout and with
`ketch up`'s command lines (node/layout.py), plus one TOML config file every node reads.

    async with running_cluster(root, {"min.insync.replicas": 2}, kafka=True) as cluster:
        await cluster.broker(0).kill()                  # SIGKILL by PID: a crash
        await cluster.broker(0).start()                 # the same ports, the same log dir
        await cluster.wait_running([0], timeout_s=30)
        codes = await cluster.stop()                    # SIGTERM: controlled shutdowns

What `ketch up` adds (restart with backoff, the control socket, cluster.json) is its own: a
harness restarts a node when the test says so, never by itself. The benchmarks
(bench/failover.py, bench/latency_cluster.py, bench/chaos.py), the process tests and the testing
API (testkit/testing.py) run this harness.

With `proxied=True` every node sits behind testkit/proxy.py's fault-injecting proxies: each
listener binds a port of its own and advertises its proxy's (`advertised.listeners`), brokers
reach the controller through its proxy, and each node binds its outgoing connections to its own
loopback address (`connections.source.host`), so every byte between nodes, and between clients
and nodes, passes a proxy that knows the link it is on. `addresses`, `kafka_addresses` and
`controller_address` are then the proxies' (what the nodes' clients use); `cluster.network`
cuts, blackholes, delays and heals links. A node can also be paused (SIGSTOP) and resumed.

Ownership: the harness runs on its caller's one event loop; the children are separate
processes, reached only over TCP and signals, and signalled only by their recorded PIDs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from client.client import Client
from client.config import ClientConfig
from node.broker.config import (
    ADVERTISED_LISTENERS_KEY,
    KAFKA_LISTENER,
    NATIVE_LISTENER,
    format_listeners,
)
from node.layout import CONTROLLER_NODE, Layout, NodeSpec, broker_node, sized_properties
from runtime.clock import SystemClock
from runtime.config import Value
from runtime.net.tcp import SOURCE_HOST_KEY, TcpTransport
from runtime.net.transport import Address
from testkit.probes import broker_states, wait_until
from testkit.proxy import CONTROLLER, FaultyNetwork, Node, source_host

LOCALHOST: Final = "127.0.0.1"
# The directory holding the packages: the children run there, so `-m cli.main` finds this
# checkout's code even where ketch is not installed.
REPO: Final = Path(__file__).resolve().parents[1]
CONFIG_FILE_NAME: Final = "ketch.toml"
STOP_TIMEOUT_S: Final = 30.0
READY_TIMEOUT_S: Final = 30.0
_LOG_TAIL_CHARS: Final = 6_000
POLL_CLIENT_CONFIG: Final = ClientConfig(
    request_timeout_ms=1_000, reconnect_backoff_ms=5, reconnect_backoff_max_ms=50
)


def free_port() -> int:
    """A port nothing listens on now. (Another process could take it before the child binds it;
    on a test machine's loopback that race is rare, and a child that loses it exits 1.)"""
    [port] = free_ports(1)
    return port


def free_ports(count: int) -> list[int]:
    """`count` distinct ports nothing listens on now: every probe stays bound until all are
    chosen, so the kernel cannot hand the same port out twice (the race with other processes
    is free_port's)."""
    with contextlib.ExitStack() as probes:
        ports = []
        for _ in range(count):
            probe = probes.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            probe.bind((LOCALHOST, 0))
            ports.append(int(probe.getsockname()[1]))
        return ports


def toml_text(properties: Mapping[str, Value]) -> str:
    # A JSON string, integer or boolean is the same TOML value; keys are quoted (DESIGN.md).
    return "".join(f"{json.dumps(k)} = {json.dumps(v)}\n" for k, v in sorted(properties.items()))


@dataclass
class Child:
    """One node process; its stderr and stdout are appended to its log file across restarts."""

    spec: NodeSpec
    process: asyncio.subprocess.Process | None = None
    paused: bool = False  # stopped by SIGSTOP and not yet continued

    @property
    def name(self) -> str:
        return self.spec.node

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def exited(self) -> bool:
        """It was started and is gone (whatever the reason)."""
        return self.process is not None and self.process.returncode is not None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    async def start(self) -> None:
        assert not self.running, f"{self.name} is already running"
        self.paused = False
        with self.spec.log_file.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                *self.spec.argv,
                cwd=REPO,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )

    async def kill(self) -> None:
        """SIGKILL by PID (a crash: no controlled shutdown, no clean-shutdown marker)."""
        if self.process is None:
            return
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)  # a stopped process dies too
        await self.process.wait()
        self.paused = False

    def pause(self) -> None:
        """SIGSTOP by PID: the process stops where it is, its sockets stay open (a long GC
        pause, a frozen VM), so peers see only silence."""
        assert self.process is not None, f"{self.name} never started"
        assert self.running, f"{self.name} is not running"
        os.kill(self.process.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT by PID, for a paused process (a no-op otherwise)."""
        if self.paused and self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGCONT)
        self.paused = False

    async def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM (the clean stop), then the exit code; SIGKILL if it takes over timeout_s."""
        assert self.process is not None, f"{self.name} never started"
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            self.resume()  # a stopped process handles SIGTERM only once continued
        try:
            return await asyncio.wait_for(self.process.wait(), timeout_s)
        except TimeoutError:
            await self.kill()
            raise

    def kill_now(self) -> None:
        """The synchronous last resort for a `finally` whose loop may be gone."""
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)


@dataclass
class ProcessCluster:
    """A controller and `brokers` brokers as child processes, in `ketch up`'s layout under root
    (node/layout.py: cluster.secret, controller/, broker-<id>/, logs/<node>.log), plus
    ketch.toml (every node's config file: `properties` over `sized_properties(brokers)`).

    Every node gets free ports on 127.0.0.1, chosen once: a restarted broker binds the same
    ones. With `kafka`, each broker also serves the Kafka wire protocol (`--kafka-listen`) at
    `kafka_addresses[id]`; `kafka_bootstrap()` is the bootstrap list a Kafka client takes.
    With `proxied`, those addresses are the proxies' (module docstring) and `network` is set
    once the cluster is started."""

    root: Path
    brokers: int = 3
    properties: Mapping[str, Value] = field(default_factory=dict)
    kafka: bool = False
    proxied: bool = False
    children: dict[str, Child] = field(init=False, default_factory=dict)
    addresses: dict[int, Address] = field(init=False, default_factory=dict)
    kafka_addresses: dict[int, Address] = field(init=False, default_factory=dict)
    controller_address: Address = field(init=False)
    layout: Layout = field(init=False)
    network: FaultyNetwork | None = field(init=False, default=None)
    # With proxies: each proxy's address -> (its node, the address the node really binds).
    _routes: dict[Address, tuple[Node, Address]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.layout = Layout(self.root)
        self.layout.prepare(range(self.brokers))
        config = self.root / CONFIG_FILE_NAME
        # A cluster of one or two brokers lowers the internal topics' replication, as `ketch up`
        # does (node/layout.py); what `properties` sets wins.
        config.write_text(toml_text({**sized_properties(self.brokers), **self.properties}))
        per_broker = 2 if self.kafka else 1
        listeners = 1 + per_broker * self.brokers
        ports = iter(free_ports(listeners * (2 if self.proxied else 1)))

        def listener(node: Node) -> tuple[Address, Address]:
            """(what the node's clients dial, what the node binds): the same without proxies."""
            bound = Address(LOCALHOST, next(ports))
            if not self.proxied:
                return bound, bound
            front = Address(LOCALHOST, next(ports))
            self._routes[front] = (node, bound)
            return front, bound

        self.controller_address, controller_bound = listener(CONTROLLER)
        controller = self.layout.controller_spec(
            controller_bound, config=config, flags=self._proxy_flags(CONTROLLER, {})
        )
        self.children[CONTROLLER_NODE] = Child(controller)
        for broker_id in range(self.brokers):
            self.addresses[broker_id], bound = listener(broker_id)
            advertised = {NATIVE_LISTENER: self.addresses[broker_id]}
            kafka_bound = None
            if self.kafka:
                self.kafka_addresses[broker_id], kafka_bound = listener(broker_id)
                advertised[KAFKA_LISTENER] = self.kafka_addresses[broker_id]
            spec = self.layout.broker_spec(
                broker_id,
                bound,
                self.controller_address,
                config=config,
                kafka_address=kafka_bound,
                flags=self._proxy_flags(broker_id, advertised),
            )
            self.children[spec.node] = Child(spec)

    def _proxy_flags(self, node: Node, advertised: Mapping[str, Address]) -> dict[str, Value]:
        """Behind proxies: the node's own source address, and its listeners advertised at
        their proxies."""
        if not self.proxied:
            return {}
        flags: dict[str, Value] = {SOURCE_HOST_KEY: source_host(node)}
        if advertised:
            flags[ADVERTISED_LISTENERS_KEY] = format_listeners(advertised)
        return flags

    def kafka_bootstrap(self, broker_ids: Sequence[int] | None = None) -> str:
        """`host:port,...` of the brokers' Kafka listeners (all by default), the form Kafka
        clients take as bootstrap servers."""
        assert self.kafka, "the cluster was built without Kafka listeners (kafka=True)"
        ids = sorted(self.kafka_addresses) if broker_ids is None else list(broker_ids)
        return ",".join(str(self.kafka_addresses[b]) for b in ids)

    def broker_dir(self, broker_id: int) -> Path:
        return self.layout.broker_dir(broker_id)

    def log_path(self, node: str) -> Path:
        return self.layout.log_file(node)

    def broker(self, broker_id: int) -> Child:
        return self.children[broker_node(broker_id)]

    def node(self, node: Node) -> Child:
        """A broker by id, or the controller (CONTROLLER)."""
        return self.controller if node == CONTROLLER else self.broker(int(node))

    @property
    def controller(self) -> Child:
        return self.children[CONTROLLER_NODE]

    def logs(self) -> str:
        """Every node's log (its tail), for a failure message."""
        parts = []
        for name in self.children:
            path = self.log_path(name)
            text = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"===== {name} =====\n{text[-_LOG_TAIL_CHARS:]}")
        return "\n".join(parts)

    def client(
        self, broker_ids: Sequence[int] | None = None, *, credential: bool = False
    ) -> Client:
        """A client of the brokers' native listeners; with `credential` it proves the cluster
        secret (a cluster member: past ACLs and a SASL native listener, as an admin tool)."""
        ids = list(self.addresses) if broker_ids is None else list(broker_ids)
        return Client(
            [self.addresses[b] for b in ids],
            transport=TcpTransport(),
            clock=SystemClock(),
            config=POLL_CLIENT_CONFIG,
            client_id="process-cluster",
            credential=self.layout.secret_file.read_bytes().strip() if credential else None,
        )

    def start_network(self) -> None:
        """The proxies (with `proxied`), before any node needs them; idempotent."""
        if not self.proxied or self.network is not None:
            return
        network = FaultyNetwork()
        network.start()
        self.network = network
        for front, (node, bound) in self._routes.items():
            network.add_route(node, bound, front)

    def close_network(self) -> None:
        if self.network is not None:
            self.network.close()

    async def start(self, *, timeout_s: float = READY_TIMEOUT_S) -> None:
        self.start_network()
        await self.controller.start()
        for broker_id in range(self.brokers):
            await self.broker(broker_id).start()
        await self.wait_running(range(self.brokers), timeout_s=timeout_s)

    async def wait_running(self, broker_ids: Sequence[int] | range, *, timeout_s: float) -> None:
        """Until the controller reports every broker in `broker_ids` registered and running.
        Fails at once, with the logs, when the controller or one of those brokers exits."""
        wanted = set(broker_ids)
        expected = [self.controller, *(self.broker(b) for b in sorted(wanted))]
        # As an admin tool: ACLs or SASL on the native listener refuse an anonymous poll.
        client = self.client(credential=True)
        try:

            async def registered() -> bool:
                for child in expected:
                    if child.exited:
                        assert child.process is not None
                        raise RuntimeError(
                            f"{child.name} exited with {child.process.returncode} while the "
                            f"cluster was starting:\n{self.logs()}"
                        )
                states = await broker_states(client, self.addresses.values())
                return all(states.get(b) == "running" for b in wanted)

            what = f"brokers {sorted(wanted)} running"
            try:
                await wait_until(registered, what, timeout_s=timeout_s)
            except TimeoutError as exc:
                raise TimeoutError(f"{exc}; the nodes' logs:\n{self.logs()}") from None
        finally:
            await client.close()

    async def stop(self) -> dict[str, int]:
        """Clean stop: the brokers together (each one's controlled shutdown moves what it can),
        then the controller. The exit codes by node."""
        brokers = [c for c in self.children.values() if c is not self.controller and c.running]
        codes = await asyncio.gather(*(c.terminate() for c in brokers))
        result = {c.name: code for c, code in zip(brokers, codes, strict=True)}
        if self.controller.running:
            result[CONTROLLER_NODE] = await self.controller.terminate()
        return result

    async def kill_all(self) -> None:
        for child in self.children.values():
            await child.kill()

    def kill_all_now(self) -> None:
        for child in self.children.values():
            child.kill_now()


@contextlib.asynccontextmanager
async def running_cluster(
    root: Path,
    properties: Mapping[str, Value],
    *,
    brokers: int = 3,
    kafka: bool = False,
    proxied: bool = False,
) -> AsyncIterator[ProcessCluster]:
    """A started ProcessCluster (with Kafka listeners when `kafka`, behind proxies when
    `proxied`); every child is killed by PID on the way out whatever happens (a caller stops it
    cleanly first when it wants the clean-stop state), then the proxies are closed."""
    cluster = ProcessCluster(root, brokers, properties, kafka=kafka, proxied=proxied)
    try:
        await cluster.start()
        yield cluster
    finally:
        try:
            await cluster.kill_all()
        finally:
            cluster.kill_all_now()
            cluster.close_network()
