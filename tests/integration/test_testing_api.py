"""The testing API for users (testkit/testing.py, testkit/pytest_plugin.py), used as a user
would: the `ketch_cluster` fixture, confluent-kafka at its defaults (plus idempotence), and the
faults. Real processes behind the proxies; every wait is bounded.

- A crash: a producer writes, the leader of a partition is killed with kill -9, the producer
  writes more; every acknowledged record is then read back where its acknowledgement said.
- A partition: the leader of the only partition is cut off (from everything, or only its own
  link to the controller, one way); it loses the leadership, ketch's own producer's acks=all
  writes go on through the new leader, and after the heal the old leader is back in the ISR.
- A pause: SIGSTOP past the session timeout moves the leadership too; SIGCONT brings the broker
  back into the ISR.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import confluent_kafka
import pytest

from client.config import ProducerConfig
from client.producer import Producer
from testkit.testing import CONTROLLER, KetchCluster

pytest_plugins = ["testkit.pytest_plugin"]
pytestmark = pytest.mark.slow

TOPIC: Final = "orders"
PARTITIONS: Final = 3
TOPIC_CONFIGS: Final = {"min.insync.replicas": "2"}
FLUSH_S: Final = 60.0
READ_S: Final = 30.0


def read_everything(bootstrap: str, topic: str, partitions: int, count: int) -> dict[bytes, Any]:
    """Value -> (partition, offset) of the first `count` records of `topic`, from offset 0
    (bounded by READ_S)."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "checker", "enable.auto.commit": False}
    )
    try:
        consumer.assign(
            [
                confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                for p in range(partitions)
            ]
        )
        found: dict[bytes, Any] = {}
        for _ in range(int(READ_S * 10)):
            if len(found) >= count:
                break
            message = consumer.poll(0.1)
            if message is None or message.error() is not None:
                continue
            value = message.value()
            assert value is not None
            found.setdefault(value, (message.partition(), message.offset()))
        return found
    finally:
        consumer.close()


async def test_acknowledged_records_survive_a_leader_crash(ketch_cluster: KetchCluster) -> None:
    cluster = ketch_cluster
    await cluster.create_topic(
        TOPIC, partitions=PARTITIONS, replication_factor=3, configs=TOPIC_CONFIGS
    )
    # The application's producer, at librdkafka's defaults (acks=all) with idempotence.
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True}
    )
    acked: dict[bytes, tuple[int, int]] = {}
    failed: list[str] = []

    def delivered(error: Any, message: Any) -> None:
        if error is not None:
            failed.append(str(error))
        else:
            acked[message.value()] = (message.partition(), message.offset())

    for i in range(100):
        producer.produce(TOPIC, value=b"order-%03d" % i, on_delivery=delivered)
    # Blocking the test's loop is fine: the proxies run on their own thread.
    assert producer.flush(FLUSH_S) == 0
    leader = await cluster.leader_of(TOPIC, 0)
    await cluster.kill(leader)
    for i in range(100, 200):
        producer.produce(TOPIC, value=b"order-%03d" % i, on_delivery=delivered)
    assert producer.flush(FLUSH_S) == 0
    assert failed == []
    assert len(acked) == 200

    await cluster.restart(leader)
    await cluster.wait_for_isr(TOPIC)
    read = await asyncio.to_thread(read_everything, cluster.bootstrap, TOPIC, PARTITIONS, 200)
    missing = {v: at for v, at in acked.items() if read.get(v) != at}
    assert not missing, f"acknowledged but not read where acknowledged: {missing}"


@pytest.mark.parametrize("cut", ["isolate", "one way to the controller"])
async def test_a_partitioned_leader_loses_leadership_and_the_cluster_recovers(
    ketch_cluster: KetchCluster, cut: str
) -> None:
    cluster = ketch_cluster
    await cluster.create_topic(TOPIC, partitions=1, replication_factor=3, configs=TOPIC_CONFIGS)
    old = await cluster.leader_of(TOPIC)
    # A produce timeout of 2 s, not 30: the cut-off leader keeps its stale metadata (nothing
    # tells it that it was replaced), so a write sent there waits out this timeout before the
    # producer looks for the new leader (as Kafka's zombie leader would hold it).
    config = ProducerConfig(linger_ms=0, request_timeout_ms=2_000)
    producer = Producer(cluster.client(), config=config, owns_client=True)
    try:
        first = await producer.send_and_wait(TOPIC, None, b"before", partition=0)
        if cut == "isolate":
            cluster.isolate(old)
        else:
            # Its heartbeats cannot reach the controller; the controller's requests reach it.
            cluster.partition(old, CONTROLLER, one_way=True)
        await cluster.leader_of(TOPIC, other_than=old)
        during = await asyncio.wait_for(
            producer.send_and_wait(TOPIC, None, b"during", partition=0), FLUSH_S
        )
        assert during.offset > first.offset

        cluster.heal()
        isr = await cluster.wait_for_isr(TOPIC, 3)
        assert old in isr[0].isr_nodes
        after = await asyncio.wait_for(
            producer.send_and_wait(TOPIC, None, b"after", partition=0), FLUSH_S
        )
    finally:
        await producer.close()
    read = await asyncio.to_thread(read_everything, cluster.bootstrap, TOPIC, 1, 3)
    assert read == {
        b"before": (0, first.offset),
        b"during": (0, during.offset),
        b"after": (0, after.offset),
    }


async def test_a_paused_leader_is_replaced_and_rejoins_after_it_resumes(
    ketch_cluster: KetchCluster,
) -> None:
    cluster = ketch_cluster
    await cluster.create_topic(TOPIC, partitions=1, replication_factor=3, configs=TOPIC_CONFIGS)
    old = await cluster.leader_of(TOPIC)
    async with cluster.paused(old):
        await cluster.leader_of(TOPIC, other_than=old)
    isr = await cluster.wait_for_isr(TOPIC, 3)
    assert old in isr[0].isr_nodes
