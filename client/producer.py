"""The producer: `send()` records, batched per partition into RecordBatch v2, to their leaders.

    producer = Producer(client, config=ProducerConfig(acks=ACKS_ALL, linger_ms=5))
    future = await producer.send("events", b"key", b"value")   # queued
    meta = await future                                         # acknowledged: partition, offset
    await producer.close()                                      # flushes first

This module is the producer's public side; the batches wait in the accumulator (accumulator.py)
and one sender task (sender.py: requests, answers, retries, how many batches are in flight)
takes them to the brokers. The idempotent producer's state lives in idempotence.py, the
transactional producer's in transactions.py.

`send()` is the hot path, so it does little per record. It checks the record's size against
max.request.size and buffer.memory, looks up the topic in a per-topic cache (partition count,
partitions with a leader, the `TopicPartition` objects) that holds while the client's metadata
view is the same and no refresh is due or requested (else it waits for the topic's metadata as
Kafka's producer does, up to max.block.ms), picks the partition (keys: murmur2 as Kafka's
default partitioner; null keys: sticky, see partitioner.py), takes the record's bytes from
buffer.memory (buffer_pool.py; waiting up to max.block.ms when it is full, then
`BufferExhaustedError`), and appends the record to its partition's open batch, returning a
future. When that filled a batch while a request's worth (max.request.size, at most half of
buffer.memory) is buffered, it yields once to the event loop, so the sender can put the batch
in flight and answers can come in while the caller goes on filling the next one: an asyncio
producer has no thread of its own to send from, and a caller that never waits would otherwise
let the sender run only when buffer.memory is full. Below that, records gather undisturbed (a
burst of sends still travels together; linger.ms or the next yield sends them).

Settings: Kafka's names and defaults. linger.ms (`ProducerConfig.linger_ms`) is 5 as in Kafka 4.0
(0 before); batch.size 16384; buffer.memory (`buffer_memory=`, 33554432); max.block.ms 60000;
max.in.flight.requests.per.connection is the client's (`ClientConfig`, 5). Linger deadlines,
retry backoffs and the buffer wait all run on the client's injected clock.

Ordering and idempotence (enable.idempotence, on by default with acks=all; see
ProducerConfig.idempotent): sender.py says how many batches of a partition are in flight and
why a partition's records keep their `send()` order and land once each.

Transactions (transactional.id set; the state machine and the coordinator requests are in
transactions.py). `init_transactions()` gets the id and epoch from the transaction coordinator;
between `begin_transaction()` and `commit_transaction()` / `abort_transaction()` records go into
the transaction. A record that fails makes the transaction abortable. `send()` outside a
transaction raises (`TransactionStateError`, or the abortable or fatal error), rather than
failing the future. `close()` aborts an open transaction first, as Kafka's producer does.

Shutdown. `close()` sends everything queued (bounded by the delivery timeout, or `timeout_ms`),
fails what is left with `ClientClosedError`, and ends the sender task.

Owned by its caller and used from one event loop; its state (the topic cache, the flags) is
touched only by its own calls, between awaits: no locks.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from client.accumulator import (
    RECORD_OVERHEAD_BYTES,
    Headers,
    PendingRecord,
    ProducerBatch,
    RecordAccumulator,
    RecordMetadata,
    estimate_record_bytes,
)
from client.buffer_pool import BufferExhaustedError, BufferPool
from client.client import Client
from client.config import ACKS_ALL, ProducerConfig
from client.errors import ClientClosedError, TransactionStateError
from client.idempotence import IdempotenceManager
from client.partitioner import DefaultPartitioner
from client.sender import Sender, partition_window
from client.transactions import TransactionManager
from runtime.clock import NS_PER_MS
from runtime.net.backoff import ExponentialBackoff
from wire.errors import ErrorCode, KafkaError
from wire.records import CompressionType
from wire.topic import TopicPartition

_log = logging.getLogger(__name__)

__all__ = ["DEFAULT_BUFFER_MEMORY", "BufferExhaustedError", "Producer", "RecordMetadata"]

DEFAULT_BUFFER_MEMORY: Final = 33_554_432  # Kafka's buffer.memory default (32 MiB)
_new_tuple: Final = tuple.__new__


@dataclass(frozen=True, slots=True)
class _TopicState:
    """What `send()` needs of a topic, valid while the metadata view is `version` and no
    refresh is due before `fresh_until_ms` (monotonic)."""

    version: int
    fresh_until_ms: int
    partition_count: int
    available: list[int]
    tps: tuple[TopicPartition, ...]


class Producer:
    def __init__(
        self,
        client: Client,
        *,
        config: ProducerConfig | None = None,
        compression: CompressionType = CompressionType.NONE,
        owns_client: bool = False,
        buffer_memory: int = DEFAULT_BUFFER_MEMORY,
    ) -> None:
        self._client = client
        self._clock = client.clock
        self.config = config or ProducerConfig()
        self._owns_client = owns_client
        self._rng = random.Random(self.config.partitioner_seed)
        self._partitioner = DefaultPartitioner(batch_size=self.config.batch_size, rng=self._rng)
        self._buffer = BufferPool(buffer_memory, self._clock)
        # send() yields to the sender when a batch fills once this much is buffered (see the
        # module docstring).
        self._yield_bytes = min(self.config.max_request_size, buffer_memory // 2)
        self._max_record_bytes = min(self.config.max_request_size, buffer_memory)
        window = partition_window(
            client.config.max_in_flight_requests_per_connection,
            idempotent=self.config.idempotent,
        )
        self._accumulator = RecordAccumulator(
            batch_size=self.config.batch_size,
            linger_ms=self.config.linger_ms,
            delivery_timeout_ms=self.config.delivery_timeout_ms,
            max_in_flight=window,
            on_batch_done=self._batch_done,
        )
        self._wakeup = asyncio.Event()
        retry_backoff = ExponentialBackoff(
            initial_ms=self.config.retry_backoff_ms, max_ms=self.config.retry_backoff_max_ms
        )
        self._idempotence: IdempotenceManager | None = None
        if self.config.idempotent:
            assert self.config.acks == ACKS_ALL, "ProducerConfig allows idempotence with acks=all"
            self._idempotence = IdempotenceManager(
                client,
                request_timeout_ms=self.config.request_timeout_ms,
                retry_backoff=retry_backoff,
                rng=self._rng,
                wakeup=self._wakeup.set,
            )
        self._transactions: TransactionManager | None = None
        if self.config.transactional:
            assert self._idempotence is not None, "ProducerConfig makes it idempotent"
            self._transactions = TransactionManager(
                client,
                self._idempotence,
                config=self.config,
                retry_backoff=retry_backoff,
                rng=self._rng,
                wakeup=self._wakeup.set,
            )
        self._sender = Sender(
            client,
            self._accumulator,
            config=self.config,
            compression=compression,
            rng=self._rng,
            retry_backoff=retry_backoff,
            wakeup=self._wakeup,
            idempotence=self._idempotence,
            transactions=self._transactions,
        )
        self._topics: dict[str, _TopicState] = {}
        # The event loop of the first send(): the producer's tasks and futures live on it.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closing = False
        self._closed = False

    # ---------------------------------------------------------------------------------------
    # Public API

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Iterable[tuple[str, bytes | None]] = (),
    ) -> asyncio.Future[RecordMetadata]:
        """Queue one record; the returned future resolves to where it was written.

        Raises (rather than failing the future) when the record can never be sent: the
        producer is closed, the record exceeds max.request.size or buffer.memory, the
        partition does not exist, the topic's metadata is not available within max.block.ms,
        or buffer.memory has no room for it within max.block.ms (`BufferExhaustedError`); for
        a transactional producer also outside a transaction (see the module docstring).
        """
        if self._closing:
            raise ClientClosedError("the producer is closed")
        record_headers: Headers
        if headers:
            record_headers = tuple(headers)
            size = estimate_record_bytes(key, value, record_headers)
        else:  # estimate_record_bytes without headers, inline: this runs once per record
            record_headers = ()
            size = RECORD_OVERHEAD_BYTES
            if key is not None:
                size += len(key)
            if value is not None:
                size += len(value)
        if size > self._max_record_bytes:
            self._too_large(size)
        clock = self._clock
        now_ms = clock.monotonic_ms()
        state = self._topics.get(topic)
        metadata = self._client.metadata
        if (
            state is None
            or now_ms >= state.fresh_until_ms
            or state.version != metadata.version
            or metadata.update_requested()
        ):
            state = await self._topic_state(topic)
            now_ms = clock.monotonic_ms()
        count = state.partition_count
        if partition is None:
            partition = self._partitioner.partition(topic, key, count, state.available, size)
        elif not 0 <= partition < count:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has {count} partitions"
            )
        if self._closing:  # closed while waiting for metadata
            raise ClientClosedError("the producer is closed")
        tp = state.tps[partition]
        if self._transactions is not None:
            self._transactions.maybe_add_partition(tp)
        stamp = clock.wall_ms() if timestamp_ms is None else timestamp_ms
        loop = self._loop
        if loop is None:
            # Once: get_running_loop() costs a getpid() system call on every call.
            loop = self._loop = asyncio.get_running_loop()
        future: asyncio.Future[RecordMetadata] = loop.create_future()
        if not self._buffer.try_allocate(size):
            await self._wait_for_memory(size)
            now_ms = clock.monotonic_ms()
        if self._idempotence is not None and self._idempotence.fatal_error is not None:
            # As Kafka's sender aborts every batch of a producer in a fatal state.
            self._buffer.release(size)
            future.set_exception(self._idempotence.fatal_error)
            return future
        # tuple.__new__ is what PendingRecord(...) runs, without its Python-level __new__.
        record = _new_tuple(PendingRecord, (key, value, stamp, record_headers, future))
        accumulator = self._accumulator
        accumulator.append(tp, record, now_ms, size)
        if accumulator.started or accumulator.filled or self._transactions is not None:
            # Only news for the sender: a batch to send now or a linger deadline to keep (a
            # transaction's partition to add, too).
            self._sender.wake()
            if accumulator.filled and self._buffer.used_bytes >= self._yield_bytes:
                # Let the sender put the full batch in flight before more records come.
                await asyncio.sleep(0)
        return future

    async def _wait_for_memory(self, size: int) -> None:
        """buffer.memory is full: wait for `size` bytes up to max.block.ms."""
        await self._buffer.allocate(size, max_block_ms=self.config.max_block_ms)
        if self._closing:
            self._buffer.release(size)
            raise ClientClosedError("the producer was closed while send() waited for memory")

    def _too_large(self, size: int) -> None:
        limit = self._max_record_bytes
        setting = "max.request.size" if limit == self.config.max_request_size else "buffer.memory"
        raise KafkaError(
            ErrorCode.MESSAGE_TOO_LARGE, f"record of ~{size} bytes exceeds {setting}={limit}"
        )

    async def _topic_state(self, topic: str) -> _TopicState:
        """The topic's metadata, waited for (up to max.block.ms) as Kafka's producer does."""
        info = await self._client.wait_for_topic(topic, timeout_ms=self.config.max_block_ms)
        metadata = self._client.metadata
        now_ms = self._clock.monotonic_ms()
        fresh_ms = 0 if metadata.update_requested() else metadata.ms_until_refresh(now_ms)
        count = len(info.partitions)
        cached = self._topics.get(topic)
        # The same objects while the count stays: batches and dict keys keep comparing fast.
        tps = (
            cached.tps
            if cached is not None and len(cached.tps) == count
            else tuple(TopicPartition(topic, p) for p in range(count))
        )
        state = _TopicState(
            version=metadata.version,
            fresh_until_ms=now_ms + fresh_ms,
            partition_count=count,
            available=metadata.view.available_partitions(topic),
            tps=tps,
        )
        self._topics[topic] = state
        return state

    def _batch_done(self, batch: ProducerBatch) -> None:
        self._buffer.release(batch.records_bytes)

    async def send_and_wait(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Iterable[tuple[str, bytes | None]] = (),
    ) -> RecordMetadata:
        future = await self.send(
            topic, key, value, partition=partition, timestamp_ms=timestamp_ms, headers=headers
        )
        return await future

    async def flush(self) -> None:
        """Send everything queued now, ignoring linger.ms, and wait until each is settled.

        Failures stay on the records' own futures; flush itself does not raise them.
        """
        futures = self._sender.pending_futures()
        if not futures:
            return
        self._accumulator.begin_flush()
        self._wakeup.set()
        try:
            # asyncio.wait, unlike gather, never cancels the futures if flush is cancelled.
            await asyncio.wait(futures)
        finally:
            self._accumulator.end_flush()

    # ---------------------------------------------------------------------------------------
    # Transactions (transactions.py has the states and the requests)

    @property
    def transactions(self) -> TransactionManager | None:
        """The transaction manager of a transactional producer (its `state`, for instance)."""
        return self._transactions

    def _require_transactions(self, call: str) -> TransactionManager:
        if self._transactions is None:
            raise TransactionStateError(f"{call}() needs a transactional.id")
        if self._closing:
            raise ClientClosedError("the producer is closed")
        return self._transactions

    async def init_transactions(self) -> None:
        """Get the producer id and epoch of the transactional id (fencing older instances of
        it and aborting their open transaction); once, before the first transaction."""
        await self._require_transactions("init_transactions").init_transactions()

    def begin_transaction(self) -> None:
        self._require_transactions("begin_transaction").begin_transaction()

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_id: str
    ) -> None:
        """Commit `group_id`'s offsets (the next offset to consume, per partition) as part of
        the transaction: visible once it commits, dropped if it aborts."""
        transactions = self._require_transactions("send_offsets_to_transaction")
        await transactions.send_offsets_to_transaction(offsets, group_id)

    async def commit_transaction(self) -> None:
        """Send every record of the transaction, then commit it. Raises
        `TransactionAbortableError` if a record failed (abort, then begin again),
        `ProducerFencedError` if a newer instance took over."""
        await self._require_transactions("commit_transaction").commit_transaction(self.flush)

    async def abort_transaction(self) -> None:
        """Drop the records not sent yet, wait for those sent, and abort the transaction."""
        transactions = self._require_transactions("abort_transaction")
        await transactions.abort_transaction(self._settle_all)

    async def _settle_all(self) -> None:
        """Wait until every record is acknowledged or failed (a record exists only once the
        sender does)."""
        self._wakeup.set()
        futures = self._sender.pending_futures()
        if futures:
            await asyncio.wait(futures)

    # ---------------------------------------------------------------------------------------
    # Shutdown

    async def close(self, *, timeout_ms: float | None = None) -> None:
        """Abort an open transaction (within the delivery timeout), send what is queued (up to
        `timeout_ms`, default the delivery timeout), then stop.

        Records still pending afterwards fail with `ClientClosedError`. Closes the client too
        when the producer owns it.
        """
        if self._closed:
            return
        if self._transactions is not None and self._transactions.has_open_transaction:
            try:
                await self._transactions.abort_transaction(self._settle_all)
            except Exception as exc:  # closing goes on: the coordinator times it out
                _log.warning("aborting the open transaction on close failed: %s", exc)
        self._closing = True
        self._accumulator.close()
        self._wakeup.set()
        futures = self._sender.pending_futures()
        if futures:
            budget_ms = self.config.delivery_timeout_ms if timeout_ms is None else timeout_ms
            await self._wait_settled(futures, budget_ms)
        self._closed = True
        self._sender.closed = True
        await self._stop_tasks()
        error = ClientClosedError("the producer was closed before the record was acknowledged")
        self._accumulator.abort_all(error)
        self._sender.fail_in_flight(error)
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _wait_settled(
        self, futures: list[asyncio.Future[RecordMetadata]], budget_ms: float
    ) -> None:
        """Wait until every future is done or `budget_ms` passed on the clock.

        Not `asyncio.wait_for(gather(...))`: cancelling a gather cancels the records' futures,
        and those must fail with a typed error instead.
        """
        done = asyncio.Event()
        remaining = len(futures)

        def one_done(_: asyncio.Future[RecordMetadata]) -> None:
            nonlocal remaining
            remaining -= 1
            if remaining == 0:
                done.set()

        for future in futures:
            future.add_done_callback(one_done)
        deadline_ns = self._clock.monotonic_ns() + round(budget_ms * NS_PER_MS)
        alarm = self._clock.call_at_ns(deadline_ns, done.set)
        try:
            await done.wait()
        finally:
            alarm.cancel()
            for future in futures:
                future.remove_done_callback(one_done)

    async def _stop_tasks(self) -> None:
        await self._sender.stop()
        if self._idempotence is not None:
            await self._idempotence.close()
        if self._transactions is not None:
            await self._transactions.close()
