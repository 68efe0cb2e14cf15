"""Client quotas end to end (node/broker/quotas.py, KIP-13 / KIP-219) with real Kafka clients.

One broker process and its controller. Quotas are set with the real command line (`ketch quota
set`, through the broker's native listener to the controller) and read back with `ketch quota
list` (answered by the broker, so once it lists them the broker enforces them).

Produce: for confluent-kafka and kafka-python, a client id with producer_byte_rate 100 KB/s
sends 1.2 MB as fast as it can; the broker's answers carry throttle times, which librdkafka
reports through `throttle_cb` and kafka-python in its `throttle-time-max` metric. Another client
id, with no quota, sends the same on the same broker and is never told to wait. Consume: a
confluent-kafka consumer whose client id has consumer_byte_rate 100 KB/s reads a topic of
1.2 MB from the start; one fetch may carry at most one window's bytes (1 MB), the next one is
answered empty with a throttle time, which `throttle_cb` reports. And `ketch quota list` /
`remove` show and take back a quota on the broker, and AlterClientQuotas / DescribeClientQuotas
v1 in Kafka's own encoding (what kafka-configs.sh sends) set and describe one on the Kafka
listener.

The assertions are on what the clients report (throttle times, bytes acknowledged or read),
never on wall-clock speed. The processes run on the wall clock: every wait is bounded; the
children are killed by PID whatever happens (testkit.processes.running_cluster).
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator
from typing import Any, Final

import confluent_kafka
import kafka
import kio.schema.alter_client_quotas.v1.request as alter_v1
import kio.schema.describe_client_quotas.v1.request as describe_v1
import pytest
import pytest_asyncio
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.static.constants import EntityType
from kio.static.primitive import f64, i8

from runtime.net.transport import Address
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import PROPERTIES
from tests.integration.kafka_drivers import DRIVERS
from tests.integration.ketch_process import ketch
from tests.unit.wire.kafka.helpers import request_frame, response_body
from wire.kafka.codec import schema
from wire.messages import ApiKey

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

RATE: Final = 100_000  # bytes per second
RECORD: Final = b"q" * 10_000
RECORDS: Final = 120  # 1.2 MB: past one window's 1 MB at once, not far (short throttles)
WAIT_S: Final = 30.0
ALTER_CLIENT_QUOTAS: Final = ApiKey.ALTER_CLIENT_QUOTAS
DESCRIBE_CLIENT_QUOTAS: Final = ApiKey.DESCRIBE_CLIENT_QUOTAS


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("quotas")
    async with running_cluster(root, PROPERTIES, brokers=1, kafka=True) as started:
        await started.wait_running(range(1), timeout_s=WAIT_S)
        yield started


async def set_quota(cluster: ProcessCluster, client_id: str, flag: str) -> None:
    code, out, err = await ketch(cluster, "quota", "set", "--client-id", client_id, flag, str(RATE))
    assert code == 0, err
    assert client_id in out
    # Enforced once the broker holds it: `list` is answered from the broker's quotas.
    deadline = time.monotonic() + WAIT_S
    while True:
        code, out, err = await ketch(cluster, "quota", "list", "--client-id", client_id)
        assert code == 0, err
        if f"client-id={client_id}:" in out:
            return
        assert time.monotonic() < deadline, f"the broker never listed the quota: {out}"
        await asyncio.sleep(0.2)


def confluent_produce(bootstrap: str, topic: str, client_id: str) -> tuple[int, list[float]]:
    """(records acknowledged, throttle times reported in s) of producing RECORDS."""
    throttles: list[float] = []
    acked = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal acked
        assert err is None, err
        acked += 1

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "acks": "all",
            "message.timeout.ms": int(WAIT_S * 1000),
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    for _ in range(RECORDS):
        producer.produce(topic, RECORD, partition=0, on_delivery=on_delivery)
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0
    producer.poll(0)  # throttle events are served by poll
    return acked, throttles


def kafka_python_produce(bootstrap: str, topic: str, client_id: str) -> tuple[int, float]:
    """(records acknowledged, throttle-time-max in ms) of producing RECORDS."""
    # Big batches, so the 1.2 MB leave in a few requests: only the last crosses the quota (a
    # client sending many small requests past it is throttled on each, which takes as long as
    # the quota says: 1.2 MB at 100 KB/s is 12 s).
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        client_id=client_id,
        linger_ms=100,
        batch_size=400_000,
        acks="all",
    )
    try:
        futures = [producer.send(topic, RECORD, partition=0) for _ in range(RECORDS)]
        producer.flush(WAIT_S)
        acked = sum(1 for f in futures if f.get(WAIT_S) is not None)
        metrics = producer.metrics()
        return acked, float(metrics["producer-metrics"]["throttle-time-max"])
    finally:
        producer.close(WAIT_S)


async def test_confluent_producer_over_its_quota_is_throttled_and_another_is_not(
    cluster: ProcessCluster,
) -> None:
    bootstrap = cluster.kafka_bootstrap()
    await DRIVERS["confluent"](bootstrap).create_topic("quota-confluent", 1, 1, {})
    await set_quota(cluster, "slow-confluent", "--producer-byte-rate")

    acked, throttles = await asyncio.to_thread(
        confluent_produce, bootstrap, "quota-confluent", "slow-confluent"
    )
    assert acked == RECORDS
    assert throttles, "librdkafka reported no throttle time"
    assert max(throttles) > 0

    acked, throttles = await asyncio.to_thread(
        confluent_produce, bootstrap, "quota-confluent", "fast-confluent"
    )
    assert acked == RECORDS
    assert throttles == [] or max(throttles) == 0


async def test_kafka_python_producer_over_its_quota_is_throttled_and_another_is_not(
    cluster: ProcessCluster,
) -> None:
    bootstrap = cluster.kafka_bootstrap()
    await DRIVERS["confluent"](bootstrap).create_topic("quota-kafka-python", 1, 1, {})
    await set_quota(cluster, "slow-kafka-python", "--producer-byte-rate")

    acked, throttle_max_ms = await asyncio.to_thread(
        kafka_python_produce, bootstrap, "quota-kafka-python", "slow-kafka-python"
    )
    assert acked == RECORDS
    assert throttle_max_ms > 0

    acked, throttle_max_ms = await asyncio.to_thread(
        kafka_python_produce, bootstrap, "quota-kafka-python", "fast-kafka-python"
    )
    assert acked == RECORDS
    assert not throttle_max_ms > 0  # NaN (never recorded) or 0


def confluent_consume(bootstrap: str, topic: str, client_id: str) -> tuple[int, list[float]]:
    """(record bytes read, throttle times in s) of reading `topic` from the start until a
    throttle time is reported (or WAIT_S)."""
    throttles: list[float] = []
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "group.id": f"{client_id}-group",
            "enable.auto.commit": False,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    read = 0
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + WAIT_S
        # Until the first throttle time (a window's bytes were read by then: the value bytes of
        # 1 MB of batches, a little less than 1 MB).
        while time.monotonic() < deadline and not throttles:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                read += len(message.value() or b"")
    finally:
        consumer.close()
    return read, throttles


async def test_a_consumer_over_its_quota_is_throttled(cluster: ProcessCluster) -> None:
    bootstrap = cluster.kafka_bootstrap()
    await DRIVERS["confluent"](bootstrap).create_topic("quota-consume", 1, 1, {})
    acked, _ = await asyncio.to_thread(confluent_produce, bootstrap, "quota-consume", "filler")
    assert acked == RECORDS
    await set_quota(cluster, "slow-consumer", "--consumer-byte-rate")

    read, throttles = await asyncio.to_thread(
        confluent_consume, bootstrap, "quota-consume", "slow-consumer"
    )
    assert throttles, "librdkafka reported no throttle time"
    assert max(throttles) > 0
    # About a window's worth (1 MB of batches) was read before the throttled, empty answer,
    # and not the whole topic: the rest waits for the rate to come down.
    assert RATE * 9 <= read < RECORDS * len(RECORD)


async def test_quotas_are_listed_and_removed_with_the_command_line(
    cluster: ProcessCluster,
) -> None:
    await set_quota(cluster, "listed", "--consumer-byte-rate")
    code, out, err = await ketch(cluster, "quota", "list")
    assert code == 0, err
    assert f"client-id=listed: consumer_byte_rate={RATE}" in out.splitlines()
    code, out, err = await ketch(cluster, "quota", "remove", "--client-id", "listed")
    assert code == 0, err
    assert "client-id=listed" in out
    # Removed at the controller; the broker lists it no more once its UpdateMetadata arrived.
    deadline = time.monotonic() + WAIT_S
    while True:
        code, out, err = await ketch(cluster, "quota", "list")
        assert code == 0, err
        if "client-id=listed:" not in out:
            break
        assert time.monotonic() < deadline, out
        await asyncio.sleep(0.2)
    code, _, err = await ketch(
        cluster, "quota", "set", "--client-id", "x", "--producer-byte-rate", "0"
    )
    assert code == 2, err  # refused by the flag's own check: a rate is at least 1


async def kafka_call(address: Address, api_key: int, version: int, body: Any) -> Any:
    """One request in Kafka's own encoding (kio, as kafka-configs.sh's AdminClient sends it)
    over a fresh TCP connection to the Kafka listener; its decoded answer."""
    frame = request_frame(api_key, version, body)
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(address.host, address.port), WAIT_S
    )
    try:
        writer.write(struct.pack(">i", len(frame)) + frame)
        await writer.drain()
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), WAIT_S))
        answer = struct.pack(">i", size) + await asyncio.wait_for(reader.readexactly(size), WAIT_S)
    finally:
        writer.close()
        await writer.wait_closed()
    response_cls = schema(api_key, version, EntityType.response)
    _, decoded = response_body(answer, response_cls)
    return decoded


async def test_kafka_admin_requests_alter_and_describe_quotas(cluster: ProcessCluster) -> None:
    address = cluster.kafka_addresses[0]
    user = (alter_v1.EntityData(entity_type="user", entity_name="kafka-admin"),)
    ip = (alter_v1.EntityData(entity_type="ip", entity_name="10.0.0.1"),)
    rate = alter_v1.OpData(key="producer_byte_rate", value=f64(2048.0), remove=False)
    connections = alter_v1.OpData(key="connection_creation_rate", value=f64(5.0), remove=False)
    alter = alter_v1.AlterClientQuotasRequest(
        entries=(
            alter_v1.EntryData(entity=user, ops=(rate,)),
            alter_v1.EntryData(entity=ip, ops=(connections,)),
        ),
        validate_only=False,
    )
    altered = await kafka_call(address, ALTER_CLIENT_QUOTAS, 1, alter)
    codes = [entry.error_code for entry in altered.entries]
    assert codes == [KioErrorCode.none, KioErrorCode.invalid_request]
    assert "ip" in (altered.entries[1].error_message or "")

    describe = describe_v1.DescribeClientQuotasRequest(
        components=(
            describe_v1.ComponentData(entity_type="user", match_type=i8(0), match="kafka-admin"),
        ),
        strict=True,
    )
    deadline = time.monotonic() + WAIT_S
    while True:  # the broker answers from what the controller last sent it
        described = await kafka_call(address, DESCRIBE_CLIENT_QUOTAS, 1, describe)
        assert described.error_code == KioErrorCode.none
        if described.entries:
            break
        assert time.monotonic() < deadline, "the broker never described the quota"
        await asyncio.sleep(0.2)
    (entry,) = described.entries
    assert [(e.entity_type, e.entity_name) for e in entry.entity] == [("user", "kafka-admin")]
    assert [(v.key, v.value) for v in entry.values] == [("producer_byte_rate", 2048.0)]
