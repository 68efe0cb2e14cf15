"""`ketch topic alter` (issue 23) run as the real command (`python -m cli.main`, a process of its
own), and confluent-kafka's AdminClient `create_partitions` / `incremental_alter_configs` through
the Kafka listener, against one process cluster: a controller and three brokers with Kafka
listeners (testkit.processes).

The command: partitions raised and configs set in one run, printed as changes; a decrease, an
unknown config key and an unknown topic refused with the Kafka error code and what to do, and
a run with one bad part changes nothing. The Kafka client: partitions grown and a decrease
refused with INVALID_PARTITIONS; SET and APPEND applied and then described as
DYNAMIC_TOPIC_CONFIG; a broker resource refused ("dynamic broker configs are not supported").

The processes run on the wall clock: every wait is a bounded poll; the children, the cluster's
and the commands', are killed by PID whatever happens.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, TypeVar

import confluent_kafka
import confluent_kafka.admin
import pytest
import pytest_asyncio
from confluent_kafka.admin._config import AlterConfigOpType, ConfigEntry, ConfigResource
from confluent_kafka.cimpl import NewPartitions, NewTopic

from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import PROPERTIES
from tests.integration.ketch_process import ketch

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

WAIT_S: Final = 30.0
DYNAMIC_TOPIC_CONFIG: Final = 1  # Kafka's ConfigSource id
T = TypeVar("T")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("topic-alter")
    async with running_cluster(root, PROPERTIES, kafka=True) as started:
        await started.wait_running(range(3), timeout_s=WAIT_S)
        yield started


async def described_partitions(cluster: ProcessCluster, topic: str) -> list[dict[str, Any]]:
    code, out, err = await ketch(cluster, "topic", "describe", topic, "--json")
    assert code == 0, err
    partitions: list[dict[str, Any]] = json.loads(out)["partitions"]
    return partitions


async def eventually(what: str, probe: Callable[[], T], done: Callable[[T], bool]) -> T:
    """`probe()` in a thread until `done(result)`, bounded by WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while True:
        result = await asyncio.to_thread(probe)
        if done(result) or time.monotonic() >= deadline:
            assert done(result), f"{what}: not within {WAIT_S} s; last {result!r}"
            return result
        await asyncio.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# ketch topic alter


async def test_alter_raises_partitions_and_sets_configs(cluster: ProcessCluster) -> None:
    code, _, err = await ketch(
        cluster, "topic", "create", "orders", "--partitions", "2", "--replication-factor", "3"
    )
    assert code == 0, err

    code, out, err = await ketch(
        cluster,
        "topic",
        "alter",
        "orders",
        "--partitions",
        "4",
        "--config",
        "retention.ms=3600000",
        "--config",
        "min.insync.replicas=2",
    )

    assert code == 0, err
    assert out.splitlines() == [
        "Altered topic 'orders':",
        "  partitions: 2 -> 4",
        "  set min.insync.replicas=2",
        "  set retention.ms=3600000",
    ]
    partitions = await described_partitions(cluster, "orders")
    assert [p["partition"] for p in partitions] == [0, 1, 2, 3]
    assert all(p["leader"] in p["replicas"] and len(p["replicas"]) == 3 for p in partitions)

    code, out, err = await ketch(
        cluster, "topic", "alter", "orders", "--delete-config", "min.insync.replicas"
    )
    assert code == 0, err
    assert "deleted min.insync.replicas (the broker default applies)" in out


async def test_alter_refusals_name_the_code_and_change_nothing(cluster: ProcessCluster) -> None:
    code, _, err = await ketch(
        cluster, "topic", "create", "fixed", "--partitions", "3", "--replication-factor", "2"
    )
    assert code == 0, err

    code, out, err = await ketch(cluster, "topic", "alter", "fixed", "--partitions", "2")
    assert code == 1, (out, err)
    assert (
        "cannot alter topic 'fixed': INVALID_PARTITIONS: Topic currently has 3 partitions, "
        "which is higher than the requested 2.; a topic's partitions can only be increased"
    ) in err

    # A bad config refuses the whole run: the partitions it also asked for are not added.
    code, out, err = await ketch(
        cluster, "topic", "alter", "fixed", "--partitions", "5", "--config", "retention.msx=1"
    )
    assert code == 1, (out, err)
    assert "cannot alter topic 'fixed': INVALID_CONFIG: unknown topic config 'retention.msx'" in err
    assert "fix or leave out that --config" in err
    assert len(await described_partitions(cluster, "fixed")) == 3

    code, out, err = await ketch(cluster, "topic", "alter", "never-was", "--partitions", "2")
    assert code == 1, (out, err)
    assert "cannot alter topic 'never-was': UNKNOWN_TOPIC_OR_PARTITION" in err
    assert "Traceback" not in err

    code, out, err = await ketch(cluster, "topic", "alter", "fixed")
    assert code == 2, (out, err)
    assert "nothing to alter" in err


# ---------------------------------------------------------------------------------------------
# confluent-kafka's AdminClient on the Kafka listener


async def test_kafka_admin_client_creates_partitions_and_alters_configs(
    cluster: ProcessCluster,
) -> None:
    admin = confluent_kafka.admin.AdminClient(
        {
            "bootstrap.servers": cluster.kafka_bootstrap(),
            "socket.timeout.ms": 5000,
            # It outlives the cluster until collected: no connection-refused lines then.
            "log_level": 2,
        }
    )
    topic = "kafka-altered"
    created = admin.create_topics([NewTopic(topic, 2, 3)], operation_timeout=10)
    await asyncio.to_thread(created[topic].result, WAIT_S)

    grown = admin.create_partitions([NewPartitions(topic, 5)], operation_timeout=10)
    await asyncio.to_thread(grown[topic].result, WAIT_S)
    await eventually(
        "5 partitions in the Kafka client's metadata",
        lambda: admin.list_topics(topic, timeout=5).topics[topic].partitions,
        lambda partitions: len(partitions) == 5 and all(p.leader >= 0 for p in partitions.values()),
    )
    shrunk = admin.create_partitions([NewPartitions(topic, 4)])
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        await asyncio.to_thread(shrunk[topic].result, WAIT_S)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.INVALID_PARTITIONS

    resource = ConfigResource(
        "TOPIC",
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "1234", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
        ],
    )
    altered = admin.incremental_alter_configs([resource])
    await asyncio.to_thread(altered[resource].result, WAIT_S)

    def describe() -> dict[str, Any]:
        described = ConfigResource("TOPIC", topic)
        return dict(admin.describe_configs([described])[described].result(WAIT_S))

    entries = await eventually(
        "the new configs described",
        describe,
        lambda entries: entries["retention.ms"].value == "1234",
    )
    assert entries["retention.ms"].source == DYNAMIC_TOPIC_CONFIG
    assert entries["cleanup.policy"].value == "delete,compact"
    assert entries["cleanup.policy"].source == DYNAMIC_TOPIC_CONFIG

    broker = ConfigResource(
        "BROKER",
        "0",
        incremental_configs=[
            ConfigEntry("log.retention.ms", "1", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    refused_broker = admin.incremental_alter_configs([broker])
    with pytest.raises(confluent_kafka.KafkaException) as no_broker:
        await asyncio.to_thread(refused_broker[broker].result, WAIT_S)
    error = no_broker.value.args[0]
    assert error.code() == confluent_kafka.KafkaError.INVALID_REQUEST
    assert "dynamic broker configs are not supported" in error.str()
