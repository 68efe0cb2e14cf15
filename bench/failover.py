"""Failover time: from `kill -9` of a partition leader's process to the first acks=all produce
acknowledged by its successor, in real processes on 127.0.0.1.

    python -m bench.failover [--runs 5] [--json F] [--session-timeout-ms 2000]
                             [--heartbeat-interval-ms 500]

The cluster is a controller and three brokers, each `python -m cli.main controller|broker`
(the command line contract of DESIGN.md) with one TOML config file, and a topic with one
partition, replication factor 3 and min.insync.replicas=2. Each run kills the partition's current
leader with SIGKILL and watches, from the benchmark process, through the surviving brokers only:

    detection         kill -> DescribeCluster (forwarded to the controller) reports the killed
                      broker "fenced": the controller noticed the missing heartbeats. Bounded
                      below by broker.session.timeout.ms minus the time since the last heartbeat,
                      and above by the session timeout plus one session check interval.
    election          fenced -> Metadata from a surviving broker names a new leader: the
                      election in the controller, the metadata log commit, and LeaderAndIsr /
                      UpdateMetadata reaching that broker.
    first produce     new leader named -> the first acks=all Produce the new leader acknowledges
                      (the ISR must have shrunk to the survivors, min.insync.replicas=2).
    total             kill -> that acknowledgement (the sum of the three).

Each figure is observed by polling every --poll-ms (default 5 ms), so each may be late by up to
one poll interval; the three pollers run concurrently so one does not delay another. Between runs
the killed broker is restarted and the run waits until it is back in the ISR, so every run starts
from a full ISR.

Timeouts: Kafka's defaults are broker.session.timeout.ms 9000 and broker.heartbeat.interval.ms
2000; the benchmark scales both down by the same factor as far as a production cluster on a fast
network could go (2000 / 500 ms), leaving replica.lag.time.max.ms at 10000 (Kafka: 30000) so the
ISR only changes through the controller's fencing, which is what is measured.

ProcessCluster, the process harness, is also what tests/integration/test_cluster_processes.py
runs. Ownership: the harness and the pollers run on the benchmark's one event loop; the children
are separate processes, reached only over TCP and signals.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final

from rich.console import Console
from rich.table import Table

from client.client import Client
from client.config import ClientConfig
from client.errors import ClientError
from runtime.clock import SystemClock
from runtime.config import Value
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponsePartition,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TopicProduceData,
)
from wire.records import build_batch

LOCALHOST: Final = "127.0.0.1"
REPO: Final = Path(__file__).resolve().parents[1]
CONTROLLER: Final = "controller"
TOPIC: Final = "failover"
STOP_TIMEOUT_S: Final = 30.0
# What the benchmark runs with (see the module docstring for why these values).
BENCH_PROPERTIES: Final[Mapping[str, Value]] = {
    "broker.session.timeout.ms": 2_000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 10_000,
    "request.timeout.ms": 2_000,
    "controlled.shutdown.retry.backoff.ms": 100,
    "controlled.shutdown.max.retries": 3,
}
POLL_CLIENT_CONFIG: Final = ClientConfig(
    request_timeout_ms=1_000, reconnect_backoff_ms=5, reconnect_backoff_max_ms=50
)


def broker_name(broker_id: int) -> str:
    return f"broker-{broker_id}"


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


async def wait_until(
    condition: Callable[[], Awaitable[bool]], what: str, *, timeout_s: float, poll_s: float = 0.02
) -> float:
    """Poll `condition` until it holds; the monotonic time it first held. Bounded by timeout_s."""
    deadline = time.monotonic() + timeout_s
    while True:
        if await condition():
            return time.monotonic()
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not reached within {timeout_s} s")
        await asyncio.sleep(poll_s)


@dataclass
class Child:
    """One node process; its stderr and stdout are appended to `log_path` across restarts."""

    name: str
    argv: list[str]
    log_path: Path
    process: asyncio.subprocess.Process | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        assert not self.running, f"{self.name} is already running"
        with self.log_path.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "cli.main",
                *self.argv,
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
                os.kill(self.process.pid, signal.SIGKILL)
        await self.process.wait()

    async def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM (the clean stop), then the exit code; SIGKILL if it takes over timeout_s."""
        assert self.process is not None, f"{self.name} never started"
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
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
    """A controller and `brokers` brokers as child processes, in `ketch up`'s layout under root:
    cluster.secret, controller/, broker-<id>/, logs/<node>.log, plus ketch.toml (every node's
    config file, `properties`).

    Every node gets free ports on 127.0.0.1, chosen once: a restarted broker binds the same
    ones. With `kafka`, each broker also serves the Kafka wire protocol (`--kafka-listen`) at
    `kafka_addresses[id]`; `kafka_bootstrap()` is the bootstrap list a Kafka client takes."""

    root: Path
    brokers: int = 3
    properties: Mapping[str, Value] = field(default_factory=dict)
    kafka: bool = False
    children: dict[str, Child] = field(init=False, default_factory=dict)
    addresses: dict[int, Address] = field(init=False, default_factory=dict)
    kafka_addresses: dict[int, Address] = field(init=False, default_factory=dict)
    controller_address: Address = field(init=False)

    def __post_init__(self) -> None:
        (self.root / "logs").mkdir(parents=True, exist_ok=True)
        secret = self.root / "cluster.secret"
        secret.write_text(secrets.token_hex(32) + "\n")
        secret.chmod(0o600)
        config = self.root / "ketch.toml"
        config.write_text(toml_text(self.properties))
        per_broker = 2 if self.kafka else 1
        ports = iter(free_ports(1 + per_broker * self.brokers))
        self.controller_address = Address(LOCALHOST, next(ports))
        common = ["--config", str(config), "--secret-file", str(secret)]
        self.children[CONTROLLER] = Child(
            CONTROLLER,
            [
                "controller",
                "--data-dir", str(self.root / CONTROLLER),
                "--listen", str(self.controller_address),
                *common,
            ],
            self.log_path(CONTROLLER),
        )  # fmt: skip
        for broker_id in range(self.brokers):
            address = Address(LOCALHOST, next(ports))
            self.addresses[broker_id] = address
            kafka: list[str] = []
            if self.kafka:
                self.kafka_addresses[broker_id] = Address(LOCALHOST, next(ports))
                kafka = ["--kafka-listen", str(self.kafka_addresses[broker_id])]
            self.children[broker_name(broker_id)] = Child(
                broker_name(broker_id),
                [
                    "broker",
                    "--id", str(broker_id),
                    "--data-dir", str(self.broker_dir(broker_id)),
                    "--listen", str(address),
                    *kafka,
                    "--controller", str(self.controller_address),
                    *common,
                ],
                self.log_path(broker_name(broker_id)),
            )  # fmt: skip

    def kafka_bootstrap(self, broker_ids: Sequence[int] | None = None) -> str:
        """`host:port,...` of the brokers' Kafka listeners (all by default), the form Kafka
        clients take as bootstrap servers."""
        assert self.kafka, "the cluster was built without Kafka listeners (kafka=True)"
        ids = sorted(self.kafka_addresses) if broker_ids is None else list(broker_ids)
        return ",".join(str(self.kafka_addresses[b]) for b in ids)

    def broker_dir(self, broker_id: int) -> Path:
        return self.root / broker_name(broker_id)

    def log_path(self, node: str) -> Path:
        return self.root / "logs" / f"{node}.log"

    def broker(self, broker_id: int) -> Child:
        return self.children[broker_name(broker_id)]

    def logs(self) -> str:
        """Every node's log, for a failure message."""
        parts = []
        for name in self.children:
            path = self.log_path(name)
            text = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"===== {name} =====\n{text[-6_000:]}")
        return "\n".join(parts)

    def client(self, broker_ids: Sequence[int] | None = None) -> Client:
        ids = list(self.addresses) if broker_ids is None else list(broker_ids)
        return Client(
            [self.addresses[b] for b in ids],
            transport=TcpTransport(),
            clock=SystemClock(),
            config=POLL_CLIENT_CONFIG,
            client_id="failover-harness",
        )

    async def start(self, *, timeout_s: float = 30.0) -> None:
        await self.children[CONTROLLER].start()
        for broker_id in range(self.brokers):
            await self.broker(broker_id).start()
        await self.wait_running(range(self.brokers), timeout_s=timeout_s)

    async def wait_running(self, broker_ids: Sequence[int] | range, *, timeout_s: float) -> None:
        """Until the controller reports every broker in `broker_ids` registered and running."""
        wanted = set(broker_ids)
        client = self.client()
        try:

            async def registered() -> bool:
                states = await broker_states(client, self.addresses.values())
                return all(states.get(b) == "running" for b in wanted)

            await wait_until(registered, f"brokers {sorted(wanted)} running", timeout_s=timeout_s)
        finally:
            await client.close()

    async def stop(self) -> dict[str, int]:
        """Clean stop: the brokers together (each one's controlled shutdown moves what it can),
        then the controller. The exit codes by node."""
        brokers = [c for name, c in self.children.items() if name != CONTROLLER and c.running]
        codes = await asyncio.gather(*(c.terminate() for c in brokers))
        result = {c.name: code for c, code in zip(brokers, codes, strict=True)}
        controller = self.children[CONTROLLER]
        if controller.running:
            result[CONTROLLER] = await controller.terminate()
        return result

    async def kill_all(self) -> None:
        for child in self.children.values():
            await child.kill()

    def kill_all_now(self) -> None:
        for child in self.children.values():
            child.kill_now()


@contextlib.asynccontextmanager
async def running_cluster(
    root: Path, properties: Mapping[str, Value], *, brokers: int = 3, kafka: bool = False
) -> AsyncIterator[ProcessCluster]:
    """A started ProcessCluster (with Kafka listeners when `kafka`); every child is killed by
    PID on the way out whatever happens (a test stops it cleanly first when it wants the
    clean-stop state)."""
    cluster = ProcessCluster(root, brokers, properties, kafka=kafka)
    try:
        await cluster.start()
        yield cluster
    finally:
        try:
            await cluster.kill_all()
        finally:
            cluster.kill_all_now()


# ---------------------------------------------------------------------------------------------
# Requests through the brokers


async def ask_any(
    client: Client, addresses: Iterable[Address], request: Request, *, timeout_ms: float = 1_000
) -> Response | None:
    """The first answer from any of `addresses`, tried in order; None when none answers."""
    for address in addresses:
        try:
            return await client.send(address, request, timeout_ms=timeout_ms)
        except ClientError:
            continue
    return None


async def broker_states(client: Client, addresses: Iterable[Address]) -> dict[int, str]:
    """Broker id -> "running" / "shutting_down" / "fenced", as the controller reports it through
    a broker (DescribeCluster is forwarded); empty when no broker or the controller answers."""
    response = await ask_any(client, addresses, DescribeClusterRequest())
    if not isinstance(response, DescribeClusterResponse) or response.error_code != 0:
        return {}
    return {b.broker_id: b.state for b in response.brokers}


async def partitions_of(
    client: Client, addresses: Iterable[Address], topic: str
) -> dict[int, MetadataResponsePartition]:
    """The topic's partitions as one of `addresses` knows them; empty when none answers."""
    request = MetadataRequest(topics=[MetadataRequestTopic(name=topic)])
    response = await ask_any(client, addresses, request)
    if not isinstance(response, MetadataResponse):
        return {}
    return {
        p.partition_index: p
        for t in response.topics
        if t.name == topic and t.error_code == 0
        for p in t.partitions
    }


async def create_topic(
    client: Client,
    addresses: Iterable[Address],
    topic: str,
    *,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str],
) -> None:
    """CreateTopics through a broker (forwarded to the controller)."""
    request = CreateTopicsRequest(
        topics=[
            CreatableTopic(
                name=topic,
                num_partitions=partitions,
                replication_factor=replication_factor,
                configs=[CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
            )
        ],
        timeout_ms=10_000,
    )
    response = await ask_any(client, addresses, request, timeout_ms=15_000)
    assert isinstance(response, CreateTopicsResponse), f"CreateTopics: {response!r}"
    [result] = response.topics
    assert result.error_code == 0, f"CreateTopics {topic}: {ErrorCode.from_code(result.error_code)}"


async def wait_fully_replicated(
    client: Client,
    addresses: Iterable[Address],
    topic: str,
    partitions: int,
    *,
    timeout_s: float,
) -> dict[int, MetadataResponsePartition]:
    """Until every partition has a leader and its whole replica set in the ISR."""
    found: dict[int, MetadataResponsePartition] = {}
    targets = list(addresses)

    async def full() -> bool:
        nonlocal found
        found = await partitions_of(client, targets, topic)
        return len(found) == partitions and all(
            p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes)
            for p in found.values()
        )

    await wait_until(full, f"{topic}: every partition led with a full ISR", timeout_s=timeout_s)
    return found


def produce_request(topic: str, partition: int, value: bytes, *, timeout_ms: int) -> ProduceRequest:
    return ProduceRequest(
        acks=-1,
        timeout_ms=timeout_ms,
        topic_data=[
            TopicProduceData(
                name=topic,
                partition_data=[
                    PartitionProduceData(
                        index=partition, records=build_batch([(None, value)], base_timestamp=0)
                    )
                ],
            )
        ],
    )


async def produce_once(
    client: Client, address: Address, topic: str, partition: int, value: bytes
) -> ErrorCode | str:
    """One acks=all record to `address`: its error code, or the client error's name."""
    try:
        response = await client.send(
            address, produce_request(topic, partition, value, timeout_ms=1_000), timeout_ms=2_000
        )
    except ClientError as exc:
        return type(exc).__name__
    assert isinstance(response, ProduceResponse), response
    [answer] = response.responses[0].partition_responses
    return ErrorCode.from_code(answer.error_code)


# ---------------------------------------------------------------------------------------------
# The benchmark


@dataclass(frozen=True, slots=True)
class RunResult:
    run: int
    killed: int
    new_leader: int
    detection_ms: float
    election_ms: float
    first_produce_ms: float
    total_ms: float
    produce_attempts: int


async def _poll(condition: Callable[[], Awaitable[bool]], poll_s: float, limit_s: float) -> float:
    return await wait_until(condition, "failover", timeout_s=limit_s, poll_s=poll_s)


async def one_failover(
    cluster: ProcessCluster, run: int, *, poll_s: float, limit_s: float
) -> RunResult:
    client = cluster.client()
    try:
        [before] = (
            await wait_fully_replicated(
                client, cluster.addresses.values(), TOPIC, 1, timeout_s=limit_s
            )
        ).values()
        old = before.leader_id
        survivors = [a for b, a in cluster.addresses.items() if b != old]
        code = await produce_once(client, cluster.addresses[old], TOPIC, 0, b"before-%d" % run)
        assert code is ErrorCode.NONE, f"run {run}: produce before the kill: {code}"

        killed_at = time.monotonic()
        await cluster.broker(old).kill()

        async def fenced() -> bool:
            states = await broker_states(client, survivors)
            return states.get(old) == "fenced"

        new_leader = -1
        leader_at = 0.0

        async def elected() -> bool:
            nonlocal new_leader
            partition = (await partitions_of(client, survivors, TOPIC)).get(0)
            if partition is None or partition.leader_id in (old, -1):
                return False
            new_leader = partition.leader_id
            return True

        attempts = 0

        async def acknowledged() -> bool:
            nonlocal attempts, leader_at
            if new_leader < 0 and not await elected():
                return False
            if not leader_at:
                leader_at = time.monotonic()
            attempts += 1
            address = cluster.addresses[new_leader]
            code = await produce_once(client, address, TOPIC, 0, b"after-%d" % run)
            return code is ErrorCode.NONE

        fenced_at, acked_at = await asyncio.gather(
            _poll(fenced, poll_s, limit_s), _poll(acknowledged, poll_s, limit_s)
        )
        # Restore a full ISR for the next run.
        await cluster.broker(old).start()
        await wait_fully_replicated(client, cluster.addresses.values(), TOPIC, 1, timeout_s=limit_s)
    finally:
        await client.close()
    ms = 1_000.0
    return RunResult(
        run=run,
        killed=old,
        new_leader=new_leader,
        detection_ms=(fenced_at - killed_at) * ms,
        # The leader can show up before the fencing is seen (the pollers are independent).
        election_ms=max(0.0, leader_at - fenced_at) * ms,
        first_produce_ms=(acked_at - leader_at) * ms,
        total_ms=(acked_at - killed_at) * ms,
        produce_attempts=attempts,
    )


async def benchmark(
    runs: int, properties: Mapping[str, Value], *, poll_s: float, progress: Console
) -> list[RunResult]:
    with tempfile.TemporaryDirectory(prefix="ketch-bench-failover-") as tmp:
        async with running_cluster(Path(tmp), properties) as cluster:
            client = cluster.client()
            try:
                await create_topic(
                    client,
                    cluster.addresses.values(),
                    TOPIC,
                    partitions=1,
                    replication_factor=3,
                    configs={"min.insync.replicas": "2"},
                )
            finally:
                await client.close()
            results = []
            session_s = float(str(properties["broker.session.timeout.ms"])) / 1_000
            for run in range(runs):
                result = await one_failover(
                    cluster, run, poll_s=poll_s, limit_s=10 * session_s + 30
                )
                progress.print(
                    f"run {run}: killed broker {result.killed}, new leader "
                    f"{result.new_leader}, {result.total_ms:.0f} ms"
                )
                results.append(result)
            codes = await cluster.stop()
            progress.print(f"clean stop, exit codes {codes}")
    return results


FIGURES: Final = (
    ("detection_ms", "detection", "kill -> controller reports the broker fenced"),
    ("election_ms", "election + propagation", "fenced -> a survivor's Metadata names a new leader"),
    ("first_produce_ms", "first produce", "new leader named -> first acks=all ack from it"),
    ("total_ms", "total", "kill -> first acks=all ack on the new leader"),
)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): an observed value, not an interpolation."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n*q/100), at least the first
    return ordered[int(rank) - 1]


def summary(results: Sequence[RunResult]) -> dict[str, dict[str, float]]:
    out = {}
    for key, _, _ in FIGURES:
        values = [float(getattr(r, key)) for r in results]
        out[key] = {
            "median": statistics.median(values),
            "p90": percentile(values, 90),
            "min": min(values),
            "max": max(values),
        }
    return out


def render(results: Sequence[RunResult], properties: Mapping[str, Value], poll_ms: float) -> Table:
    table = Table(
        title=(
            f"Failover, {len(results)} runs (session {properties['broker.session.timeout.ms']} ms,"
            f" heartbeat {properties['broker.heartbeat.interval.ms']} ms, poll {poll_ms:g} ms)"
        )
    )
    table.add_column("figure")
    table.add_column("measures")
    for column in ("median ms", "p90 ms", "min ms", "max ms"):
        table.add_column(column, justify="right")
    stats = summary(results)
    for key, name, what in FIGURES:
        s = stats[key]
        table.add_row(name, what, *(f"{s[k]:.0f}" for k in ("median", "p90", "min", "max")))
    return table


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write every run and the summary here")
    parser.add_argument("--session-timeout-ms", type=int, default=2_000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--poll-ms", type=float, default=5.0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.runs < 1 or args.poll_ms <= 0:
        print("--runs must be >= 1 and --poll-ms > 0", file=sys.stderr)
        return 2
    properties = {
        **BENCH_PROPERTIES,
        "broker.session.timeout.ms": args.session_timeout_ms,
        "broker.heartbeat.interval.ms": args.heartbeat_interval_ms,
    }
    # The table's "measures" column is prose: give it room even on an 80-column terminal.
    console = Console(width=max(Console().width, 120))
    results = asyncio.run(
        benchmark(args.runs, properties, poll_s=args.poll_ms / 1_000, progress=console)
    )
    console.print(render(results, properties, args.poll_ms))
    if args.json is not None:
        document = {
            "properties": dict(properties),
            "poll_ms": args.poll_ms,
            "figures": {key: what for key, _, what in FIGURES},
            "summary": summary(results),
            "runs": [asdict(r) for r in results],
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
