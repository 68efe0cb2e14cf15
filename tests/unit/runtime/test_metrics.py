"""Node metrics: latency buckets, Kafka's names and values in the text exposition, the per-node
registries, and the HTTP endpoint over 127.0.0.1 (real sockets, the node's ManualClock)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from actors.replication.partition import PartitionActor, PartitionConfig
from actors.replication.partition_messages import BecomeLeader, MaybeShrinkIsr
from node.broker.config import BrokerConfig, property_defaults
from runtime.actor import ActorStatistics
from runtime.clock import NS_PER_MS, ManualClock
from runtime.log.config import LogConfig
from runtime.log.log import Log
from runtime.metrics import (
    LATENCY_BUCKETS_MS,
    METRICS_DISABLED,
    REQUEST_DEADLINE_MS,
    BrokerMetrics,
    ControllerGauges,
    ControllerMetrics,
    IsrChangeCounter,
    LatencyHistogram,
    MetricsHttpServer,
    NodeMetrics,
    RequestMetrics,
    metrics_port,
    request_name,
)
from tests.unit.actors.replication.partition_harness import (
    LAG_MS,
    TP,
    RecordingListener,
    RecordingSink,
    Replica,
    follower_fetch,
    produce,
    settle,
    state,
)
from wire.errors import ErrorCode
from wire.messages import FetchRequest, MetadataRequest, ProduceRequest

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: bytes) -> Samples:
    """Every sample of a text exposition by (name, sorted labels)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(parsed: Samples, name: str, **labels: str) -> float:
    return parsed[(name, tuple(sorted(labels.items())))]


# -- latency histograms ---------------------------------------------------------------------------


def test_histogram_counts_a_value_on_a_bound_in_that_bucket() -> None:
    histogram = LatencyHistogram((1, 10))
    for elapsed_ms in (0.5, 1, 1.000001, 10, 11, 5000):
        histogram.observe(round(elapsed_ms * NS_PER_MS))
    # le="1": 0.5 and 1; le="10": + 1.000001 and 10; +Inf: all six.
    assert histogram.cumulative_ms() == [("1.0", 2), ("10.0", 4), ("+Inf", 6)]
    assert histogram.count == 6
    assert histogram.sum_ns == round((0.5 + 1 + 1.000001 + 10 + 11 + 5000) * NS_PER_MS)


def test_request_names_are_kafkas() -> None:
    assert request_name(0) == "Produce"
    assert request_name(4) == "LeaderAndIsr"
    assert request_name(23) == "OffsetForLeaderEpoch"
    assert request_name(60) == "DescribeCluster"
    assert request_name(999) == "Api999"


def fetch(replica_id: int) -> FetchRequest:
    return FetchRequest(replica_id=replica_id, max_wait_ms=500, min_bytes=1, topics=[])


async def test_request_metrics_per_api_and_fetch_split_by_origin() -> None:
    requests = RequestMetrics()
    produce = ProduceRequest(acks=1, timeout_ms=1000, topic_data=[])
    requests.observe(produce, 200_000)  # 0.2 ms
    requests.observe(produce, 3 * NS_PER_MS)
    requests.observe(fetch(-1), 2 * NS_PER_MS)
    requests.observe(fetch(2), 500 * NS_PER_MS)
    requests.observe(MetadataRequest(topics=None), 50_000)
    registry = NodeMetrics()
    registry.add_collector(requests.collect)
    parsed = samples(await registry.scrape())
    name = "kafka_network_requestmetrics_totaltimems"
    assert value(parsed, name + "_count", request="Produce") == 2
    assert value(parsed, name + "_sum", request="Produce") == pytest.approx(3.2)
    assert value(parsed, name + "_bucket", request="Produce", le="0.25") == 1
    assert value(parsed, name + "_bucket", request="Produce", le="2.5") == 1
    assert value(parsed, name + "_bucket", request="Produce", le="5.0") == 2
    assert value(parsed, name + "_bucket", request="Produce", le="+Inf") == 2
    # Fetch as a whole and split into consumers and followers, as Kafka reports it.
    assert value(parsed, name + "_count", request="Fetch") == 2
    assert value(parsed, name + "_count", request="FetchConsumer") == 1
    assert value(parsed, name + "_count", request="FetchFollower") == 1
    assert value(parsed, name + "_bucket", request="FetchFollower", le="250.0") == 0
    assert value(parsed, name + "_bucket", request="FetchFollower", le="500.0") == 1
    assert value(parsed, name + "_count", request="Metadata") == 1
    buckets = [k for k in parsed if k[0] == name + "_bucket" and ("request", "Metadata") in k[1]]
    assert len(buckets) == len(LATENCY_BUCKETS_MS) + 1


# -- configuration --------------------------------------------------------------------------------


def test_metrics_port_property() -> None:
    assert metrics_port({}) == METRICS_DISABLED
    assert metrics_port({"metrics.port": "9300"}) == 9300
    assert metrics_port({"metrics.port": 0}) == 0
    for bad in (70_000, -2, True, "http"):
        with pytest.raises(ValueError, match=r"metrics\.port"):
            metrics_port({"metrics.port": bad})
    assert BrokerConfig.from_properties({"broker.id": 1}).metrics_port == METRICS_DISABLED
    assert BrokerConfig.from_properties({"broker.id": 1, "metrics.port": 9301}).metrics_port == 9301
    assert property_defaults()["metrics.port"] == METRICS_DISABLED


# -- broker and controller registries -------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    partitions: int = 5
    leaders: int = 3
    under_replicated: int = 2
    under_min_isr: int = 1
    offline: int = 1


@dataclass
class FakePurgatory:
    watched: int
    delayed: int


def stats(name: str, depth: int) -> ActorStatistics:
    return ActorStatistics(
        name=name,
        depth=depth,
        capacity=1024,
        blocked_senders=0,
        processed=0,
        failed=0,
        max_wait_ms=0.0,
        running=True,
    )


def broker_metrics(mailboxes: list[tuple[str, ActorStatistics]]) -> BrokerMetrics:
    return BrokerMetrics(
        replica_counts=Counts,
        purgatories={"Produce": FakePurgatory(4, 3), "Fetch": FakePurgatory(7, 6)},
        mailboxes=lambda: mailboxes,
    )


async def test_broker_metrics_carry_kafkas_names_and_the_sources_values() -> None:
    mailboxes = [
        ("ReplicaManager", stats("rm", 1)),
        ("Partition", stats("p0", 2)),
        ("Partition", stats("p1", 5)),
    ]
    metrics = broker_metrics(mailboxes)
    metrics.isr_changes.mark_shrink()
    metrics.isr_changes.mark_shrink()
    metrics.isr_changes.mark_expand()
    metrics.isr_changes.mark_failed()
    parsed = samples(await metrics.scrape())
    rm = "kafka_server_replicamanager_"
    assert value(parsed, rm + "partitioncount") == 5
    assert value(parsed, rm + "leadercount") == 3
    assert value(parsed, rm + "underreplicatedpartitions") == 2
    assert value(parsed, rm + "underminisrpartitioncount") == 1
    assert value(parsed, rm + "offlinereplicacount") == 1
    assert value(parsed, rm + "isrshrinks_total") == 2
    assert value(parsed, rm + "isrexpands_total") == 1
    assert value(parsed, rm + "failedisrupdates_total") == 1
    purgatory = "kafka_server_delayedoperationpurgatory_"
    assert value(parsed, purgatory + "purgatorysize", delayedOperation="Produce") == 4
    assert value(parsed, purgatory + "purgatorysize", delayedOperation="Fetch") == 7
    assert value(parsed, purgatory + "numdelayedoperations", delayedOperation="Fetch") == 6
    assert value(parsed, "ketch_actor_mailbox_depth", kind="Partition") == 7
    assert value(parsed, "ketch_actor_mailbox_depth_max", kind="Partition") == 5
    assert value(parsed, "ketch_actors", kind="Partition") == 2
    assert value(parsed, "ketch_actor_mailbox_depth", kind="ReplicaManager") == 1
    # Mailbox gauges are computed at scrape time: a later scrape sees the new depths.
    mailboxes[1] = ("Partition", stats("p0", 0))
    parsed = samples(await metrics.scrape())
    assert value(parsed, "ketch_actor_mailbox_depth", kind="Partition") == 5


async def test_each_node_has_its_own_registry() -> None:
    first, second = broker_metrics([]), broker_metrics([])
    first.isr_changes.mark_expand()
    assert value(samples(await first.scrape()), "kafka_server_replicamanager_isrexpands_total") == 1
    assert (
        value(samples(await second.scrape()), "kafka_server_replicamanager_isrexpands_total") == 0
    )


async def test_controller_metrics_report_the_last_snapshot() -> None:
    snapshots = [ControllerGauges(3, 2, 4, 1, 1)]

    async def snapshot() -> ControllerGauges:
        if not snapshots:
            raise RuntimeError("the controller actor stopped")
        return snapshots.pop(0)

    metrics = ControllerMetrics(snapshot, lambda: [("Controller", stats("c", 0))])
    assert metrics.last is None
    parsed = samples(await metrics.scrape())
    kc = "kafka_controller_kafkacontroller_"
    assert value(parsed, kc + "activecontrollercount") == 1
    assert value(parsed, kc + "offlinepartitionscount") == 2
    assert value(parsed, kc + "activebrokercount") == 4
    assert value(parsed, kc + "fencedbrokercount") == 1
    assert value(parsed, "kafka_controller_controllerstats_uncleanleaderelections_total") == 1
    assert value(parsed, "ketch_controller_epoch") == 3
    assert value(parsed, "ketch_actors", kind="Controller") == 1
    # The actor cannot answer (stopping): the scrape still succeeds with the last values.
    assert samples(await metrics.scrape()) == parsed


async def test_controller_metrics_absent_until_a_snapshot_arrives() -> None:
    async def failing() -> ControllerGauges:
        raise RuntimeError("not started")

    parsed = samples(await ControllerMetrics(failing, list).scrape())
    assert not [k for k in parsed if k[0].startswith("kafka_controller")]


# -- the HTTP endpoint ----------------------------------------------------------------------------


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[MetricsHttpServer, ManualClock]]:
    clock = ManualClock()
    metrics = broker_metrics([("Partition", stats("p", 3))])
    server = MetricsHttpServer(metrics, "127.0.0.1", 0, clock=clock)
    await server.start()
    try:
        yield server, clock
    finally:
        await server.stop()
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def http(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        raw = await reader.read()  # the server closes after one response
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), headers, body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()


async def test_get_metrics_serves_the_text_format(
    endpoint: tuple[MetricsHttpServer, ManualClock],
) -> None:
    server, _ = endpoint
    status, headers, body = await http(server.port, get("/metrics"))
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert int(headers["Content-Length"]) == len(body)
    parsed = samples(body)
    assert value(parsed, "kafka_server_replicamanager_underreplicatedpartitions") == 2
    assert value(parsed, "ketch_actor_mailbox_depth", kind="Partition") == 3
    assert server.scrapes == 1


async def test_other_paths_and_methods_are_refused(
    endpoint: tuple[MetricsHttpServer, ManualClock],
) -> None:
    server, _ = endpoint
    assert (await http(server.port, get("/")))[0] == 404
    post = b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
    assert (await http(server.port, post))[0] == 405
    assert (await http(server.port, b"garbage\r\n\r\n"))[0] == 400
    status, headers, body = await http(server.port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
    assert (status, body) == (200, b"")
    assert int(headers["Content-Length"]) > 0
    assert server.scrapes == 1


async def test_an_oversized_request_head_closes_the_connection(
    endpoint: tuple[MetricsHttpServer, ManualClock],
) -> None:
    server, _ = endpoint
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 20_000 + b"\r\n\r\n")
    await writer.drain()
    assert await reader.read() == b""  # closed without an answer
    writer.close()
    await writer.wait_closed()
    assert server.scrapes == 0


async def wait_for(condition: Awaitable[object] | None = None, *, rounds: int = 200) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)
    if condition is not None:
        await condition


async def test_a_silent_client_is_cut_at_the_deadline_on_the_nodes_clock(
    endpoint: tuple[MetricsHttpServer, ManualClock],
) -> None:
    server, clock = endpoint
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /metr")  # never finished
    await writer.drain()
    closed = asyncio.ensure_future(reader.read())
    await wait_for()
    assert not closed.done()
    clock.advance(REQUEST_DEADLINE_MS - 1)
    await wait_for()
    assert not closed.done()
    clock.advance(1)
    # Real sockets: allow the close to travel (bounded by the read's own completion).
    await asyncio.wait_for(closed, timeout=5)
    assert closed.result() == b""
    writer.close()
    await writer.wait_closed()


async def test_sources_are_read_only_at_scrape_time() -> None:
    reads: list[int] = []

    def counts() -> Counts:
        reads.append(1)
        return Counts()

    metrics = BrokerMetrics(replica_counts=counts, purgatories={}, mailboxes=list)
    assert reads == []
    await metrics.scrape()
    assert reads == [1]


# -- ISR change counting in the partition actor ---------------------------------------------------


async def test_partition_counts_committed_isr_changes_and_failed_attempts(tmp_path: Path) -> None:
    clock = ManualClock(start_ms=1_000_000)
    counter = IsrChangeCounter()
    sink = RecordingSink()
    partition_log = Log.open(tmp_path / TP.dir_name, LogConfig(), clock)
    actor = PartitionActor(
        TP,
        1,
        partition_log,
        alter_partition_sink=sink,
        config=PartitionConfig(replica_lag_time_max_ms=LAG_MS, min_insync_replicas=1),
        isr_change_listener=counter,
        clock=clock,
    )
    await actor.start()
    try:
        await actor.ask(BecomeLeader(state(1, 0, (1, 2, 3))))
        replica = Replica(actor, partition_log, sink, RecordingListener(), tmp_path)
        await produce(replica, 2)
        clock.advance(LAG_MS + 1)  # neither follower fetched: both are out of sync
        assert await actor.ask(MaybeShrinkIsr())
        assert (counter.shrinks, counter.failed) == (0, 0), "proposed is not committed"

        sink.fail(ErrorCode.REQUEST_TIMED_OUT)  # one attempt failed; the proposal goes again
        await settle(lambda: len(sink.submitted) == 2)
        assert (counter.shrinks, counter.failed) == (0, 1)

        sink.accept(partition_epoch=1)
        await settle(lambda: actor.view.isr == (1,))
        assert (counter.shrinks, counter.expands, counter.failed) == (1, 0, 1)

        # Follower 2 catches up to the HW and LEO: the expansion counts once committed.
        await follower_fetch(replica, 2, 2)
        await settle(lambda: actor.pending_isr_change is not None)
        assert counter.expands == 0
        sink.accept(partition_epoch=2)
        await settle(lambda: actor.view.isr == (1, 2))
        assert (counter.shrinks, counter.expands, counter.failed) == (1, 1, 1)
    finally:
        await actor.stop()
        partition_log.close()
