"""Incremental fetch sessions (KIP-227) with real Kafka clients through the Kafka listener.

One broker process (and its controller) with the metrics endpoint on any free port (the one the
broker logs it bound). For each client: records are produced to a topic of four partitions, the
client's consumer reads them from the start while more records go to partition 0 only (the other
three stay unchanged, so a session's answers leave them out); every record must be read exactly
once. kafka-python asks for fetch sessions: the second records are produced only once the
broker has answered it in a session, and the broker's
`ketch_fetchsessioncache_incrementalfetches_total` must have grown while it read. librdkafka
(2.16) and aiokafka (0.14) send sessionless fetches (session id 0, epoch -1): for them the
counter must not move (were they to start asking, this test says so).

The processes run on the wall clock: every wait is a bounded poll of a condition; the children
are killed by PID whatever happens (testkit.processes.running_cluster).
"""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import AsyncIterator
from typing import Final

import pytest
import pytest_asyncio

from node.layout import broker_node
from testkit.probes import wait_until
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import PROPERTIES
from tests.integration.kafka_drivers import DRIVERS, Read, Sent

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

PARTITIONS: Final = 4
FIRST_WAVE: Final = 40  # ten per partition
SECOND_WAVE: Final = 10  # to partition 0 only
WAIT_S: Final = 30.0
INCREMENTAL_FETCHES: Final = "ketch_fetchsessioncache_incrementalfetches_total"
SESSIONS: Final = "kafka_server_fetchsessioncache_numincrementalfetchsessions"
# The clients whose consumers ask for fetch sessions (Fetch v7+ with session epoch 0).
SESSION_CLIENTS: Final = frozenset({"kafka-python"})


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[ProcessCluster, int]]:
    root = tmp_path_factory.mktemp("fetch-sessions")
    properties = {**PROPERTIES, "metrics.port": 0}
    async with running_cluster(root, properties, brokers=1, kafka=True) as started:
        await started.wait_running(range(1), timeout_s=WAIT_S)
        yield started, metrics_port(started)


def metrics_port(cluster: ProcessCluster) -> int:
    """The port broker 0 logged its metrics endpoint at (it logs it before it serves)."""
    log = cluster.log_path(broker_node(0)).read_text(errors="replace")
    found = re.search(r"metrics at http://[^:]+:(\d+)/metrics", log)
    assert found is not None, cluster.logs()
    return int(found.group(1))


async def scrape(port: int) -> dict[str, float]:
    """The broker's unlabelled samples, by name."""

    def get() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text: str = answer.read().decode()
            return text

    samples = {}
    for line in (await asyncio.to_thread(get)).splitlines():
        name, _, value = line.partition(" ")
        if line and not line.startswith("#") and "{" not in name:
            samples[name] = float(value)
    return samples


@pytest.mark.parametrize("client", sorted(DRIVERS))
async def test_incremental_sessions_deliver_every_record_once(
    cluster: tuple[ProcessCluster, int], client: str
) -> None:
    processes, metrics_port = cluster
    bootstrap = processes.kafka_bootstrap()
    producer = DRIVERS["confluent"](bootstrap)
    driver = DRIVERS[client](bootstrap)
    topic = f"sessions-{client}"
    await producer.create_topic(topic, PARTITIONS, 1, {})
    first = [Sent(i % PARTITIONS, None, b"first-%d" % i) for i in range(FIRST_WAVE)]
    second = [Sent(0, None, b"second-%d" % i) for i in range(SECOND_WAVE)]
    acked = await producer.produce(topic, first, acks="all", compression="none")
    before = (await scrape(metrics_port)).get(INCREMENTAL_FETCHES, 0.0)

    total = FIRST_WAVE + SECOND_WAVE
    reading = asyncio.ensure_future(
        driver.consume(topic, dict.fromkeys(range(PARTITIONS), 0), total)
    )

    async def in_a_session() -> bool:
        assert not reading.done() or reading.exception() is None
        samples = await scrape(metrics_port)
        return samples.get(INCREMENTAL_FETCHES, 0.0) > before and samples.get(SESSIONS, 0) >= 1

    if client in SESSION_CLIENTS:
        await wait_until(
            in_a_session, f"{client}: a Fetch answered in a session", timeout_s=WAIT_S, poll_s=0.1
        )
    acked += await producer.produce(topic, second, acks="all", compression="none")
    read: list[Read] = await asyncio.wait_for(reading, WAIT_S)

    expected = {
        (partition, offset): sent.value
        for sent, (partition, offset) in zip(first + second, acked, strict=True)
    }
    positions = [(r.partition, r.offset) for r in read]
    assert len(positions) == len(set(positions)), f"{client}: a record was read twice"
    assert {(r.partition, r.offset): r.value for r in read} == expected
    after = (await scrape(metrics_port)).get(INCREMENTAL_FETCHES, 0.0)
    if client in SESSION_CLIENTS:
        assert after - before >= 2, f"{client}: {after - before} incremental fetches"
    else:
        assert after == before, f"{client} now uses fetch sessions: add it to SESSION_CLIENTS"
