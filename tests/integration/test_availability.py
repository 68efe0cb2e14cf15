"""Availability under a steady acks=all producer (issue 18's "done means"): a rolling restart
(controlled shutdown and start of each broker in turn) and a kill -9 of one broker, in real
processes.

The producer is deliberately plain, like a client with idempotence off: per partition, one
ProduceRequest at a time (acks=all, a request timeout fixed here, longer than the broker's
session timeout), each carrying one record with a unique sequence number; a failed request is
counted with its error and the same record is sent again to the partition's current leader
until it is acknowledged. A metadata poller records every leader each partition had.

The run is cut into phases (one per broker restarted); what must hold, per phase and partition:
  - the leader did not move in the phase: no produce request failed, and no record sent in the
    phase is in the log twice;
  - the leader moved: only retriable errors, every record eventually acknowledged (a retry after
    a lost answer may duplicate there, which only idempotence prevents);
and everywhere every acknowledged record is read back at the offset its acknowledgement named.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest

from client.client import Client
from client.config import ClientConfig
from client.errors import ClientError
from runtime.clock import SystemClock
from runtime.net.tcp import TcpTransport
from testkit.probes import (
    create_topic,
    one_record,
    only_answer,
    partitions_of,
    wait_fully_replicated,
    wait_until,
)
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import PROPERTIES
from wire.errors import ErrorCode
from wire.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
)
from wire.record_reader import iter_records
from wire.records import iter_batches
from wire.topic import TopicPartition

pytestmark = pytest.mark.slow

TOPIC: Final = "steady"
PARTITIONS: Final = 3
WAIT_S: Final = 30.0
# The producer's request timeout (Kafka's request.timeout.ms / the produce timeout): longer than
# the session timeout, so a write waiting on a dead follower is released by the controller's ISR
# shrink before it times out.
PRODUCE_TIMEOUT_MS: Final = 10_000
SESSION_TIMEOUT_MS: Final = 1_500
RETRIABLE: Final = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.KAFKA_STORAGE_ERROR,
    }
)
CONNECTION_LOST: Final = "connection"  # a request whose answer never came (a dead leader)
CLUSTER_PROPERTIES: Final = {
    **PROPERTIES,
    "broker.session.timeout.ms": SESSION_TIMEOUT_MS,
    "replica.lag.time.max.ms": 10_000,  # the ISR shrinks by the controller, not by lag
    "request.timeout.ms": 2_000,
    "min.insync.replicas": 2,
    "controlled.shutdown.max.retries": 5,
    "controlled.shutdown.retry.backoff.ms": 200,
}


@dataclass
class PartitionStats:
    """One partition in one phase."""

    sent: set[int] = field(default_factory=set)  # sequences first sent in the phase
    # Sequences sent again in the phase: a record in the log twice was written twice by a retry,
    # so it counts against the phase of the retry.
    retried: set[int] = field(default_factory=set)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)
    leaders: set[int] = field(default_factory=set)

    @property
    def failed(self) -> int:
        return sum(self.errors.values())


@dataclass
class SteadyProducer:
    client: Client
    phase: str = "start"
    # phase -> partition -> what happened to it in that phase
    phases: dict[str, dict[int, PartitionStats]] = field(default_factory=dict)
    acked: dict[int, dict[int, int]] = field(
        default_factory=lambda: {p: {} for p in range(PARTITIONS)}
    )  # partition -> sequence -> acknowledged offset
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def stats(self, partition: int) -> PartitionStats:
        by_partition = self.phases.setdefault(
            self.phase, {p: PartitionStats() for p in range(PARTITIONS)}
        )
        return by_partition[partition]

    def begin(self, phase: str) -> None:
        self.phase = phase
        # Its leaders start with the leaders the previous phase ended with.
        for partition in range(PARTITIONS):
            self.stats(partition)

    def value(self, partition: int, seq: int) -> bytes:
        return b"%d:%08d" % (partition, seq)

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            for partition in range(PARTITIONS):
                tasks.create_task(self._partition(partition))
            tasks.create_task(self._watch_leaders())

    async def _partition(self, partition: int) -> None:
        tp = TopicPartition(TOPIC, partition)
        seq = 0
        while not self.stop.is_set():
            self.stats(partition).sent.add(seq)
            request = one_record(
                TOPIC, partition, self.value(partition, seq), timeout_ms=PRODUCE_TIMEOUT_MS
            )
            attempt = 0
            while True:  # the same record until it is acknowledged
                if attempt:
                    self.stats(partition).retried.add(seq)
                attempt += 1
                # The lookup's own failures (a dead broker asked for metadata) are no produce
                # failures: it retries inside, up to its timeout.
                leader, _ = await self.client.leader_for(tp, timeout_ms=WAIT_S * 1000)
                self.stats(partition).leaders.add(leader.node_id)
                try:
                    response = await self.client.send(
                        leader.address, request, timeout_ms=PRODUCE_TIMEOUT_MS + 5_000
                    )
                except ClientError as exc:
                    lost = f"{CONNECTION_LOST} to {leader.node_id}: {type(exc).__name__}"
                    self.stats(partition).errors[lost] += 1
                    self.client.metadata.request_update()
                    await asyncio.sleep(0.05)  # backoff before the retry, as a client's
                    continue
                answer = only_answer(response)
                code = ErrorCode.from_code(answer.error_code)
                if code is ErrorCode.NONE:
                    self.acked[partition][seq] = answer.base_offset
                    break
                self.stats(partition).errors[code.name] += 1
                self.client.metadata.request_update()
                await asyncio.sleep(0.05)
            seq += 1

    async def _watch_leaders(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(ClientError):
                view = await self.client.refresh_metadata([TOPIC])
                for partition in range(PARTITIONS):
                    info = view.partition(TopicPartition(TOPIC, partition))
                    if info is not None and info.leader_id >= 0:
                        self.stats(partition).leaders.add(info.leader_id)
            await asyncio.sleep(0.02)

    def acked_total(self) -> int:
        return sum(len(a) for a in self.acked.values())


async def progress(producer: SteadyProducer, more: int, what: str) -> None:
    target = producer.acked_total() + more

    async def enough() -> bool:
        return producer.acked_total() >= target

    await wait_until(enough, what, timeout_s=WAIT_S)


async def read_values(cluster: ProcessCluster, client: Client, partition: int) -> list[bytes]:
    """Every record value of the partition below its high watermark, from its leader."""
    tp = TopicPartition(TOPIC, partition)
    values: list[bytes] = []
    offset = 0
    for _ in range(10_000):  # bounded: each round moves on or ends
        leader, _ = await client.leader_for(tp, timeout_ms=WAIT_S * 1000)
        response = await client.send(
            leader.address,
            FetchRequest(
                max_wait_ms=0,
                min_bytes=0,
                topics=[
                    FetchTopic(
                        topic=TOPIC,
                        partitions=[
                            FetchPartition(
                                partition=partition,
                                fetch_offset=offset,
                                partition_max_bytes=1_048_576,
                            )
                        ],
                    )
                ],
            ),
        )
        assert isinstance(response, FetchResponse), response
        [data] = response.responses[0].partitions
        assert data.error_code == 0, (partition, ErrorCode.from_code(data.error_code))
        records = data.records or b""
        if not records:
            return values
        for position, _header in iter_batches(records):
            for record in iter_records(records, position):
                if record.offset >= offset:
                    assert record.value is not None
                    values.append(record.value)
                    offset = record.offset + 1
    raise AssertionError(f"partition {partition}: reading did not end")


async def check(cluster: ProcessCluster, producer: SteadyProducer) -> list[str]:
    """The promises per phase and partition; returns the reports of the phases' partitions whose
    leader stayed (the ones held to no failure and no duplicate)."""
    client = cluster.client()
    duplicated: dict[int, set[int]] = {}
    try:
        for partition, acked in producer.acked.items():
            values = await read_values(cluster, client, partition)
            counts = collections.Counter(values)
            duplicated[partition] = {
                int(value.split(b":")[1]) for value, n in counts.items() if n > 1
            }
            for seq, offset in acked.items():
                value = producer.value(partition, seq)
                assert value in counts, f"p{partition}: acknowledged seq {seq} lost"
                assert values[offset] == value, f"p{partition}: seq {seq} not at offset {offset}"
    finally:
        await client.close()
    stayed = []
    for phase, by_partition in producer.phases.items():
        for partition, stats in by_partition.items():
            twice = len(stats.retried & duplicated[partition])
            report = (
                f"{phase}, p{partition}: leaders {sorted(stats.leaders)}, {len(stats.sent)} sent, "
                f"errors {dict(stats.errors)}, {twice} written twice"
            )
            if len(stats.leaders) > 1:
                unexpected = {e for e in stats.errors if not e.startswith(CONNECTION_LOST)} - {
                    c.name for c in RETRIABLE
                }
                assert not unexpected, report
            else:
                assert stats.failed == 0, report
                assert twice == 0, report
                stayed.append(report)
    return stayed


def producer_client(cluster: ProcessCluster) -> Client:
    """A client whose request timeout is longer than a produce may wait in the purgatory, as
    Kafka's defaults are (request.timeout.ms 30 s): answers on a connection come in request order,
    so a metadata request queued behind a produce waits for it, and a shorter timeout would reset
    the connection and fail the produce on the client's side."""
    return Client(
        list(cluster.addresses.values()),
        transport=TcpTransport(),
        clock=SystemClock(),
        config=ClientConfig(
            request_timeout_ms=PRODUCE_TIMEOUT_MS + 5_000,
            reconnect_backoff_ms=10,
            reconnect_backoff_max_ms=100,
        ),
        client_id="steady-producer",
    )


@contextlib.asynccontextmanager
async def steady_load(cluster: ProcessCluster) -> AsyncIterator[tuple[SteadyProducer, Client]]:
    """The topic, and the steady producer writing to it until the block ends; also a client for
    the test's own metadata checks."""
    client = producer_client(cluster)
    await create_topic(
        client,
        cluster.addresses.values(),
        TOPIC,
        partitions=PARTITIONS,
        replication_factor=3,
        configs={"min.insync.replicas": "2"},
    )
    await wait_fully_replicated(
        client, cluster.addresses.values(), TOPIC, PARTITIONS, timeout_s=WAIT_S
    )
    producer = SteadyProducer(client)
    task = asyncio.get_running_loop().create_task(producer.run())
    checks = cluster.client()
    try:
        await progress(producer, 30, "the producer runs")
        yield producer, checks
    finally:
        producer.stop.set()
        await asyncio.wait_for(task, WAIT_S)
        await asyncio.gather(client.close(), checks.close())


async def back_in_the_isrs(
    cluster: ProcessCluster, client: Client, producer: SteadyProducer, broker_id: int
) -> None:
    """Until the broker is running, every partition's ISR is whole again, and writes go on."""
    await cluster.wait_running([broker_id], timeout_s=WAIT_S)
    await wait_fully_replicated(
        client, cluster.addresses.values(), TOPIC, PARTITIONS, timeout_s=WAIT_S
    )
    await progress(producer, 20, f"writes after broker {broker_id} is back")


async def test_a_rolling_restart_fails_no_write_whose_leader_stayed(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, CLUSTER_PROPERTIES) as cluster:
        async with steady_load(cluster) as (producer, client):
            for broker_id in range(3):
                producer.begin(f"broker {broker_id} restarting")
                assert await cluster.broker(broker_id).terminate() == 0, cluster.logs()
                await progress(producer, 20, f"writes while broker {broker_id} is down")
                await cluster.broker(broker_id).start()
                await back_in_the_isrs(cluster, client, producer, broker_id)
        stayed = await check(cluster, producer)
        assert stayed, "in some phase some partition must have kept its leader"


async def test_a_killed_follower_fails_no_write_whose_leader_stayed(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, CLUSTER_PROPERTIES) as cluster:
        async with steady_load(cluster) as (producer, client):
            leaders = await partitions_of(client, cluster.addresses.values(), TOPIC)
            # The broker leading the fewest partitions: most of its partitions keep their leader.
            led = collections.Counter(p.leader_id for p in leaders.values())
            victim = min(range(3), key=lambda b: (led[b], b))
            producer.begin(f"broker {victim} killed")
            await cluster.broker(victim).kill()
            await progress(producer, 30, f"writes after broker {victim} was killed")
            await cluster.broker(victim).start()
            await back_in_the_isrs(cluster, client, producer, victim)
        stayed = await check(cluster, producer)
        assert any("killed" in report for report in stayed), "a partition must keep its leader"


async def test_a_broker_killed_and_restarted_at_once_does_not_wait_out_its_session(
    tmp_path: Path,
) -> None:
    """A session far longer than the test may wait: if the controller kept the dead incarnation
    registered until its session ended, it would stay in every ISR (acks=all writes stall) and
    lead its partitions (writes fail) for a minute."""
    properties = {**CLUSTER_PROPERTIES, "broker.session.timeout.ms": 60_000}
    async with running_cluster(tmp_path, properties) as cluster:
        async with steady_load(cluster) as (producer, client):
            producer.begin("broker 1 killed and restarted")
            await cluster.broker(1).kill()
            await cluster.broker(1).start()
            await progress(producer, 30, "writes after broker 1 came back")
            await back_in_the_isrs(cluster, client, producer, 1)
        await check(cluster, producer)
