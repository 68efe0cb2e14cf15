"""A producer run over a lossy, delayed in-memory network, shared by the lossy-network tests of
the producer (plain and idempotent): the seeded cluster, and 200 keyed sends driven on the
manual clock until flushed."""

from __future__ import annotations

import asyncio

from client.accumulator import RecordMetadata
from client.config import ClientConfig
from client.producer import Producer
from runtime.clock import ManualClock
from runtime.net.memory import LinkConfig
from tests.unit.client.scripted_cluster import ScriptedCluster, settle

RECORDS = 200
CLIENT = ClientConfig(request_timeout_ms=500, retry_backoff_ms=20, reconnect_backoff_ms=10)

Sent = list[tuple[bytes, asyncio.Future[RecordMetadata]]]


def lossy_cluster(clock: ManualClock, seed: int) -> ScriptedCluster:
    """Two brokers and topic "t" (partitions 0 and 1) over links that delay with jitter and
    drop 3% of chunks (each drop resets a connection)."""
    cluster = ScriptedCluster(clock, brokers=2, seed=seed)
    cluster.network = type(cluster.network)(
        seed, clock, default_link=LinkConfig(delay_ms=2, jitter_ms=3, drop_probability=0.03)
    )
    cluster.create_topic("t", [0, 1])
    return cluster


async def send_all(producer: Producer, clock: ManualClock, seed: int) -> Sent:
    """RECORDS keyed sends and a flush, the clock moved 1 ms at a time (bounded); every value
    with the future of its acknowledgement."""
    sent: Sent = []

    async def produce_all() -> None:
        for i in range(RECORDS):
            value = f"value-{i}".encode()
            sent.append((value, await producer.send("t", f"k{i % 7}".encode(), value)))
            if i % 20 == 0:
                await clock.sleep(0.005)
        await producer.flush()

    task = asyncio.create_task(produce_all())
    for _ in range(20_000):
        await settle(5)
        if task.done():
            break
        clock.advance(1)
    assert task.done(), f"seed={seed}: producing did not finish"
    task.result()
    return sent
