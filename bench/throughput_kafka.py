"""The librdkafka phases of `python -m bench.throughput`: ingest, fetch and one-at-a-time produce
through confluent-kafka, at librdkafka's defaults except the settings each phase names below.

They are plain synchronous functions, as a confluent-kafka application is written (a produce
loop, a consume loop), run on a worker thread by `in_thread` so the benchmark's event loop (which
owns the cluster's child processes) stays free. Each builds its own client, warms it up before
the clock (connection, Metadata, the partitions' leaders), then times exactly the transfer with
a `Window` (wall time and every measured process's CPU).

* `ingest`: `total_bytes` of `record_bytes` values, no key, through one producer with the given
  acks and linger.ms=5, produce() as fast as librdkafka's queue takes them (a full queue,
  BufferError, is waited out in poll); the window ends when flush() has every record
  acknowledged. `delivery.report.only.error=true` so that only failures come back to Python:
  a per-record callback would add the benchmark's own interpreter to every record's cost.
* `fetch`: one consumer, the topic's partitions assigned at offset 0 (no group is joined, nothing
  committed; confluent-kafka refuses to build a consumer without a group.id, so it gets one it
  never uses), records taken with consume() in slices of up to CONSUME_BATCH until `records`
  are in hand. `fetch.queue.backoff.ms` is lowered from 1000 to FETCH_QUEUE_BACKOFF_MS: when
  librdkafka's local queue passes queued.min.messages (100 000) it stops fetching for that long,
  and the consume loop drains 100 000 records well within it, so at the default a 64 MiB fetch
  of 100 B records measured mostly that pause (4.5 s against 0.8 s here, for ketch and Tansu
  alike).
* `produce_one_at_a_time`: produce() then flush() for each record, each record's latency being
  the time from produce() until flush() returned with its delivery report. flush() sends at
  once whatever is queued, ignoring linger.ms (measured: p50 ~0.2 ms with linger.ms at its 5 ms
  default), so no linger setting is needed. WARMUP_REQUESTS go through first, unmeasured.

Every loop is bounded by PHASE_TIMEOUT_S and checks the `stop` event `in_thread` sets when the
awaiting coroutine is cancelled (Ctrl-C), so no worker thread outlives the benchmark for long.
The librdkafka handles are created, used and closed by the one worker thread of their phase.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any, Final, Protocol, TypeVar

import confluent_kafka

from bench.throughput_meter import CpuMeter, Window
from bench.throughput_summary import Phase

LINGER_MS: Final = 5
CONSUME_BATCH: Final = 10_000
FETCH_QUEUE_BACKOFF_MS: Final = 10
WARMUP_REQUESTS: Final = 50
PHASE_TIMEOUT_S: Final = 120.0
SLICE_S: Final = 0.2  # longest blocking librdkafka call between checks of stop and deadline
METADATA_ATTEMPTS: Final = 20
QUEUE_FULL_POLL_S: Final = 0.001
UNUSED_GROUP_ID: Final = "ketch-bench-throughput"

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class PhaseError(Exception):
    """A phase failed: a delivery error, a consumer error, or it ran past PHASE_TIMEOUT_S."""


class Interrupted(Exception):
    """The benchmark was cancelled while the phase ran."""


class Stoppable(Protocol[T_co]):
    """A phase with everything bound but its `stop` event (a functools.partial of one)."""

    def __call__(self, *, stop: threading.Event) -> T_co: ...


async def in_thread(phase: Stoppable[T]) -> T:
    """Runs `phase(stop=...)` on a worker thread; cancelling the caller sets the event, which
    the phase checks at least every SLICE_S."""
    stop = threading.Event()
    try:
        return await asyncio.to_thread(phase, stop=stop)
    except asyncio.CancelledError:
        stop.set()
        raise


class _Guard:
    def __init__(self, stop: threading.Event, what: str) -> None:
        self._stop = stop
        self._what = what
        self._deadline = time.monotonic() + PHASE_TIMEOUT_S

    def check(self) -> None:
        if self._stop.is_set():
            raise Interrupted(self._what)
        if time.monotonic() > self._deadline:
            raise PhaseError(f"{self._what}: not done after {PHASE_TIMEOUT_S:.0f} s")


def _flush(producer: confluent_kafka.Producer, guard: _Guard) -> None:
    while producer.flush(SLICE_S) > 0:
        guard.check()


def _producer(bootstrap: str, acks: int, errors: list[str], **settings: Any) -> Any:
    def failed(error: confluent_kafka.KafkaError | None, _message: Any) -> None:
        if error is not None:
            errors.append(str(error))

    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": "ketch-bench-throughput",
        "acks": acks,
        "on_delivery": failed,
        **settings,
    }
    return confluent_kafka.Producer(config)


def ingest(
    bootstrap: str,
    topic: str,
    *,
    acks: int,
    record_bytes: int,
    total_bytes: int,
    meter: CpuMeter,
    stop: threading.Event,
) -> Phase:
    """One warm-up record (the same size), then total_bytes // record_bytes records measured:
    the topic holds that many + 1."""
    guard = _Guard(stop, f"ingest into {topic}")
    errors: list[str] = []
    producer = _producer(
        bootstrap, acks, errors, **{"linger.ms": LINGER_MS, "delivery.report.only.error": True}
    )
    value = os.urandom(record_bytes)  # one object sent again and again: no per-record cost
    count = total_bytes // record_bytes
    assert count > 0, (total_bytes, record_bytes)
    produce = producer.produce
    producer.produce(topic, value)
    _flush(producer, guard)
    if errors:
        raise PhaseError(f"warm-up record to {topic}: {errors[0]}")
    window = Window(meter)
    window.start()
    for i in range(count):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:  # the local queue is full: serve it, then try again
                producer.poll(QUEUE_FULL_POLL_S)
                guard.check()
        if i % 4096 == 0:
            guard.check()
    _flush(producer, guard)
    measured = window.stop()
    if errors:
        raise PhaseError(f"{len(errors)} records to {topic} failed, first: {errors[0]}")
    return Phase(measured.elapsed_ns, measured.cpu_s, count * record_bytes, count)


def fetch(
    bootstrap: str,
    topic: str,
    *,
    partitions: int,
    records: int,
    meter: CpuMeter,
    stop: threading.Event,
) -> Phase:
    """Reads `records` records (the whole topic) from offset 0 of every partition."""
    guard = _Guard(stop, f"fetch from {topic}")
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": "ketch-bench-throughput",
        "group.id": UNUSED_GROUP_ID,
        "enable.auto.commit": False,
        "fetch.queue.backoff.ms": FETCH_QUEUE_BACKOFF_MS,
    }
    consumer = confluent_kafka.Consumer(config)
    try:
        _wait_metadata(consumer, topic, guard)
        window = Window(meter)
        window.start()
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
        got = payload = 0
        while got < records:
            # Never ask for more than is left: consume() waits its whole timeout for a batch
            # it cannot fill, and that wait would end up in the window.
            for message in consumer.consume(min(CONSUME_BATCH, records - got), SLICE_S):
                if (error := message.error()) is not None:
                    raise PhaseError(f"fetch from {topic}: {error}")
                value = message.value()
                payload += 0 if value is None else len(value)
                got += 1
            guard.check()
        measured = window.stop()
    finally:
        consumer.close()
    return Phase(measured.elapsed_ns, measured.cpu_s, payload, got)


def produce_one_at_a_time(
    bootstrap: str,
    topic: str,
    *,
    acks: int,
    record_bytes: int,
    count: int,
    meter: CpuMeter,
    stop: threading.Event,
) -> Phase:
    guard = _Guard(stop, f"one-at-a-time produce to {topic}")
    errors: list[str] = []
    producer = _producer(bootstrap, acks, errors)
    value = os.urandom(record_bytes)
    now = time.perf_counter_ns

    def one() -> int:
        sent = now()
        producer.produce(topic, value)
        _flush(producer, guard)
        latency = now() - sent
        if errors:
            raise PhaseError(f"a record to {topic} failed: {errors[0]}")
        return latency

    for _ in range(WARMUP_REQUESTS):
        one()
    window = Window(meter)
    window.start()
    latencies = tuple(one() for _ in range(count))
    measured = window.stop()
    return Phase(measured.elapsed_ns, measured.cpu_s, count * record_bytes, count, latencies)


def _wait_metadata(consumer: confluent_kafka.Consumer, topic: str, guard: _Guard) -> None:
    """The consumer's first Metadata, before the clock (its connection to the bootstrap). A
    failed attempt is retried: one was seen to fail with a transport error on a loaded machine."""
    for attempt in range(METADATA_ATTEMPTS):
        guard.check()
        try:
            consumer.list_topics(topic, timeout=SLICE_S * 10)
            return
        except confluent_kafka.KafkaException:
            if attempt == METADATA_ATTEMPTS - 1:
                raise
