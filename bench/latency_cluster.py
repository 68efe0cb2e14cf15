"""The cluster `ketch bench latency` measures when no --bootstrap is given.

* `process_cluster`: a controller and N brokers as child processes (`python -m cli.main
  controller|broker ...`, DESIGN.md's command line contract) on free 127.0.0.1 ports, in a
  temporary data dir with its own `cluster.secret`. Preferred: the followers' fetch and append
  work then runs on other cores, not on the benchmark client's event loop.
* `in_process_cluster`: bench/cluster.py's BenchCluster (the real controller and brokers, TCP,
  ONE event loop shared with the client), with --in-process.

Both are async context managers yielding the brokers' addresses. `kafka_process_cluster` is
the process cluster with each broker also serving the Kafka wire protocol (`--kafka-listen` on
another free port); it yields the Kafka listeners' addresses, for `--protocol kafka`. The
process cluster is owned by the coroutine that entered it (it alone starts, polls and stops the
children), so no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Final

from bench.cluster import BenchCluster
from client.client import Client
from client.errors import ClientError
from runtime.clock import SystemClock
from runtime.net.transport import Address, Transport
from wire.messages import DescribeClusterRequest, DescribeClusterResponse

LOCALHOST: Final = "127.0.0.1"
READY_TIMEOUT_S: Final = 30.0
STOP_TIMEOUT_S: Final = 15.0
_POLL_S: Final = 0.1
_LOG_TAIL_CHARS: Final = 2_000
# The cluster and its data are thrown away afterwards: moving leadership off each broker first
# would only cost time, and for the last broker (nowhere to move to) it costs every retry and
# backoff before it gives up, as Kafka's does.
TEARDOWN_PROPERTIES: Final = {"controlled.shutdown.enable": False}
BENCH_OFFSETS_PARTITIONS: Final = 3


@contextlib.asynccontextmanager
async def in_process_cluster(
    brokers: int, transport: Transport, min_insync_replicas: int
) -> AsyncIterator[list[Address]]:
    properties = {"min.insync.replicas": min_insync_replicas, **TEARDOWN_PROPERTIES}
    async with BenchCluster(
        brokers, transport=transport, clock=SystemClock(), properties=properties
    ) as cluster:
        yield cluster.addresses


def _free_ports(count: int) -> list[int]:
    """`count` distinct ports free now: every probe stays bound until all are chosen, so the
    kernel cannot hand one out twice. Released on return: another process could take one before
    the child binds it, a race a benchmark on a developer machine accepts (a child that cannot
    bind fails loudly)."""
    with contextlib.ExitStack() as probes:
        ports = []
        for _ in range(count):
            probe = probes.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            probe.bind((LOCALHOST, 0))
            ports.append(int(probe.getsockname()[1]))
        return ports


class _Child:
    def __init__(self, name: str, process: asyncio.subprocess.Process, log: Path) -> None:
        self.name = name
        self.process = process
        self.log = log

    def tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
        except OSError:
            return "(no log)"


async def _spawn(name: str, args: list[str], logs: Path) -> _Child:
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "cli.main",
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    return _Child(name, process, log)


async def _stop(child: _Child) -> None:
    if child.process.returncode is not None:
        return
    # SIGTERM: the node's clean shutdown (broker_main.py; controlled shutdown is off here).
    child.process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(child.process.wait(), STOP_TIMEOUT_S)
    except TimeoutError:
        child.process.kill()
        await child.process.wait()


async def _wait_ready(
    children: list[_Child], addresses: list[Address], transport: Transport
) -> None:
    """Until DescribeCluster (forwarded by a broker) lists every broker as running."""
    client = Client(addresses, transport=transport, clock=SystemClock(), client_id="bench-ready")
    deadline = time.monotonic() + READY_TIMEOUT_S
    try:
        while True:
            for child in children:
                if child.process.returncode is not None:
                    raise RuntimeError(
                        f"{child.name} exited with {child.process.returncode} while starting:\n"
                        f"{child.tail()}"
                    )
            with contextlib.suppress(ClientError):
                response = await client.send_any(DescribeClusterRequest(), timeout_ms=2_000)
                if isinstance(response, DescribeClusterResponse) and response.error_code == 0:
                    running = [b for b in response.brokers if b.state == "running"]
                    if len(running) == len(addresses):
                        return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the cluster was not ready within {READY_TIMEOUT_S:.0f} s; logs:\n"
                    + "\n".join(f"--- {c.name}\n{c.tail()}" for c in children)
                )
            await asyncio.sleep(_POLL_S)
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def process_cluster(
    brokers: int, transport: Transport, min_insync_replicas: int
) -> AsyncIterator[list[Address]]:
    async with _processes(brokers, transport, min_insync_replicas, kafka=False) as (native, _):
        yield native


@contextlib.asynccontextmanager
async def kafka_process_cluster(
    brokers: int,
    transport: Transport,
    min_insync_replicas: int,
    properties: Mapping[str, object] | None = None,
) -> AsyncIterator[list[Address]]:
    """The brokers' Kafka listeners (the cluster is ready on its native side: every broker
    registered and running; a Kafka client's first Metadata may still be on its way).
    `properties`: more broker properties (`--set`), after the benchmark's own."""
    async with _processes(
        brokers, transport, min_insync_replicas, kafka=True, properties=properties or {}
    ) as (_, kafka):
        yield kafka


@contextlib.asynccontextmanager
async def _processes(
    brokers: int,
    transport: Transport,
    min_insync_replicas: int,
    *,
    kafka: bool,
    properties: Mapping[str, object] | None = None,
) -> AsyncIterator[tuple[list[Address], list[Address]]]:
    """(native addresses, Kafka addresses: empty unless `kafka`)."""
    with tempfile.TemporaryDirectory(prefix="ketch-bench-latency-") as tmp:
        root = Path(tmp)
        logs = root / "logs"
        logs.mkdir()
        secret_file = root / "cluster.secret"
        secret_file.write_text(secrets.token_hex(32) + "\n")
        secret_file.chmod(0o600)
        ports = iter(_free_ports(1 + brokers * (2 if kafka else 1)))
        controller_port = next(ports)
        children: list[_Child] = []
        try:
            children.append(
                await _spawn(
                    "controller",
                    [
                        "controller",
                        "--data-dir",
                        str(root / "controller"),
                        "--listen",
                        f"{LOCALHOST}:{controller_port}",
                        "--secret-file",
                        str(secret_file),
                    ],
                    logs,
                )
            )
            addresses: list[Address] = []
            kafka_addresses: list[Address] = []
            for broker_id in range(brokers):
                port = next(ports)
                addresses.append(Address(LOCALHOST, port))
                kafka_listen: list[str] = []
                if kafka:
                    kafka_addresses.append(Address(LOCALHOST, next(ports)))
                    kafka_listen = ["--kafka-listen", str(kafka_addresses[-1])]
                children.append(
                    await _spawn(
                        f"broker-{broker_id}",
                        [
                            "broker",
                            "--id",
                            str(broker_id),
                            "--data-dir",
                            str(root / f"broker-{broker_id}"),
                            "--listen",
                            f"{LOCALHOST}:{port}",
                            "--controller",
                            f"{LOCALHOST}:{controller_port}",
                            "--secret-file",
                            str(secret_file),
                            "--set",
                            f"min.insync.replicas={min_insync_replicas}",
                            "--set",
                            "controlled.shutdown.enable=false",
                            # librdkafka consumers look for a group coordinator even when they
                            # only assign(): the first one creates __consumer_offsets, and 50
                            # partitions x RF 3 would load the cluster mid-measurement.
                            "--set",
                            f"offsets.topic.num.partitions={BENCH_OFFSETS_PARTITIONS}",
                            *kafka_listen,
                            *(
                                word
                                for name, value in (properties or {}).items()
                                for word in ("--set", f"{name}={value}")
                            ),
                        ],
                        logs,
                    )
                )
            await _wait_ready(children, addresses, transport)
            yield addresses, kafka_addresses
        finally:
            # Brokers first, while the controller they deregister from is still there.
            for child in reversed(children):
                await _stop(child)
