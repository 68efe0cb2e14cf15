"""Real Kafka clients against a ketch cluster through its Kafka listeners.

(Long, on purpose: every client's tests share one process cluster, which costs seconds to
start.) One cluster for the module: a controller and three brokers as processes (bench.failover's
ProcessCluster with Kafka listeners), short session timeouts so a killed leader is replaced in
about a second. For each of confluent-kafka (librdkafka), kafka-python and aiokafka: a topic
made through the client's admin API (RF=3, min.insync.replicas=2), records produced with acks=1
and acks=all under every compression codec the client has, read back with assign() from the
beginning and from a given offset, offsets listed (earliest, latest, by timestamp), and a
leader killed while the client produces with acks=all and idempotence: every acknowledged record
is read back at the offset its acknowledgement named, and every record is in the log once. kcat
lists metadata, produces and consumes.

Consumer groups: aiokafka members share a topic's partitions, commit and resume; confluent-kafka
and kafka-python consumers resume from their committed offsets; `ketch group list | describe`
shows a live group's members, assignments, offsets and lag; committed offsets survive a kill -9
of the group's coordinator, with the same consumer finding the new one.

The processes run on the wall clock: every wait is a bounded poll of a condition; the children
are killed by PID whatever happens.
"""

from __future__ import annotations

import asyncio
import functools
import json
import shutil
import subprocess
import threading
import time
from collections.abc import AsyncIterator
from typing import Any, Final

import aiokafka  # type: ignore[import-untyped]
import confluent_kafka
import confluent_kafka.admin
import kafka.admin
import pytest
import pytest_asyncio
from confluent_kafka.admin._config import ConfigResource

from cli import group as cli_group
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address
from testkit.probes import wait_fully_replicated, wait_until
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import CLUSTER_PROPERTIES, OFFSETS_PARTITIONS
from tests.integration.kafka_drivers import (
    COMPRESSIONS,
    DRIVERS,
    EARLIEST,
    LATEST,
    Driver,
    Read,
    Sent,
)
from wire.frames import encode_frame
from wire.group_records import OFFSETS_TOPIC, partition_for

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

PARTITIONS: Final = 3
WAIT_S: Final = 30.0
TOPIC_CONFIGS: Final = {"min.insync.replicas": "2"}


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("kafka-clients")
    async with running_cluster(root, CLUSTER_PROPERTIES, kafka=True) as started:
        await started.wait_running(range(3), timeout_s=WAIT_S)
        yield started


def driver_for(cluster: ProcessCluster, client: str) -> Driver:
    return DRIVERS[client](cluster.kafka_bootstrap())


async def ready_topic(cluster: ProcessCluster, driver: Driver, topic: str) -> None:
    await driver.create_topic(topic, PARTITIONS, 3, TOPIC_CONFIGS)
    client = cluster.client()
    try:
        await wait_fully_replicated(
            client, cluster.addresses.values(), topic, PARTITIONS, timeout_s=WAIT_S
        )
    finally:
        await client.close()


def by_partition(reads: list[Read]) -> dict[int, list[tuple[int, bytes | None, bytes]]]:
    found: dict[int, list[tuple[int, bytes | None, bytes]]] = {}
    for read in reads:
        found.setdefault(read.partition, []).append((read.offset, read.key, read.value))
    return found


@pytest.mark.parametrize("client", sorted(DRIVERS))
async def test_admin_produce_consume_and_list_offsets(cluster: ProcessCluster, client: str) -> None:
    driver = driver_for(cluster, client)
    topic = f"roundtrip-{client}"
    await ready_topic(cluster, driver, topic)
    expected: dict[int, list[tuple[int, bytes | None, bytes]]] = {}
    index = 0
    for acks in ("1", "all"):
        for compression in COMPRESSIONS:
            batch = []
            for _ in range(4):
                key = None if index % 4 == 3 else b"k%d" % index
                batch.append(Sent(index % PARTITIONS, key, b"%s-%s-%d" % (
                    acks.encode(), compression.encode(), index)))  # fmt: skip
                index += 1
            acked = await driver.produce(topic, batch, acks=acks, compression=compression)
            for sent, (partition, offset) in zip(batch, acked, strict=True):
                assert partition == sent.partition, f"{driver.name} {driver.version}"
                expected.setdefault(partition, []).append((offset, sent.key, sent.value))
    # Offsets per partition are dense from 0 in the order the acknowledgements came back.
    for records in expected.values():
        assert [offset for offset, _, _ in records] == list(range(len(records)))

    everything = await driver.consume(topic, dict.fromkeys(range(PARTITIONS), 0), index)
    assert by_partition(everything) == expected, f"{driver.name} {driver.version}"

    # From a given offset: the rest of partition 0 only.
    tail = await driver.consume(topic, {0: 3}, len(expected[0]) - 3)
    assert by_partition(tail) == {0: expected[0][3:]}

    assert await driver.list_offset(topic, 0, EARLIEST) == 0
    assert await driver.list_offset(topic, 0, LATEST) == len(expected[0])
    # By timestamp: the record read at offset 5 carries a timestamp; asking for it finds the
    # first offset at or after it (an earlier record can share the millisecond).
    stamp = next(r.timestamp_ms for r in everything if r.partition == 0 and r.offset == 5)
    found = await driver.list_offset(topic, 0, stamp)
    assert 0 <= found <= 5
    assert all(r.timestamp_ms < stamp for r in everything if r.partition == 0 and r.offset < found)
    assert await driver.list_offset(topic, 0, stamp + 3_600_000) == -1  # none that late


@pytest.mark.parametrize("client", sorted(DRIVERS))
async def test_a_killed_leader_loses_no_acknowledged_record(
    cluster: ProcessCluster, client: str
) -> None:
    driver = driver_for(cluster, client)
    topic = f"failover-{client}"
    await ready_topic(cluster, driver, topic)
    native = cluster.client()
    try:
        leaders = await wait_fully_replicated(
            native, cluster.addresses.values(), topic, PARTITIONS, timeout_s=WAIT_S
        )
        victim = leaders[0].leader_id
        acks_seen = 0
        lock = threading.Lock()

        def on_ack(partition: int, offset: int) -> None:
            nonlocal acks_seen
            with lock:
                acks_seen += 1

        records = [Sent(0, b"k", b"v%d" % i) for i in range(60)]
        producing = asyncio.ensure_future(
            driver.produce(
                topic, records, acks="all", compression="none", on_ack=on_ack, idempotent=True
            )
        )

        async def fifteen_acked() -> bool:
            return acks_seen >= 15 or producing.done()

        await wait_until(fifteen_acked, "15 acknowledgements before the kill", timeout_s=WAIT_S)
        assert not producing.done(), "the produce loop ended before the leader was killed"
        await cluster.broker(victim).kill()
        acked = await asyncio.wait_for(producing, WAIT_S * 2)
        # Everything acknowledged after the kill came from another leader.
        await cluster.broker(victim).start()
        await wait_fully_replicated(
            native, cluster.addresses.values(), topic, PARTITIONS, timeout_s=WAIT_S
        )
    finally:
        await native.close()
    assert len(acked) == len(records)
    offsets = [offset for _, offset in acked]
    end = max(offsets) + 1
    read = await driver.consume(topic, {0: 0}, end)
    at = {r.offset: r.value for r in read}
    for sent, (_, offset) in zip(records, acked, strict=True):
        assert at.get(offset) == sent.value, (
            f"{driver.name} {driver.version}: acknowledged {sent.value!r} at {offset}, "
            f"read {at.get(offset)!r}"
        )
    # Idempotence (issue 19): every value once, in the order sent, and nothing else; the new
    # leader continued the producer's sequence (an OUT_OF_ORDER_SEQUENCE_NUMBER there would have
    # failed or reordered the sends).
    assert [r.value for r in sorted(read, key=lambda r: r.offset)] == [r.value for r in records]


KCAT: Final = shutil.which("kcat")


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (make test installs it with apt)")
async def test_kcat_lists_produces_and_consumes(cluster: ProcessCluster) -> None:
    assert KCAT is not None
    bootstrap = cluster.kafka_bootstrap()
    driver = driver_for(cluster, "confluent")
    await ready_topic(cluster, driver, "kcat")
    listing = await asyncio.to_thread(_run, [KCAT, "-b", bootstrap, "-L", "-m", "10"])
    assert " 3 brokers:" in listing
    for broker_id, address in cluster.kafka_addresses.items():
        assert f"broker {broker_id} at {address.host}:{address.port}" in listing
    assert 'topic "kcat" with 3 partitions:' in listing

    lines = [f"line-{i}" for i in range(10)]
    await asyncio.to_thread(
        _run,
        [KCAT, "-b", bootstrap, "-P", "-t", "kcat", "-p", "1", "-X", "acks=all"],
        "\n".join(lines) + "\n",
    )
    consumed = await asyncio.to_thread(
        _run, [KCAT, "-b", bootstrap, "-C", "-t", "kcat", "-p", "1", "-o", "beginning", "-e"]
    )
    assert consumed.splitlines() == lines


def _run(command: list[str], stdin: str | None = None) -> str:
    done = subprocess.run(
        command, input=stdin, capture_output=True, text=True, timeout=WAIT_S, check=False
    )
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr}"
    return done.stdout


async def test_garbage_on_the_kafka_port_closes_only_that_connection(
    cluster: ProcessCluster,
) -> None:
    address: Address = cluster.kafka_addresses[0]
    transport = TcpTransport()
    bad = await transport.connect(address, timeout_s=5)
    await bad.send(encode_frame(b"\xff" * 40))
    async with asyncio.timeout(5):
        assert await bad.receive() == b""  # closed by the broker
    await bad.aclose()
    # The broker still serves Kafka clients.
    driver = driver_for(cluster, "aiokafka")
    await ready_topic(cluster, driver, "after-garbage")
    assert await driver.list_offset("after-garbage", 0, LATEST) == 0


async def test_describe_configs_shows_a_topics_overrides(cluster: ProcessCluster) -> None:
    """Through confluent-kafka's and kafka-python's admin clients."""

    driver = driver_for(cluster, "confluent")
    await ready_topic(cluster, driver, "described")
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    resource = ConfigResource("TOPIC", "described")
    future = admin.describe_configs([resource])[resource]
    entries = await asyncio.to_thread(future.result, WAIT_S)
    assert entries["min.insync.replicas"].value == "2"
    assert entries["min.insync.replicas"].source == 1  # DYNAMIC_TOPIC_CONFIG
    assert entries["cleanup.policy"].value == "delete"
    assert entries["cleanup.policy"].source == 5  # DEFAULT_CONFIG

    def with_kafka_python() -> dict[str, dict[str, object]]:
        client = kafka.admin.KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap())
        try:
            resource = kafka.admin.ConfigResource(kafka.admin.ConfigResourceType.TOPIC, "described")
            # kafka-python's default filter keeps only settings that differ from the defaults.
            modified = client.describe_configs([resource])
            assert set(modified["topic"]["described"]) == {"min.insync.replicas"}
            everything = client.describe_configs([resource], config_filter="all")
            return dict(everything["topic"]["described"])
        finally:
            client.close()

    values = await asyncio.to_thread(with_kafka_python)
    assert values["min.insync.replicas"]["value"] == "2"
    assert values["retention.ms"]["value"] == "604800000"


async def produce_spread(driver: Driver, topic: str, count: int, tag: str) -> set[bytes]:
    records = [Sent(i % PARTITIONS, None, b"%s-%d" % (tag.encode(), i)) for i in range(count)]
    await driver.produce(topic, records, acks="all", compression="none")
    return {r.value for r in records}


async def test_aiokafka_group_members_share_commit_and_resume(cluster: ProcessCluster) -> None:
    driver = driver_for(cluster, "aiokafka")
    await ready_topic(cluster, driver, "grouped-aiokafka")
    first = await produce_spread(driver, "grouped-aiokafka", 30, "first")

    def consumer() -> aiokafka.AIOKafkaConsumer:
        return aiokafka.AIOKafkaConsumer(
            "grouped-aiokafka",
            bootstrap_servers=cluster.kafka_bootstrap(),
            group_id="shared",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            metadata_max_age_ms=1000,
        )

    members = [consumer(), consumer()]
    for member in members:
        await member.start()
    try:
        seen: dict[int, set[bytes]] = {0: set(), 1: set()}

        async def everything_read() -> bool:
            for index, member in enumerate(members):
                batches = await member.getmany(timeout_ms=100)
                for messages in batches.values():
                    seen[index].update(m.value for m in messages)
            return seen[0] | seen[1] == first and all(m.assignment() for m in members)

        await wait_until(everything_read, "both members consume their share", timeout_s=WAIT_S)
        assignments = [{tp.partition for tp in m.assignment()} for m in members]
        assert not assignments[0] & assignments[1]
        assert assignments[0] | assignments[1] == set(range(PARTITIONS))
        for member in members:
            await member.commit()
    finally:
        for member in members:
            await member.stop()

    later = await produce_spread(driver, "grouped-aiokafka", 3, "later")
    resumed = consumer()
    await resumed.start()
    try:
        found: set[bytes] = set()

        async def only_new() -> bool:
            for messages in (await resumed.getmany(timeout_ms=200)).values():
                found.update(m.value for m in messages)
            return found >= later

        await wait_until(only_new, "the new records after the committed offsets", timeout_s=WAIT_S)
        assert found == later, "a resumed member starts at the committed offsets"
    finally:
        await resumed.stop()


def ketch_group(
    capsys: pytest.CaptureFixture[str], cluster: ProcessCluster, *argv: str, table: bool = False
) -> Any:
    """`ketch group ARGV --json` through the native listener: (exit code, parsed JSON or
    stderr); with `table`, without --json: (exit code, stdout)."""
    capsys.readouterr()
    bootstrap = str(cluster.addresses[min(cluster.addresses)])
    fmt = [] if table else ["--json"]
    code = cli_group.main(["group", *argv, *fmt, "--bootstrap", bootstrap])
    out, err = capsys.readouterr()
    if code != 0:
        return code, err
    return code, out if table else json.loads(out)


def confluent_group_admin(bootstrap: str, group: str) -> tuple[list[str], Any]:
    """The group ids librdkafka's admin client lists, and its description of `group`."""
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups(request_timeout=WAIT_S).result()
    described = admin.describe_consumer_groups([group], request_timeout=WAIT_S)[group].result()
    return [g.group_id for g in listed.valid], described


async def test_group_list_and_describe_show_members_offsets_and_lag(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    driver = driver_for(cluster, "aiokafka")
    await ready_topic(cluster, driver, "group-described")
    await produce_spread(driver, "group-described", 12, "first")
    members = [
        aiokafka.AIOKafkaConsumer(
            "group-described",
            bootstrap_servers=cluster.kafka_bootstrap(),
            group_id="described-group",
            client_id=f"member-{index}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        for index in range(2)
    ]
    for member in members:
        await member.start()
    try:
        read = 0

        async def everything_read() -> bool:
            nonlocal read
            for member in members:
                for messages in (await member.getmany(timeout_ms=100)).values():
                    read += len(messages)
            return read == 12 and all(m.assignment() for m in members)

        await wait_until(everything_read, "both members read their share", timeout_s=WAIT_S)
        for member in members:
            await member.commit()
        await produce_spread(driver, "group-described", 6, "unread")

        code, described = await asyncio.to_thread(
            ketch_group, capsys, cluster, "describe", "described-group"
        )
        assert code == 0, described
        assert described["state"] == "Stable"
        assert described["protocol_type"] == "consumer"
        clients = sorted(m["client_id"] for m in described["members"])
        assert clients == ["member-0", "member-1"]
        owned = {
            p: m["member_id"]
            for m in described["members"]
            for p in m["assignment"]["group-described"]
        }
        assert sorted(owned) == list(range(PARTITIONS))
        assert all(m["subscription"] == ["group-described"] for m in described["members"])
        offsets = {o["partition"]: o for o in described["offsets"]}
        assert sorted(offsets) == list(range(PARTITIONS))
        for partition, row in offsets.items():
            # produce_spread puts every PARTITIONS-th record on each partition
            assert (row["committed_offset"], row["high_watermark"], row["lag"]) == (4, 6, 2)
            assert row["member_id"] == owned[partition]

        code, text = await asyncio.to_thread(
            functools.partial(ketch_group, table=True),
            capsys,
            cluster,
            "describe",
            "described-group",
        )
        assert code == 0, text
        for shown in ("state Stable", "member-0", "member-1", "group-described:"):
            assert shown in text

        names, seen = await asyncio.to_thread(
            confluent_group_admin, cluster.kafka_bootstrap(), "described-group"
        )
        assert "described-group" in names, "ListGroups through librdkafka's admin client"
        assert seen.state == confluent_kafka.ConsumerGroupState.STABLE
        assert sorted(m.client_id for m in seen.members) == ["member-0", "member-1"]
        assert sorted(
            tp.partition for m in seen.members for tp in m.assignment.topic_partitions
        ) == list(range(PARTITIONS)), "DescribeGroups, with each member's assignment"

        code, listed = await asyncio.to_thread(ketch_group, capsys, cluster, "list")
        assert code == 0, listed
        mine = [g for g in listed["groups"] if g["group"] == "described-group"]
        assert [(g["state"], g["protocol_type"]) for g in mine] == [("Stable", "consumer")]
        assert mine[0]["coordinator"] == described["coordinator"]
    finally:
        for member in members:
            await member.stop()

    code, err = await asyncio.to_thread(ketch_group, capsys, cluster, "describe", "no-such-group")
    assert code == 1
    assert "'no-such-group' does not exist" in err


def confluent_group_read(
    bootstrap: str, topic: str, group: str, expected: set[bytes]
) -> set[bytes]:
    """Subscribe as a member of `group`, read until `expected` (bounded), commit, close."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    found: set[bytes] = set()
    deadline = time.monotonic() + WAIT_S
    try:
        while found != expected and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                found.add(message.value() or b"")
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return found


def kafka_python_group_read(
    bootstrap: str, topic: str, group: str, expected: set[bytes]
) -> set[bytes]:
    """The same with kafka-python (its own, older, versions of the group APIs)."""
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    found: set[bytes] = set()
    deadline = time.monotonic() + WAIT_S
    try:
        while found != expected and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=200).values():
                found.update(m.value for m in messages)
        consumer.commit()
    finally:
        consumer.close()
    return found


GROUP_READERS: Final = {"confluent": confluent_group_read, "kafka-python": kafka_python_group_read}


@pytest.mark.parametrize("client", sorted(GROUP_READERS))
async def test_a_group_resumes_from_committed_offsets(cluster: ProcessCluster, client: str) -> None:
    driver = driver_for(cluster, client)
    topic = f"grouped-{client}"
    await ready_topic(cluster, driver, topic)
    read = functools.partial(
        GROUP_READERS[client], cluster.kafka_bootstrap(), topic, f"{client}-group"
    )
    first = await produce_spread(driver, topic, 12, "first")
    assert await asyncio.to_thread(read, first) == first
    later = await produce_spread(driver, topic, 3, "later")
    assert await asyncio.to_thread(read, later) == later, "a new member starts where it committed"


async def stop_aiokafka(consumer: aiokafka.AIOKafkaConsumer) -> None:
    """`consumer.stop()`, whose CancelledError is aiokafka's own when a fetch to a killed broker
    was in its retry backoff (0.14's Fetcher.close awaits the task it just cancelled); the
    consumer is closed all the same. A cancellation of this task itself still propagates."""
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise


async def test_committed_offsets_survive_the_coordinators_death(
    cluster: ProcessCluster,
) -> None:
    driver = driver_for(cluster, "aiokafka")
    await ready_topic(cluster, driver, "coordinated")
    await produce_spread(driver, "coordinated", 9, "x")
    group = "survivor"
    tp = aiokafka.TopicPartition("coordinated", 1)

    async def committer() -> aiokafka.AIOKafkaConsumer:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=cluster.kafka_bootstrap(),
            group_id=group,
            enable_auto_commit=False,
            metadata_max_age_ms=500,
            retry_backoff_ms=50,
        )
        await consumer.start()
        consumer.assign([tp])
        return consumer

    native = cluster.client()
    try:
        consumer = await committer()
        try:
            await consumer.commit({tp: 2})
            assert await consumer.committed(tp) == 2
            offsets = await wait_fully_replicated(
                native,
                cluster.addresses.values(),
                OFFSETS_TOPIC,
                OFFSETS_PARTITIONS,
                timeout_s=WAIT_S,
            )
            coordinator = offsets[partition_for(group, OFFSETS_PARTITIONS)].leader_id
            await cluster.broker(coordinator).kill()
            # The same consumer: its coordinator is gone; it finds the new one (a lost
            # connection or NOT_COORDINATOR, then FindCoordinator), which has loaded the offsets.
            found = await asyncio.wait_for(consumer.committed(tp), WAIT_S)
            assert found == 2, cluster.logs()
            await consumer.commit({tp: 5})
        finally:
            await stop_aiokafka(consumer)
        fresh = await committer()
        try:
            assert await asyncio.wait_for(fresh.committed(tp), WAIT_S) == 5
        finally:
            await stop_aiokafka(fresh)
        await cluster.broker(coordinator).start()
        await wait_fully_replicated(
            native, cluster.addresses.values(), OFFSETS_TOPIC, OFFSETS_PARTITIONS, timeout_s=WAIT_S
        )
    finally:
        await native.close()
