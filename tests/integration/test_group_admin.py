"""Deleting consumer groups and offsets, and resetting offsets, against a process cluster: a
controller and three brokers as processes with Kafka listeners (testkit.processes).

Through real Kafka clients on the Kafka listener: confluent-kafka's AdminClient
delete_consumer_groups (DeleteGroups; this confluent-kafka has no call for OffsetDelete) and
kafka-python's KafkaAdminClient delete_groups and delete_group_offsets (DeleteGroups,
OffsetDelete), each answering Kafka's errors for an active group, an unknown group, a subscribed
topic and an unknown partition; a deletion then survives a kill -9 of the group's coordinator.
Through `ketch group delete | reset-offsets` on the native listener (the CLI's `main`, in a
worker thread): every reset target, the dry run, clamping into the log, and each bad input
refused with a clear message while the committed offsets stay as they were.

Active members are kafka-python consumers, whose heartbeat thread keeps them in their group
while the test runs. The processes run on the wall clock: every wait is a bounded poll; the
children are killed by PID whatever happens.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, Final

import confluent_kafka
import confluent_kafka.admin
import kafka
import kafka.admin
import kafka.errors
import pytest
import pytest_asyncio
from kafka.structs import OffsetAndMetadata

from cli import group as cli_group
from testkit.probes import partitions_of, wait_fully_replicated, wait_until
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import CLUSTER_PROPERTIES, OFFSETS_PARTITIONS
from tests.integration.kafka_drivers import ConfluentDriver, Sent
from wire.group_records import OFFSETS_TOPIC, partition_for

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

PARTITIONS: Final = 3
RECORDS_PER_PARTITION: Final = 10
WAIT_S: Final = 30.0


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("group-admin")
    async with running_cluster(root, CLUSTER_PROPERTIES, kafka=True) as started:
        await started.wait_running(range(3), timeout_s=WAIT_S)
        yield started


async def filled_topic(cluster: ProcessCluster, topic: str) -> None:
    """A topic of PARTITIONS partitions (RF 3) with RECORDS_PER_PARTITION records in each."""
    driver = ConfluentDriver(cluster.kafka_bootstrap())
    await driver.create_topic(topic, PARTITIONS, 3, {})
    native = cluster.client()
    try:
        await wait_fully_replicated(
            native, cluster.addresses.values(), topic, PARTITIONS, timeout_s=WAIT_S
        )
    finally:
        await native.close()
    records = [
        Sent(p, None, b"%s-%d-%d" % (topic.encode(), p, i))
        for p in range(PARTITIONS)
        for i in range(RECORDS_PER_PARTITION)
    ]
    await driver.produce(topic, records, acks="all", compression="none")


def admin(cluster: ProcessCluster) -> kafka.admin.KafkaAdminClient:
    return kafka.admin.KafkaAdminClient(
        bootstrap_servers=cluster.kafka_bootstrap().split(","), request_timeout_ms=10_000
    )


def commit_outside(
    cluster: ProcessCluster, group: str, offsets: dict[tuple[str, int], int]
) -> None:
    """Commit as a consumer outside the group (OffsetCommit, generation -1): the group is
    Empty and has these offsets."""
    client = admin(cluster)
    try:
        answer = client.alter_group_offsets(
            group,
            {
                kafka.TopicPartition(t, p): OffsetAndMetadata(o, "", -1)
                for (t, p), o in offsets.items()
            },
        )
        assert all(error is kafka.errors.NoError for error in answer.values()), answer
    finally:
        client.close()


@contextmanager
def member_of(cluster: ProcessCluster, group: str, topic: str) -> Iterator[kafka.KafkaConsumer]:
    """A kafka-python consumer subscribed to `topic` in `group`, assigned its partitions; its
    heartbeat thread keeps it a member until the block ends."""
    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=cluster.kafka_bootstrap().split(","),
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while not consumer.assignment():
            assert time.monotonic() < deadline, f"{group} never got an assignment"
            consumer.poll(timeout_ms=200)
        yield consumer
    finally:
        consumer.close()


def consumed_and_left(cluster: ProcessCluster, group: str, topic: str) -> None:
    """A member joins, commits what it read, and leaves: the group is Empty at generation > 0."""
    with member_of(cluster, group, topic) as consumer:
        consumer.commit(
            {
                kafka.TopicPartition(topic, p): OffsetAndMetadata(2, "", -1)
                for p in range(PARTITIONS)
            }
        )


def native_bootstrap(cluster: ProcessCluster) -> str:
    """A running broker's native listener (one may be killed for the failover)."""
    return str(cluster.addresses[min(b for b in cluster.addresses if cluster.broker(b).running)])


def ketch(capsys: pytest.CaptureFixture[str], cluster: ProcessCluster, *argv: str) -> Any:
    """`ketch group ARGV` through the native listener: (exit code, stdout, stderr)."""
    capsys.readouterr()
    bootstrap = native_bootstrap(cluster)
    code = cli_group.main(["group", *argv, "--bootstrap", bootstrap])
    out, err = capsys.readouterr()
    return code, out, err


def committed(capsys: pytest.CaptureFixture[str], cluster: ProcessCluster, group: str) -> Any:
    """The group's committed offsets per (topic, partition), from `ketch group describe`; None
    when the group does not exist."""
    capsys.readouterr()
    bootstrap = native_bootstrap(cluster)
    code = cli_group.main(["group", "describe", group, "--json", "--bootstrap", bootstrap])
    out, err = capsys.readouterr()
    if code != 0:
        assert "does not exist" in err, err
        return None
    return {
        (o["topic"], o["partition"]): o["committed_offset"]
        for o in json.loads(out)["offsets"]
        if o["committed_offset"] is not None
    }


# -- Kafka clients -----------------------------------------------------------------------------


def confluent_delete(cluster: ProcessCluster, groups: list[str]) -> dict[str, Any]:
    """Each group's outcome: None (deleted) or librdkafka's error code."""
    client = confluent_kafka.admin.AdminClient({"bootstrap.servers": cluster.kafka_bootstrap()})
    outcome: dict[str, Any] = {}
    for group, future in client.delete_consumer_groups(groups, request_timeout=WAIT_S).items():
        try:
            future.result()
            outcome[group] = None
        except confluent_kafka.KafkaException as exc:
            outcome[group] = exc.args[0].code()
    return outcome


async def test_kafka_clients_delete_groups_and_offsets(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    await filled_topic(cluster, "admin-orders")
    await filled_topic(cluster, "admin-audit")
    for group in ("emptied-confluent", "emptied-kafka-python"):
        await asyncio.to_thread(consumed_and_left, cluster, group, "admin-orders")
    with member_of(cluster, "busy", "admin-orders") as busy:
        busy.commit(
            {
                kafka.TopicPartition(t, 0): OffsetAndMetadata(4, "", -1)
                for t in ("admin-orders", "admin-audit")
            }
        )
        deleted = await asyncio.to_thread(
            confluent_delete, cluster, ["emptied-confluent", "busy", "never-existed"]
        )
        assert deleted == {
            "emptied-confluent": None,
            "busy": confluent_kafka.KafkaError.NON_EMPTY_GROUP,
            "never-existed": confluent_kafka.KafkaError.GROUP_ID_NOT_FOUND,
        }

        def kafka_python_deletes() -> tuple[Any, Any]:
            client = admin(cluster)
            try:
                groups = client.delete_groups(["emptied-kafka-python", "busy", "never-existed"])
                offsets = client.delete_group_offsets(
                    "busy",
                    [
                        kafka.TopicPartition("admin-orders", 0),
                        kafka.TopicPartition("admin-audit", 0),
                        kafka.TopicPartition("no-such-topic", 0),
                    ],
                )
                return groups, offsets
            finally:
                client.close()

        groups, offsets = await asyncio.to_thread(kafka_python_deletes)
        assert groups == {
            "emptied-kafka-python": "OK",
            "busy": "NonEmptyGroupError",
            "never-existed": "GroupIdNotFoundError",
        }
        assert offsets == {
            kafka.TopicPartition("admin-orders", 0): kafka.errors.GroupSubscribedToTopicError,
            kafka.TopicPartition("admin-audit", 0): kafka.errors.NoError,
            kafka.TopicPartition("no-such-topic", 0): kafka.errors.UnknownTopicOrPartitionError,
        }
        for group in ("emptied-confluent", "emptied-kafka-python"):
            assert await asyncio.to_thread(committed, capsys, cluster, group) is None
        assert await asyncio.to_thread(committed, capsys, cluster, "busy") == {
            ("admin-orders", 0): 4
        }

    # kill -9 the coordinator of the deleted group: the broker that loads its offsets
    # partition next reads the tombstones.
    native = cluster.client()
    try:
        leaders = await wait_fully_replicated(
            native, cluster.addresses.values(), OFFSETS_TOPIC, OFFSETS_PARTITIONS, timeout_s=WAIT_S
        )
        coordinator = leaders[partition_for("emptied-kafka-python", OFFSETS_PARTITIONS)].leader_id
        await cluster.broker(coordinator).kill()

        survivors = [a for b, a in cluster.addresses.items() if b != coordinator]
        offsets_partition = partition_for("emptied-kafka-python", OFFSETS_PARTITIONS)

        async def moved() -> bool:
            found = await partitions_of(native, survivors, OFFSETS_TOPIC)
            led = found.get(offsets_partition)
            return led is not None and led.leader_id not in (coordinator, -1)

        await wait_until(moved, "a new coordinator", timeout_s=WAIT_S)
        assert await asyncio.to_thread(committed, capsys, cluster, "emptied-kafka-python") is None
        assert await asyncio.to_thread(committed, capsys, cluster, "busy") == {
            ("admin-orders", 0): 4
        }, "the deleted offset stays deleted"
        await cluster.broker(coordinator).start()
        await wait_fully_replicated(
            native, cluster.addresses.values(), OFFSETS_TOPIC, OFFSETS_PARTITIONS, timeout_s=WAIT_S
        )
    finally:
        await native.close()


# -- ketch group delete ------------------------------------------------------------------------


async def test_ketch_group_delete(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    await filled_topic(cluster, "cli-delete")
    await asyncio.to_thread(commit_outside, cluster, "cli-emptied", {("cli-delete", 0): 3})
    code, out, err = await asyncio.to_thread(ketch, capsys, cluster, "delete", "cli-emptied")
    assert (code, err) == (0, ""), err
    assert "Deleted group 'cli-emptied'" in out
    assert await asyncio.to_thread(committed, capsys, cluster, "cli-emptied") is None

    with member_of(cluster, "cli-busy", "cli-delete") as busy:
        busy.commit({kafka.TopicPartition("cli-delete", 1): OffsetAndMetadata(6, "", -1)})
        code, out, err = await asyncio.to_thread(
            ketch, capsys, cluster, "delete", "cli-busy", "cli-nobody"
        )
        assert code == 1
        assert "group 'cli-busy' was not deleted: it has active members" in err
        assert "group 'cli-nobody' was not deleted: it does not exist" in err
        assert await asyncio.to_thread(committed, capsys, cluster, "cli-busy") == {
            ("cli-delete", 1): 6
        }, "nothing lost"

    code, _, err = await asyncio.to_thread(ketch, capsys, cluster, "delete", "")
    assert code == 2
    assert "a group id must not be empty" in err


# -- ketch group reset-offsets -----------------------------------------------------------------


async def test_ketch_group_reset_offsets(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "cli-reset"
    await filled_topic(cluster, topic)
    start = {(topic, p): 5 for p in range(PARTITIONS)}
    await asyncio.to_thread(commit_outside, cluster, "resettable", start)

    async def reset(*argv: str) -> tuple[int, str, str]:
        code, out, err = await asyncio.to_thread(
            ketch, capsys, cluster, "reset-offsets", "--group", "resettable", *argv
        )
        return code, out, err

    async def now() -> Any:
        return await asyncio.to_thread(committed, capsys, cluster, "resettable")

    code, out, err = await reset("--all-topics", "--to-earliest")
    assert (code, err) == (0, ""), err
    assert "Dry run: nothing committed" in out
    assert await now() == start, "a dry run commits nothing"

    code, out, err = await reset("--topic", f"{topic}:0,1", "--to-offset", "3", "--execute")
    assert (code, err) == (0, ""), err
    assert "Committed the new offsets of 2 partition(s)" in out
    assert await now() == {(topic, 0): 3, (topic, 1): 3, (topic, 2): 5}

    code, _, err = await reset("--topic", f"{topic}:2", "--shift-by", "100", "--execute")
    assert code == 0, err
    assert f"{topic}-2: offset 105 is outside the log [0, 10]; using the high watermark" in err
    code, _, err = await reset("--all-topics", "--shift-by", "-4", "--execute")
    assert code == 0, err
    assert await now() == {(topic, 0): 0, (topic, 1): 0, (topic, 2): 6}, "clamped to the start"

    code, _, err = await reset("--topic", topic, "--to-latest", "--execute")
    assert code == 0, err
    assert await now() == dict.fromkeys(start, RECORDS_PER_PARTITION)
    code, _, err = await reset("--all-topics", "--to-datetime", "2000-01-01T00:00:00Z", "--execute")
    assert code == 0, err
    assert await now() == dict.fromkeys(start, 0), "every record is later: the first offset"
    code, _, err = await reset("--all-topics", "--to-datetime", "2999-01-01T00:00:00", "--execute")
    assert code == 0, err
    assert await now() == dict.fromkeys(start, RECORDS_PER_PARTITION), "none that late: the end"


async def test_ketch_group_reset_offsets_refuses_bad_input_and_loses_nothing(
    cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = "cli-reset-refused"
    await filled_topic(cluster, topic)
    start = {(topic, p): 5 for p in range(PARTITIONS)}
    await asyncio.to_thread(commit_outside, cluster, "kept", start)

    refusals = [
        (("--all-topics", "--to-datetime", "yesterday"), 2, "not a date and time: 'yesterday'"),
        (("--topic", "no-such-topic", "--to-earliest"), 1, "unknown topic 'no-such-topic'"),
        (("--topic", f"{topic}:7", "--to-earliest"), 1, f"topic '{topic}' has no partition 7"),
        (("--topic", f"{topic}:x", "--to-earliest"), 2, "partitions must be numbers"),
        (("--all-topics", "--to-offset", "-1"), 2, "must be >= 0, got -1"),
        (("--all-topics",), 2, "one of the arguments --to-earliest"),
    ]
    for argv, exit_code, message in refusals:
        code, _, err = await asyncio.to_thread(
            ketch, capsys, cluster, "reset-offsets", "--group", "kept", *argv, "--execute"
        )
        assert code == exit_code, (argv, err)
        assert message in err, (argv, err)
    assert await asyncio.to_thread(committed, capsys, cluster, "kept") == start

    # A group that does not exist yet may be reset (Kafka's rule), but not shifted.
    code, _, err = await asyncio.to_thread(
        ketch,
        capsys,
        cluster,
        "reset-offsets",
        "--group",
        "fresh",
        "--topic",
        topic,
        "--shift-by",
        "1",
    )
    assert code == 1
    assert f"cannot shift {topic}-0: group 'fresh' has no committed offset there" in err
    code, _, err = await asyncio.to_thread(
        ketch, capsys, cluster, "reset-offsets", "--group", "fresh", "--all-topics", "--to-earliest"
    )
    assert code == 1
    assert "group 'fresh' has no committed offsets: name the topics with --topic" in err
    code, _, err = await asyncio.to_thread(
        ketch,
        capsys,
        cluster,
        "reset-offsets",
        "--group",
        "fresh",
        "--topic",
        topic,
        "--to-earliest",
        "--execute",
    )
    assert code == 0, err
    assert await asyncio.to_thread(committed, capsys, cluster, "fresh") == dict.fromkeys(start, 0)

    with member_of(cluster, "kept", topic):
        code, _, err = await asyncio.to_thread(
            ketch,
            capsys,
            cluster,
            "reset-offsets",
            "--group",
            "kept",
            "--all-topics",
            "--to-earliest",
            "--execute",
        )
        assert code == 1
        assert (
            "cannot reset the offsets of group 'kept': it is Stable with 1 active member(s)" in err
        )
    assert await asyncio.to_thread(committed, capsys, cluster, "kept") == start
