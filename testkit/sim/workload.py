"""The simulation's clients: producers and consumers that record what the cluster promised.

Each worker is ketch's own client (client/) on the simulated network, under a node name of its
own (so faults can cut it off like any node), paced on the simulated clock. What they record
goes into the run's `History` (history.py), which the checkers read:

* `ProducerWorker`: one record at a time, every `interval_ms`, each value unique
  (`<name>:<n>`), to the partitions of one topic in turn. acks=all with idempotence (the
  client's default), acks=all without, acks=1 or acks=0. Every value sent is recorded as
  attempted (with whether the producer was idempotent, for the duplicate check); every
  acknowledgement as an `Ack` with its offset. A send that fails (delivery timeout, a refusal)
  is counted and the worker goes on with the next value: the failed one may or may not be in
  the log, which the checkers allow.
* `ConsumerWorker`: assigned every partition of a topic from the earliest offset, polls until
  stopped and records every record in the order received. Consumers read below the high
  watermark only, so everything they record must survive.
* `OffsetCommitter`: commits, as a simple consumer of group "sim-group" (no membership:
  generation -1), the consumer worker's positions every `interval_ms`, at the coordinator
  FindCoordinator names; records each commit sent and each one acknowledged. At the end the
  group's offsets are read back (`read_group_offsets`) for the checker.
* `TransactionalWorker`: a transactional producer (ketch's client, client/transactions.py)
  writing `batch` records per transaction across the partitions of its topic, and aborting
  about one transaction in five on purpose; each ended transaction is recorded with what the
  producer was told (committed, aborted, or unknown when it failed before an answer). A
  fenced or failed producer is replaced by a new instance with the same transactional id, as
  an application restarts: its InitProducerId ends what the old one left open.
* The consumer group's members are in group_member.py (`GroupMemberWorker`, built on `Worker`
  and `new_client` here).
* `TopicChurn`: creates a topic, produces a few records with acks=all, deletes it, again
  under a new name each round (names are never reused), while the faults run; a deleted topic
  is exempt from the final-log checks.

Over 500 lines on purpose: six workers that share one client setup and one way of recording
what they were told.

Ownership: the workers run as tasks on the simulation's loop; each owns its client; `stop()`
closes it. Errors are counted per kind in `errors` for the run's summary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from client.client import Client
from client.config import ClientConfig, ConsumerConfig, ProducerConfig
from client.consumer import Consumer
from client.errors import (
    ClientError,
    ProducerFencedError,
    TransactionAbortableError,
)
from client.producer import Producer
from runtime.clock import Clock
from runtime.net.transport import Address, Transport
from testkit.sim.history import (
    Ack,
    History,
    OffsetCommitted,
    Read,
    TopicDeleted,
    TransactionOutcome,
)
from wire.errors import ErrorCode, KafkaError
from wire.messages import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from wire.topic import TopicPartition

log = logging.getLogger(__name__)

CLIENT_CONFIG = ClientConfig(
    request_timeout_ms=1_000, reconnect_backoff_ms=10, reconnect_backoff_max_ms=100
)
# A send settles (acknowledged or failed) within this much simulated time, so a worker never
# waits out a long fault on one record.
DELIVERY_TIMEOUT_MS = 3_000


def _producer_config(**settings: Any) -> ProducerConfig:
    """The workers' producer settings (no linger, short timeouts and backoffs), plus
    `settings`."""
    return ProducerConfig(
        linger_ms=0,
        request_timeout_ms=1_000,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        max_block_ms=DELIVERY_TIMEOUT_MS,
        retry_backoff_ms=20,
        retry_backoff_max_ms=200,
        **settings,
    )


def new_client(
    transport: Transport, bootstrap: Sequence[Address], clock: Clock, name: str
) -> Client:
    return Client(
        list(bootstrap), transport=transport, clock=clock, config=CLIENT_CONFIG, client_id=name
    )


class Worker:
    def __init__(self, name: str, clock: Clock, history: History) -> None:
        self.name = name
        self.clock = clock
        self.history = history
        self.errors: Counter[str] = Counter()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        self._stopping = True
        task = self._task
        if task is None:
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        raise NotImplementedError


class ProducerWorker(Worker):
    def __init__(
        self,
        name: str,
        *,
        transport: Transport,
        bootstrap: Sequence[Address],
        clock: Clock,
        history: History,
        topic: str,
        partitions: int,
        acks: int,
        idempotent: bool,
        interval_ms: int,
    ) -> None:
        super().__init__(name, clock, history)
        self.topic = topic
        self.partitions = partitions
        self.acks = acks
        self.idempotent = idempotent
        self.interval_ms = interval_ms
        self.sent = 0
        self.producer = Producer(
            new_client(transport, bootstrap, clock, name),
            config=_producer_config(acks=acks, enable_idempotence=idempotent),
            owns_client=True,
        )

    async def _run(self) -> None:
        while not self._stopping:
            value = b"%s:%d" % (self.name.encode(), self.sent)
            partition = self.sent % self.partitions
            self.sent += 1
            self.history.append_attempt(self.name, value, self.idempotent)
            try:
                sent = await self.producer.send_and_wait(
                    self.topic, None, value, partition=partition
                )
            except (ClientError, KafkaError, TimeoutError) as error:
                self.errors[type(error).__name__] += 1
            else:
                self.history.append_ack(
                    Ack(
                        producer=self.name,
                        tp=TopicPartition(sent.topic, sent.partition),
                        value=value,
                        offset=sent.offset,
                        acks=self.acks,
                        idempotent=self.idempotent,
                        at_ns=self.clock.monotonic_ns(),
                    )
                )
            await self.clock.sleep(self.interval_ms / 1000)

    async def stop(self) -> None:
        await super().stop()
        with contextlib.suppress(Exception):
            await self.producer.close(timeout_ms=0)


class ConsumerWorker(Worker):
    def __init__(
        self,
        name: str,
        *,
        transport: Transport,
        bootstrap: Sequence[Address],
        clock: Clock,
        history: History,
        partitions: Sequence[TopicPartition],
    ) -> None:
        super().__init__(name, clock, history)
        self.consumer = Consumer(
            new_client(transport, bootstrap, clock, name),
            config=ConsumerConfig(
                fetch_max_wait_ms=100,
                auto_offset_reset="earliest",
                request_timeout_ms=1_000,
                retry_backoff_ms=20,
            ),
            owns_client=True,
        )
        self.consumer.assign(partitions)
        self.read = 0
        self.positions: dict[TopicPartition, int] = {}  # the next offset after the last read

    async def _run(self) -> None:
        while not self._stopping:
            try:
                records = await self.consumer.poll(timeout_ms=200)
            except (ClientError, KafkaError, TimeoutError) as error:
                self.errors[type(error).__name__] += 1
                await self.clock.sleep(0.05)
                continue
            now_ns = self.clock.monotonic_ns()
            for record in records:
                self.positions[TopicPartition(record.topic, record.partition)] = record.offset + 1
                self.history.append_read(
                    Read(
                        consumer=self.name,
                        tp=TopicPartition(record.topic, record.partition),
                        offset=record.offset,
                        value=record.value,
                        at_ns=now_ns,
                    )
                )
            self.read += len(records)

    async def stop(self) -> None:
        await super().stop()
        with contextlib.suppress(Exception):
            await self.consumer.close()


class OffsetCommitter(Worker):
    """A simple consumer's offset commits (module docstring)."""

    def __init__(
        self,
        name: str,
        *,
        transport: Transport,
        bootstrap: Sequence[Address],
        clock: Clock,
        history: History,
        group: str,
        source: ConsumerWorker,
        interval_ms: int,
    ) -> None:
        super().__init__(name, clock, history)
        self.group = group
        self.source = source
        self.interval_ms = interval_ms
        self.bootstrap = list(bootstrap)
        self.client = new_client(transport, bootstrap, clock, name)
        self.committed = 0

    async def _run(self) -> None:
        while not self._stopping:
            await self.clock.sleep(self.interval_ms / 1000)
            positions = dict(self.source.positions)
            if not positions:
                continue
            try:
                await self._commit(positions)
            except (ClientError, KafkaError, TimeoutError) as error:
                self.errors[type(error).__name__] += 1

    async def _commit(self, positions: dict[TopicPartition, int]) -> None:
        coordinator = await find_coordinator(self.client, self.bootstrap, self.group)
        if coordinator is None:
            self.errors["no coordinator"] += 1
            return
        by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
        for tp, offset in sorted(positions.items()):
            by_topic.setdefault(tp.topic, []).append(
                OffsetCommitRequestPartition(partition_index=tp.partition, committed_offset=offset)
            )
            self.history.append_offset_commit(
                OffsetCommitted(self.group, tp, offset, False, self.clock.monotonic_ns())
            )
        request = OffsetCommitRequest(
            group_id=self.group,
            topics=[
                OffsetCommitRequestTopic(name=topic, partitions=partitions)
                for topic, partitions in by_topic.items()
            ],
        )
        response = await self.client.send(coordinator, request)
        assert isinstance(response, OffsetCommitResponse), response
        for topic in response.topics:
            for partition in topic.partitions:
                tp = TopicPartition(topic.name, partition.partition_index)
                if partition.error_code != ErrorCode.NONE:
                    self.errors[ErrorCode.from_code(partition.error_code).name] += 1
                    continue
                self.committed += 1
                self.history.append_offset_commit(
                    OffsetCommitted(self.group, tp, positions[tp], True, self.clock.monotonic_ns())
                )

    async def stop(self) -> None:
        await super().stop()
        with contextlib.suppress(Exception):
            await self.client.close()


async def find_coordinator(client: Client, bootstrap: list[Address], group: str) -> Address | None:
    """The group's coordinator as the first broker that answers names it, or None."""
    for address in bootstrap:
        try:
            found = await client.send(address, FindCoordinatorRequest(coordinator_keys=[group]))
        except (ClientError, TimeoutError):
            continue
        assert isinstance(found, FindCoordinatorResponse), found
        [coordinator] = found.coordinators
        if coordinator.error_code == ErrorCode.NONE:
            return Address(coordinator.host, coordinator.port)
    return None


async def read_group_offsets(
    client: Client, bootstrap: list[Address], group: str, clock: Clock, *, attempts: int = 100
) -> dict[TopicPartition, int] | None:
    """The group's committed offsets, asked of its coordinator until it answers (bounded)."""
    for _ in range(attempts):
        coordinator = await find_coordinator(client, bootstrap, group)
        if coordinator is not None:
            try:
                fetched = await client.send(coordinator, OffsetFetchRequest(group_id=group))
            except (ClientError, TimeoutError):
                fetched = None
            if isinstance(fetched, OffsetFetchResponse) and fetched.error_code == ErrorCode.NONE:
                return {
                    TopicPartition(topic.name, p.partition_index): p.committed_offset
                    for topic in fetched.topics
                    for p in topic.partitions
                    if p.error_code == ErrorCode.NONE and p.committed_offset >= 0
                }
        await clock.sleep(0.05)
    return None


class TransactionalWorker(Worker):
    """Transactions, some aborted on purpose (module docstring)."""

    def __init__(
        self,
        name: str,
        *,
        transport: Transport,
        bootstrap: Sequence[Address],
        clock: Clock,
        history: History,
        topic: str,
        partitions: int,
        batch: int,
        interval_ms: int,
        rng: random.Random,
    ) -> None:
        super().__init__(name, clock, history)
        self.transport = transport
        self.bootstrap = list(bootstrap)
        self.topic = topic
        self.partitions = partitions
        self.batch = batch
        self.interval_ms = interval_ms
        self.rng = rng
        self.sent = 0
        self.instances = 0
        self.producer: Producer | None = None

    def _new_producer(self) -> Producer:
        self.instances += 1
        return Producer(
            new_client(self.transport, self.bootstrap, self.clock, f"{self.name}-{self.instances}"),
            config=_producer_config(transactional_id=self.name, transaction_timeout_ms=3_000),
            owns_client=True,
        )

    async def _run(self) -> None:
        while not self._stopping:
            producer = self.producer = self._new_producer()
            try:
                await producer.init_transactions()
                while not self._stopping:
                    await self._one_transaction(producer)
                    await self.clock.sleep(self.interval_ms / 1000)
            except (ClientError, KafkaError, TimeoutError) as error:
                self.errors[type(error).__name__] += 1
            finally:
                with contextlib.suppress(Exception):
                    await producer.close(timeout_ms=0)
            await self.clock.sleep(self.interval_ms / 1000)

    async def _one_transaction(self, producer: Producer) -> None:
        values = tuple(b"%s:%d" % (self.name.encode(), self.sent + i) for i in range(self.batch))
        self.sent += self.batch
        abort = self.rng.random() < 0.2
        producer.begin_transaction()
        try:
            for i, value in enumerate(values):
                self.history.append_attempt(self.name, value, True)
                await producer.send(self.topic, None, value, partition=i % self.partitions)
            if abort:
                await producer.abort_transaction()
            else:
                await producer.commit_transaction()
        except TransactionAbortableError as error:
            self.errors[type(error).__name__] += 1
            try:
                await producer.abort_transaction()
            except (ClientError, KafkaError, TimeoutError):
                self._ended(values, "unknown")
                raise
            self._ended(values, "aborted")
            return
        except (ClientError, KafkaError, TimeoutError, ProducerFencedError):
            self._ended(values, "unknown")
            raise
        except asyncio.CancelledError:
            self._ended(values, "unknown")  # the workload stopped inside the transaction
            raise
        self._ended(values, "aborted" if abort else "committed")

    def _ended(self, values: tuple[bytes, ...], outcome: str) -> None:
        self.history.append_transaction(
            TransactionOutcome(self.name, values, outcome, self.clock.monotonic_ns())
        )

    async def stop(self) -> None:
        await super().stop()
        if self.producer is not None:
            with contextlib.suppress(Exception):
                await self.producer.close(timeout_ms=0)


class TopicChurn(Worker):
    """Topics created, written to and deleted while the faults run (module docstring)."""

    def __init__(
        self,
        name: str,
        *,
        clock: Clock,
        history: History,
        create: Callable[[str], Awaitable[object]],
        delete: Callable[[str], Awaitable[object]],
        producer_for: Callable[[str], ProducerWorker],
        interval_ms: int,
    ) -> None:
        super().__init__(name, clock, history)
        self._create = create
        self._delete = delete
        self._producer_for = producer_for
        self.interval_ms = interval_ms
        self.rounds = 0
        self.deleted = 0
        self._producer: ProducerWorker | None = None

    async def _run(self) -> None:
        while not self._stopping:
            topic = f"{self.name}-{self.rounds}"
            self.rounds += 1
            try:
                await self._create(topic)
            except (ClientError, KafkaError, TimeoutError, AssertionError) as error:
                self.errors[f"create:{type(error).__name__}"] += 1
                await self.clock.sleep(self.interval_ms / 1000)
                continue
            self._producer = producer = self._producer_for(topic)
            producer.start()
            await self.clock.sleep(self.interval_ms / 1000)
            await producer.stop()
            self._producer = None
            # Out of the checks from the moment the deletion is asked for, confirmed or not: a
            # deletion may go through though its answer is lost, or this worker stopped.
            self.history.append_topic_deleted(TopicDeleted(topic, self.clock.monotonic_ns()))
            self.deleted += 1
            try:
                await self._delete(topic)
            except (ClientError, KafkaError, TimeoutError, AssertionError) as error:
                self.errors[f"delete:{type(error).__name__}"] += 1
            await self.clock.sleep(self.interval_ms / 1000)

    def upcoming(self) -> list[str]:
        """The partition directories of the next two topics this worker will create."""
        return [f"{self.name}-{self.rounds + i}-0" for i in range(2)]

    async def stop(self) -> None:
        await super().stop()
        if self._producer is not None:
            await self._producer.stop()
