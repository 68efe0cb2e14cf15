"""The Kafka clients `ketch bench latency --protocol kafka` drives: confluent-kafka (librdkafka,
bench/kafka_confluent.py) and aiokafka (bench/kafka_aiokafka.py), behind one small interface so
the scenarios (bench/latency_kafka_scenarios.py) are written once and run with either client
against any Kafka-protocol broker (ketch's Kafka listener, or the `--peer-cmd` broker).

The interface is callback-shaped because that is what both clients have in common: a send hands
the client a record and a `Delivered(done_ns, error)` callback, which runs on the benchmark's
event loop with `done_ns` taken (perf_counter ns) at the moment the client reported the outcome
to the application.

* aiokafka runs on the benchmark's event loop: `send()` returns a future; `done_ns` is read in
  the future's done callback, exactly when an `await` of it would resume.
* confluent-kafka's delivery reports come from `Producer.poll()`, called by a dedicated poller
  thread per producer (`poll(POLL_TIMEOUT_S)` blocks in librdkafka with the GIL released and
  wakes as soon as a report is queued). `done_ns` is read in the delivery callback on that
  thread, then the callback is handed to the loop with `call_soon_threadsafe`. Why a thread and
  not `poll(0)` from the loop: an in-loop poll either spins (and takes the only core the loop
  has from librdkafka's own threads) or sleeps between polls (and adds up to its period to every
  latency); the thread adds one condition-variable wake-up, which is what any confluent-kafka
  application that serves callbacks from a poll thread pays. Its consumer is read the same way:
  a thread blocked in `Consumer.poll()` stamps each record when poll returns it. Measured on
  a 2-core machine (closed loop, acks=1, 100-byte values, 3000 sends, ketch's Kafka listener,
  two rounds): a plain synchronous producer blocking in poll(1) in its own thread p50 706/827
  us, p99 2001/1883 us; this poller thread p50 718/811, p99 2345/2479; an in-loop poll(0)
  with sleep(0) (spinning) p50 989/1245, p99 4633/5758; an in-loop poll(0) every 1 ms p50
  1174/1207, p99 3184/3148. The thread costs what a synchronous confluent-kafka application
  pays; the in-loop variants add their own cost to ketch's figures.

Everything a client instance owns is touched by the loop thread, except the librdkafka handle
inside a confluent producer or consumer (thread-safe by librdkafka's contract: produce() from the
loop, poll() from the poller) and the poller's stop flag (a threading.Event). Counters of
outstanding records change only in callbacks the poller posts to the loop, so no lock is needed.
"""

from __future__ import annotations

import abc
import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from client.config import ACKS_ALL

CLIENTS: Final = ("confluent", "aiokafka")
POLL_TIMEOUT_S: Final = 0.1  # the poller's wait per call: bounds how long a stop takes
CLOSE_TIMEOUT_S: Final = 30.0
METADATA_TIMEOUT_S: Final = 2.0
QUEUE_FULL_BACKOFF_S: Final = 0.001
CONFLUENT_DELIVERY: Final = (
    "delivery reports served by a dedicated thread blocked in Producer.poll(0.1); each latency "
    "ends in the delivery callback on that thread (consumer: a thread blocked in Consumer.poll)"
)
AIOKAFKA_DELIVERY: Final = "on the benchmark's event loop; latency ends in the future's callback"

Delivered = Callable[[int, int, BaseException | None], None]
"""A send's outcome, called on the event loop: (perf_counter ns when reported, the record's
offset (-1 when the broker does not say, as with acks=0), error or None)."""
Arrived = Callable[[int, int], None]
"""A consumed record, called on the event loop: (offset, perf_counter ns when poll returned it)."""


def now_ns() -> int:
    return time.perf_counter_ns()


class KafkaClientError(Exception):
    """A Kafka client reported a failure (delivery, topic creation, metadata)."""


@dataclass(frozen=True, slots=True)
class Batching:
    """How the producer batches: linger.ms=0 for the latency scenarios, batches for throughput."""

    linger_ms: int
    batch_bytes: int


LATENCY_BATCHING: Final = Batching(linger_ms=0, batch_bytes=16_384)


def acks_setting(acks: int) -> str:
    return "all" if acks == ACKS_ALL else str(acks)


class Producer(abc.ABC):
    """One producer instance (its own connections), used by one scenario on the loop."""

    def __init__(self) -> None:
        self._outstanding = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @abc.abstractmethod
    async def _send(self, topic: str, value: bytes, partition: int | None, done: Delivered) -> None:
        """Hands the record to the client; `done` runs once, on the loop."""

    async def send(self, topic: str, value: bytes, partition: int | None, done: Delivered) -> None:
        """Hands one record to the client (waits only when the client's queue is full)."""
        self._outstanding += 1
        self._idle.clear()

        def finished(done_ns: int, offset: int, error: BaseException | None) -> None:
            self._outstanding -= 1
            assert self._outstanding >= 0, self._outstanding
            if self._outstanding == 0:
                self._idle.set()
            done(done_ns, offset, error)

        try:
            await self._send(topic, value, partition, finished)
        except BaseException:
            # Never handed over: no longer outstanding, and the caller sees the exception.
            self._outstanding -= 1
            if self._outstanding == 0:
                self._idle.set()
            raise

    async def send_and_wait(
        self, topic: str, value: bytes, partition: int | None
    ) -> tuple[int, int]:
        """Sends one record and returns when the client reported it: (perf_counter ns, offset)."""
        future: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()

        def done(done_ns: int, offset: int, error: BaseException | None) -> None:
            if future.done():
                return
            if error is None:
                future.set_result((done_ns, offset))
            else:
                future.set_exception(error)

        await self.send(topic, value, partition, done)
        return await future

    async def flush(self) -> None:
        """Until every record sent so far has been reported."""
        await asyncio.wait_for(self._idle.wait(), CLOSE_TIMEOUT_S)

    @abc.abstractmethod
    async def close(self) -> None:
        """Flushes, then releases the client's connections and threads."""

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()


class Consumer(abc.ABC):
    """Reads one partition from an offset on and reports each record through `Arrived`."""

    @abc.abstractmethod
    async def close(self) -> None: ...

    async def __aenter__(self) -> Consumer:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()


class KafkaClient(abc.ABC):
    """One client library: its settings (printed in the JSON config) and its instances."""

    name: str
    delivery: str

    @abc.abstractmethod
    def version(self) -> str: ...

    @abc.abstractmethod
    def producer_settings(self, acks: int | None, batching: Batching) -> dict[str, Any]:
        """The producer's configuration; acks None: as the scenario says (for the config)."""

    @abc.abstractmethod
    def consumer_settings(self, fetch_max_wait_ms: int) -> dict[str, Any]: ...

    @abc.abstractmethod
    async def producer(
        self, bootstrap: str, acks: int, batching: Batching = LATENCY_BATCHING
    ) -> Producer: ...

    @abc.abstractmethod
    async def consumer(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        offset: int,
        fetch_max_wait_ms: int,
        arrived: Arrived,
    ) -> Consumer: ...

    @abc.abstractmethod
    async def broker_count(self, bootstrap: str) -> int:
        """Brokers in a Metadata response through this client (raises when none comes)."""

    @abc.abstractmethod
    async def create_topic(
        self, bootstrap: str, name: str, partitions: int, rf: int, configs: Mapping[str, str]
    ) -> None:
        """Creates the topic through the client's admin API (an existing one is fine)."""

    @abc.abstractmethod
    async def leaders_known(self, bootstrap: str, name: str, partitions: int) -> bool:
        """Whether Metadata shows the topic with a leader for each of its partitions."""

    @abc.abstractmethod
    def release(self) -> None:
        """Drops what the client keeps between calls (before the brokers stop, so it does not
        log their going away)."""

    def settings(self, fetch_max_wait_ms: int, throughput: Batching) -> dict[str, Any]:
        """Every setting this client runs with, for the JSON config."""
        return {
            "version": self.version(),
            "delivery": self.delivery,
            "latency_producer": self.producer_settings(None, LATENCY_BATCHING),
            "throughput_producer": self.producer_settings(None, throughput),
            "consumer": self.consumer_settings(fetch_max_wait_ms),
        }


def client(name: str) -> KafkaClient:
    """A client by name; each is imported only when asked for (they need each other's nothing)."""
    assert name in CLIENTS, name
    if name == "confluent":
        from bench.kafka_confluent import ConfluentClient

        return ConfluentClient()
    from bench.kafka_aiokafka import AiokafkaClient

    return AiokafkaClient()
