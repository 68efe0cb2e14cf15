"""A record that runs out of delivery.timeout.ms says why: the producer keeps the last error each
batch met (`ProducerBatch.last_error`) and the `DeliveryTimeoutError` names it and has it as its
cause. Scripted brokers on the in-memory network, under a manual clock."""

from __future__ import annotations

import asyncio
from typing import Any

from client.config import ClientConfig, ProducerConfig
from client.errors import ConnectionFailedError, DeliveryTimeoutError
from client.producer import Producer
from runtime.clock import ManualClock
from tests.unit.client.scripted_cluster import ScriptedCluster, advance_until
from wire.errors import ErrorCode, KafkaError
from wire.topic import TopicPartition

SEED = 5151
DELIVERY_TIMEOUT_MS = 3_000


async def make_producer(cluster: ScriptedCluster, **settings: Any) -> Producer:
    client = cluster.client(config=ClientConfig(retry_backoff_ms=100), seed=SEED)
    config = ProducerConfig(linger_ms=0, delivery_timeout_ms=DELIVERY_TIMEOUT_MS, **settings)
    return Producer(client, config=config, owns_client=True)


async def timeout_of(
    clock: ManualClock, futures: list[asyncio.Future[Any]]
) -> list[DeliveryTimeoutError]:
    """Advance until every future failed; each must be a delivery timeout within the bound."""
    await advance_until(clock, lambda: all(f.done() for f in futures), step_ms=50, max_steps=100)
    assert clock.monotonic_ms() <= DELIVERY_TIMEOUT_MS + 100
    errors = [f.exception() for f in futures]
    assert all(isinstance(e, DeliveryTimeoutError) for e in errors), errors
    return [e for e in errors if isinstance(e, DeliveryTimeoutError)]


async def test_a_partition_without_leader_names_leader_not_available(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    """The stumble of issue 23: 30 s, then no reason. Now the code and the partition."""
    cluster.create_topic("orders", [-1])
    producer = await make_producer(cluster, batch_size=100)
    # Four batches (one record each): the later ones reach the queue's head, where the sender
    # notes errors, only as the earlier ones expire.
    futures = [await producer.send("orders", None, bytes(40), partition=0) for _ in range(4)]
    errors = await timeout_of(clock, futures)
    for error in errors:
        # No leader to send to: never sent, said so rather than "0 attempt(s)".
        assert "not acknowledged within delivery.timeout.ms (3000 ms, never sent)" in str(error)
        assert "last error: LEADER_NOT_AVAILABLE (partition orders-0 has no leader)" in str(error)
        assert isinstance(error.__cause__, KafkaError)
        assert error.__cause__.code is ErrorCode.LEADER_NOT_AVAILABLE
        assert error.topic == "orders"
    await producer.close()


async def test_a_refusing_leader_names_its_error(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    cluster.produce_errors[TopicPartition("t", 0)] = [ErrorCode.NOT_ENOUGH_REPLICAS] * 1000
    producer = await make_producer(cluster)
    future = await producer.send("t", None, b"x", partition=0)
    (error,) = await timeout_of(clock, [future])
    assert "last error: NOT_ENOUGH_REPLICAS" in str(error)
    assert "never sent" not in str(error)
    assert " attempt(s))" in str(error)
    assert isinstance(error.__cause__, KafkaError)
    assert error.__cause__.code is ErrorCode.NOT_ENOUGH_REPLICAS
    await producer.close()


async def test_a_leader_that_cannot_be_reached_names_the_connection(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    """Partition 1's leader, broker 1, is down (its metadata still says it leads)."""
    producer = await make_producer(cluster, acks=1)
    await producer.send_and_wait("t", None, b"warm-up", partition=0)  # metadata known
    await cluster.servers[1].stop()
    future = await producer.send("t", None, b"x", partition=1)
    (error,) = await timeout_of(clock, [future])
    assert "last error: cannot connect to broker-1:9092" in str(error)
    assert isinstance(error.__cause__, ConnectionFailedError)
    await producer.close()
