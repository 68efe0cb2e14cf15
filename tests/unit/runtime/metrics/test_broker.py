"""runtime/metrics/broker.py: latency buckets, Kafka's request names and values in the text
exposition, the broker's gauges and counters under Kafka's names read from their sources at
scrape time. (That the partition actor reports only committed ISR changes, and each failed
attempt, is tested in tests/unit/actors/replication/test_isr.py.)"""

from __future__ import annotations

import pytest

from runtime.clock import NS_PER_MS
from runtime.metrics.broker import (
    LATENCY_BUCKETS_MS,
    BrokerMetrics,
    LatencyHistogram,
    RequestMetrics,
    request_name,
)
from runtime.metrics.registry import NodeMetrics
from tests.unit.runtime.metrics.helpers import Counts, broker_metrics, samples, stats, value
from wire.messages import FetchRequest, MetadataRequest, ProduceRequest

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


# -- the broker's registry ------------------------------------------------------------------------


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


async def test_sources_are_read_only_at_scrape_time() -> None:
    reads: list[int] = []

    def counts() -> Counts:
        reads.append(1)
        return Counts()

    metrics = BrokerMetrics(replica_counts=counts, purgatories={}, mailboxes=list)
    assert reads == []
    await metrics.scrape()
    assert reads == [1]
