"""Leader failover on a 3-broker in-process cluster (seeded MemoryNetwork, ManualClock).

The real controller runs beside the brokers: the topic is created through a broker, the leader's
broker is killed, the controller notices when its session times out and elects a follower from
the ISR, and the old leader is restarted as a new process and rejoins as a follower. A producer with
acks=all writes continuously throughout (it sends record i+1 only once record i is
acknowledged, and retries a record until it is, so retries may duplicate but never reorder).
Afterwards: no acknowledged record is lost, records are in order, and every replica's log holds
the same bytes up to the high watermark.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from client.client import Client
from client.config import ClientConfig, ConsumerConfig
from client.consumer import Consumer
from client.errors import ClientError
from client.fetched_records import ConsumerRecord
from runtime.net.memory import LinkConfig
from testkit.cluster import Cluster
from testkit.probes import one_record, only_answer
from wire.errors import ErrorCode
from wire.records import iter_batches
from wire.topic import TopicPartition

TOPIC = "orders"
TP = TopicPartition(TOPIC, 0)
LAG_MS = 2_000
PROPERTIES: dict[str, object] = {
    "min.insync.replicas": 2,
    "replica.lag.time.max.ms": LAG_MS,
    "replica.fetch.wait.max.ms": 20,
    "replica.fetch.backoff.ms": 20,
    "request.timeout.ms": 1_000,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 50,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 50,
}
CLIENT_CONFIG = ClientConfig(
    request_timeout_ms=1_000, reconnect_backoff_ms=10, reconnect_backoff_max_ms=50
)


def value_of(i: int) -> bytes:
    return b"record-%06d" % i


@dataclass
class ContinuousProducer:
    """acks=all, one record in flight, to the leader the controller names; retries forever."""

    cluster: Cluster
    total: int
    acked: list[tuple[int, int]] = field(default_factory=list)  # (record, offset)
    errors: dict[str, int] = field(default_factory=dict)

    async def run(self) -> None:
        clock = self.cluster.clock
        assert self.cluster.network is not None
        client = Client(
            self.cluster.addresses,
            transport=self.cluster.network.transport("producer"),
            clock=clock,
            config=CLIENT_CONFIG,
        )
        try:
            i = 0
            while i < self.total:
                error = await self._attempt(client, i)
                if error is None:
                    i += 1
                else:
                    self.errors[error] = self.errors.get(error, 0) + 1
                    await clock.sleep(0.01)
        finally:
            await client.close()

    async def _attempt(self, client: Client, i: int) -> str | None:
        address = self.cluster.leader_address(TP)
        if address is None:
            return "no live leader"
        try:
            response = await client.send(address, one_record(TOPIC, 0, value_of(i), timeout_ms=500))
        except ClientError as exc:
            return type(exc).__name__
        answer = only_answer(response)
        if answer.error_code != ErrorCode.NONE:
            return ErrorCode.from_code(answer.error_code).name
        self.acked.append((i, answer.base_offset))
        return None


async def consume_to(cluster: Cluster, end_offset: int) -> list[ConsumerRecord]:
    assert cluster.network is not None
    consumer = Consumer(
        Client(
            cluster.addresses,
            transport=cluster.network.transport("consumer"),
            clock=cluster.clock,
            config=CLIENT_CONFIG,
        ),
        config=ConsumerConfig(
            fetch_max_wait_ms=50, auto_offset_reset="earliest", request_timeout_ms=1_000
        ),
        owns_client=True,
    )
    consumer.assign([(TOPIC, 0)])
    records: list[ConsumerRecord] = []
    try:
        for _ in range(1_000):  # bounded; each poll brings records or times out
            if records and records[-1].offset + 1 >= end_offset:
                break
            records.extend(await cluster.drive(consumer.poll(timeout_ms=100)))
    finally:
        await cluster.drive(consumer.close())
    return records


def batches_up_to(partition_dir: Path, high_watermark: int) -> list[bytes]:
    """The stored bytes of every batch below the high watermark, in offset order."""
    out: list[bytes] = []
    for segment in sorted(partition_dir.glob("*.log")):
        data = segment.read_bytes()
        for pos, header in iter_batches(data):
            if header.last_offset < high_watermark:
                out.append(data[pos : pos + header.size_bytes])
    return out


def replicas_caught_up(cluster: Cluster) -> bool:
    record = cluster.record(TP)
    if sorted(record.isr) != sorted(record.replicas):
        return False
    views = [cluster.node(b).replica_manager.partition(TP) for b in record.replicas]
    if any(v is None for v in views):
        return False
    leos = {v.view.log_end_offset.message_offset for v in views if v is not None}
    hws = {v.view.high_watermark.message_offset for v in views if v is not None}
    return len(leos) == 1 and hws == leos


@pytest.mark.parametrize("seed", [4, 11, 14, 23])
async def test_failover_loses_no_acknowledged_record(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    total = 150
    kill_at = rng.randrange(30, 60)
    # A random moment after an acknowledgement, so the next record may be anywhere: in flight,
    # on the leader only (to be truncated when it rejoins), or on some followers.
    kill_delay_ms = rng.randrange(0, 8)
    cluster = Cluster.in_memory(
        tmp_path, 3, seed=seed, properties=PROPERTIES, link=LinkConfig(delay_ms=1, jitter_ms=1)
    )
    await cluster.drive(cluster.start())
    producer = ContinuousProducer(cluster, total)
    task: asyncio.Task[None] | None = None
    try:
        await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=3))
        task = asyncio.ensure_future(producer.run())
        await cluster.run_until(lambda: len(producer.acked) >= kill_at, max_ms=20_000)
        await cluster.run_for(kill_delay_ms)

        old_leader = cluster.record(TP).leader
        await cluster.drive(cluster.kill(old_leader))
        new_leader = await cluster.new_leader(TP, old_leader)
        assert new_leader in cluster.record(TP).isr
        await cluster.run_until(lambda: len(producer.acked) >= kill_at + 40, max_ms=20_000)

        await cluster.drive(cluster.restart(old_leader))
        await cluster.run_until(task.done, max_ms=30_000, what="all records acknowledged")
        task.result()
        await cluster.run_until(
            lambda: replicas_caught_up(cluster), max_ms=10_000, what="replicas caught up"
        )

        leader_view = cluster.node(new_leader).replica_manager.partition(TP)
        assert leader_view is not None
        high_watermark = leader_view.view.high_watermark.message_offset
        records = await consume_to(cluster, high_watermark)
    finally:
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await cluster.drive(cluster.stop())
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == {asyncio.current_task()}, "a task outlived the cluster"

    context = (
        f"seed={seed} kill_at={kill_at} kill_delay_ms={kill_delay_ms} errors={producer.errors}"
    )
    by_offset = {r.offset: r.value for r in records}
    assert [r.offset for r in records] == list(range(high_watermark)), context
    # No acknowledged record is lost: each is where its acknowledgement said.
    assert len(producer.acked) == total, context
    for i, offset in producer.acked:
        assert by_offset.get(offset) == value_of(i), f"record {i} at {offset}: {context}"
    # In order: the first copy of each record follows the one before it; retries only repeat.
    ids = [int(r.value.split(b"-")[1]) for r in records if r.value is not None]
    firsts = list(dict.fromkeys(ids))
    assert firsts == list(range(total)), context
    duplicates = len(ids) - len(firsts)
    print(f"{context} duplicates={duplicates} high_watermark={high_watermark}")

    # Every replica's log holds identical bytes up to the high watermark.
    copies = [batches_up_to(cluster.log_dir(b) / f"{TOPIC}-0", high_watermark) for b in range(3)]
    assert sum(len(b) for b in copies[0]) > 0, context
    for broker_id, copy in enumerate(copies[1:], start=1):
        assert copy == copies[0], f"broker {broker_id} differs from broker 0: {context}"


async def test_acks_all_times_out_then_is_refused_with_too_few_replicas(tmp_path: Path) -> None:
    seed = 5
    cluster = Cluster.in_memory(tmp_path, 3, seed=seed, properties=PROPERTIES)
    await cluster.drive(cluster.start())
    client: Client | None = None
    try:
        await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=3))
        leader = cluster.record(TP).leader
        assert cluster.network is not None
        client = Client(
            [cluster.node(leader).address],
            transport=cluster.network.transport("producer"),
            clock=cluster.clock,
            config=CLIENT_CONFIG,
        )
        address = cluster.node(leader).address

        async def produce(value: bytes) -> ErrorCode:
            assert client is not None
            request = one_record(TOPIC, 0, value, timeout_ms=200)
            answer = only_answer(await cluster.drive(client.send(address, request)))
            return ErrorCode.from_code(answer.error_code)

        assert await produce(b"record-000000") is ErrorCode.NONE
        for follower in [b for b in cluster.record(TP).replicas if b != leader]:
            await cluster.drive(cluster.kill(follower))
        # The ISR still names the dead followers: the append happens, the HW cannot advance.
        assert await produce(b"record-000001") is ErrorCode.REQUEST_TIMED_OUT, f"seed={seed}"
        # When their sessions time out the controller takes the dead followers out of the
        # ISR, below min.insync.replicas: appends are refused.
        await cluster.run_until(
            lambda: cluster.record(TP).isr == (leader,), max_ms=3 * LAG_MS, what="ISR shrink"
        )
        await cluster.run_until(
            lambda: _isr_of_leader(cluster, leader) == 1, max_ms=1_000, what="leader sees ISR"
        )
        assert await produce(b"record-000002") is ErrorCode.NOT_ENOUGH_REPLICAS, f"seed={seed}"
    finally:
        if client is not None:
            await cluster.drive(client.close())
        await cluster.drive(cluster.stop())


def _isr_of_leader(cluster: Cluster, leader: int) -> int:
    actor = cluster.node(leader).replica_manager.partition(TP)
    return -1 if actor is None else len(actor.view.isr)
