"""The producer against scripted brokers on the in-memory network, under a manual clock."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from client.accumulator import RecordMetadata
from client.config import ACKS_ALL, ClientConfig, ProducerConfig
from client.errors import ClientClosedError, DeliveryTimeoutError
from client.partitioner import partition_for_key
from client.producer import Producer
from runtime.clock import ManualClock
from tests.unit.client.scripted_cluster import ScriptedCluster, advance_until, settle
from wire.errors import ErrorCode, KafkaError
from wire.messages import ApiKey
from wire.record_reader import iter_records
from wire.records import CompressionType, Record, iter_batches
from wire.topic import TopicPartition

SEED = 4242


def stored(cluster: ScriptedCluster, tp: TopicPartition) -> list[Record]:
    out: list[Record] = []
    for _, data in cluster.logs[tp].batches:
        for pos, _header in iter_batches(data):
            out.extend(iter_records(data, pos))
    return out


def producer_tasks() -> set[str]:
    prefixes = ("producer ", "produce to ")
    return {t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith(prefixes)}


async def make_producer(cluster: ScriptedCluster, **settings: Any) -> Producer:
    client = cluster.client(config=ClientConfig(retry_backoff_ms=100), seed=SEED)
    return Producer(client, config=ProducerConfig(**settings), owns_client=True)


async def test_records_linger_then_travel_as_one_batch(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    producer = await make_producer(cluster, linger_ms=20)
    futures = [
        await producer.send("t", None, f"v{i}".encode(), partition=0, timestamp_ms=1000 + i)
        for i in range(3)
    ]
    await settle()
    assert cluster.count(ApiKey.PRODUCE) == 0, "sent before linger.ms"
    clock.advance(19)
    await settle()
    assert cluster.count(ApiKey.PRODUCE) == 0
    await advance_until(clock, lambda: all(f.done() for f in futures), step_ms=1, max_steps=5)
    assert cluster.count(ApiKey.PRODUCE) == 1
    assert [f.result() for f in futures] == [RecordMetadata("t", 0, i, 1000 + i) for i in range(3)]
    tp = TopicPartition("t", 0)
    assert len(cluster.logs[tp].batches) == 1
    assert [(r.offset, r.value, r.timestamp) for r in stored(cluster, tp)] == [
        (0, b"v0", 1000),
        (1, b"v1", 1001),
        (2, b"v2", 1002),
    ]
    await producer.close()


async def test_full_batch_is_sent_without_waiting_for_linger(cluster: ScriptedCluster) -> None:
    producer = await make_producer(cluster, linger_ms=60_000, batch_size=200)
    futures = [await producer.send("t", None, bytes(60), partition=1) for _ in range(4)]
    await settle()
    # Two 60-byte records fill a 200-byte batch (61 header bytes + overheads).
    assert futures[0].done()
    assert futures[0].result().offset == 0
    assert not futures[3].done()  # the last batch is not full: it lingers
    await producer.close()
    assert [f.result().offset for f in futures] == [0, 1, 2, 3]


async def test_keys_go_to_their_murmur2_partition(cluster: ScriptedCluster) -> None:
    producer = await make_producer(cluster, linger_ms=0)
    keys = [f"key-{i}".encode() for i in range(20)]
    metas = [await producer.send_and_wait("t", key, b"v") for key in keys]
    for key, meta in zip(keys, metas, strict=True):
        assert meta.partition == partition_for_key(key, 2), key
    assert {m.partition for m in metas} == {0, 1}
    for partition in (0, 1):
        tp = TopicPartition("t", partition)
        assert [r.key for r in stored(cluster, tp)] == [
            k for k, m in zip(keys, metas, strict=True) if m.partition == partition
        ]
    await producer.close()


async def test_null_keys_stick_to_a_partition_for_a_batch(cluster: ScriptedCluster) -> None:
    producer = await make_producer(cluster, linger_ms=0, batch_size=1000, partitioner_seed=SEED)
    metas = [await producer.send_and_wait("t", None, bytes(100)) for _ in range(30)]
    partitions = [m.partition for m in metas]
    # ~140 bytes per record: 7-8 records per sticky run of 1000 bytes, then a switch.
    assert len(set(partitions[:7])) == 1, f"seed={SEED} {partitions}"
    switches = sum(1 for a, b in itertools.pairwise(partitions) if a != b)
    assert 2 <= switches <= 5, f"seed={SEED} {partitions}"
    await producer.close()


async def test_not_leader_refreshes_metadata_and_retries_on_the_new_leader(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    producer = await make_producer(cluster, linger_ms=0)
    tp = TopicPartition("t", 0)
    first = await producer.send_and_wait("t", None, b"a", partition=0)
    assert first.offset == 0
    cluster.move_leader(tp, 1)
    future = await producer.send("t", None, b"b", partition=0)
    await advance_until(clock, future.done, step_ms=10, max_steps=100)
    assert future.result().offset == 1
    assert cluster.count(ApiKey.PRODUCE, broker=0) == 2  # the second answered NOT_LEADER
    assert cluster.count(ApiKey.PRODUCE, broker=1) == 1
    assert cluster.count(ApiKey.METADATA) >= 2
    assert [r.value for r in stored(cluster, tp)] == [b"a", b"b"]
    await producer.close()


async def test_retriable_errors_are_retried_with_backoff_keeping_order(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    producer = await make_producer(cluster, linger_ms=0, batch_size=100)
    tp = TopicPartition("t", 1)
    cluster.produce_errors[tp] = [ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT]
    futures = [await producer.send("t", None, bytes(50), partition=1) for _ in range(3)]
    await settle()
    assert not any(f.done() for f in futures)
    await advance_until(clock, lambda: all(f.done() for f in futures), step_ms=10, max_steps=100)
    assert [f.result().offset for f in futures] == [0, 1, 2]
    # Two failed attempts of the first batch, then three successes, one batch at a time.
    assert cluster.count(ApiKey.PRODUCE) == 5
    # retry.backoff.ms=100 then 200 (+/-20%) passed before the first success.
    assert clock.monotonic_ms() >= 240
    await producer.close()


async def test_non_retriable_error_fails_the_records(cluster: ScriptedCluster) -> None:
    producer = await make_producer(cluster, linger_ms=0)
    cluster.produce_errors[TopicPartition("t", 0)] = [ErrorCode.INVALID_RECORD]
    future = await producer.send("t", None, b"x", partition=0)
    with pytest.raises(KafkaError) as info:
        await future
    assert info.value.code is ErrorCode.INVALID_RECORD
    # The partition is usable again afterwards.
    assert (await producer.send_and_wait("t", None, b"y", partition=0)).offset == 0
    await producer.close()


async def test_delivery_timeout_bounds_retries(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    producer = await make_producer(cluster, linger_ms=0, delivery_timeout_ms=3000)
    cluster.produce_errors[TopicPartition("t", 0)] = [ErrorCode.NOT_ENOUGH_REPLICAS] * 1000
    future = await producer.send("t", None, b"x", partition=0)
    await advance_until(clock, future.done, step_ms=50, max_steps=200)
    with pytest.raises(DeliveryTimeoutError) as info:
        await future
    assert isinstance(info.value.__cause__, KafkaError)
    assert clock.monotonic_ms() <= 3050
    await producer.close()


async def test_acks_zero_completes_without_offsets(cluster: ScriptedCluster) -> None:
    producer = await make_producer(cluster, linger_ms=0, acks=0)
    meta = await producer.send_and_wait("t", None, b"x", partition=1)
    assert meta.offset == -1
    await producer.close()
    assert [r.value for r in stored(cluster, TopicPartition("t", 1))] == [b"x"]


async def test_flush_sends_lingering_records_now(cluster: ScriptedCluster) -> None:
    producer = await make_producer(cluster, linger_ms=60_000, acks=ACKS_ALL)
    futures = [await producer.send("t", b"k", b"v") for _ in range(3)]
    await settle()
    assert not any(f.done() for f in futures)
    await producer.flush()
    assert all(f.done() for f in futures)
    assert [f.result().offset for f in futures] == [0, 1, 2]
    await producer.close()


async def test_close_flushes_then_refuses_and_leaves_no_task(cluster: ScriptedCluster) -> None:
    producer = await make_producer(cluster, linger_ms=60_000)
    future = await producer.send("t", None, b"last", partition=0)
    assert producer_tasks()
    await producer.close()
    assert future.result().offset == 0
    assert producer_tasks() == set()
    with pytest.raises(ClientClosedError):
        await producer.send("t", None, b"late", partition=0)


async def test_close_with_timeout_fails_what_cannot_be_delivered(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    producer = await make_producer(cluster, linger_ms=0)
    cluster.produce_errors[TopicPartition("t", 0)] = [ErrorCode.NOT_ENOUGH_REPLICAS] * 1000
    future = await producer.send("t", None, b"x", partition=0)
    await settle()
    closing = asyncio.create_task(producer.close(timeout_ms=500))
    await advance_until(clock, closing.done, step_ms=50, max_steps=20)
    with pytest.raises(ClientClosedError):
        await future
    assert producer_tasks() == set()


async def test_send_rejects_what_can_never_be_sent(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    producer = await make_producer(cluster, max_request_size=1000, max_block_ms=500)
    with pytest.raises(KafkaError) as info:
        await producer.send("t", None, bytes(2000))
    assert info.value.code is ErrorCode.MESSAGE_TOO_LARGE
    with pytest.raises(KafkaError) as info:
        await producer.send("t", None, b"x", partition=2)
    assert info.value.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    missing = asyncio.create_task(producer.send("no-such-topic", None, b"x"))
    await advance_until(clock, missing.done, step_ms=50, max_steps=20)
    with pytest.raises(DeliveryTimeoutError):
        await missing
    await producer.close()


@pytest.mark.parametrize("codec", [CompressionType.GZIP, CompressionType.ZSTD, CompressionType.LZ4])
async def test_compressed_batches_round_trip(
    cluster: ScriptedCluster, codec: CompressionType
) -> None:
    client = cluster.client(seed=SEED)
    producer = Producer(client, config=ProducerConfig(linger_ms=60_000), compression=codec)
    futures = [await producer.send("t", b"k", b"value %d" % i, partition=0) for i in range(10)]
    await producer.flush()
    assert [f.result().offset for f in futures] == list(range(10))
    tp = TopicPartition("t", 0)
    ((_, data),) = cluster.logs[tp].batches
    assert next(iter_batches(data))[1].compression is codec
    assert [r.value for r in stored(cluster, tp)] == [b"value %d" % i for i in range(10)]
    await producer.close()
    await client.close()
