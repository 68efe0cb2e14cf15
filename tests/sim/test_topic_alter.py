"""`ketch topic alter`'s two APIs on a running 3-broker in-process cluster (seeded MemoryNetwork,
ManualClock, the real controller), sent by a client to a broker, which forwards them to the
controller (issue 23):

* CreatePartitions: the new partitions get leaders, every replica hosts them, and a produce to
  one is acknowledged by all of its replicas;
* IncrementalAlterConfigs takes effect on the live brokers without a restart, as Kafka's dynamic
  topic configs do: min.insync.replicas above the ISR refuses acks=all writes at once and its
  deletion lets them through again; retention.ms set on a topic that kept everything deletes
  its old segments on every replica at the next retention check; DescribeConfigs on a broker
  lists the new value as DYNAMIC_TOPIC_CONFIG, and the default again once deleted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from client.client import Client
from client.config import ClientConfig
from testkit.cluster import Cluster
from testkit.probes import one_record, only_answer
from wire.errors import ErrorCode
from wire.messages import (
    AlterableConfig,
    AlterConfigsResource,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from wire.messages.admin import (
    CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_DYNAMIC_TOPIC,
    RESOURCE_TOPIC,
)
from wire.messages.alter import CONFIG_OPERATION_DELETE, CONFIG_OPERATION_SET
from wire.topic import TopicPartition

SEED: Final = 23
TOPIC: Final = "orders"
RETENTION_CHECK_MS: Final = 100
PROPERTIES: Final[dict[str, object]] = {
    "log.retention.check.interval.ms": RETENTION_CHECK_MS,
    "replica.fetch.wait.max.ms": 20,
    "replica.fetch.backoff.ms": 20,
    "request.timeout.ms": 1_000,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 50,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 50,
}
CLIENT_CONFIG: Final = ClientConfig(
    request_timeout_ms=5_000, reconnect_backoff_ms=10, reconnect_backoff_max_ms=50
)


def producer(cluster: Cluster) -> Client:
    assert cluster.network is not None
    return Client(
        cluster.addresses,
        transport=cluster.network.transport("producer"),
        clock=cluster.clock,
        config=CLIENT_CONFIG,
    )


async def produce(cluster: Cluster, client: Client, tp: TopicPartition, value: bytes) -> ErrorCode:
    """One record with acks=all to the partition's leader."""
    request = one_record(tp.topic, tp.partition, value, timeout_ms=2_000)
    answer = only_answer(await cluster.drive(client.send(cluster.leader(tp).address, request)))
    return ErrorCode.from_code(answer.error_code)


async def set_config(cluster: Cluster, key: str, value: str | None) -> None:
    """SET `key` (or DELETE it, value None) on the topic through a broker; asserts success."""
    operation = CONFIG_OPERATION_DELETE if value is None else CONFIG_OPERATION_SET
    request = IncrementalAlterConfigsRequest(
        resources=[
            AlterConfigsResource(
                resource_type=RESOURCE_TOPIC,
                resource_name=TOPIC,
                configs=[AlterableConfig(name=key, config_operation=operation, value=value)],
            )
        ]
    )
    response = await cluster.drive(cluster.admin(request))
    assert isinstance(response, IncrementalAlterConfigsResponse), response
    (result,) = response.responses
    assert result.error_code == ErrorCode.NONE, result


async def described(cluster: Cluster, key: str) -> DescribeConfigsResourceResult:
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsResource(
                resource_type=RESOURCE_TOPIC, resource_name=TOPIC, configuration_keys=[key]
            )
        ]
    )
    response = await cluster.drive(cluster.admin(request))
    assert isinstance(response, DescribeConfigsResponse), response
    (result,) = response.results
    (config,) = result.configs
    return config


def applied_everywhere(cluster: Cluster, key: str, value: str | None) -> bool:
    """Every running broker holds `value` as the topic's override of `key` (None: none)."""
    return all(
        cluster.node(b).log_manager.topic_overrides(TOPIC).get(key) == value
        for b in cluster.broker_ids
        if cluster.running(b)
    )


async def test_new_partitions_are_led_hosted_and_take_writes(tmp_path: Path) -> None:
    cluster = Cluster.in_memory(tmp_path, 3, seed=SEED, properties=PROPERTIES)
    await cluster.drive(cluster.start())
    client = producer(cluster)
    try:
        await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=2))
        request = CreatePartitionsRequest(topics=[CreatePartitionsTopic(name=TOPIC, count=4)])
        response = await cluster.drive(cluster.admin(request))
        assert isinstance(response, CreatePartitionsResponse), response
        assert [r.error_code for r in response.results] == [ErrorCode.NONE]

        grown = [TopicPartition(TOPIC, p) for p in range(4)]
        await cluster.run_until(
            lambda: all(cluster.serving(tp) for tp in grown), max_ms=5_000, what="grown"
        )
        for tp in grown[1:]:
            record = cluster.record(tp)
            assert len(record.replicas) == 2, record
            for broker_id in record.replicas:
                assert cluster.node(broker_id).log_manager.get_log(tp) is not None
            assert await produce(cluster, client, tp, b"to " + str(tp).encode()) is ErrorCode.NONE
    finally:
        await client.close()
        await cluster.drive(cluster.stop())


async def test_min_insync_replicas_changes_on_the_running_brokers(tmp_path: Path) -> None:
    cluster = Cluster.in_memory(tmp_path, 3, seed=SEED, properties=PROPERTIES)
    await cluster.drive(cluster.start())
    client = producer(cluster)
    tp = TopicPartition(TOPIC, 0)
    try:
        await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=3))
        assert await produce(cluster, client, tp, b"before") is ErrorCode.NONE
        before = await described(cluster, "min.insync.replicas")
        assert (before.value, before.config_source) == ("1", CONFIG_SOURCE_DEFAULT)

        # More in-sync replicas required than the partition has: acks=all is refused at once.
        await set_config(cluster, "min.insync.replicas", "4")
        await cluster.run_until(
            lambda: applied_everywhere(cluster, "min.insync.replicas", "4"),
            max_ms=2_000,
            what="min.insync.replicas=4 on every broker",
        )
        assert await produce(cluster, client, tp, b"refused") is ErrorCode.NOT_ENOUGH_REPLICAS
        now = await described(cluster, "min.insync.replicas")
        assert (now.value, now.config_source) == ("4", CONFIG_SOURCE_DYNAMIC_TOPIC)

        await set_config(cluster, "min.insync.replicas", None)
        await cluster.run_until(
            lambda: applied_everywhere(cluster, "min.insync.replicas", None),
            max_ms=2_000,
            what="min.insync.replicas deleted on every broker",
        )
        assert await produce(cluster, client, tp, b"after") is ErrorCode.NONE
        after = await described(cluster, "min.insync.replicas")
        assert (after.value, after.config_source) == ("1", CONFIG_SOURCE_DEFAULT)
    finally:
        await client.close()
        await cluster.drive(cluster.stop())


async def test_retention_set_on_a_live_topic_deletes_old_segments_on_every_replica(
    tmp_path: Path,
) -> None:
    cluster = Cluster.in_memory(tmp_path, 3, seed=SEED, properties=PROPERTIES)
    await cluster.drive(cluster.start())
    client = producer(cluster)
    tp = TopicPartition(TOPIC, 0)
    # Small segments, kept forever: the records (timestamp 0) outlive any retention.ms until
    # the topic is given one.
    configs = {"segment.bytes": "200", "retention.ms": "-1"}
    try:
        await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=3, configs=configs))
        for n in range(8):
            assert await produce(cluster, client, tp, b"record-%d" % n) is ErrorCode.NONE
        replicas = cluster.record(tp).replicas

        def log_starts() -> list[int]:
            logs = [cluster.node(b).log_manager.get_log(tp) for b in replicas]
            return [log.log_start_offset for log in logs if log is not None]

        def fully_replicated() -> bool:
            logs = [cluster.node(b).log_manager.get_log(tp) for b in replicas]
            return all(log is not None and log.log_end_offset == 8 for log in logs)

        await cluster.run_until(fully_replicated, max_ms=2_000, what="8 records on 3 replicas")
        await cluster.run_for(3 * RETENTION_CHECK_MS)
        assert log_starts() == [0, 0, 0]  # retention.ms -1 keeps everything

        await set_config(cluster, "retention.ms", "60000")
        await cluster.run_until(
            lambda: all(start > 0 for start in log_starts()) and len(log_starts()) == 3,
            max_ms=3 * RETENTION_CHECK_MS + 1_000,
            what="old segments deleted on every replica",
        )
        now = await described(cluster, "retention.ms")
        assert (now.value, now.config_source) == ("60000", CONFIG_SOURCE_DYNAMIC_TOPIC)
        assert await produce(cluster, client, tp, b"still-writable") is ErrorCode.NONE
    finally:
        await client.close()
        await cluster.drive(cluster.stop())
