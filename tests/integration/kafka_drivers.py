"""Three real Kafka clients behind one small interface, for the Kafka listener's tests.

confluent-kafka (librdkafka) and kafka-python are synchronous: their calls run in a worker
thread (`asyncio.to_thread`) so the test's event loop, which supervises the broker processes,
keeps running. aiokafka runs on the loop itself. Every wait is bounded.

Consumers use assign() with explicit offsets and never commit (ketch has no group coordinator
yet); librdkafka needs a group.id all the same, which it then only uses to look for a
coordinator that answers COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import aiokafka  # type: ignore[import-untyped]
import aiokafka.admin  # type: ignore[import-untyped]
import confluent_kafka
import confluent_kafka.admin
import kafka
import kafka.admin
from confluent_kafka.cimpl import NewTopic
from kafka.net.inet import KafkaNetSocket

COMPRESSIONS: Final = ("none", "gzip", "snappy", "lz4", "zstd")
TIMEOUT_S: Final = 30.0
EARLIEST: Final = "earliest"
LATEST: Final = "latest"


@dataclass(frozen=True, slots=True)
class Sent:
    """One record to produce, to an explicit partition."""

    partition: int
    key: bytes | None
    value: bytes


@dataclass(frozen=True, slots=True)
class Read:
    partition: int
    offset: int
    key: bytes | None
    value: bytes
    timestamp_ms: int


OnAck = Callable[[int, int], None]
"""on_ack(partition, offset), called as each acknowledgement arrives (any thread)."""


class Driver(Protocol):
    name: str
    version: str

    async def create_topic(
        self, topic: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None: ...

    async def produce(
        self,
        topic: str,
        records: Sequence[Sent],
        *,
        acks: str,
        compression: str,
        on_ack: OnAck | None = None,
        idempotent: bool = False,
    ) -> list[tuple[int, int]]:
        """Each record sent and acknowledged in turn (retries on); (partition, offset) each.
        `idempotent` turns the client's enable.idempotence on; off, each client keeps its own
        default (kafka-python's is on)."""
        ...

    async def consume(self, topic: str, starts: dict[int, int], count: int) -> list[Read]:
        """`count` records from the given partitions' offsets, in per-partition order."""
        ...

    async def list_offset(self, topic: str, partition: int, spec: str | int) -> int:
        """EARLIEST, LATEST, or the first offset at/after a timestamp (ms)."""
        ...


def _deadline() -> float:
    return time.monotonic() + TIMEOUT_S


def _check_time(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"{what} did not finish within {TIMEOUT_S} s")


# -- confluent-kafka (librdkafka) ------------------------------------------------------------------


class ConfluentDriver:
    name = "confluent-kafka"
    version = f"{confluent_kafka.version()[0]} (librdkafka {confluent_kafka.libversion()[0]})"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def _common(self) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.bootstrap,
            "socket.timeout.ms": 5000,
            "reconnect.backoff.ms": 20,
            "reconnect.backoff.max.ms": 200,
            "topic.metadata.refresh.interval.ms": 1000,
        }

    async def create_topic(
        self, topic: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        admin = confluent_kafka.admin.AdminClient(self._common())
        futures = admin.create_topics(
            [NewTopic(topic, partitions, replication_factor, config=configs)]
        )
        await asyncio.to_thread(futures[topic].result, TIMEOUT_S)

    async def produce(
        self,
        topic: str,
        records: Sequence[Sent],
        *,
        acks: str,
        compression: str,
        on_ack: OnAck | None = None,
        idempotent: bool = False,
    ) -> list[tuple[int, int]]:
        return await asyncio.to_thread(
            self._produce, topic, records, acks, compression, on_ack, idempotent
        )

    def _produce(
        self,
        topic: str,
        records: Sequence[Sent],
        acks: str,
        compression: str,
        on_ack: OnAck | None,
        idempotent: bool,
    ) -> list[tuple[int, int]]:
        producer = confluent_kafka.Producer(
            {
                **self._common(),
                **({"enable.idempotence": True} if idempotent else {}),
                "acks": acks,
                "compression.type": compression,
                "linger.ms": 0,
                "message.timeout.ms": int(TIMEOUT_S * 1000),
                "request.timeout.ms": 5000,
                "retry.backoff.ms": 50,
            }
        )
        acked: list[tuple[int, int]] = []
        deadline = _deadline()
        for record in records:
            outcome: list[Any] = []

            def delivered(err: Any, msg: Any, out: list[Any] = outcome) -> None:
                out.append((err, msg))

            producer.produce(
                topic,
                value=record.value,
                key=record.key,
                partition=record.partition,
                on_delivery=delivered,
            )
            while not outcome:
                _check_time(deadline, "confluent produce")
                producer.poll(0.1)
            error, message = outcome[0]
            if error is not None:
                raise RuntimeError(f"confluent-kafka delivery failed: {error}")
            acked.append((message.partition(), message.offset()))
            if on_ack is not None:
                on_ack(message.partition(), message.offset())
        producer.flush(5)
        return acked

    async def consume(self, topic: str, starts: dict[int, int], count: int) -> list[Read]:
        return await asyncio.to_thread(self._consume, topic, starts, count)

    def _consumer(self) -> confluent_kafka.Consumer:
        return confluent_kafka.Consumer(
            {
                **self._common(),
                "group.id": "ketch-test-assign-only",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "auto.offset.reset": "earliest",
            }
        )

    def _consume(self, topic: str, starts: dict[int, int], count: int) -> list[Read]:
        consumer = self._consumer()
        try:
            consumer.assign(
                [confluent_kafka.TopicPartition(topic, p, o) for p, o in starts.items()]
            )
            found: list[Read] = []
            deadline = _deadline()
            while len(found) < count:
                _check_time(deadline, f"confluent consume of {count} records")
                message = consumer.poll(0.2)
                if message is None or message.error() is not None:
                    continue
                partition, offset, value = message.partition(), message.offset(), message.value()
                assert partition is not None
                assert offset is not None
                assert value is not None
                found.append(Read(partition, offset, message.key(), value, message.timestamp()[1]))
            return found
        finally:
            consumer.close()

    async def list_offset(self, topic: str, partition: int, spec: str | int) -> int:
        return await asyncio.to_thread(self._list_offset, topic, partition, spec)

    def _list_offset(self, topic: str, partition: int, spec: str | int) -> int:
        consumer = self._consumer()
        try:
            tp = confluent_kafka.TopicPartition(topic, partition)
            if spec in (EARLIEST, LATEST):
                low, high = consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S)
                return int(low if spec == EARLIEST else high)
            assert isinstance(spec, int)
            [found] = consumer.offsets_for_times(
                [confluent_kafka.TopicPartition(topic, partition, spec)], timeout=TIMEOUT_S
            )
            return int(found.offset)
        finally:
            consumer.close()


# -- kafka-python ----------------------------------------------------------------------------------


class KafkaPythonDriver:
    name = "kafka-python"
    version = kafka.__version__

    def __init__(self, bootstrap: str) -> None:
        self.servers = bootstrap.split(",")

    def _common(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.servers,
            "request_timeout_ms": 5000,
            "reconnect_backoff_ms": 20,
            "reconnect_backoff_max_ms": 200,
            "retry_backoff_ms": 50,
            "metadata_max_age_ms": 1000,
        }

    async def create_topic(
        self, topic: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        def create() -> None:
            admin = kafka.admin.KafkaAdminClient(**self._common())
            try:
                admin.create_topics(
                    [
                        kafka.admin.NewTopic(
                            topic, partitions, replication_factor, topic_configs=configs
                        )
                    ],
                    timeout_ms=int(TIMEOUT_S * 1000),
                )
            finally:
                admin.close()

        await asyncio.to_thread(create)

    async def produce(
        self,
        topic: str,
        records: Sequence[Sent],
        *,
        acks: str,
        compression: str,
        on_ack: OnAck | None = None,
        idempotent: bool = False,
    ) -> list[tuple[int, int]]:
        def produce() -> list[tuple[int, int]]:
            # enable_idempotence keeps kafka-python's default (on since 2.1): InitProducerId.
            producer = kafka.KafkaProducer(
                **self._common(),
                **({"enable_idempotence": True} if idempotent else {}),
                acks="all" if acks == "all" else int(acks),
                compression_type=None if compression == "none" else compression,
                linger_ms=0,
                max_in_flight_requests_per_connection=1,
                delivery_timeout_ms=int(TIMEOUT_S * 1000),
            )
            try:
                acked = []
                for record in records:
                    future = producer.send(
                        topic, value=record.value, key=record.key, partition=record.partition
                    )
                    metadata = future.get(timeout=TIMEOUT_S)
                    acked.append((metadata.partition, metadata.offset))
                    if on_ack is not None:
                        on_ack(metadata.partition, metadata.offset)
                return acked
            finally:
                producer.close(timeout=5)

        return await asyncio.to_thread(produce)

    async def consume(self, topic: str, starts: dict[int, int], count: int) -> list[Read]:
        def consume() -> list[Read]:
            consumer = kafka.KafkaConsumer(
                **self._common(), group_id=None, enable_auto_commit=False
            )
            try:
                tps = {p: kafka.TopicPartition(topic, p) for p in starts}
                consumer.assign(list(tps.values()))
                for partition, offset in starts.items():
                    consumer.seek(tps[partition], offset)
                found: list[Read] = []
                deadline = _deadline()
                while len(found) < count:
                    _check_time(deadline, f"kafka-python consume of {count} records")
                    for messages in consumer.poll(timeout_ms=200).values():
                        found.extend(
                            Read(m.partition, m.offset, m.key, m.value, m.timestamp)
                            for m in messages
                        )
                return found
            finally:
                consumer.close()

        return await asyncio.to_thread(consume)

    async def list_offset(self, topic: str, partition: int, spec: str | int) -> int:
        def list_offset() -> int:
            consumer = kafka.KafkaConsumer(**self._common(), group_id=None)
            try:
                tp = kafka.TopicPartition(topic, partition)
                if spec == EARLIEST:
                    return int(consumer.beginning_offsets([tp])[tp])
                if spec == LATEST:
                    return int(consumer.end_offsets([tp])[tp])
                found = consumer.offsets_for_times({tp: spec})[tp]
                return -1 if found is None else int(found.offset)
            finally:
                consumer.close()

        return await asyncio.to_thread(list_offset)


def _close_failed_kafka_python_sockets() -> None:
    """kafka-python 3.0.12 drops without closing the socket of a connection attempt that
    failed (a killed broker refuses it), so its finalizer warns (an error in this suite) at
    some later garbage collection. Wrap its connect step to close the socket on failure."""
    original = KafkaNetSocket.sock_connect
    if getattr(original, "closes_on_failure", False):
        return

    async def sock_connect(
        self: Any, net: Any, sock: Any, sockaddr: Any, timeout_at: Any = None
    ) -> Any:
        try:
            return await original(self, net, sock, sockaddr, timeout_at=timeout_at)
        except BaseException:
            sock.close()
            raise

    sock_connect.closes_on_failure = True  # type: ignore[attr-defined]
    KafkaNetSocket.sock_connect = sock_connect


_close_failed_kafka_python_sockets()


# -- aiokafka --------------------------------------------------------------------------------------


class AiokafkaDriver:
    name = "aiokafka"
    version = aiokafka.__version__

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def _common(self) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.bootstrap,
            "request_timeout_ms": 5000,
            "retry_backoff_ms": 50,
            "metadata_max_age_ms": 1000,
        }

    async def create_topic(
        self, topic: str, partitions: int, replication_factor: int, configs: dict[str, str]
    ) -> None:
        admin = aiokafka.admin.AIOKafkaAdminClient(**self._common())
        await admin.start()
        try:
            response = await admin.create_topics(
                [
                    aiokafka.admin.NewTopic(
                        topic, partitions, replication_factor, topic_configs=configs
                    )
                ]
            )
            errors = [error for _, error, *_ in response.topic_errors]
            assert errors == [0], f"aiokafka create_topics: {response}"
        finally:
            await admin.close()

    async def produce(
        self,
        topic: str,
        records: Sequence[Sent],
        *,
        acks: str,
        compression: str,
        on_ack: OnAck | None = None,
        idempotent: bool = False,
    ) -> list[tuple[int, int]]:
        producer = aiokafka.AIOKafkaProducer(
            **self._common(),
            **({"enable_idempotence": True} if idempotent else {}),
            acks="all" if acks == "all" else int(acks),
            compression_type=None if compression == "none" else compression,
            linger_ms=0,
        )
        await producer.start()
        try:
            acked = []
            for record in records:
                async with asyncio.timeout(TIMEOUT_S):
                    metadata = await producer.send_and_wait(
                        topic, value=record.value, key=record.key, partition=record.partition
                    )
                acked.append((metadata.partition, metadata.offset))
                if on_ack is not None:
                    on_ack(metadata.partition, metadata.offset)
            return acked
        finally:
            await producer.stop()

    async def consume(self, topic: str, starts: dict[int, int], count: int) -> list[Read]:
        consumer = aiokafka.AIOKafkaConsumer(**self._common(), enable_auto_commit=False)
        await consumer.start()
        try:
            tps = {p: aiokafka.TopicPartition(topic, p) for p in starts}
            consumer.assign(list(tps.values()))
            for partition, offset in starts.items():
                consumer.seek(tps[partition], offset)
            found: list[Read] = []
            async with asyncio.timeout(TIMEOUT_S):
                while len(found) < count:
                    for messages in (await consumer.getmany(timeout_ms=200)).values():
                        found.extend(
                            Read(m.partition, m.offset, m.key, m.value, m.timestamp)
                            for m in messages
                        )
            return found
        finally:
            await consumer.stop()

    async def list_offset(self, topic: str, partition: int, spec: str | int) -> int:
        consumer = aiokafka.AIOKafkaConsumer(**self._common(), enable_auto_commit=False)
        await consumer.start()
        try:
            tp = aiokafka.TopicPartition(topic, partition)
            async with asyncio.timeout(TIMEOUT_S):
                if spec == EARLIEST:
                    return int((await consumer.beginning_offsets([tp]))[tp])
                if spec == LATEST:
                    return int((await consumer.end_offsets([tp]))[tp])
                found = (await consumer.offsets_for_times({tp: spec}))[tp]
                return -1 if found is None else int(found.offset)
        finally:
            await consumer.stop()


DRIVERS: Final[dict[str, Callable[[str], Driver]]] = {
    "confluent": ConfluentDriver,
    "kafka-python": KafkaPythonDriver,
    "aiokafka": AiokafkaDriver,
}
