"""aiokafka behind bench/latency_kafka_clients.py's interface, on the benchmark's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
from collections.abc import Callable, Mapping
from typing import Any, Final

import aiokafka  # type: ignore[import-untyped]
import aiokafka.admin  # type: ignore[import-untyped]

from bench.latency_kafka_clients import (
    AIOKAFKA_DELIVERY,
    LATENCY_BATCHING,
    METADATA_TIMEOUT_S,
    Arrived,
    Batching,
    Consumer,
    Delivered,
    KafkaClient,
    KafkaClientError,
    Producer,
    now_ns,
)
from client.config import ACKS_ALL

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
