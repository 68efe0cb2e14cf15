"""The metrics endpoints of real nodes, scraped over HTTP on 127.0.0.1.

Two brokers and the controller over TCP with `metrics.port = 0` (any free port). After produce
and consume, a killed follower makes the leader shrink the ISR (replica.lag.time.max.ms is
shorter than the session timeout, so the leader's AlterPartition shrink comes first, as in
Kafka); its restart makes the ISR expand again. Each step is checked in the scraped text.
Time is a ManualClock that the harness advances in 1 ms steps; the sockets are real.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from actors.controller.messages import ControllerConfig
from client.client import Client
from client.config import ConsumerConfig, ProducerConfig
from client.consumer import Consumer
from client.fetched_records import ConsumerRecord
from client.producer import Producer
from node.controller.node import ControllerNode
from runtime.clock import ManualClock
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address
from testkit.cluster import SECRET, Cluster
from wire.topic import TopicPartition

TOPIC = "metered"
TP = TopicPartition(TOPIC, 0)
SOLO = "solo"  # replication factor 1: partition 1 lives only on broker 1
COUNT = 10

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class MeteredCluster(Cluster):
    """The harness's cluster with the controller's metrics endpoint on too."""

    def _controller_node(self) -> ControllerNode:
        return ControllerNode(
            ControllerConfig.from_properties(
                {**self.properties, "auto.leader.rebalance.enable": False}
            ),
            self.data_dir / "controller",
            transport=TcpTransport(),
            clock=self.clock,
            cluster_secret=SECRET,
            listen=Address("127.0.0.1", 0),
            metrics_port=0,
        )


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[MeteredCluster]:
    cluster = MeteredCluster(
        tmp_path,
        [0, 1],
        clock=ManualClock(),
        transport_for=lambda name: TcpTransport(),
        address_for=lambda name: Address("127.0.0.1", 0),
        properties={
            "metrics.port": 0,
            "replica.fetch.wait.max.ms": 20,
            "replica.lag.time.max.ms": 200,
            # Long enough that the leader's own shrink (after 200-300 ms) is what removes the
            # dead follower, not the controller fencing its broker.
            "broker.session.timeout.ms": 4_000,
        },
    )
    await cluster.drive(cluster.start())
    try:
        yield cluster
    finally:
        await cluster.drive(cluster.stop())
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def http_get(port: int, path: str) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


async def scrape(cluster: Cluster, port: int) -> Samples:
    status, body = await cluster.drive(http_get(port, "/metrics"))
    assert status == 200
    out: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(parsed: Samples, name: str, **labels: str) -> float:
    return parsed[(name, tuple(sorted(labels.items())))]


def broker_port(cluster: Cluster, broker_id: int) -> int:
    server = cluster.node(broker_id).metrics_server
    assert server is not None, "metrics.port was set"
    return server.port


def controller_port(cluster: Cluster) -> int:
    server = cluster.controller.metrics_server
    assert server is not None
    return server.port


async def produce(cluster: Cluster, acks: int, count: int) -> None:
    client = Client([cluster.node(0).address], transport=TcpTransport(), clock=cluster.clock)
    producer = Producer(client, config=ProducerConfig(acks=acks, linger_ms=0), owns_client=True)
    try:
        for i in range(count):
            future = await cluster.drive(producer.send(TOPIC, None, b"v%d" % i, partition=0))
            await cluster.drive(future)
    finally:
        await cluster.drive(producer.close())


async def produce_and_consume(cluster: Cluster) -> list[ConsumerRecord]:
    await produce(cluster, -1, COUNT)
    consumer = Consumer(
        Client([cluster.node(0).address], transport=TcpTransport(), clock=cluster.clock),
        config=ConsumerConfig(fetch_max_wait_ms=50, auto_offset_reset="earliest"),
        owns_client=True,
    )
    consumer.assign([(TOPIC, 0)])
    records: list[ConsumerRecord] = []
    try:
        for _ in range(100):  # bounded: each poll brings records or times out
            if len(records) >= COUNT:
                break
            records.extend(await cluster.drive(consumer.poll(timeout_ms=200)))
    finally:
        await cluster.drive(consumer.close())
    return records


async def test_scraped_metrics_follow_traffic_and_isr_changes(cluster: MeteredCluster) -> None:
    await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=2))
    await cluster.drive(cluster.create_topic(SOLO, 2, replication_factor=1))
    assert cluster.record(TP).leader == 0
    assert len(await produce_and_consume(cluster)) == COUNT

    leader = await scrape(cluster, broker_port(cluster, 0))
    rm = "kafka_server_replicamanager_"
    latency = "kafka_network_requestmetrics_totaltimems"
    assert value(leader, rm + "partitioncount") == 2  # metered-0 and solo-0
    assert value(leader, rm + "leadercount") == 2
    assert value(leader, rm + "underreplicatedpartitions") == 0
    assert value(leader, rm + "isrshrinks_total") == 0
    assert value(leader, latency + "_count", request="Produce") == COUNT
    assert value(leader, latency + "_count", request="FetchConsumer") >= 1
    assert value(leader, latency + "_count", request="FetchFollower") >= COUNT
    # Follower long-polls wait up to replica.fetch.wait.max.ms: none in the sub-ms bucket
    # can hide them all, and every one is within the 25 ms bucket (20 ms max wait).
    followers = value(leader, latency + "_count", request="FetchFollower")
    assert value(leader, latency + "_bucket", request="FetchFollower", le="25.0") == followers
    assert value(leader, latency + "_bucket", request="Produce", le="+Inf") == COUNT
    purgatory = "kafka_server_delayedoperationpurgatory_"
    assert (purgatory + "purgatorysize", (("delayedOperation", "Produce"),)) in leader
    assert value(leader, purgatory + "numdelayedoperations", delayedOperation="Produce") == 0
    assert value(leader, "ketch_actors", kind="Partition") == 2
    assert value(leader, "ketch_actors", kind="ReplicaManager") == 1
    assert value(leader, "ketch_actor_mailbox_depth", kind="Partition") == 0

    controller = await scrape(cluster, controller_port(cluster))
    kc = "kafka_controller_kafkacontroller_"
    assert value(controller, kc + "activecontrollercount") == 1
    assert value(controller, kc + "activebrokercount") == 2
    assert value(controller, kc + "offlinepartitionscount") == 0
    assert value(controller, "ketch_controller_epoch") == 1

    # The follower dies and the leader's log moves on (as in Kafka, a follower at the leader's
    # end offset is in sync however long it is silent): the leader shrinks the ISR of
    # metered-0 (its AlterPartition, counted once the controller commits it) well before the
    # controller fences broker 1.
    await cluster.drive(cluster.kill(1))
    await produce(cluster, 1, 1)
    partition = cluster.node(0).replica_manager.partition(TP)
    assert partition is not None
    try:
        await cluster.run_until(
            lambda: cluster.record(TP).isr == (0,), max_ms=3_000, what="leader's ISR shrink"
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {partition.view}, {partition.pending_isr_change}") from exc
    leader = await scrape(cluster, broker_port(cluster, 0))
    assert value(leader, rm + "isrshrinks_total") == 1
    assert value(leader, rm + "isrexpands_total") == 0
    assert value(leader, rm + "underreplicatedpartitions") == 1
    assert value(leader, rm + "underminisrpartitioncount") == 0  # min.insync.replicas is 1

    # Then the session times out: solo-1 (only on broker 1) has no leader any more.
    await cluster.run_until(
        lambda: cluster.record(TopicPartition(SOLO, 1)).leader == -1,
        max_ms=6_000,
        what="broker 1 fenced",
    )
    controller = await scrape(cluster, controller_port(cluster))
    assert value(controller, kc + "offlinepartitionscount") == 1
    assert value(controller, kc + "activebrokercount") == 1
    assert value(controller, kc + "fencedbrokercount") == 1

    # It comes back, catches up and rejoins the ISR: an expansion, nothing under-replicated.
    await cluster.drive(cluster.restart(1))
    await cluster.run_until(
        lambda: cluster.record(TP).isr == (0, 1), max_ms=3_000, what="ISR expansion"
    )
    leader = await scrape(cluster, broker_port(cluster, 0))
    assert value(leader, rm + "isrexpands_total") == 1
    assert value(leader, rm + "isrshrinks_total") == 1
    assert value(leader, rm + "underreplicatedpartitions") == 0
    controller = await scrape(cluster, controller_port(cluster))
    assert value(controller, kc + "offlinepartitionscount") == 0
    assert value(controller, kc + "activebrokercount") == 2


async def test_a_node_without_metrics_port_serves_no_endpoint(tmp_path: Path) -> None:
    cluster = Cluster(
        tmp_path,
        [0],
        clock=ManualClock(),
        transport_for=lambda name: TcpTransport(),
        address_for=lambda name: Address("127.0.0.1", 0),
    )
    await cluster.drive(cluster.start())
    try:
        node = cluster.node(0)
        assert node.metrics_server is None
        assert node.server.request_observer is None  # nothing on the request path either
        assert cluster.controller.metrics_server is None
    finally:
        await cluster.drive(cluster.stop())
