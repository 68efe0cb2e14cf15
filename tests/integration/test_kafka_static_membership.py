"""Static membership (KIP-345) with a real Kafka client: confluent-kafka (librdkafka) consumers
with `group.instance.id` against a one-broker process cluster with a Kafka listener.

Two static consumers share a topic; one is closed (a static member sends no LeaveGroup on close)
and restarted with the same instance id within its session timeout: it gets its partitions back
and the other consumer sees no rebalance (its assignment callback ran once, its revocation
callback never). DescribeGroups shows both instance ids.

The processes run on the wall clock: every wait is a bounded poll of a condition; the children
are killed by PID whatever happens (testkit's running_cluster).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

import confluent_kafka
import confluent_kafka.admin
import pytest
from confluent_kafka.cimpl import NewTopic

from testkit.probes import wait_fully_replicated
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import CLUSTER_PROPERTIES

pytestmark = [pytest.mark.slow]

TOPIC: Final = "static-orders"
GROUP: Final = "static-group"
PARTITIONS: Final = 4
WAIT_S: Final = 20.0
SESSION_MS: Final = 10_000  # the restart below takes well under this


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ProcessCluster]:
    properties = {**CLUSTER_PROPERTIES, "offsets.topic.replication.factor": 1}
    async with running_cluster(tmp_path, properties, brokers=1, kafka=True) as started:
        await started.wait_running(range(1), timeout_s=WAIT_S)
        yield started


class StaticConsumer:
    """A confluent-kafka consumer with an instance id, recording its rebalance callbacks."""

    def __init__(self, bootstrap: str, instance_id: str) -> None:
        self.assigned: list[set[int]] = []
        self.revoked: list[set[int]] = []
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "group.instance.id": instance_id,
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": 300,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.assigned.append({p.partition for p in partitions})

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self.revoked.append({p.partition for p in partitions})

    def owned(self) -> set[int]:
        return self.assigned[-1] if self.assigned else set()


def poll_until(consumers: list[StaticConsumer], done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {WAIT_S} s: {what}")
        for member in consumers:
            member.consumer.poll(0.05)


def create_topic(bootstrap: str) -> None:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
    futures[TOPIC].result(timeout=WAIT_S)


def described_instances(bootstrap: str) -> set[str | None]:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.describe_consumer_groups([GROUP]).values()
    description = future.result(timeout=WAIT_S)
    return {m.group_instance_id for m in description.members}


def restart_scenario(bootstrap: str) -> None:
    a = StaticConsumer(bootstrap, "instance-a")
    b = StaticConsumer(bootstrap, "instance-b")
    everyone = [a, b]
    try:
        # A lone first member may be assigned everything before the second one joins: wait for
        # the two-member generation (each owns some partitions).
        poll_until(everyone, lambda: bool(a.owned()) and bool(b.owned()), "shared assignment")
        assert described_instances(bootstrap) == {"instance-a", "instance-b"}
        a_assignments, a_revocations, b_owned = len(a.assigned), len(a.revoked), b.owned()

        b.consumer.close()  # a static member sends no LeaveGroup on close
        everyone = [a]  # closed once only, should the restart fail
        restarted = StaticConsumer(bootstrap, "instance-b")
        everyone = [a, restarted]
        poll_until(everyone, lambda: bool(restarted.assigned), "the restarted member assigned")
        assert restarted.owned() == b_owned
        # Keep both polling over a few heartbeats: a rebalance would show on `a` by then.
        end = time.monotonic() + 1.5
        poll_until(everyone, lambda: time.monotonic() > end, "heartbeats")
        assert (len(a.assigned), len(a.revoked)) == (a_assignments, a_revocations)
        assert a.owned() | restarted.owned() == set(range(PARTITIONS))
    finally:
        for member in everyone:
            member.consumer.close()


async def test_a_restarted_static_consumer_gets_its_partitions_back_without_a_rebalance(
    cluster: ProcessCluster,
) -> None:
    bootstrap = cluster.kafka_bootstrap()
    await asyncio.to_thread(create_topic, bootstrap)
    client = cluster.client()
    try:
        await wait_fully_replicated(
            client, cluster.addresses.values(), TOPIC, PARTITIONS, timeout_s=WAIT_S
        )
    finally:
        await client.close()
    await asyncio.to_thread(restart_scenario, bootstrap)
