"""Issue 18, finding 11, with librdkafka: a steady acks=all producer without idempotence
(confluent-kafka, max.in.flight.requests.per.connection=1) while the leader of ONE partition is
killed with kill -9 and restarted at once (as `ketch up` restarts it), in real processes.

What was measured before the fixes: the same batch landed 5 times in a partition whose leader
was not the killed broker, the copies up to ~1,000 offsets and 7 s apart, and the
acknowledgement named the last copy. A retry of a non-idempotent producer may duplicate only when
an answer is lost or the write is refused; a partition whose leader stayed has no reason for
either, so there the promise is the strict one.

The cause, seen with librdkafka's debug log on the commit before the fixes (0639f8d): the killed
broker, restarted at once, was refused registration until its old session ran out (finding 10),
but its Kafka listener already answered Metadata, from an empty cache: UNKNOWN_TOPIC_OR_PARTITION
for the whole topic. librdkafka then takes every partition of the topic away from its leader's
connection and re-queues the batch in flight there as not persisted ("Broker handle destroyed
without termination", MsgNotPersisted) although the leader has appended it and holds it in the
purgatory, where the dead incarnation, still in the ISR, keeps it waiting. Each metadata answer
from the restarted broker did it again to the resent copy: the same batch 2 to 5 times in a row,
the acknowledgement naming the last copy. (The leader-epoch bump of the ISR shrink, finding 2,
failed a copy librdkafka had already given up on: it added nothing visible here.) Since the
restarted broker fences its old incarnation as it registers (finding 10's fix), its cache is
filled and the dead incarnation leaves the ISRs within milliseconds instead of a session, so
that window is too short for a metadata refresh to fall in it in these runs. It is now closed
too: the Kafka listener holds every request until the broker's first UpdateMetadata
(node/broker/serving_gate.py), as Kafka's broker processes none before its metadata catch-up.

The producer keeps a few records in flight per partition (explicit partitions, unique values)
and keeps every delivery report (offset or error). A poller records, through ketch's own client,
every leader (and leader epoch and ISR) each partition had during the run, so "the leader did not
change" is observed, not assumed. Afterwards a confluent Consumer reads every partition from
offset 0 to its high watermark, and:
  - a partition whose leader did not change: no delivery failed, every value sent is in the log
    exactly once, and each delivery report's offset holds its value;
  - elsewhere: every acknowledged value is in the log at the offset its report named (a value may
    be there twice: only idempotence prevents a retry's duplicate after a lost answer).

Bounded: a few seconds of producing, every wait has a timeout; the victim is the leader of
partition 0, whatever the timing.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import confluent_kafka
import pytest

from client.client import Client
from runtime.config import Value
from testkit.probes import partitions_of, wait_fully_replicated, wait_until
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import PROPERTIES
from tests.integration.kafka_drivers import LATEST, ConfluentDriver

pytestmark = pytest.mark.slow

TOPIC: Final = "steady-librdkafka"
PARTITIONS: Final = 3
WAIT_S: Final = 30.0
# Records sent and not yet reported, per partition: enough for librdkafka to batch several
# records into one request (finding 11 saw a whole batch repeated), few enough that a stall is
# seen at once.
WINDOW: Final = 8
# librdkafka's request.timeout.ms, also the produce timeout the broker is asked to wait: longer
# than the session timeout, so a write waiting on a dead follower is released by the ISR shrink
# before it times out.
PRODUCE_TIMEOUT_MS: Final = 10_000
SESSION_TIMEOUT_MS: Final = 1_500
# How long the producer goes on after the kill before the test waits for the full ISRs: past the
# old session's end, the fencing of the old incarnation and the restarted one's catching up.
PRODUCE_AFTER_KILL_S: Final = 4.0
ACKED_BEFORE_KILL: Final = 50  # per partition
ACKED_AFTER: Final = 30  # per partition, after the kill and again after the ISRs are full
CLUSTER_PROPERTIES: Final[dict[str, Value]] = {
    **PROPERTIES,
    "broker.session.timeout.ms": SESSION_TIMEOUT_MS,
    # As in finding 11: followers leave the ISR by the controller's broker failure handling, not
    # by lagging.
    "replica.lag.time.max.ms": 10_000,
    "request.timeout.ms": 2_000,
    "min.insync.replicas": 2,
}


def value_of(partition: int, seq: int) -> bytes:
    return b"%d:%08d" % (partition, seq)


def seq_of(value: bytes) -> int:
    return int(value.split(b":")[1])


@dataclass
class Reports:
    """One partition's delivery reports (written by the producer's thread, read by the test's
    loop under `SteadyProducer.lock`)."""

    sent: int = 0  # sequences 0..sent-1 were handed to librdkafka
    acked: dict[int, int] = field(default_factory=dict)  # sequence -> offset reported
    failed: dict[int, str] = field(default_factory=dict)  # sequence -> error reported

    @property
    def reported(self) -> int:
        return len(self.acked) + len(self.failed)


class SteadyProducer:
    """A confluent Producer in its own thread: per partition, at most WINDOW unreported records,
    each with a unique value. librdkafka retries internally (retries is unbounded by default), so
    a failed request shows only as a duplicate in the log, or as an error report when the
    message timeout runs out."""

    def __init__(self, bootstrap: str, *, idempotent: bool) -> None:
        # Idempotent: librdkafka's own defaults for in-flight requests (5). Not: one in flight,
        # as in finding 11.
        in_flight: dict[str, Any] = (
            {"enable.idempotence": True}
            if idempotent
            else {"enable.idempotence": False, "max.in.flight.requests.per.connection": 1}
        )
        self.config: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            **in_flight,
            "linger.ms": 5,
            "request.timeout.ms": PRODUCE_TIMEOUT_MS,
            "message.timeout.ms": int(WAIT_S * 1000) * 2,
            "retry.backoff.ms": 50,
            "socket.timeout.ms": 5_000,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 1_000,
        }
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.reports = {p: Reports() for p in range(PARTITIONS)}
        self.unfinished = -1  # records still queued when the flush gave up (-1: not flushed)

    def run(self) -> None:
        producer = confluent_kafka.Producer(self.config)
        deadline = time.monotonic() + 4 * WAIT_S  # the thread ends even if nobody stops it
        while not self.stop.is_set() and time.monotonic() < deadline:
            for partition in range(PARTITIONS):
                reports = self.reports[partition]
                while True:
                    with self.lock:
                        if reports.sent - reports.reported >= WINDOW:
                            break
                        seq = reports.sent
                        reports.sent += 1
                    producer.produce(
                        TOPIC,
                        value=value_of(partition, seq),
                        partition=partition,
                        on_delivery=functools.partial(self._delivered, partition, seq),
                    )
            producer.poll(0.005)
        self.unfinished = producer.flush(WAIT_S)

    def _delivered(self, partition: int, seq: int, error: Any, message: Any) -> None:
        with self.lock:
            if error is not None:
                self.reports[partition].failed[seq] = str(error.name())
                return
            assert message.partition() == partition, (partition, seq, message.partition())
            self.reports[partition].acked[seq] = int(message.offset())

    def acked_each(self) -> int:
        """The fewest acknowledgements any partition has."""
        with self.lock:
            return min(len(r.acked) for r in self.reports.values())


@dataclass
class LeaderWatch:
    """Polls the topic's metadata through ketch's client while the run lasts: every leader,
    leader epoch and ISR each partition was seen with."""

    cluster: ProcessCluster
    client: Client
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    leaders: dict[int, set[int]] = field(
        default_factory=lambda: {p: set() for p in range(PARTITIONS)}
    )
    epochs: dict[int, set[int]] = field(
        default_factory=lambda: {p: set() for p in range(PARTITIONS)}
    )
    isrs: dict[int, list[tuple[int, ...]]] = field(
        default_factory=lambda: {p: [] for p in range(PARTITIONS)}
    )  # each partition's ISRs in the order seen, consecutive repeats left out

    async def run(self) -> None:
        while not self.stop.is_set():
            await self.poll()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 0.02)

    async def poll(self) -> None:
        # Every broker's view, not the first answer: one broker's cache may lag (a restarted
        # broker's is empty until the controller fills it), and a leader any broker saw counts.
        for address in self.cluster.addresses.values():
            found = await partitions_of(self.client, [address], TOPIC)
            for partition, info in found.items():
                if info.leader_id < 0:
                    continue
                self.leaders[partition].add(info.leader_id)
                self.epochs[partition].add(info.leader_epoch)
                isr = tuple(sorted(info.isr_nodes))
                if not self.isrs[partition] or self.isrs[partition][-1] != isr:
                    self.isrs[partition].append(isr)


async def read_back(driver: ConfluentDriver) -> dict[int, dict[int, bytes]]:
    """Every partition, offset -> value, from offset 0 to its high watermark."""
    ends = {p: await driver.list_offset(TOPIC, p, LATEST) for p in range(PARTITIONS)}
    read = await driver.consume(TOPIC, dict.fromkeys(range(PARTITIONS), 0), sum(ends.values()))
    logs: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
    for record in read:
        logs[record.partition][record.offset] = record.value
    for partition, end in ends.items():
        assert sorted(logs[partition]) == list(range(end)), f"p{partition}: offsets not 0..{end}"
    return logs


def report(
    partition: int, reports: Reports, log: dict[int, bytes], watch: LeaderWatch
) -> tuple[str, int]:
    """What happened to the partition, and how many of its values are in the log more than
    once."""
    copies: dict[bytes, list[int]] = collections.defaultdict(list)
    for offset, value in sorted(log.items()):
        copies[value].append(offset)
    repeated = {v: offsets for v, offsets in copies.items() if len(offsets) > 1}
    worst = max(repeated.items(), key=lambda item: (len(item[1]), item[0]), default=None)
    text = (
        f"p{partition}: leaders {sorted(watch.leaders[partition])}, leader epochs "
        f"{sorted(watch.epochs[partition])}, ISRs {watch.isrs[partition]}, {reports.sent} sent, "
        f"{len(reports.acked)} acknowledged, errors "
        f"{dict(collections.Counter(reports.failed.values()))}, {len(log)} in the log, "
        f"{len(repeated)} values there more than once"
    )
    if worst is not None:
        value, offsets = worst
        text += (
            f" (most: {value!r} {len(offsets)} times at offsets {offsets}, acknowledged at "
            f"{reports.acked.get(seq_of(value))})"
        )
    return text, len(repeated)


@dataclass
class Run:
    """What one kill-and-restart run left: the victim, the producer's reports, the logs read
    back and the leaders seen."""

    victim: int
    producer: SteadyProducer
    logs: dict[int, dict[int, bytes]]
    watch: LeaderWatch

    def account(self) -> tuple[list[str], dict[int, int]]:
        """The run's account, a line per partition, and how many values each has twice."""
        lines = [f"broker {self.victim} killed and restarted"]
        repeated: dict[int, int] = {}
        for partition in range(PARTITIONS):
            text, repeated[partition] = report(
                partition, self.producer.reports[partition], self.logs[partition], self.watch
            )
            lines.append(text)
        return lines, repeated


async def kill_and_restart_under_load(tmp_path: Path, *, idempotent: bool) -> Run:
    async with running_cluster(tmp_path, CLUSTER_PROPERTIES, kafka=True) as cluster:
        driver = ConfluentDriver(cluster.kafka_bootstrap())
        await driver.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        native = cluster.client()
        producer = SteadyProducer(cluster.kafka_bootstrap(), idempotent=idempotent)
        watch = LeaderWatch(cluster, native)
        producing: asyncio.Future[None] | None = None
        watching: asyncio.Task[None] | None = None

        async def acked_each(count: int, what: str) -> None:
            async def enough() -> bool:
                assert producing is not None
                if producing.done():  # the thread failed: its exception, not a timeout
                    producing.result()
                return producer.acked_each() >= count

            await wait_until(enough, what, timeout_s=WAIT_S)

        try:
            await wait_fully_replicated(
                native, cluster.addresses.values(), TOPIC, PARTITIONS, timeout_s=WAIT_S
            )
            await watch.poll()
            watching = asyncio.get_running_loop().create_task(watch.run())
            producing = asyncio.ensure_future(asyncio.to_thread(producer.run))
            await acked_each(ACKED_BEFORE_KILL, "the producer runs")

            before = await partitions_of(native, cluster.addresses.values(), TOPIC)
            victim = before[0].leader_id
            await cluster.broker(victim).kill()
            await cluster.broker(victim).start()
            after_kill = producer.acked_each()
            await asyncio.sleep(PRODUCE_AFTER_KILL_S)
            await acked_each(after_kill + ACKED_AFTER, f"writes after broker {victim} was killed")
            await cluster.wait_running([victim], timeout_s=WAIT_S)
            await wait_fully_replicated(
                native, cluster.addresses.values(), TOPIC, PARTITIONS, timeout_s=WAIT_S
            )
            full = producer.acked_each()
            await acked_each(full + ACKED_AFTER, "writes with full ISRs again")
        finally:
            producer.stop.set()
            if producing is not None:
                await asyncio.wait_for(producing, WAIT_S * 2)
            watch.stop.set()
            if watching is not None:
                await asyncio.wait_for(watching, WAIT_S)
            await watch.poll()  # the leaders the run ended with
            await native.close()

        assert producer.unfinished == 0, f"{producer.unfinished} records never reported"
        return Run(victim, producer, await read_back(driver), watch)


def check_acknowledgements(run: Run, lines: list[str]) -> None:
    """Everywhere: every acknowledgement names the offset holding its value."""
    for partition in range(PARTITIONS):
        reports, log = run.producer.reports[partition], run.logs[partition]
        for seq, offset in reports.acked.items():
            assert log.get(offset) == value_of(partition, seq), (
                f"p{partition}: seq {seq} acknowledged at {offset}, read {log.get(offset)!r}\n"
                + "\n".join(lines)
            )


async def test_a_killed_leader_makes_librdkafka_write_nothing_twice_where_the_leader_stayed(
    tmp_path: Path,
) -> None:
    run = await kill_and_restart_under_load(tmp_path, idempotent=False)
    lines, repeated = run.account()
    print("\n".join(lines))  # the run's account, shown with -s or on failure
    check_acknowledgements(run, lines)
    stayed = [p for p in range(PARTITIONS) if len(run.watch.leaders[p]) == 1]
    assert 0 not in stayed, "the killed broker led partition 0"
    assert stayed, "some partition must keep its leader\n" + "\n".join(lines)
    for partition in stayed:
        reports, log = run.producer.reports[partition], run.logs[partition]
        assert not reports.failed, lines[partition + 1]
        assert repeated[partition] == 0, lines[partition + 1]
        assert sorted(seq_of(v) for v in log.values()) == list(range(reports.sent)), lines[
            partition + 1
        ]


async def test_an_idempotent_librdkafka_producer_writes_nothing_twice_across_a_leader_kill(
    tmp_path: Path,
) -> None:
    """Issue 19: with librdkafka's idempotence (its defaults: 5 requests in flight per
    partition), every partition, the killed leader's included, holds every value sent exactly
    once, in order, with no delivery failed."""
    run = await kill_and_restart_under_load(tmp_path, idempotent=True)
    lines, repeated = run.account()
    print("\n".join(lines))
    check_acknowledgements(run, lines)
    assert len(run.watch.leaders[0]) > 1, "partition 0's leader moved\n" + "\n".join(lines)
    for partition in range(PARTITIONS):
        reports, log = run.producer.reports[partition], run.logs[partition]
        text = lines[partition + 1]
        assert not reports.failed, text
        assert repeated[partition] == 0, text
        assert [seq_of(v) for _, v in sorted(log.items())] == list(range(reports.sent)), text
