"""Producer and consumer over a lossy, delayed in-memory network: nothing acknowledged is lost.

Seeded: the network drops chunks (each drop resets a connection) and delays them with jitter;
the producer retries through resets and leader-less windows. Invariants at the end:

* every acknowledged record is in the log at the offset its acknowledgement names;
* per partition, acknowledged offsets increase in `send()` order (retries never reorder);
* the consumer reads every acknowledged value back, in log order.
"""

from __future__ import annotations

import asyncio

import pytest

from client.config import ConsumerConfig, ProducerConfig
from client.consumer import Consumer
from client.producer import Producer
from runtime.clock import ManualClock
from tests.unit.client.lossy_run import CLIENT, lossy_cluster, send_all
from tests.unit.client.scripted_cluster import settle
from wire.record_reader import iter_records
from wire.records import iter_batches
from wire.topic import TopicPartition


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_acknowledged_records_survive_a_lossy_network(seed: int) -> None:
    clock = ManualClock()
    cluster = lossy_cluster(clock, seed)
    await cluster.start()
    config = CLIENT
    # These brokers check no sequences, so the order must come from the producer alone: one
    # batch per partition in flight, as without idempotence. (An idempotent producer has more
    # in flight and relies on the broker's sequence checks: test_producer_idempotence.py's
    # lossy test.)
    producer = Producer(
        cluster.client(config=config, seed=seed),
        config=ProducerConfig(
            linger_ms=3,
            batch_size=300,
            request_timeout_ms=500,
            retry_backoff_ms=20,
            partitioner_seed=seed,
            enable_idempotence=False,
        ),
        owns_client=True,
    )
    sent = await send_all(producer, clock, seed)
    acked = [(v, f.result()) for v, f in sent if not f.exception()]
    assert len(acked) >= 190, f"seed={seed}: only {len(acked)} of 200 acknowledged"
    logged = sum(log.end_offset for log in cluster.logs.values())
    # The network really lost answers: some batches were appended twice (a retry after a
    # reset whose request had arrived), or some records were given up on.
    assert logged > 200 or len(acked) < 200, f"seed={seed}: the run saw no loss"

    logs: dict[int, dict[int, bytes | None]] = {}
    for p in (0, 1):
        logs[p] = {}
        for _, data in cluster.logs[TopicPartition("t", p)].batches:
            for pos, _h in iter_batches(data):
                logs[p].update((r.offset, r.value) for r in iter_records(data, pos))
    last: dict[int, int] = {}
    for value, meta in acked:
        assert logs[meta.partition].get(meta.offset) == value, f"seed={seed} {meta}"
        assert meta.offset > last.get(meta.partition, -1), f"seed={seed}: reordered at {meta}"
        last[meta.partition] = meta.offset
    await producer.close()

    consumer = Consumer(
        cluster.client(config=config, seed=seed),
        config=ConsumerConfig(auto_offset_reset="earliest", request_timeout_ms=600),
        owns_client=True,
    )
    consumer.assign([("t", 0), ("t", 1)])
    read: dict[int, list[tuple[int, bytes | None]]] = {0: [], 1: []}

    async def consume_all() -> None:
        while sum(len(v) for v in read.values()) < sum(len(v) for v in logs.values()):
            for record in await consumer.poll(1000):
                read[record.partition].append((record.offset, record.value))

    task = asyncio.create_task(consume_all())
    for _ in range(20_000):
        await settle(5)
        if task.done():
            break
        clock.advance(1)
    assert task.done(), f"seed={seed}: consuming did not finish"
    task.result()
    for p in (0, 1):
        assert read[p] == sorted(logs[p].items()), f"seed={seed} partition {p}"
    await consumer.close()
    await cluster.stop()
