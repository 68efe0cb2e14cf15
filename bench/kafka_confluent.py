"""confluent-kafka (librdkafka) behind bench/latency_kafka_clients.py's interface; that module's
docstring says how its delivery reports are timed (a poller thread)."""

from __future__ import annotations

import asyncio
import importlib.metadata
import threading
from collections.abc import Callable, Mapping
from typing import Any

import confluent_kafka
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench.latency_kafka_clients import (
    CLOSE_TIMEOUT_S,
    CONFLUENT_DELIVERY,
    LATENCY_BATCHING,
    METADATA_TIMEOUT_S,
    POLL_TIMEOUT_S,
    QUEUE_FULL_BACKOFF_S,
    Arrived,
    Batching,
    Consumer,
    Delivered,
    KafkaClient,
    KafkaClientError,
    Producer,
    acks_setting,
    now_ns,
)

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
                await asyncio.sleep(QUEUE_FULL_BACKOFF_S)

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
