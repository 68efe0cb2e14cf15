"""Load generation and the scenarios of `ketch bench latency`, against any cluster's addresses.

Two ways to drive a scenario (`Load.rate`):

* closed loop (rate None): one request in flight; each latency is completion - send. What a
  single synchronous caller sees; the achieved rate is whatever the latency allows.
* open loop (rate N): request i is due at `start + i/N` whether or not earlier ones finished,
  with up to `MAX_IN_FLIGHT` outstanding. Coordinated omission is corrected by recording each
  latency from the request's *intended* send time, not from when it was actually sent: when the
  system (or this client's own loop) stalls, the requests that should have gone out during the
  stall are sent late in a burst and are charged the whole wait, as a client with a real
  arrival process would have experienced it. (This is HdrHistogram's "correct at recording
  time from the schedule" approach, not its `record_corrected_value` expected-interval
  back-fill, which would invent samples for closed-loop stalls instead.)

Each scenario runs `warmup_s` unmeasured first (connections, metadata, leader discovery, JIT-
free but cache-warm paths), then `duration_s` measured. Everything runs on the caller's event
loop; the state of a scenario lives in its coroutine's locals and the callbacks it schedules on
that loop, so nothing needs a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from hdrh.histogram import HdrHistogram

from bench.latency_report import ScenarioResult, new_histogram
from client.accumulator import RecordMetadata
from client.client import Client
from client.config import ACKS_ALL, ConsumerConfig, ProducerConfig
from client.consumer import Consumer
from client.producer import Producer
from runtime.clock import SystemClock
from runtime.net.transport import Address, Transport
from wire.errors import ErrorCode
from wire.messages import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from wire.topic import TopicPartition

MAX_IN_FLIGHT: Final = 10_000  # open loop: beyond this the generator waits (and still charges)
E2E_FETCH_MAX_WAIT_MS: Final = 500
E2E_ARRIVAL_TIMEOUT_S: Final = 10.0
THROUGHPUT_PRODUCERS: Final = 8
THROUGHPUT_BATCH_BYTES: Final = 16_384
THROUGHPUT_LINGER_MS: Final = 5
THROUGHPUT_WINDOW_BATCHES: Final = 4  # per producer: batches' worth of records outstanding
THROUGHPUT_PARTITIONS: Final = 3
TOPIC_READY_TIMEOUT_MS: Final = 30_000
_MAX_SLEEPS: Final = 1_000

Step = Callable[[int], Awaitable[int]]
"""One request: given its intended send time (perf_counter ns), returns its completion time."""


def now_ns() -> int:
    return time.perf_counter_ns()


def acks_name(acks: int) -> str:
    return "all" if acks == ACKS_ALL else str(acks)


@dataclass(frozen=True, slots=True)
class Load:
    duration_s: float
    warmup_s: float
    rate: int | None  # messages per second (open loop), or None (closed loop)
    size_bytes: int

    def __post_init__(self) -> None:
        assert self.duration_s > 0, self
        assert self.warmup_s >= 0, self
        assert self.rate is None or self.rate > 0, self
        assert self.size_bytes >= 0, self

    @property
    def value(self) -> bytes:
        return b"v" * self.size_bytes


@dataclass(frozen=True, slots=True)
class Window:
    """The measured window of one run, and its histogram."""

    histogram: HdrHistogram
    elapsed_s: float
    started_at_s: float


async def closed_loop(step: Step, load: Load) -> Window:
    histogram = new_histogram()
    record = histogram.record_value
    start = now_ns()
    measure_from = start + round(load.warmup_s * 1e9)
    end = measure_from + round(load.duration_s * 1e9)
    started_at_s = time.time() + load.warmup_s
    while (sent := now_ns()) < end:
        done = await step(sent)
        if sent >= measure_from:
            record(done - sent)
    return Window(histogram, (now_ns() - measure_from) / 1e9, started_at_s)


async def open_loop(step: Step, load: Load) -> Window:
    assert load.rate is not None
    histogram = new_histogram()
    record = histogram.record_value
    interval_ns = 1e9 / load.rate
    start = now_ns()
    measure_from = start + round(load.warmup_s * 1e9)
    end = measure_from + round(load.duration_s * 1e9)
    started_at_s = time.time() + load.warmup_s
    in_flight: set[asyncio.Task[None]] = set()
    failures: list[BaseException] = []

    async def one(intended: int) -> None:
        done = await step(intended)
        if intended >= measure_from:
            record(done - intended)

    def finished(task: asyncio.Task[None]) -> None:
        in_flight.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            failures.append(error)

    try:
        i = 0
        while (intended := start + round(i * interval_ns)) < end and not failures:
            await sleep_until(intended)
            while len(in_flight) >= MAX_IN_FLIGHT:
                await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)
            task = asyncio.create_task(one(intended))
            in_flight.add(task)
            task.add_done_callback(finished)
            i += 1
        if in_flight:
            await asyncio.wait(set(in_flight))
    finally:
        for task in list(in_flight):
            task.cancel()
        if in_flight:
            await asyncio.wait(set(in_flight))
    if failures:
        raise failures[0]
    return Window(histogram, load.duration_s, started_at_s)


async def sleep_until(deadline_ns: int) -> None:
    """Returns at `deadline_ns` or later, never before: the loops' timers round to
    milliseconds and may wake a little early, and a request sent before its due time would
    record too little. Each pass sleeps the remainder, so a few passes suffice; the bound only
    keeps the loop finite."""
    for _ in range(_MAX_SLEEPS):
        delay_ns = deadline_ns - now_ns()
        if delay_ns <= 0:
            return
        await asyncio.sleep(delay_ns / 1e9)


async def drive(step: Step, load: Load) -> Window:
    return await (closed_loop(step, load) if load.rate is None else open_loop(step, load))


# -- the cluster side ------------------------------------------------------------------------------


class Bench:
    """Clients of one benchmark run against `bootstrap`; topics are created per scenario with a
    run-unique name, so a run against a long-lived cluster (--bootstrap) starts empty."""

    def __init__(
        self,
        bootstrap: Sequence[Address],
        transport: Transport,
        *,
        replication_factor: int,
        min_insync_replicas: int,
    ) -> None:
        self.bootstrap = list(bootstrap)
        self.transport = transport
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas
        self._run_id = f"{os.getpid()}-{time.time_ns() % 1_000_000_000}"

    def client(self, client_id: str) -> Client:
        return Client(
            self.bootstrap, transport=self.transport, clock=SystemClock(), client_id=client_id
        )

    def producer(self, acks: int, *, batch_bytes: int = 16_384, linger_ms: int = 0) -> Producer:
        config = ProducerConfig(acks=acks, linger_ms=linger_ms, batch_size=batch_bytes)
        return Producer(self.client("bench-producer"), config=config, owns_client=True)

    async def create_topic(self, scenario: str, partitions: int = 1) -> str:
        """Creates the scenario's topic and waits until every partition has a leader."""
        name = f"ketch-bench-{scenario}-{self._run_id}"
        topic = CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=self.replication_factor,
            configs=[
                CreatableTopicConfig(
                    name="min.insync.replicas", value=str(self.min_insync_replicas)
                )
            ],
        )
        client = self.client("bench-admin")
        try:
            response = await client.send_any(CreateTopicsRequest(topics=[topic]))
            assert isinstance(response, CreateTopicsResponse), response
            code = ErrorCode.from_code(response.topics[0].error_code)
            if code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                raise RuntimeError(f"creating topic {name}: {code.name}")
            for partition in range(partitions):
                await client.leader_for(
                    TopicPartition(name, partition), timeout_ms=TOPIC_READY_TIMEOUT_MS
                )
        finally:
            await client.close()
        if self.replication_factor > 1:
            # A leader is not yet a replicated partition: the followers learn their role and
            # the leader's address, then start fetching. One acks=all record per partition
            # proves the ISR answers, so no scenario's first samples wait for that.
            async with self.producer(ACKS_ALL) as producer:
                await asyncio.wait_for(
                    asyncio.gather(
                        *(
                            producer.send_and_wait(name, None, b"ready", partition=p)
                            for p in range(partitions)
                        )
                    ),
                    TOPIC_READY_TIMEOUT_MS / 1000,
                )
        return name


async def produce_scenario(bench: Bench, acks: int, load: Load) -> ScenarioResult:
    """One producer with linger.ms=0; acks=0 completes when the request has been written."""
    topic = await bench.create_topic(f"acks{acks_name(acks)}")
    value = load.value
    async with bench.producer(acks) as producer:

        async def step(_intended: int) -> int:
            await producer.send_and_wait(topic, None, value, partition=0)
            return now_ns()

        window = await drive(step, load)
    what = "until the request is written" if acks == 0 else "until acknowledged"
    return ScenarioResult(
        f"produce_acks{'_all' if acks == ACKS_ALL else acks}",
        f"produce acks={acks_name(acks)}, RF={bench.replication_factor}, "
        f"min.insync.replicas={bench.min_insync_replicas}, {what}",
        window.histogram,
        window.elapsed_s,
        window.started_at_s,
    )


async def e2e_scenario(bench: Bench, load: Load) -> ScenarioResult:
    """Produce (acks=all) -> a consumer long-polling with fetch.max.wait.ms=500 receives it;
    the latency ends when the consumer's poll returns the record."""
    topic = await bench.create_topic("e2e")
    tp = TopicPartition(topic, 0)
    value = load.value
    loop = asyncio.get_running_loop()
    arrivals: dict[int, asyncio.Future[int]] = {}

    def arrival(offset: int) -> asyncio.Future[int]:
        return arrivals.setdefault(offset, loop.create_future())

    async with bench.producer(ACKS_ALL) as producer:
        first = await producer.send_and_wait(topic, None, value, partition=0)
        consumer = Consumer(
            bench.client("bench-consumer"),
            config=ConsumerConfig(fetch_max_wait_ms=E2E_FETCH_MAX_WAIT_MS),
            owns_client=True,
        )
        consumer.assign([tp])
        consumer.seek(tp, first.offset + 1)

        async def consume() -> None:
            while True:
                for record in await consumer.poll(timeout_ms=1_000):
                    received = now_ns()
                    future = arrival(record.offset)
                    if not future.done():
                        future.set_result(received)

        async def step(_intended: int) -> int:
            meta: RecordMetadata = await producer.send_and_wait(topic, None, value, partition=0)
            got = await asyncio.wait_for(arrival(meta.offset), timeout=E2E_ARRIVAL_TIMEOUT_S)
            del arrivals[meta.offset]
            return got

        reader = asyncio.create_task(consume(), name="bench e2e consumer")
        try:
            await step(0)  # the consumer's start, before the clock (as in the Kafka scenario)
            window = await drive(step, load)
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            await consumer.close()
    return ScenarioResult(
        "e2e",
        f"produce (acks=all) -> consumer poll returns it, fetch.max.wait.ms="
        f"{E2E_FETCH_MAX_WAIT_MS}, RF={bench.replication_factor}",
        window.histogram,
        window.elapsed_s,
        window.started_at_s,
    )


Acked = Callable[[int, BaseException | None], None]
"""A throughput record's outcome, on the loop: (perf_counter ns when the producer reported it,
the error or None)."""
SendRecord = Callable[[Acked], Awaitable[None]]
"""Hands one record to a producer (waiting only while its queue is full); `acked` runs once."""


async def throughput_run(
    load: Load,
    open_producer: Callable[[], contextlib.AbstractAsyncContextManager[SendRecord]],
    *,
    name: str,
    description: str,
) -> ScenarioResult:
    """THROUGHPUT_PRODUCERS producers from `open_producer` (each its own connections), each
    keeping a few batches' worth of records outstanding, as fast as the cluster takes them (never
    rate-limited); latency is per record, send -> acknowledged. The native and the Kafka-client
    throughput scenarios differ only in the producer they open."""
    histogram = new_histogram()
    record = histogram.record_value
    window_records = max(
        1, THROUGHPUT_WINDOW_BATCHES * THROUGHPUT_BATCH_BYTES // max(1, load.size_bytes)
    )
    # The window opens once every producer has had one record acknowledged: a client's start
    # (connections, metadata) can outlast a short run's window (seen: 8 librdkafka producers
    # with nothing acknowledged in a 3 s window on a loaded machine).
    window: list[int] = []  # [measure_from, end] on the monotonic clock
    started: list[float] = []  # the window's start on the wall clock
    warm: list[None] = []
    all_warm = asyncio.Event()
    failures: list[BaseException] = []

    def open_window() -> None:
        measure_from = now_ns() + round(load.warmup_s * 1e9)
        window.extend((measure_from, measure_from + round(load.duration_s * 1e9)))
        started.append(time.time() + load.warmup_s)
        all_warm.set()

    async def warm_up(send: SendRecord) -> None:
        first: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

        def acked(_done_ns: int, error: BaseException | None) -> None:
            if not first.done():
                first.set_result(error)

        await send(acked)
        error = await first
        if error is not None:
            failures.append(error)
            all_warm.set()  # nobody waits for the others then
            return
        warm.append(None)
        if len(warm) == THROUGHPUT_PRODUCERS:
            open_window()
        await all_warm.wait()

    async def run_producer() -> None:
        slots = asyncio.Semaphore(window_records)

        def acked(done_ns: int, error: BaseException | None, sent: int) -> None:
            # Recorded by callback, at completion: awaiting records in order would charge a
            # record for an older one still pending on another partition.
            slots.release()
            if error is not None:
                failures.append(error)
            elif measure_from <= done_ns < end:
                # Counted by acknowledgement time: throughput is what the cluster acknowledged
                # within the window, whenever the record was sent (under a saturated window a
                # record sent in it may be acknowledged only after it).
                record(done_ns - sent)

        async with open_producer() as send:
            await warm_up(send)
            if failures:
                return
            measure_from, end = window
            while (sent := now_ns()) < end and not failures:
                await slots.acquire()
                await send(functools.partial(acked, sent=sent))

    await asyncio.gather(*(run_producer() for _ in range(THROUGHPUT_PRODUCERS)))
    if failures:
        raise failures[0]
    started_at_s = started[0]
    count: int = histogram.get_total_count()
    return ScenarioResult(
        name,
        description,
        histogram,
        load.duration_s,
        started_at_s,
        payload_bytes=count * load.size_bytes,
    )


async def throughput_scenario(bench: Bench, acks: int, load: Load) -> ScenarioResult:
    """`throughput_run` with ketch's own producer: 16 KB batches and linger.ms=5."""
    topic = await bench.create_topic(f"throughput-acks{acks_name(acks)}", THROUGHPUT_PARTITIONS)
    value = load.value

    @contextlib.asynccontextmanager
    async def open_producer() -> AsyncIterator[SendRecord]:
        producer = bench.producer(
            acks, batch_bytes=THROUGHPUT_BATCH_BYTES, linger_ms=THROUGHPUT_LINGER_MS
        )

        def reported(future: asyncio.Future[RecordMetadata], acked: Acked) -> None:
            if future.cancelled():
                acked(now_ns(), asyncio.CancelledError())
            else:
                acked(now_ns(), future.exception())

        async def send(acked: Acked) -> None:
            future = await producer.send(topic, None, value)
            future.add_done_callback(functools.partial(reported, acked=acked))

        try:
            yield send
            await producer.flush()
        finally:
            await producer.close()

    return await throughput_run(
        load,
        open_producer,
        name=f"throughput_acks{'_all' if acks == ACKS_ALL else acks}",
        description=(
            f"{THROUGHPUT_PRODUCERS} producers, {THROUGHPUT_BATCH_BYTES // 1024} KB batches, "
            f"linger.ms={THROUGHPUT_LINGER_MS}, {THROUGHPUT_PARTITIONS} partitions, acks="
            f"{acks_name(acks)}: records acknowledged within the window"
        ),
    )
