"""The new consumer group protocol (KIP-848, ConsumerGroupHeartbeat) with a real Kafka client:
confluent-kafka (librdkafka 2.16) consumers with `group.protocol=consumer` against a one-broker
process cluster with a Kafka listener. librdkafka is the one client here that speaks KIP-848:
kafka-python and aiokafka only have the classic protocol.

Two consumers share a topic of 4 partitions: the coordinator assigns (uniform), each partition to
one consumer at a time; every record is read once and committed (OffsetCommit, with the
member epoch). When one consumer closes (it leaves with epoch -1), the other gets its partitions
and reads the records produced after, from the committed offsets. ConsumerGroupDescribe (the
admin client's describe_consumer_groups) shows the group as a `consumer` group.

Static members (`group.instance.id`): one closes (it leaves with epoch -2, keeping its
assignment) and its instance comes back under a new member id with the same partitions, while
the other member sees no change.

Failover: on three brokers, the coordinator's broker is killed (-9) between two rounds of
records; the consumers find the new coordinator, which loaded the group from
`__consumer_offsets`, and go on with their partitions and epochs: every record is read exactly
once, and the committed offsets end at the log ends.

The processes run on the wall clock: every wait is a bounded poll of a condition; the children
are killed by PID whatever happens (testkit's running_cluster). The coordinator's heartbeat
interval is shortened (group.consumer.heartbeat.interval.ms) so a rebalance takes well under a
second per step instead of Kafka's 5 s.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
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
from tests.integration.cluster_properties import CLUSTER_PROPERTIES, OFFSETS_PARTITIONS
from wire.group_records import OFFSETS_TOPIC, partition_for

pytestmark = [pytest.mark.slow]

TOPIC: Final = "kip848-orders"
GROUP: Final = "kip848-group"
PARTITIONS: Final = 4
RECORDS: Final = 200  # per round
WAIT_S: Final = 30.0


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ProcessCluster]:
    properties = {
        **CLUSTER_PROPERTIES,
        "offsets.topic.replication.factor": 1,
        "group.consumer.heartbeat.interval.ms": 200,
    }
    async with running_cluster(tmp_path, properties, brokers=1, kafka=True) as started:
        await started.wait_running(range(1), timeout_s=WAIT_S)
        yield started


class Member:
    """A consumer of the new protocol, recording what it read and its assignment callbacks."""

    def __init__(self, bootstrap: str, name: str, instance_id: str | None = None) -> None:
        self.name = name
        self.read: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.owned: set[int] = set()
        self.callbacks = 0  # assignment changes seen (a member fenced or rejoining has some)
        settings: dict[str, str | int | bool] = {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "group.protocol": "consumer",
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        if instance_id is not None:
            settings["group.instance.id"] = instance_id
        self.consumer = confluent_kafka.Consumer(settings)
        self.consumer.subscribe([TOPIC], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.callbacks += 1
        self.owned |= {p.partition for p in partitions}

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        self.callbacks += 1
        self.owned -= {p.partition for p in partitions}

    def poll(self) -> None:
        message = self.consumer.poll(0.05)
        if message is None:
            return
        error = message.error()
        if error is not None:
            assert error.code() == confluent_kafka.KafkaError._PARTITION_EOF, error
            return
        partition, offset, value = message.partition(), message.offset(), message.value()
        assert partition is not None
        assert offset is not None
        assert value is not None
        self.read.append((partition, offset, value))
        deadline = time.monotonic() + WAIT_S
        while True:  # a commit in flight when the coordinator dies is retried at the new one
            try:
                self.consumer.commit(message=message, asynchronous=False)
                return
            except confluent_kafka.KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def poll_until(members: list[Member], done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            states = {m.name: (sorted(m.owned), len(m.read)) for m in members}
            raise AssertionError(f"never happened within {WAIT_S} s: {what} ({states})")
        for member in members:
            member.poll()


def poll_for(members: list[Member], seconds: float) -> None:
    end = time.monotonic() + seconds
    poll_until(members, lambda: time.monotonic() > end, f"{seconds} s of polls")


def create_topic(bootstrap: str, replicas: int) -> None:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(TOPIC, PARTITIONS, replicas)])
    futures[TOPIC].result(timeout=WAIT_S)


def produce(bootstrap: str, first: int, count: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(first, first + count):
        producer.produce(TOPIC, value=f"v{i}".encode(), key=f"k{i}".encode())
    assert producer.flush(WAIT_S) == 0


def committed(bootstrap: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False}
    )
    try:
        wanted = [confluent_kafka.TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        return {tp.partition: tp.offset for tp in consumer.committed(wanted, timeout=WAIT_S)}
    finally:
        consumer.close()


def end_offsets(bootstrap: str) -> dict[int, int]:
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        ends = {}
        for p in range(PARTITIONS):
            _, high = consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(TOPIC, p), timeout=WAIT_S
            )
            ends[p] = high
        return ends
    finally:
        consumer.close()


def describe(bootstrap: str) -> Any:
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.describe_consumer_groups([GROUP]).values()
    return future.result(timeout=WAIT_S)


def listed_consumer_groups(bootstrap: str) -> dict[str, Any]:
    """ListGroups v5 with a type filter: the consumer groups by id, with their types."""
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    future = admin.list_consumer_groups(types={confluent_kafka.ConsumerGroupType.CONSUMER})
    result = future.result(timeout=WAIT_S)
    assert not result.errors, result.errors
    return {listing.group_id: listing.type for listing in result.valid}


def ketch_describe(native: str) -> dict[str, Any]:
    """`ketch group describe GROUP --json`, as a user runs it."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "group",
            "describe",
            GROUP,
            "--json",
            "--bootstrap",
            native,
        ],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    described: dict[str, Any] = json.loads(done.stdout)
    return described


def scenario(bootstrap: str, native: str) -> None:
    a, b = Member(bootstrap, "member-a"), Member(bootstrap, "member-b")
    everyone = [a, b]
    try:
        produce(bootstrap, 0, RECORDS)
        poll_until(
            everyone,
            lambda: len(a.read) + len(b.read) >= RECORDS and bool(a.owned) and bool(b.owned),
            "both members assigned and every record read",
        )
        # Each partition is owned by one member at a time.
        assert not a.owned & b.owned
        assert a.owned | b.owned == set(range(PARTITIONS))
        description = describe(bootstrap)
        assert {m.client_id for m in description.members} == {"member-a", "member-b"}
        assert description.type == confluent_kafka.ConsumerGroupType.CONSUMER
        assert description.partition_assignor == "uniform"
        assert listed_consumer_groups(bootstrap) == {
            GROUP: confluent_kafka.ConsumerGroupType.CONSUMER
        }
        assert {
            tp.partition for m in description.members for tp in m.assignment.topic_partitions
        } == set(range(PARTITIONS))
        # ketch's own command shows the members (DescribeGroups alone would say Dead).
        shown = ketch_describe(native)
        assert (shown["state"], shown["protocol_type"], shown["protocol"]) == (
            "Stable",
            "consumer",
            "uniform",
        )
        assert {m["client_id"] for m in shown["members"]} == {"member-a", "member-b"}
        assert sorted(p for m in shown["members"] for p in m["assignment"][TOPIC]) == list(
            range(PARTITIONS)
        )

        b.consumer.close()  # leaves the group (member epoch -1)
        everyone = [a]
        produce(bootstrap, RECORDS, RECORDS)
        poll_until(
            everyone,
            lambda: a.owned == set(range(PARTITIONS)) and len(a.read) + len(b.read) >= 2 * RECORDS,
            "the remaining member owning every partition and reading the rest",
        )
        reads = [(p, o) for m in (a, b) for p, o, _ in m.read]
        assert len(reads) == len(set(reads)), "a record was read twice"
        values = sorted(v for m in (a, b) for _, _, v in m.read)
        assert values == sorted(f"v{i}".encode() for i in range(2 * RECORDS))
        assert committed(bootstrap) == end_offsets(bootstrap)
    finally:
        for member in everyone:
            member.consumer.close()


async def prepare(cluster: ProcessCluster, replicas: int) -> None:
    await asyncio.to_thread(create_topic, cluster.kafka_bootstrap(), replicas)
    client = cluster.client()
    try:
        await wait_fully_replicated(
            client, cluster.addresses.values(), TOPIC, PARTITIONS, timeout_s=WAIT_S
        )
    finally:
        await client.close()


async def test_two_consumers_of_the_new_protocol_share_and_hand_over_a_topic(
    cluster: ProcessCluster,
) -> None:
    await prepare(cluster, 1)
    native = ",".join(str(address) for address in cluster.addresses.values())
    await asyncio.to_thread(scenario, cluster.kafka_bootstrap(), native)


def both_read(bootstrap: str, members: list[Member], records: int) -> None:
    poll_until(
        members,
        lambda: sum(len(m.read) for m in members) >= records and all(m.owned for m in members),
        f"both members assigned and {records} records read",
    )


async def test_the_group_survives_its_coordinators_death(tmp_path: Path) -> None:
    properties = {**CLUSTER_PROPERTIES, "group.consumer.heartbeat.interval.ms": 200}
    async with running_cluster(tmp_path, properties, kafka=True) as cluster:
        await cluster.wait_running(range(3), timeout_s=WAIT_S)
        await prepare(cluster, 3)
        bootstrap = cluster.kafka_bootstrap()
        members = [Member(bootstrap, "member-a"), Member(bootstrap, "member-b")]
        try:
            await asyncio.to_thread(produce, bootstrap, 0, RECORDS)
            await asyncio.to_thread(both_read, bootstrap, members, RECORDS)
            client = cluster.client()
            try:
                offsets = await wait_fully_replicated(
                    client,
                    cluster.addresses.values(),
                    OFFSETS_TOPIC,
                    OFFSETS_PARTITIONS,
                    timeout_s=WAIT_S,
                )
            finally:
                await client.close()
            coordinator_id = offsets[partition_for(GROUP, OFFSETS_PARTITIONS)].leader_id
            # Let the last rebalance's callbacks settle, then count: none may follow the kill.
            await asyncio.to_thread(poll_for, members, 1.0)
            owned_before = [set(m.owned) for m in members]
            callbacks_before = [m.callbacks for m in members]
            await cluster.broker(coordinator_id).kill()
            live = cluster.kafka_bootstrap([b for b in range(3) if b != coordinator_id])
            await asyncio.to_thread(produce, live, RECORDS, RECORDS)
            await asyncio.to_thread(both_read, live, members, 2 * RECORDS)
            # The new coordinator continued the group: nobody lost or swapped partitions.
            assert [m.owned for m in members] == owned_before
            assert [m.callbacks for m in members] == callbacks_before
            reads = [(p, o) for m in members for p, o, _ in m.read]
            assert len(reads) == len(set(reads)), "a record was read twice"
            assert sorted(v for m in members for _, _, v in m.read) == sorted(
                f"v{i}".encode() for i in range(2 * RECORDS)
            )
            ends = await asyncio.to_thread(end_offsets, live)
            assert await asyncio.to_thread(committed, live) == ends
        finally:
            for member in members:
                member.consumer.close()


def static_scenario(bootstrap: str) -> None:
    a = Member(bootstrap, "member-a", "instance-a")
    b = Member(bootstrap, "member-b", "instance-b")
    everyone = [a, b]
    try:
        produce(bootstrap, 0, RECORDS)
        poll_until(
            everyone,
            lambda: len(a.read) + len(b.read) >= RECORDS and bool(a.owned) and bool(b.owned),
            "both static members assigned and every record read",
        )
        poll_for(everyone, 1.0)
        a_callbacks, b_owned = a.callbacks, set(b.owned)
        b.consumer.close()  # a static member leaves for a while (member epoch -2)
        everyone = [a]
        back = Member(bootstrap, "member-b2", "instance-b")
        everyone = [a, back]
        poll_until(everyone, lambda: back.owned == b_owned, "the instance back with its partitions")
        poll_for(everyone, 1.0)
        assert a.callbacks == a_callbacks  # no rebalance for the other member
        assert {m.client_id for m in describe(bootstrap).members} == {"member-a", "member-b2"}
    finally:
        for member in everyone:
            member.consumer.close()


async def test_a_static_member_comes_back_with_its_partitions(cluster: ProcessCluster) -> None:
    await prepare(cluster, 1)
    await asyncio.to_thread(static_scenario, cluster.kafka_bootstrap())
