"""The cluster `ketch bench latency` measures when no --bootstrap is given, from testkit's
harnesses, with the benchmark's settings.

* `process_cluster`: a controller and N brokers as child processes (testkit/processes.py:
  `python -m cli.main controller|broker ...`, DESIGN.md's command line contract) on free
  127.0.0.1 ports, in a temporary data dir with its own `cluster.secret`. Preferred: the
  followers' fetch and append work then runs on other cores, not on the benchmark client's
  event loop.
* `in_process_cluster`: testkit/cluster.py's `tcp_cluster` (the real controller and brokers,
  TCP, ONE event loop shared with the client), with --in-process.

Both are async context managers yielding the brokers' addresses. `kafka_process_cluster` is
the process cluster with each broker also serving the Kafka wire protocol (`--kafka-listen` on
another free port); it yields the Kafka listeners' addresses, for `--protocol kafka`. The
process cluster is owned by the coroutine that entered it (it alone starts, polls and stops the
children), so no lock.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Final

from runtime.clock import SystemClock
from runtime.config import Value
from runtime.net.transport import Address, Transport
from testkit.cluster import tcp_cluster
from testkit.processes import ProcessCluster, running_cluster

# The cluster and its data are thrown away afterwards: moving leadership off each broker first
# would only cost time, and for the last broker (nowhere to move to) it costs every retry and
# backoff before it gives up, as Kafka's does.
TEARDOWN_PROPERTIES: Final[Mapping[str, Value]] = {"controlled.shutdown.enable": False}
# librdkafka consumers look for a group coordinator even when they only assign(): the first one
# creates __consumer_offsets, and 50 partitions x RF 3 would load the cluster mid-measurement.
BENCH_OFFSETS_PARTITIONS: Final = 3


@contextlib.asynccontextmanager
async def in_process_cluster(
    brokers: int, transport: Transport, min_insync_replicas: int
) -> AsyncIterator[list[Address]]:
    properties = {"min.insync.replicas": min_insync_replicas, **TEARDOWN_PROPERTIES}
    async with tcp_cluster(
        brokers, transport=transport, clock=SystemClock(), properties=properties
    ) as cluster:
        yield cluster.addresses


@contextlib.asynccontextmanager
async def process_cluster(
    brokers: int, transport: Transport, min_insync_replicas: int
) -> AsyncIterator[list[Address]]:
    """(`transport` is for the in-process cluster's signature: the children bring their own.)"""
    async with _processes(brokers, min_insync_replicas, kafka=False) as cluster:
        yield [cluster.addresses[b] for b in sorted(cluster.addresses)]


@contextlib.asynccontextmanager
async def kafka_process_cluster(
    brokers: int,
    transport: Transport,
    min_insync_replicas: int,
    properties: Mapping[str, Value] | None = None,
) -> AsyncIterator[list[Address]]:
    """The brokers' Kafka listeners (the cluster is ready on its native side: every broker
    registered and running; a Kafka client's first Metadata may still be on its way).
    `properties`: more node properties, after the benchmark's own."""
    async with _processes(
        brokers, min_insync_replicas, kafka=True, properties=properties or {}
    ) as cluster:
        yield [cluster.kafka_addresses[b] for b in sorted(cluster.kafka_addresses)]


@contextlib.asynccontextmanager
async def _processes(
    brokers: int,
    min_insync_replicas: int,
    *,
    kafka: bool,
    properties: Mapping[str, Value] | None = None,
) -> AsyncIterator[ProcessCluster]:
    """A started cluster in a temporary directory, stopped cleanly (SIGTERM) when the body
    ends; killed by PID when the body raises (its data is thrown away either way)."""
    settings: dict[str, Value] = {
        "min.insync.replicas": min_insync_replicas,
        **TEARDOWN_PROPERTIES,
        "offsets.topic.num.partitions": BENCH_OFFSETS_PARTITIONS,
        **(properties or {}),
    }
    with tempfile.TemporaryDirectory(prefix="ketch-bench-latency-") as tmp:
        async with running_cluster(Path(tmp), settings, brokers=brokers, kafka=kafka) as cluster:
            yield cluster
            await cluster.stop()
