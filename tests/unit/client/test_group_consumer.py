"""`GroupConsumer` against the real group coordinator: an in-process cluster (testkit/cluster.py:
two brokers, the controller, a seeded in-memory network, a manual clock).

Two members share a two-partition topic: each record is read by exactly one of them, also across
the rebalances when the second joins and when it leaves (each member commits what it read
before it gives its partitions up), and a member that joins later starts at the committed
offsets. Every wait is bounded in simulated milliseconds (`run_until`), and the seed is in each
failure message.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

from client.client import Client
from client.config import ClientConfig, ConsumerConfig, ProducerConfig
from client.group_consumer import GroupConsumer
from client.group_member import GroupConfig, MemberState
from client.producer import Producer
from testkit.cluster import Cluster
from wire.topic import TopicPartition

SEED: Final = 23
TOPIC: Final = "events"
P0, P1 = TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)
PROPERTIES: Final[dict[str, object]] = {
    "offsets.topic.num.partitions": 2,
    "group.initial.rebalance.delay.ms": 0,
}
CLIENT: Final = ClientConfig(
    request_timeout_ms=2_000,
    reconnect_backoff_ms=10,
    retry_backoff_ms=20,
    delivery_timeout_ms=20_000,
)
GROUP: Final = GroupConfig(
    "readers",
    session_timeout_ms=6_000,
    heartbeat_interval_ms=300,
    max_poll_interval_ms=10_000,
    auto_commit_interval_ms=1_000,
    retry_backoff_ms=20,
    request_timeout_ms=2_000,
)


@contextlib.asynccontextmanager
async def running(tmp_path: Path) -> AsyncIterator[Cluster]:
    cluster = Cluster.in_memory(tmp_path, 2, seed=SEED, properties=PROPERTIES)
    await cluster.drive(cluster.start())
    try:
        await cluster.drive(cluster.create_topic(TOPIC, 2, replication_factor=1))
        yield cluster
    finally:
        await cluster.drive(cluster.stop())


def new_client(cluster: Cluster, name: str) -> Client:
    assert cluster.network is not None
    return Client(
        cluster.addresses,
        transport=cluster.network.transport(name),
        clock=cluster.clock,
        config=CLIENT,
        seed=SEED,
    )


class Reader:
    """A GroupConsumer polled by a task of its own, as an application polls; what it read is
    kept as (partition, offset, value)."""

    def __init__(self, cluster: Cluster, name: str) -> None:
        self.client = new_client(cluster, name)
        self.generations: list[tuple[int, frozenset[TopicPartition]]] = []
        self.consumer = GroupConsumer(
            self.client,
            [TOPIC],
            group=GROUP,
            config=ConsumerConfig(
                auto_offset_reset="earliest", fetch_max_wait_ms=50, request_timeout_ms=2_000
            ),
            on_assigned=lambda tps, generation: self.generations.append((generation, tps)),
            seed=SEED,
        )
        self.read: list[tuple[int, int, bytes]] = []
        self.task = asyncio.create_task(self._run(), name=f"reader {name}")

    async def _run(self) -> None:
        while True:
            records = await self.consumer.poll(timeout_ms=200)
            self.read += [(r.partition, r.offset, r.value or b"") for r in records]
            self.consumer.mark_consumed(records)

    async def close(self, cluster: Cluster) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await cluster.drive(self.consumer.close())
        await cluster.drive(self.client.close())

    def owns(self) -> frozenset[TopicPartition]:
        return self.consumer.assignment()


async def produce(cluster: Cluster, values: list[bytes]) -> None:
    producer = Producer(
        new_client(cluster, "producer"),
        config=ProducerConfig(linger_ms=0, request_timeout_ms=2_000, partitioner_seed=SEED),
        owns_client=True,
    )
    try:
        # A key per value spreads them over both partitions.
        futures = [await cluster.drive(producer.send(TOPIC, v, v)) for v in values]
        await cluster.drive(producer.flush())
        assert all(f.done() and f.exception() is None for f in futures)
    finally:
        await cluster.drive(producer.close())


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


def read_values(*readers: Reader) -> list[bytes]:
    return sorted(value for reader in readers for _, _, value in reader.read)


async def test_two_members_share_a_topic_and_a_late_member_resumes_at_the_commits(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as cluster:
        first = values("first", 20)
        await produce(cluster, first)
        a = Reader(cluster, "a")
        await cluster.run_until(
            lambda: len(a.read) == 20, max_ms=10_000, what=f"a reads all (seed {SEED})"
        )
        assert a.owns() == {P0, P1}
        assert a.consumer.member.state is MemberState.STABLE

        # b joins: a hears of the rebalance in a heartbeat, commits, rejoins; one partition each.
        b = Reader(cluster, "b")
        await cluster.run_until(
            lambda: len(a.owns()) == 1 and len(b.owns()) == 1,
            max_ms=10_000,
            what="a and b split the partitions",
        )
        assert a.owns() | b.owns() == {P0, P1}
        assert a.generations[-1][0] == b.generations[-1][0] == a.generations[0][0] + 1
        second = values("second", 30)
        await produce(cluster, second)
        await cluster.run_until(
            lambda: len(read_values(a, b)) == 50, max_ms=10_000, what="a and b read the rest"
        )
        assert read_values(a, b) == sorted(first + second)  # none lost, none read twice
        assert {p for p, _, _ in b.read} == {tp.partition for tp in b.owns()}

        # b leaves (commit, LeaveGroup): a takes both partitions again, at b's commits.
        await b.close(cluster)
        await cluster.run_until(lambda: a.owns() == {P0, P1}, max_ms=10_000, what="a owns all")
        third = values("third", 10)
        await produce(cluster, third)
        await cluster.run_until(
            lambda: len(read_values(a, b)) == 60, max_ms=10_000, what="a reads the third batch"
        )
        await cluster.run_for(500)  # nothing more arrives: nothing is read twice
        assert read_values(a, b) == sorted(first + second + third)
        await a.close(cluster)
        assert a.consumer.commit_failures == 0

        # A member of a new generation starts at the committed offsets, not at the earliest.
        fourth = values("fourth", 6)
        await produce(cluster, fourth)
        c = Reader(cluster, "c")
        await cluster.run_until(lambda: len(c.read) == 6, max_ms=10_000, what="c resumes")
        await cluster.run_for(500)
        assert sorted(v for _, _, v in c.read) == sorted(fourth)
        await c.close(cluster)


async def test_only_what_was_marked_consumed_is_committed(tmp_path: Path) -> None:
    """A reader that stops in the middle of a poll's records commits up to what it used."""
    async with running(tmp_path) as cluster:
        await produce(cluster, values("v", 10))
        client = new_client(cluster, "partial")
        consumer = GroupConsumer(
            client,
            [TOPIC],
            group=GROUP,
            config=ConsumerConfig(auto_offset_reset="earliest", fetch_max_wait_ms=50),
            seed=SEED,
        )
        used: dict[TopicPartition, int] = {}
        while not used:
            records = await cluster.drive(consumer.poll(timeout_ms=500))
            consumer.mark_consumed(records[:1])
            for record in records[:1]:
                used[TopicPartition(record.topic, record.partition)] = record.offset + 1
        await cluster.drive(consumer.close())
        assert consumer.commit_failures == 0

        checker = GroupConsumer(new_client(cluster, "checker"), [TOPIC], group=GROUP, seed=SEED)
        committed = await cluster.drive(checker.member.committed([P0, P1]))
        await cluster.drive(checker.close())
        await cluster.drive(client.close())
        assert {tp: o for tp, o in committed.items() if o is not None} == used
