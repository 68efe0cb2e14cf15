"""What Kafka clients expect of a cluster by default (issue 22), with real clients against
process clusters: a cluster id, and topics created on first use.

Two clusters, one per module fixture:

- `cluster`: a controller and three brokers with Kafka listeners and the default
  auto.create.topics.enable (true), num.partitions and default.replication.factor (1).
  confluent-kafka's `AdminClient.describe_cluster()` returns the cluster id (it runs in a child
  process: librdkafka used to crash the whole process on the null id); confluent-kafka,
  kafka-python and aiokafka see the same id through Metadata and produce to a topic nobody
  created, with default settings, and each record is read back.
- `closed`: one broker with auto.create.topics.enable=false, where a producer's unknown topic
  stays unknown (UNKNOWN_TOPIC_OR_PARTITION, as before). It also has the restart tests: the id
  survives a restart of the controller and the broker (and is in the broker's meta.properties),
  and a broker whose meta.properties names another cluster refuses to join and exits 1.

The processes run on the wall clock: every wait is a bounded poll of a condition; the children
are killed by PID whatever happens.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import aiokafka  # type: ignore[import-untyped]
import aiokafka.admin  # type: ignore[import-untyped]
import confluent_kafka
import kafka
import kafka.admin
import pytest
import pytest_asyncio

from node.process import EXIT_CONFIG
from runtime.log.meta_properties import META_PROPERTIES_FILE, read_if_present
from testkit.probes import wait_until
from testkit.processes import REPO, ProcessCluster, running_cluster
from tests.integration.cluster_properties import CLUSTER_PROPERTIES
from tests.integration.kafka_drivers import DRIVERS, Driver
from wire.errors import ErrorCode
from wire.messages import (
    DescribeClusterRequest,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponseTopic,
)

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

WAIT_S: Final = 30.0
RECORDS: Final = 5


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("kafka-defaults")
    async with running_cluster(root, CLUSTER_PROPERTIES, kafka=True) as started:
        await started.wait_running(range(3), timeout_s=WAIT_S)
        yield started


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def closed(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("no-auto-creation")
    properties = {**CLUSTER_PROPERTIES, "auto.create.topics.enable": False}
    async with running_cluster(root, properties, brokers=1, kafka=True) as started:
        await started.wait_running([0], timeout_s=WAIT_S)
        yield started


async def native_cluster_id(cluster: ProcessCluster) -> str:
    """The id `ketch cluster status` shows: DescribeCluster through a broker's native listener."""
    client = cluster.client()
    try:
        response = await client.send_any(DescribeClusterRequest())
    finally:
        await client.close()
    assert isinstance(response, DescribeClusterResponse), response
    assert response.error_code == ErrorCode.NONE, response
    return response.cluster_id


async def native_topic(cluster: ProcessCluster, topic: str) -> MetadataResponseTopic:
    """The topic as a broker's native listener answers it, without asking to create it."""
    client = cluster.client()
    try:
        response = await client.send_any(MetadataRequest(topics=[MetadataRequestTopic(name=topic)]))
    finally:
        await client.close()
    assert isinstance(response, MetadataResponse), response
    [answer] = response.topics
    return answer


async def check_created_with_defaults(cluster: ProcessCluster, topic: str) -> None:
    """num.partitions and default.replication.factor: one partition, one replica."""
    answer = await native_topic(cluster, topic)
    assert answer.error_code == ErrorCode.NONE, answer
    assert [(p.partition_index, len(p.replica_nodes)) for p in answer.partitions] == [(0, 1)]


async def read_back(cluster: ProcessCluster, topic: str, values: list[bytes]) -> None:
    driver: Driver = DRIVERS["confluent"](cluster.kafka_bootstrap())
    read = await driver.consume(topic, {0: 0}, len(values))
    assert [r.value for r in sorted(read, key=lambda r: r.offset)] == values


# -- the cluster id --------------------------------------------------------------------------------

DESCRIBE_CLUSTER: Final = """
import json, sys
import confluent_kafka.admin

admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": sys.argv[1]})
described = admin.describe_cluster(request_timeout=20).result(timeout=30)
print(json.dumps({
    "cluster_id": described.cluster_id,
    "nodes": sorted(node.id for node in described.nodes),
}))
"""


async def run_child(*argv: str) -> tuple[int, str, str]:
    """A Python child process (killed by PID if it outlives WAIT_S): exit code, stdout, stderr."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        *argv,
        cwd=REPO,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(child.communicate(), WAIT_S)
    except TimeoutError:
        child.kill()
        await child.wait()
        raise
    assert child.returncode is not None
    return child.returncode, out.decode(), err.decode()


async def test_confluent_describe_cluster_returns_the_cluster_id(cluster: ProcessCluster) -> None:
    cluster_id = await native_cluster_id(cluster)
    assert len(cluster_id) == 22, cluster_id
    code, out, err = await run_child("-c", DESCRIBE_CLUSTER, cluster.kafka_bootstrap())
    # A negative code is a signal: -11 was librdkafka's segfault on a null cluster id.
    assert code == 0, f"describe_cluster exited {code}\n{err}"
    described = json.loads(out)
    assert described == {"cluster_id": cluster_id, "nodes": [0, 1, 2]}


async def test_kafka_python_and_aiokafka_read_the_cluster_id(cluster: ProcessCluster) -> None:
    cluster_id = await native_cluster_id(cluster)

    def with_kafka_python() -> dict[str, Any]:
        admin = kafka.admin.KafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap())
        try:
            described: dict[str, Any] = admin.describe_cluster()
            return described
        finally:
            admin.close()

    assert (await asyncio.to_thread(with_kafka_python))["cluster_id"] == cluster_id
    admin = aiokafka.admin.AIOKafkaAdminClient(bootstrap_servers=cluster.kafka_bootstrap())
    await admin.start()
    try:
        described = await asyncio.wait_for(admin.describe_cluster(), WAIT_S)
    finally:
        await admin.close()
    assert described["cluster_id"] == cluster_id


# -- automatic topic creation ----------------------------------------------------------------------


def confluent_produce(bootstrap: str, topic: str, values: list[bytes]) -> list[Any]:
    """Produce with librdkafka's defaults (no partition, no topic settings); the delivery
    errors, one per record (None when delivered)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    errors: list[Any] = []
    for value in values:
        producer.produce(topic, value=value, on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(WAIT_S) == 0, "records still queued"
    return errors


async def test_confluent_produces_to_a_new_topic_with_default_settings(
    cluster: ProcessCluster,
) -> None:
    topic = "auto-confluent"
    values = [b"c%d" % i for i in range(RECORDS)]
    errors = await asyncio.to_thread(confluent_produce, cluster.kafka_bootstrap(), topic, values)
    assert errors == [None] * RECORDS
    await check_created_with_defaults(cluster, topic)
    await read_back(cluster, topic, values)


async def test_kafka_python_produces_to_a_new_topic(cluster: ProcessCluster) -> None:
    topic = "auto-kafka-python"
    values = [b"k%d" % i for i in range(RECORDS)]

    def produce() -> None:
        producer = kafka.KafkaProducer(bootstrap_servers=cluster.kafka_bootstrap())
        try:
            for value in values:
                producer.send(topic, value=value).get(timeout=WAIT_S)
        finally:
            producer.close(timeout=5)

    await asyncio.to_thread(produce)
    await check_created_with_defaults(cluster, topic)
    await read_back(cluster, topic, values)


async def test_aiokafka_produces_to_a_new_topic(cluster: ProcessCluster) -> None:
    topic = "auto-aiokafka"
    values = [b"a%d" % i for i in range(RECORDS)]
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.kafka_bootstrap())
    await producer.start()
    try:
        for value in values:
            await asyncio.wait_for(producer.send_and_wait(topic, value), WAIT_S)
    finally:
        await producer.stop()
    await check_created_with_defaults(cluster, topic)
    await read_back(cluster, topic, values)


def confluent_produce_unknown(bootstrap: str, topic: str) -> Any:
    """One record to a topic that will not be created: its delivery error."""
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            # librdkafka waits this long before it believes a topic does not exist.
            "topic.metadata.propagation.max.ms": 1_000,
            "message.timeout.ms": 5_000,
        }
    )
    errors: list[Any] = []
    producer.produce(topic, value=b"lost", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(WAIT_S)
    return errors[0] if errors else None


async def test_with_auto_creation_off_an_unknown_topic_stays_unknown(
    closed: ProcessCluster,
) -> None:
    topic = "never-created"
    error = await asyncio.to_thread(confluent_produce_unknown, closed.kafka_bootstrap(), topic)
    assert error is not None, "delivered to a topic that should not exist"
    assert error.code() in (
        confluent_kafka.KafkaError.UNKNOWN_TOPIC_OR_PART,
        confluent_kafka.KafkaError._UNKNOWN_TOPIC,
    ), error
    # A Metadata that allows creation is answered as before, and creates nothing.
    client = closed.client()
    try:
        response = await client.send_any(
            MetadataRequest(
                topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True
            )
        )
    finally:
        await client.close()
    assert isinstance(response, MetadataResponse), response
    assert [(t.name, t.error_code) for t in response.topics] == [
        (topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    ]
    assert (await native_topic(closed, topic)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# -- the cluster id across restarts ----------------------------------------------------------------


def stored_cluster_id(cluster: ProcessCluster, broker_id: int) -> str | None:
    meta = read_if_present(cluster.broker_dir(broker_id))
    assert meta is not None, f"broker {broker_id} has no {META_PROPERTIES_FILE}"
    return meta.cluster_id


async def test_the_cluster_id_survives_a_controller_and_broker_restart(
    closed: ProcessCluster,
) -> None:
    cluster_id = await native_cluster_id(closed)
    assert stored_cluster_id(closed, 0) == cluster_id
    assert await closed.broker(0).terminate() == 0  # clean stop
    await closed.controller.kill()  # crash
    await closed.controller.start()
    await closed.broker(0).start()
    await closed.wait_running([0], timeout_s=WAIT_S)
    assert await native_cluster_id(closed) == cluster_id
    assert stored_cluster_id(closed, 0) == cluster_id


def with_cluster_id(path: Path, cluster_id: str) -> None:
    lines = [
        f"cluster.id={cluster_id}" if line.startswith("cluster.id=") else line
        for line in path.read_text(encoding="utf-8").splitlines()
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


async def test_a_broker_of_another_cluster_refuses_to_join(closed: ProcessCluster) -> None:
    cluster_id = await native_cluster_id(closed)
    broker = closed.broker(0)
    assert await broker.terminate() == 0
    meta = closed.broker_dir(0) / META_PROPERTIES_FILE
    original = meta.read_text(encoding="utf-8")
    log = closed.log_path(broker.name)
    logged_before = len(log.read_text(errors="replace"))
    foreign = "Zm9yZWlnbi1jbHVzdGVyLQ"
    with_cluster_id(meta, foreign)
    await broker.start()
    assert broker.process is not None
    code = await asyncio.wait_for(broker.process.wait(), WAIT_S)
    logged = log.read_text(errors="replace")[logged_before:]
    # A configuration error (ketch up does not restart a node that exits with it).
    assert code == EXIT_CONFIG, logged
    assert (
        f"broker 0 belongs to cluster {foreign} (its cluster.id or its log dirs' "
        f"meta.properties), the controller to cluster {cluster_id}: refusing to join" in logged
    ), logged
    assert stored_cluster_id(closed, 0) == foreign, "the foreign dir is left as it was"

    # Its own meta.properties back: it joins again.
    meta.write_text(original, encoding="utf-8")
    await broker.start()
    await closed.wait_running([0], timeout_s=WAIT_S)

    async def same_id() -> bool:
        return await native_cluster_id(closed) == cluster_id

    await wait_until(same_id, "the cluster answers with its id", timeout_s=WAIT_S)
