"""The chaos run's workload and its checks (bench/chaos.py runs them): two acks=all idempotent
producers, a consumer, the final read-back and what is judged on it.

    native       ketch's own Producer (client/producer.py: idempotent by default with acks=all)
                 through the native listeners; values b"n:<seq>"
    librdkafka   confluent-kafka's Producer through the Kafka listeners, enable.idempotence=true,
                 acks=all, in its own thread; values b"k:<seq>"
    consumer     ketch's Consumer reading every partition from offset 0 as the run goes

Each producer sends round-robin over the partitions, paced (one record every PACE_S, at most
WINDOW unacknowledged), so the acknowledgements are a steady clock of availability: the longest
gap between two consecutive acknowledgements (of either producer) is the longest unavailability.
Every acknowledgement is kept with its (partition, offset, value) and the time it arrived; every
failure is counted by producer and error.

The checks, on the log read back after the run (`judge`):
    lost        an acknowledged (partition, offset) that does not hold the acknowledged value
    duplicated  a value found at more than one offset (idempotence promises none)
    diverged    a record the consumer saw during the run that is not at the same offset at the
                end (a consumer must only ever see committed records, below the high watermark)

Ownership: everything runs on the chaos run's event loop except the librdkafka producer, which
runs in a worker thread and hands its acknowledgements over under `AckLog.lock`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import confluent_kafka

from client.config import ConsumerConfig, ProducerConfig
from client.consumer import Consumer
from client.errors import ClientError, ProducerFencedError
from client.producer import Producer, RecordMetadata
from testkit.testing import KetchCluster
from wire.errors import KafkaError

PACE_S: Final = 0.005
WINDOW: Final = 50
# The native producer's produce timeout: short, so a write sent to a leader that was cut off
# (and does not know it was replaced) is given up on and resent to the new one in seconds.
NATIVE_CONFIG: Final = ProducerConfig(
    linger_ms=2,
    request_timeout_ms=2_000,
    delivery_timeout_ms=60_000,
    retry_backoff_ms=20,
    retry_backoff_max_ms=200,
    max_block_ms=10_000,
)
LIBRDKAFKA_CONFIG: Final[dict[str, Any]] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "request.timeout.ms": 5_000,
    "message.timeout.ms": 60_000,
    "retry.backoff.ms": 50,
    "retry.backoff.max.ms": 500,
    "reconnect.backoff.ms": 20,
    "reconnect.backoff.max.ms": 200,
    "socket.timeout.ms": 5_000,
    "topic.metadata.refresh.interval.ms": 1_000,
}
CLOSE_TIMEOUT_S: Final = 70.0
READ_POLL_MS: Final = 200
READ_TIMEOUT_S: Final = 120.0
LIBRDKAFKA_LOG: Final = logging.getLogger("bench.chaos.librdkafka")
LIBRDKAFKA_LOG.addHandler(logging.NullHandler())
LIBRDKAFKA_LOG.propagate = False
Where = tuple[int, int]  # (partition, offset)


@dataclass(frozen=True, slots=True)
class Ack:
    producer: str
    partition: int
    offset: int
    value: bytes
    at_s: float  # time.monotonic() when the acknowledgement arrived


@dataclass
class AckLog:
    """Every acknowledgement and every failure, from either producer (and thread)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acks: list[Ack] = field(default_factory=list)
    failures: collections.Counter[str] = field(default_factory=collections.Counter)
    sent: collections.Counter[str] = field(default_factory=collections.Counter)

    def acked(self, producer: str, partition: int, offset: int, value: bytes) -> None:
        with self.lock:
            self.acks.append(Ack(producer, partition, offset, value, time.monotonic()))

    def failed(self, producer: str, error: object) -> None:
        name = type(error).__name__ if isinstance(error, BaseException) else str(error)
        with self.lock:
            self.failures[f"{producer}: {name}"] += 1

    def count(self, producer: str) -> int:
        with self.lock:
            return sum(1 for ack in self.acks if ack.producer == producer)

    def snapshot(self) -> list[Ack]:
        with self.lock:
            return list(self.acks)


@dataclass
class NativeProducer:
    """ketch's Producer, paced; a producer fenced for good is replaced by a new one."""

    cluster: KetchCluster
    topic: str
    partitions: int
    log: AckLog
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    replaced: int = 0  # producers replaced after a fatal error
    _fenced: bool = False

    async def run(self) -> None:
        producer = self._producer()
        pending: set[asyncio.Future[RecordMetadata]] = set()
        seq = 0
        try:
            while not self.stop.is_set():
                if len(pending) < WINDOW:
                    value = b"n:%09d" % seq
                    partition = seq % self.partitions
                    seq += 1
                    self.log.sent["native"] += 1
                    try:
                        future = await producer.send(self.topic, None, value, partition=partition)
                    except (ClientError, KafkaError) as exc:  # no metadata in max.block.ms
                        self.log.failed("native", exc)
                    else:
                        pending.add(future)
                        future.add_done_callback(pending.discard)
                        future.add_done_callback(functools.partial(self._settled, value))
                if self._fenced:  # it fails every record from now on (client/idempotence.py)
                    await producer.close(timeout_ms=0)
                    producer = self._producer()
                    self._fenced = False
                    self.replaced += 1
                await asyncio.sleep(PACE_S)
        finally:
            await producer.close(timeout_ms=CLOSE_TIMEOUT_S * 1_000)

    def _producer(self) -> Producer:
        return Producer(self.cluster.client(), config=NATIVE_CONFIG, owns_client=True)

    def _settled(self, value: bytes, future: asyncio.Future[RecordMetadata]) -> None:
        if future.cancelled():
            return
        error = future.exception()
        if error is not None:
            self.log.failed("native", error)
            self._fenced |= isinstance(error, ProducerFencedError)
            return
        meta = future.result()
        self.log.acked("native", meta.partition, meta.offset, value)


@dataclass
class LibrdkafkaProducer:
    """confluent-kafka's idempotent Producer in a worker thread, paced; after a fatal error
    (librdkafka's idempotent producer gives up on a sequence it cannot resolve) a new one."""

    bootstrap: str
    topic: str
    partitions: int
    log: AckLog
    stop: threading.Event = field(default_factory=threading.Event)
    replaced: int = 0
    unfinished: int = 0  # records still unreported when the last flush gave up
    _fatal: threading.Event = field(default_factory=threading.Event)
    _outstanding: int = 0

    def run(self) -> None:
        producer = self._producer()
        seq = 0
        while not self.stop.is_set():
            if self._fatal.is_set():
                producer.flush(0)
                self._fatal.clear()
                producer = self._producer()
                self.replaced += 1
            with self.log.lock:
                room = self._outstanding < WINDOW
                if room:
                    self._outstanding += 1
            if room:
                value = b"k:%09d" % seq
                partition = seq % self.partitions
                seq += 1
                self.log.sent["librdkafka"] += 1
                try:
                    producer.produce(
                        self.topic,
                        value=value,
                        partition=partition,
                        on_delivery=functools.partial(self._delivered, value),
                    )
                except (BufferError, confluent_kafka.KafkaException) as exc:
                    self.log.failed("librdkafka", exc)
                    with self.log.lock:
                        self._outstanding -= 1
            producer.poll(PACE_S)
        self.unfinished = producer.flush(CLOSE_TIMEOUT_S)

    def _producer(self) -> confluent_kafka.Producer:
        config = {**LIBRDKAFKA_CONFIG, "bootstrap.servers": self.bootstrap}
        config["error_cb"] = self._error
        # librdkafka logs every refused or reset connection, which is the point of the run:
        # its log goes to a logger of its own (silent unless configured); what matters is
        # counted from the delivery reports.
        config["logger"] = LIBRDKAFKA_LOG
        return confluent_kafka.Producer(config)

    def _error(self, error: Any) -> None:
        if error.fatal():
            self.log.failed("librdkafka", f"fatal {error.name()}")
            self._fatal.set()

    def _delivered(self, value: bytes, error: Any, message: Any) -> None:
        with self.log.lock:
            self._outstanding -= 1
        if error is not None:
            self.log.failed("librdkafka", error.name())
            return
        self.log.acked("librdkafka", int(message.partition()), int(message.offset()), value)


@dataclass
class Reader:
    """ketch's Consumer on every partition from offset 0, for the whole run: what it saw."""

    cluster: KetchCluster
    topic: str
    partitions: int
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    seen: dict[Where, bytes] = field(default_factory=dict)
    errors: collections.Counter[str] = field(default_factory=collections.Counter)

    async def run(self) -> None:
        consumer = new_consumer(self.cluster, self.topic, self.partitions)
        try:
            while not self.stop.is_set():
                try:
                    records = await consumer.poll(timeout_ms=READ_POLL_MS)
                except (ClientError, KafkaError) as exc:
                    self.errors[type(exc).__name__] += 1
                    await asyncio.sleep(READ_POLL_MS / 1_000)
                    continue
                for record in records:
                    assert record.value is not None
                    self.seen[record.partition, record.offset] = record.value
        finally:
            await consumer.close()


def new_consumer(cluster: KetchCluster, topic: str, partitions: int) -> Consumer:
    config = ConsumerConfig(
        fetch_max_wait_ms=100, auto_offset_reset="earliest", request_timeout_ms=2_000
    )
    consumer = Consumer(cluster.client(), config=config, owns_client=True)
    consumer.assign([(topic, p) for p in range(partitions)])
    return consumer


async def read_back(cluster: KetchCluster, topic: str, partitions: int) -> dict[Where, bytes]:
    """Every record of every partition, from offset 0 to its high watermark (bounded)."""
    consumer = new_consumer(cluster, topic, partitions)
    logs: dict[Where, bytes] = {}
    try:
        ends = await consumer.end_offsets(list(consumer.assignment()))
        wanted = {tp.partition: end for tp, end in ends.items()}
        deadline = time.monotonic() + READ_TIMEOUT_S
        positions = dict.fromkeys(wanted, 0)
        while any(positions[p] < wanted[p] for p in wanted):
            if time.monotonic() > deadline:
                raise TimeoutError(f"read back {positions} of {wanted} in {READ_TIMEOUT_S} s")
            for record in await consumer.poll(timeout_ms=READ_POLL_MS):
                assert record.value is not None
                logs[record.partition, record.offset] = record.value
                positions[record.partition] = max(positions[record.partition], record.offset + 1)
    finally:
        await consumer.close()
    return logs


@dataclass(frozen=True, slots=True)
class Verdict:
    acknowledged: dict[str, int]  # by producer
    lost: int
    duplicated: int
    diverged: int
    examples: tuple[str, ...]  # the first few problems, readable


def judge(acks: Sequence[Ack], logs: dict[Where, bytes], seen: dict[Where, bytes]) -> Verdict:
    """The checks of the module docstring."""
    examples: list[str] = []
    lost = 0
    for ack in acks:
        found = logs.get((ack.partition, ack.offset))
        if found != ack.value:
            lost += 1
            if len(examples) < 5:
                examples.append(
                    f"lost: {ack.producer} {ack.value!r} acknowledged at "
                    f"{ack.partition}@{ack.offset}, which holds {found!r}"
                )
    places: dict[bytes, list[Where]] = collections.defaultdict(list)
    for where, value in logs.items():
        places[value].append(where)
    duplicated = 0
    for value, found_at in places.items():
        if len(found_at) > 1:
            duplicated += 1
            if len(examples) < 10:
                examples.append(f"duplicated: {value!r} at {sorted(found_at)}")
    diverged = 0
    for where, value in seen.items():
        now = logs.get(where)
        if now != value:
            diverged += 1
            if len(examples) < 15:
                examples.append(f"diverged: consumed {value!r} at {where}, now {now!r}")
    by_producer = collections.Counter(ack.producer for ack in acks)
    return Verdict(dict(by_producer), lost, duplicated, diverged, tuple(examples))


def longest_gap(acks: Sequence[Ack], start_s: float, end_s: float) -> tuple[float, float]:
    """The longest time between start_s, consecutive acknowledgements and end_s with no
    acknowledgement: (its length in seconds, when it began, relative to start_s)."""
    times = sorted(a.at_s for a in acks if start_s <= a.at_s <= end_s)
    best, began = 0.0, 0.0
    previous = start_s
    for at in [*times, end_s]:
        if at - previous > best:
            best, began = at - previous, previous - start_s
        previous = at
    return best, began


async def stop_all(
    native: NativeProducer,
    native_task: asyncio.Future[None],
    librdkafka: LibrdkafkaProducer,
    librdkafka_task: asyncio.Future[None],
    reader: Reader,
    reader_task: asyncio.Future[None],
) -> None:
    """Stop the producers (each flushes what it has, bounded) and the consumer."""
    native.stop.set()
    librdkafka.stop.set()
    reader.stop.set()
    for task in (native_task, librdkafka_task, reader_task):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(task, CLOSE_TIMEOUT_S + 10)
