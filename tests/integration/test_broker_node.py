"""One `BrokerNode` and the controller over real TCP on 127.0.0.1.

Time is a ManualClock that `Cluster.drive` advances in 1 ms steps while the loop runs, so no
test waits on the wall clock; the sockets are real.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from client.client import Client
from client.config import ConsumerConfig, ProducerConfig
from client.consumer import Consumer
from client.fetched_records import ConsumerRecord
from client.producer import Producer
from node.broker.config import BrokerConfig
from runtime.clock import ManualClock
from runtime.log.manager import CLEAN_SHUTDOWN_FILE
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address
from testkit.cluster import Cluster
from wire.errors import ErrorCode
from wire.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
)
from wire.topic import TopicPartition

TOPIC = "events"
TP = TopicPartition(TOPIC, 0)
COUNT = 20


def tcp_cluster(data_dir: Path) -> Cluster:
    return Cluster(
        data_dir,
        [0],
        clock=ManualClock(),
        transport_for=lambda name: TcpTransport(),
        address_for=lambda name: Address("127.0.0.1", 0),
        properties={"replica.fetch.wait.max.ms": 50},
    )


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    cluster = tcp_cluster(tmp_path)
    await cluster.drive(cluster.start())
    try:
        yield cluster
    finally:
        await cluster.drive(cluster.stop())
    # No task of any node, client or server outlives its stop().
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == {asyncio.current_task()}


def client_of(cluster: Cluster) -> Client:
    return Client([cluster.node(0).address], transport=TcpTransport(), clock=cluster.clock)


async def produce(cluster: Cluster, acks: int, values: list[bytes]) -> list[int]:
    producer = Producer(
        client_of(cluster), config=ProducerConfig(acks=acks, linger_ms=0), owns_client=True
    )
    try:
        offsets = []
        for value in values:
            future = await cluster.drive(producer.send(TOPIC, None, value, partition=0))
            offsets.append((await cluster.drive(future)).offset)
        return offsets
    finally:
        await cluster.drive(producer.close())


async def consume_all(cluster: Cluster, count: int) -> list[ConsumerRecord]:
    consumer = Consumer(
        client_of(cluster),
        config=ConsumerConfig(fetch_max_wait_ms=50, auto_offset_reset="earliest"),
        owns_client=True,
    )
    consumer.assign([(TOPIC, 0)])
    records: list[ConsumerRecord] = []
    try:
        for _ in range(100):  # bounded: every poll brings at least one record or times out
            if len(records) >= count:
                break
            records.extend(await cluster.drive(consumer.poll(timeout_ms=200)))
    finally:
        await cluster.drive(consumer.close())
    return records


async def test_produce_with_acks_1_and_all_then_consume(cluster: Cluster) -> None:
    await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=1))
    first = await produce(cluster, 1, [b"one-%d" % i for i in range(COUNT // 2)])
    second = await produce(cluster, -1, [b"all-%d" % i for i in range(COUNT // 2)])
    assert first + second == list(range(COUNT))
    records = await consume_all(cluster, COUNT)
    assert [r.offset for r in records] == list(range(COUNT))
    assert [r.value for r in records] == [b"one-%d" % i for i in range(COUNT // 2)] + [
        b"all-%d" % i for i in range(COUNT // 2)
    ]


async def test_acks_0_is_appended_without_an_offset(cluster: Cluster) -> None:
    await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=1))
    assert await produce(cluster, 0, [b"fire-%d" % i for i in range(3)]) == [-1, -1, -1]
    # A later acks=1 produce on a fresh connection lands after them.
    assert await produce(cluster, 1, [b"after"]) == [3]
    records = await consume_all(cluster, 4)
    assert [r.value for r in records] == [b"fire-0", b"fire-1", b"fire-2", b"after"]


def test_broker_config_reads_kafka_property_names(tmp_path: Path) -> None:
    config = BrokerConfig.from_properties(
        {
            "broker.id": "7",
            "log.dirs": f"{tmp_path / 'a'},{tmp_path / 'b'}",
            "listeners": "native://10.0.0.7:9092,kafka://10.0.0.7:9093",
            "controller.address": "10.0.0.1:9090",
            "min.insync.replicas": 2,
            "replica.lag.time.max.ms": "15000",
            "replica.fetch.wait.max.ms": 100,
            "message.max.bytes": 2048,
            "request.timeout.ms": 5000,
        }
    )
    assert config.broker_id == 7
    assert config.log.log_dirs == (str(tmp_path / "a"), str(tmp_path / "b"))
    assert config.listen_address == Address("10.0.0.7", 9092)
    assert config.controller_address == Address("10.0.0.1", 9090)
    assert config.replica_manager.min_insync_replicas == 2
    assert config.replica_manager.replica_lag_time_max_ms == 15_000
    assert config.fetcher.replica_fetch_wait_max_ms == 100
    assert config.message_max_bytes == 2048
    assert config.client.request_timeout_ms == 5000
    with pytest.raises(ValueError, match=r"broker\.id"):
        BrokerConfig.from_properties({"log.dirs": str(tmp_path)})
    with pytest.raises(ValueError, match="native"):
        BrokerConfig.from_properties({"broker.id": 1, "listeners": "kafka://h:1"})


async def test_control_plane_needs_the_cluster_credential(cluster: Cluster) -> None:
    anonymous = client_of(cluster)
    try:
        request = LeaderAndIsrRequest(controller_id=1, controller_epoch=1, partition_states=[])
        response = await cluster.drive(anonymous.send(cluster.node(0).address, request))
        assert isinstance(response, LeaderAndIsrResponse)
        assert response.error is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        versions = await cluster.drive(
            anonymous.send(cluster.node(0).address, ApiVersionsRequest())
        )
        assert isinstance(versions, ApiVersionsResponse)
        served = {key.api_key for key in versions.api_keys}
        assert {0, 1, 2, 3, 4, 5, 6, 23} <= served
    finally:
        await anonymous.close()


async def test_clean_shutdown_writes_the_marker_and_restart_skips_recovery(
    cluster: Cluster,
) -> None:
    await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=1))
    await produce(cluster, -1, [b"v%d" % i for i in range(COUNT)])
    await cluster.drive(cluster.node(0).stop())
    assert (cluster.log_dir(0) / CLEAN_SHUTDOWN_FILE).exists()

    node = await cluster.drive(cluster.restart(0))
    assert node.had_clean_shutdown
    assert not (cluster.log_dir(0) / CLEAN_SHUTDOWN_FILE).exists()  # a crash now is unclean
    log = node.log_manager.get_log(TP)
    assert log is not None
    assert log.log_end_offset == COUNT
    assert log.high_watermark == COUNT  # the last HW checkpoint came with the shutdown


async def test_crash_leaves_no_marker_and_restart_recovers(cluster: Cluster) -> None:
    await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=1))
    await produce(cluster, 1, [b"v%d" % i for i in range(COUNT)])
    await cluster.drive(cluster.kill(0))
    assert not (cluster.log_dir(0) / CLEAN_SHUTDOWN_FILE).exists()

    node = await cluster.drive(cluster.restart(0))
    assert not node.had_clean_shutdown
    log = node.log_manager.get_log(TP)
    assert log is not None
    assert log.log_end_offset == COUNT  # written to the file before the crash
