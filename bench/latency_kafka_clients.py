"""The Kafka clients `ketch bench latency --protocol kafka` drives: confluent-kafka (librdkafka)
and aiokafka, behind one small interface so the scenarios (bench/latency_kafka_scenarios.py) are
written once and run with either client against any Kafka-protocol broker (ketch's Kafka
listener, or the `--peer-cmd` broker).

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
import contextlib
import importlib.metadata
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import aiokafka  # type: ignore[import-untyped]
import aiokafka.admin  # type: ignore[import-untyped]
import confluent_kafka
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from client.config import ACKS_ALL

CLIENTS: Final = ("confluent", "aiokafka")
POLL_TIMEOUT_S: Final = 0.1  # the poller's wait per call: bounds how long a stop takes
CLOSE_TIMEOUT_S: Final = 30.0
METADATA_TIMEOUT_S: Final = 2.0
_QUEUE_FULL_BACKOFF_S: Final = 0.001
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


# -- confluent-kafka (librdkafka) ------------------------------------------------------------------


class _Poller:
    """A thread calling `poll` until stopped; `stopped` resolves on the loop when it has ended.
    `last` runs on the thread after the final poll (the consumer closes itself there: librdkafka
    wants a consumer closed by the thread that polls it)."""

    def __init__(
        self, name: str, poll: Callable[[], None], last: Callable[[], None] | None = None
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._poll = poll
        self._last = last
        self._stop = threading.Event()
        self.stopped: asyncio.Future[None] = self._loop.create_future()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        error: BaseException | None = None
        try:
            while not self._stop.is_set():
                self._poll()
        except BaseException as exc:  # reported on the loop, where the scenario awaits it
            error = exc
        finally:
            if self._last is not None:
                try:
                    self._last()
                except BaseException as exc:
                    error = error or exc
            self._loop.call_soon_threadsafe(self._finish, error)

    def _finish(self, error: BaseException | None) -> None:
        if self.stopped.done():
            return
        if error is None:
            self.stopped.set_result(None)
        else:
            self.stopped.set_exception(error)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.wait_for(asyncio.shield(self.stopped), CLOSE_TIMEOUT_S)


class _ConfluentProducer(Producer):
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self._loop = asyncio.get_running_loop()
        self._producer = confluent_kafka.Producer(config)
        self._poller = _Poller("bench confluent delivery", self._serve_reports)

    def _serve_reports(self) -> None:
        # On the poller thread: runs the delivery callbacks of whatever reports are queued.
        self._producer.poll(POLL_TIMEOUT_S)

    async def _send(self, topic: str, value: bytes, partition: int | None, done: Delivered) -> None:
        loop = self._loop

        def delivered(error: confluent_kafka.KafkaError | None, message: Any) -> None:
            done_ns = now_ns()  # on the poller thread, as librdkafka hands the report over
            failure = None if error is None else KafkaClientError(f"delivery failed: {error}")
            offset = message.offset()
            loop.call_soon_threadsafe(done, done_ns, -1 if offset is None else offset, failure)

        kwargs: dict[str, Any] = {} if partition is None else {"partition": partition}
        while True:
            try:
                self._producer.produce(topic, value, on_delivery=delivered, **kwargs)
                return
            except BufferError:
                # librdkafka's queue is full (only under throughput load): give its threads
                # the moment they need to drain it, then try again.
                await asyncio.sleep(_QUEUE_FULL_BACKOFF_S)

    async def close(self) -> None:
        try:
            await self.flush()
        finally:
            await self._poller.stop()


class _ConfluentConsumer(Consumer):
    def __init__(
        self, config: dict[str, Any], topic: str, partition: int, offset: int, arrived: Arrived
    ) -> None:
        loop = asyncio.get_running_loop()
        consumer = confluent_kafka.Consumer(config)
        consumer.assign([confluent_kafka.TopicPartition(topic, partition, offset)])

        def poll() -> None:
            message = consumer.poll(POLL_TIMEOUT_S)
            if message is None:
                return
            received = now_ns()  # as poll returns the record, on this thread
            if message.error() is None:
                offset_now = message.offset()
                assert offset_now is not None
                loop.call_soon_threadsafe(arrived, offset_now, received)

        self._poller = _Poller("bench confluent consumer", poll, last=consumer.close)

    async def close(self) -> None:
        await self._poller.stop()


class ConfluentClient(KafkaClient):
    name = "confluent"
    delivery = CONFLUENT_DELIVERY

    def __init__(self) -> None:
        # One admin client per bootstrap for the run: each holds librdkafka threads and
        # connections, and topic readiness is polled through it every 50 ms.
        self._admins: dict[str, AdminClient] = {}

    def version(self) -> str:
        # The distribution's metadata: confluent_kafka.version()'s type differs from its stub.
        library = confluent_kafka.libversion()[0]
        return (
            f"confluent-kafka {importlib.metadata.version('confluent-kafka')}, librdkafka {library}"
        )

    def producer_settings(self, acks: int | None, batching: Batching) -> dict[str, Any]:
        return {
            "acks": "per scenario" if acks is None else acks_setting(acks),
            "linger.ms": batching.linger_ms,
            "batch.size": batching.batch_bytes,
            "compression.type": "none",
            "enable.idempotence": False,
            # asyncio (and so aiokafka) sets TCP_NODELAY; librdkafka does not by default.
            "socket.nagle.disable": True,
        }

    def consumer_settings(self, fetch_max_wait_ms: int) -> dict[str, Any]:
        return {
            # librdkafka insists on a group.id; the group is never joined (assign() only) and
            # nothing is committed.
            "group.id": "ketch-bench",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": fetch_max_wait_ms,
            "fetch.min.bytes": 1,
            "isolation.level": "read_uncommitted",
            "socket.nagle.disable": True,
        }

    def release(self) -> None:
        self._admins.clear()  # the last reference: librdkafka's handle is destroyed with it

    def _admin(self, bootstrap: str) -> AdminClient:
        admin = self._admins.get(bootstrap)
        if admin is None:
            config: dict[str, str | int | float | bool] = {
                "bootstrap.servers": bootstrap,
                "client.id": "ketch-bench-admin",
            }
            admin = self._admins[bootstrap] = AdminClient(config)
        return admin

    async def producer(
        self, bootstrap: str, acks: int, batching: Batching = LATENCY_BATCHING
    ) -> Producer:
        config = {
            **self.producer_settings(acks, batching),
            "bootstrap.servers": bootstrap,
            "client.id": "ketch-bench-producer",
        }
        return _ConfluentProducer(config)

    async def consumer(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        offset: int,
        fetch_max_wait_ms: int,
        arrived: Arrived,
    ) -> Consumer:
        config = {
            **self.consumer_settings(fetch_max_wait_ms),
            "bootstrap.servers": bootstrap,
            "client.id": "ketch-bench-consumer",
        }
        return _ConfluentConsumer(config, topic, partition, offset, arrived)

    async def broker_count(self, bootstrap: str) -> int:
        admin = self._admin(bootstrap)
        metadata = await asyncio.to_thread(admin.list_topics, timeout=METADATA_TIMEOUT_S)
        return len(metadata.brokers)

    async def create_topic(
        self, bootstrap: str, name: str, partitions: int, rf: int, configs: Mapping[str, str]
    ) -> None:
        admin = self._admin(bootstrap)
        futures = admin.create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=rf, config=dict(configs))]
        )
        try:
            await asyncio.wrap_future(futures[name])
        except confluent_kafka.KafkaException as exc:
            error = exc.args[0]
            if error.code() != confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS:
                raise KafkaClientError(f"creating topic {name}: {error}") from exc

    async def leaders_known(self, bootstrap: str, name: str, partitions: int) -> bool:
        admin = self._admin(bootstrap)
        try:
            metadata = await asyncio.to_thread(admin.list_topics, name, timeout=METADATA_TIMEOUT_S)
        except confluent_kafka.KafkaException:
            return False
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None or len(topic.partitions) != partitions:
            return False
        return all(p.leader >= 0 and p.error is None for p in topic.partitions.values())


# -- aiokafka --------------------------------------------------------------------------------------


class _AiokafkaProducer(Producer):
    def __init__(self, producer: Any) -> None:
        super().__init__()
        self._producer = producer

    async def _send(self, topic: str, value: bytes, partition: int | None, done: Delivered) -> None:
        future: asyncio.Future[Any] = await self._producer.send(topic, value, partition=partition)

        def reported(f: asyncio.Future[Any]) -> None:
            done_ns = now_ns()
            if f.cancelled():
                done(done_ns, -1, KafkaClientError("delivery cancelled"))
            elif (error := f.exception()) is not None:
                done(done_ns, -1, error)
            else:
                metadata = f.result()  # None with acks=0: nothing came back
                offset = None if metadata is None else metadata.offset
                done(done_ns, -1 if offset is None else offset, None)

        future.add_done_callback(reported)

    async def close(self) -> None:
        try:
            await self.flush()
        finally:
            await self._producer.stop()


class _AiokafkaConsumer(Consumer):
    def __init__(self, consumer: Any, arrived: Arrived) -> None:
        self._consumer = consumer
        self._arrived = arrived
        self._reader = asyncio.create_task(self._read(), name="bench aiokafka consumer")

    async def _read(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=1_000)
            received = now_ns()
            for records in batches.values():
                for record in records:
                    self._arrived(record.offset, received)

    async def close(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader
        await self._consumer.stop()


class AiokafkaClient(KafkaClient):
    name = "aiokafka"
    delivery = AIOKAFKA_DELIVERY

    def version(self) -> str:
        return f"aiokafka {importlib.metadata.version('aiokafka')}"

    def producer_settings(self, acks: int | None, batching: Batching) -> dict[str, Any]:
        return {
            "acks": "per scenario" if acks is None else _aiokafka_acks(acks),
            "linger_ms": batching.linger_ms,
            "max_batch_size": batching.batch_bytes,
            "compression_type": None,
            "enable_idempotence": False,
        }

    def consumer_settings(self, fetch_max_wait_ms: int) -> dict[str, Any]:
        return {
            "group_id": None,
            "enable_auto_commit": False,
            "fetch_max_wait_ms": fetch_max_wait_ms,
            "fetch_min_bytes": 1,
            "isolation_level": "read_uncommitted",
        }

    async def producer(
        self, bootstrap: str, acks: int, batching: Batching = LATENCY_BATCHING
    ) -> Producer:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            client_id="ketch-bench-producer",
            **self.producer_settings(acks, batching),
        )
        await producer.start()
        return _AiokafkaProducer(producer)

    async def consumer(
        self,
        bootstrap: str,
        topic: str,
        partition: int,
        offset: int,
        fetch_max_wait_ms: int,
        arrived: Arrived,
    ) -> Consumer:
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            client_id="ketch-bench-consumer",
            **self.consumer_settings(fetch_max_wait_ms),
        )
        await consumer.start()
        tp = aiokafka.TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, offset)
        return _AiokafkaConsumer(consumer, arrived)

    def release(self) -> None:
        pass  # every admin call opens and closes its own client

    async def _describe(self, bootstrap: str, call: Callable[[Any], Any]) -> Any:
        admin = aiokafka.admin.AIOKafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="ketch-bench-admin",
            request_timeout_ms=round(METADATA_TIMEOUT_S * 1000),
        )
        await admin.start()
        try:
            return await call(admin)
        finally:
            await admin.close()

    async def broker_count(self, bootstrap: str) -> int:
        cluster = await self._describe(bootstrap, lambda admin: admin.describe_cluster())
        return len(cluster["brokers"])

    async def create_topic(
        self, bootstrap: str, name: str, partitions: int, rf: int, configs: Mapping[str, str]
    ) -> None:
        topic = aiokafka.admin.NewTopic(name, partitions, rf, topic_configs=dict(configs))
        response = await self._describe(bootstrap, lambda admin: admin.create_topics([topic]))
        for _name, code, message in response.topic_errors:
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                raise KafkaClientError(f"creating topic {name}: error {code}: {message}")

    async def leaders_known(self, bootstrap: str, name: str, partitions: int) -> bool:
        topics = await self._describe(bootstrap, lambda admin: admin.describe_topics([name]))
        for topic in topics:
            if topic["topic"] != name:
                continue
            found = topic["partitions"]
            return (
                topic["error_code"] == 0
                and len(found) == partitions
                and all(p["error_code"] == 0 and p["leader"] >= 0 for p in found)
            )
        return False


_TOPIC_ALREADY_EXISTS: Final = 36


def _aiokafka_acks(acks: int) -> int | str:
    return "all" if acks == ACKS_ALL else acks


def client(name: str) -> KafkaClient:
    assert name in CLIENTS, name
    return ConfluentClient() if name == "confluent" else AiokafkaClient()
