"""Consumer-group members for `python -m bench.groups`: one subscribed consumer of a Kafka client
library (confluent-kafka/librdkafka or aiokafka), with the client's defaults except the group id
and auto.offset.reset=earliest, consuming until closed.

A member records, in perf_counter ns, when its first record arrived and every assignment it was
given (the client's rebalance callback: confluent's `on_assign`, aiokafka's
`on_partitions_assigned`), so the benchmark reads each moment where the client reported it.

* aiokafka runs on the benchmark's event loop: a task reads with `getmany` (which also drives
  its heartbeats and rebalances, as in any aiokafka application).
* confluent-kafka runs in a thread of its own blocked in `Consumer.poll(0.1)`; librdkafka calls
  `on_assign` and returns records from inside that poll, on that thread. The records are plain
  appends to lists read by the loop after the thread wrote them (the GIL orders them; the
  benchmark only reads a member's lists to check a condition, never while relying on a count).
"""

from __future__ import annotations

import abc
import asyncio
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Final

import aiokafka  # type: ignore[import-untyped]
import confluent_kafka

POLL_TIMEOUT_S: Final = 0.1
CLOSE_TIMEOUT_S: Final = 30.0


def now_ns() -> int:
    return time.perf_counter_ns()


@dataclass(slots=True)
class Observed:
    """What a member saw: assignments (ns, partitions) in order, and its first record's ns."""

    assignments: list[tuple[int, frozenset[int]]] = field(default_factory=list)
    first_record_ns: int | None = None

    def assigned_since(self, start_ns: int) -> frozenset[int] | None:
        """The member's latest assignment given at or after `start_ns`, if any."""
        for at_ns, partitions in reversed(self.assignments):
            if at_ns >= start_ns:
                return partitions
        return None

    def last_assignment_ns(self) -> int:
        return self.assignments[-1][0]


class Member(abc.ABC):
    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.bootstrap = bootstrap
        self.group = group
        self.topic = topic
        self.name = name
        self.observed = Observed()

    @abc.abstractmethod
    async def start(self) -> None:
        """Creates the consumer and subscribes; returns at once (joining goes on behind)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Leaves the group (the client's close sends LeaveGroup) and releases the client."""


class AiokafkaMember(Member):
    _consumer: Any = None
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        observed = self.observed

        class Listener(aiokafka.ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                pass

            def on_partitions_assigned(self, assigned: Any) -> None:
                observed.assignments.append((now_ns(), frozenset(tp.partition for tp in assigned)))

        self._consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            client_id=self.name,
            auto_offset_reset="earliest",
        )
        await self._consumer.start()
        self._consumer.subscribe([self.topic], listener=Listener())
        self._task = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        while True:
            batches = await self._consumer.getmany(timeout_ms=100)
            if self.observed.first_record_ns is None and any(batches.values()):
                self.observed.first_record_ns = now_ns()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._consumer is not None:
            await asyncio.wait_for(self._consumer.stop(), CLOSE_TIMEOUT_S)


class ConfluentMember(Member):
    _thread: threading.Thread | None = None

    async def start(self) -> None:
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        observed = self.observed
        try:
            consumer = confluent_kafka.Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": self.group,
                    "client.id": self.name,
                    "auto.offset.reset": "earliest",
                }
            )

            def assigned(_consumer: Any, partitions: list[Any]) -> None:
                observed.assignments.append((now_ns(), frozenset(p.partition for p in partitions)))

            consumer.subscribe([self.topic], on_assign=assigned)
            try:
                while not self._stop.is_set():
                    message = consumer.poll(POLL_TIMEOUT_S)
                    if (
                        message is not None
                        and message.error() is None
                        and observed.first_record_ns is None
                    ):
                        observed.first_record_ns = now_ns()
            finally:
                consumer.close()
        except BaseException as exc:  # reported by close() on the loop
            self._failure = exc

    async def close(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        await asyncio.to_thread(self._thread.join, CLOSE_TIMEOUT_S)
        if self._thread.is_alive():
            raise RuntimeError(f"{self.name} did not close in {CLOSE_TIMEOUT_S:.0f} s")
        if self._failure is not None:
            raise RuntimeError(f"{self.name} failed") from self._failure


MEMBERS: Final[dict[str, type[Member]]] = {"confluent": ConfluentMember, "aiokafka": AiokafkaMember}
