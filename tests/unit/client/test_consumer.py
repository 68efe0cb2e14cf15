"""The consumer against scripted brokers on the in-memory network, under a manual clock."""

from __future__ import annotations

import asyncio

import pytest

from client.config import ClientConfig, ConsumerConfig
from client.consumer import Consumer, NoOffsetForPartitionError, OffsetOutOfRangeError
from client.errors import ClientClosedError
from client.fetched_records import ConsumerRecord, RecordTooLargeError
from client.list_offsets import OffsetAndTimestamp
from runtime.clock import ManualClock
from tests.unit.client.scripted_cluster import ScriptedCluster, advance_until, settle
from wire.batch_builder import build_batch
from wire.errors import ErrorCode, KafkaError
from wire.messages import ApiKey
from wire.topic import TopicPartition

SEED = 777
TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def append(
    cluster: ScriptedCluster, tp: TopicPartition, values: list[bytes], first_ts: int = 1000
) -> None:
    stamps = [first_ts + i for i in range(len(values))]
    cluster.logs[tp].append(build_batch([(None, v) for v in values], timestamps=stamps))


def consumer_for(cluster: ScriptedCluster, **settings: object) -> Consumer:
    client = cluster.client(config=ClientConfig(retry_backoff_ms=100), seed=SEED)
    config = ConsumerConfig(**settings)  # type: ignore[arg-type]
    return Consumer(client, config=config, owns_client=True)


def values(records: list[ConsumerRecord]) -> list[tuple[int, int, bytes | None]]:
    return [(r.partition, r.offset, r.value) for r in records]


async def poll_task(consumer: Consumer, timeout_ms: float) -> asyncio.Task[list[ConsumerRecord]]:
    task = asyncio.create_task(consumer.poll(timeout_ms))
    await settle()
    return task


async def test_poll_returns_records_from_the_earliest_offset(cluster: ScriptedCluster) -> None:
    append(cluster, TP0, [b"a", b"b"])
    append(cluster, TP0, [b"c"])
    append(cluster, TP1, [b"x"])
    consumer = consumer_for(cluster, auto_offset_reset="earliest")
    consumer.assign([("t", 0), ("t", 1)])
    seen: list[ConsumerRecord] = []
    while len(seen) < 4:
        batch = await consumer.poll(1000)
        assert batch, "data was there: the poll must return it without the clock moving"
        seen += batch
    assert sorted(values(seen)) == [(0, 0, b"a"), (0, 1, b"b"), (0, 2, b"c"), (1, 0, b"x")]
    assert seen[0].timestamp_ms in (1000, 1001)
    assert await consumer.position(TP0) == 3
    assert await consumer.position(TP1) == 1
    assert consumer.high_watermark(TP0) == 3
    await consumer.close()


async def test_latest_reset_skips_existing_records(cluster: ScriptedCluster) -> None:
    append(cluster, TP0, [b"old"])
    consumer = consumer_for(cluster, auto_offset_reset="latest")
    consumer.assign([TP0])
    assert await consumer.position(TP0) == 1
    append(cluster, TP0, [b"new"])
    records = await consumer.poll(1000)
    assert values(records) == [(0, 1, b"new")]
    await consumer.close()


async def test_long_poll_returns_when_data_arrives_not_at_max_wait(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    consumer = consumer_for(cluster, auto_offset_reset="earliest", fetch_max_wait_ms=500)
    consumer.assign([TP0])
    task = await poll_task(consumer, 10_000)
    assert cluster.count(ApiKey.FETCH) == 1
    clock.advance(100)
    await settle()
    assert not task.done()
    append(cluster, TP0, [b"now"])
    cluster.notify_append()
    await settle()
    assert task.done(), "the long poll should complete on the append"
    assert values(task.result()) == [(0, 0, b"now")]
    assert clock.monotonic_ms() == 100
    await consumer.close()


async def test_poll_times_out_empty_and_keeps_the_fetch_in_flight(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    consumer = consumer_for(cluster, auto_offset_reset="earliest", fetch_max_wait_ms=500)
    consumer.assign([TP1])
    task = await poll_task(consumer, 200)
    await advance_until(clock, task.done, step_ms=50, max_steps=10)
    assert task.result() == []
    assert clock.monotonic_ms() == 200
    fetches = cluster.count(ApiKey.FETCH)
    # The broker answers the long poll at max wait (500 ms); the next poll picks that up and
    # fetches again.
    task = await poll_task(consumer, 1000)
    await advance_until(
        clock, lambda: cluster.count(ApiKey.FETCH) > fetches, step_ms=50, max_steps=10
    )
    assert 500 <= clock.monotonic_ms() <= 550
    append(cluster, TP1, [b"late"])
    cluster.notify_append()
    await advance_until(clock, task.done, step_ms=10, max_steps=10)
    assert values(task.result()) == [(1, 0, b"late")]
    await consumer.close()


async def test_seek_and_seek_to_beginning_and_end(cluster: ScriptedCluster) -> None:
    append(cluster, TP0, [b"0", b"1", b"2", b"3"])
    consumer = consumer_for(cluster, auto_offset_reset="latest")
    consumer.assign([TP0])
    consumer.seek(TP0, 2)
    assert values(await consumer.poll(1000)) == [(0, 2, b"2"), (0, 3, b"3")]
    consumer.seek_to_beginning(TP0)
    assert await consumer.position(TP0) == 0
    assert [r.offset for r in await consumer.poll(1000)] == [0, 1, 2, 3]
    consumer.seek_to_end()
    assert await consumer.position(TP0) == 4
    with pytest.raises(ValueError, match="negative"):
        consumer.seek(TP0, -1)
    with pytest.raises(ValueError, match="not assigned"):
        consumer.seek(TP1, 0)
    await consumer.close()


async def test_offsets_for_times_and_beginning_end_offsets(cluster: ScriptedCluster) -> None:
    append(cluster, TP0, [b"a", b"b", b"c"], first_ts=5000)  # timestamps 5000..5002
    consumer = consumer_for(cluster)
    found = await consumer.offsets_for_times({TP0: 5001, TP1: 0})
    assert found[TP0] == OffsetAndTimestamp(1, 5001, -1)
    assert found[TP1] is None  # empty partition: no such record
    assert (await consumer.offsets_for_times({TP0: 9999}))[TP0] is None
    assert await consumer.beginning_offsets([TP0, TP1]) == {TP0: 0, TP1: 0}
    assert await consumer.end_offsets([TP0, TP1]) == {TP0: 3, TP1: 0}
    await consumer.close()


async def test_offset_out_of_range_resets_per_policy(cluster: ScriptedCluster) -> None:
    append(cluster, TP0, [b"a", b"b"])
    consumer = consumer_for(cluster, auto_offset_reset="earliest")
    consumer.assign([TP0])
    consumer.seek(TP0, 50)
    records = await consumer.poll(1000)
    assert values(records) == [(0, 0, b"a"), (0, 1, b"b")]
    await consumer.close()

    strict = consumer_for(cluster, auto_offset_reset="none")
    strict.assign([TP0])
    with pytest.raises(NoOffsetForPartitionError):
        await strict.poll(1000)
    strict.seek(TP0, 50)
    with pytest.raises(OffsetOutOfRangeError) as info:
        await strict.poll(1000)
    assert info.value.code is ErrorCode.OFFSET_OUT_OF_RANGE
    assert info.value.position == 50
    await strict.close()


async def test_leader_change_refreshes_metadata_and_fetches_from_the_new_leader(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    append(cluster, TP0, [b"a"])
    consumer = consumer_for(cluster, auto_offset_reset="earliest")
    consumer.assign([TP0])
    assert values(await consumer.poll(1000)) == [(0, 0, b"a")]
    cluster.move_leader(TP0, 1)
    append(cluster, TP0, [b"b"])
    task = await poll_task(consumer, 5000)
    await advance_until(clock, task.done, step_ms=20, max_steps=100)
    assert values(task.result()) == [(0, 1, b"b")]
    assert cluster.count(ApiKey.FETCH, broker=1) >= 1
    assert cluster.count(ApiKey.METADATA) >= 2
    await consumer.close()


async def test_retriable_fetch_error_is_retried(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    append(cluster, TP1, [b"x"])
    cluster.fetch_errors[TP1] = [ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.REPLICA_NOT_AVAILABLE]
    consumer = consumer_for(cluster, auto_offset_reset="earliest")
    consumer.assign([TP1])
    task = await poll_task(consumer, 5000)
    await advance_until(clock, task.done, step_ms=20, max_steps=100)
    assert values(task.result()) == [(1, 0, b"x")]
    assert cluster.count(ApiKey.FETCH) == 3
    await consumer.close()


async def test_non_retriable_fetch_error_is_raised(cluster: ScriptedCluster) -> None:
    cluster.fetch_errors[TP0] = [ErrorCode.TOPIC_AUTHORIZATION_FAILED]
    consumer = consumer_for(cluster, auto_offset_reset="earliest")
    consumer.assign([TP0])
    with pytest.raises(KafkaError) as info:
        await consumer.poll(1000)
    assert info.value.code is ErrorCode.TOPIC_AUTHORIZATION_FAILED
    await consumer.close()


async def test_a_batch_cut_short_is_fetched_again_whole(cluster: ScriptedCluster) -> None:
    append(cluster, TP0, [b"a" * 100])
    append(cluster, TP0, [b"b" * 100])
    batch_bytes = len(cluster.logs[TP0].batches[0][1])
    original = cluster.logs[TP0].read

    def truncating_read(offset: int, max_bytes: int) -> bytes:
        data = original(offset, max_bytes)
        return data[: batch_bytes + 30] if offset == 0 else data  # second batch cut mid-way

    cluster.logs[TP0].read = truncating_read  # type: ignore[method-assign]
    consumer = consumer_for(cluster, auto_offset_reset="earliest")
    consumer.assign([TP0])
    first = await consumer.poll(1000)
    assert [r.offset for r in first] == [0]
    second = await consumer.poll(1000)
    assert [r.offset for r in second] == [1]
    await consumer.close()


async def test_a_batch_larger_than_the_partition_limit_is_an_error(
    cluster: ScriptedCluster,
) -> None:
    append(cluster, TP0, [b"z" * 500])
    original = cluster.logs[TP0].read
    cluster.logs[TP0].read = lambda offset, max_bytes: original(offset, max_bytes)[:200]  # type: ignore[method-assign]
    consumer = consumer_for(cluster, auto_offset_reset="earliest")
    consumer.assign([TP0])
    with pytest.raises(RecordTooLargeError):
        await consumer.poll(1000)
    await consumer.close()


async def test_stale_fetch_answers_are_dropped_after_seek(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    append(cluster, TP0, [b"a", b"b", b"c"])
    consumer = consumer_for(cluster, auto_offset_reset="earliest", fetch_max_wait_ms=500)
    consumer.assign([TP0])
    assert await consumer.position(TP0) == 0
    release = asyncio.Event()
    original = cluster.fetch

    async def slow_fetch(broker: int, request: object, ctx: object) -> object:
        await release.wait()
        return await original(broker, request, ctx)  # type: ignore[arg-type]

    cluster.overrides[ApiKey.FETCH] = slow_fetch  # type: ignore[assignment]
    task = await poll_task(consumer, 100)
    await advance_until(clock, task.done, step_ms=50, max_steps=5)
    assert task.result() == []
    consumer.seek(TP0, 2)  # the in-flight fetch asked for offset 0
    del cluster.overrides[ApiKey.FETCH]
    release.set()
    await settle()
    assert values(await consumer.poll(1000)) == [(0, 2, b"c")]
    await consumer.close()


async def test_close_cancels_fetches_and_refuses_polls(cluster: ScriptedCluster) -> None:
    consumer = consumer_for(cluster, auto_offset_reset="earliest")
    consumer.assign([TP0, TP1])
    task = await poll_task(consumer, 10_000)
    assert {t.get_name() for t in asyncio.all_tasks()} & {"fetch from 0", "fetch from 1"}
    await consumer.close()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert not {t.get_name() for t in asyncio.all_tasks()} & {"fetch from 0", "fetch from 1"}
    with pytest.raises(ClientClosedError):
        await consumer.poll(1000)


async def test_a_leaderless_partition_is_fetched_once_a_leader_appears(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    append(cluster, TP1, [b"x"])
    consumer = consumer_for(cluster, auto_offset_reset="earliest")
    consumer.assign([TP1])
    assert await consumer.position(TP1) == 0
    cluster.leaders["t"][1] = -1  # the leader died; no new one yet
    cluster.epochs[TP1] += 1
    consumer._client.metadata.request_update()
    task = await poll_task(consumer, 10_000)
    clock.advance(300)
    await settle()
    assert not task.done()
    cluster.move_leader(TP1, 0)
    # Found within a few retry.backoff.ms (100 ms) rounds, not at the end of the 10 s poll.
    await advance_until(clock, task.done, step_ms=20, max_steps=30)
    assert values(task.result()) == [(1, 0, b"x")]
    assert cluster.count(ApiKey.FETCH, broker=0) == 1
    await consumer.close()
