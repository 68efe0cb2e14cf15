"""The producer: `send()` records, batched per partition into RecordBatch v2, to their leaders.

    producer = Producer(client, config=ProducerConfig(acks=ACKS_ALL, linger_ms=5))
    future = await producer.send("events", b"key", b"value")   # queued
    meta = await future                                         # acknowledged: partition, offset
    await producer.close()                                      # flushes first

Flow. `send()` waits for the topic's metadata (up to max.block.ms), picks the partition (keys:
murmur2 as Kafka's default partitioner; null keys: sticky, see partitioner.py), and appends
the record to the partition's open batch in the accumulator (accumulator.py), returning a
future. One sender task turns ready batches into Produce requests: it groups them by the
partition's current leader, builds each batch's bytes once with `wire.batch_builder.build_batch`
(a retry resends the same bytes), and sends one request per leader; requests to different
leaders overlap. It sleeps until the next linger deadline, retry backoff or delivery-timeout
expiry, or until `send()`/a response wakes it.

Responses. Per partition: NONE completes the batch's futures with `base_offset + i`; a
retriable error (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, a lost
connection, ...) puts the batch back at the head of its partition's queue after retry.backoff.ms
(exponential, capped by retry.backoff.max.ms) and, when the error says the leader moved,
refreshes metadata first; anything else, or running out of delivery.timeout.ms, fails the
batch's futures. With acks=0 the broker sends no response: futures complete with offset -1 as
soon as the request was written.

Ordering. One batch per partition is in flight at a time and retried batches go back to the
front (see accumulator.py), so a partition's records keep their `send()` order.

Idempotence (enable.idempotence, on by default with acks=all; see ProducerConfig.idempotent).
The sender first gets a producer id and epoch with InitProducerId and drains nothing until it
has one; each batch takes its partition's next sequence when first drained and keeps it on
every retry, so a resend after a lost answer is recognised by the broker (answered NONE with the
original offsets) instead of being appended twice. OUT_OF_ORDER_SEQUENCE_NUMBER or
UNKNOWN_PRODUCER_ID bump the epoch and restart the partition at sequence 0; INVALID_PRODUCER_EPOCH
or PRODUCER_FENCED fail every pending and later record. The bookkeeping is in idempotence.py.
A non-idempotent producer sends producer id -1 and no sequences, as before.

Transactions (transactional.id set; the state machine and the coordinator requests are in
transactions.py). `init_transactions()` gets the id and epoch from the transaction coordinator;
between `begin_transaction()` and `commit_transaction()` / `abort_transaction()` records go into
the transaction: a partition's batches are drained only after AddPartitionsToTxn added it, and
carry the transactional attribute. A record that fails makes the transaction abortable; while it
is abortable or being aborted, batches never sent are failed with `TransactionAbortedError` and
only batches already sent (holding sequences) are sent again. `send()` outside a transaction
raises (`TransactionStateError`, or the abortable or fatal error), rather than failing the
future. `close()` aborts an open transaction first, as Kafka's producer does.

Shutdown. `close()` sends everything queued (bounded by the delivery timeout, or `timeout_ms`),
fails what is left with `ClientClosedError`, and ends the sender task.

Size. The module is over the ~500-line guide: the sender's batch lifecycle (drain, encode,
produce, settle, retry, expire) is one state machine and reads best in one place; the idempotent
producer's own state lives in idempotence.py, the transactional producer's in transactions.py,
and only their hooks into that lifecycle are here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Iterable, Mapping, Sequence

from client.accumulator import (
    Headers,
    PendingRecord,
    ProducerBatch,
    RecordAccumulator,
    RecordMetadata,
    estimate_record_bytes,
)
from client.client import Client
from client.config import ACKS_ALL, ProducerConfig
from client.errors import (
    ClientClosedError,
    DeliveryTimeoutError,
    TransactionStateError,
    invalidates_metadata,
    is_retriable,
)
from client.idempotence import FENCING_ERRORS, SEQUENCE_ERRORS, IdempotenceManager
from client.partitioner import DefaultPartitioner
from client.transactions import TransactionManager
from runtime.clock import NS_PER_MS
from runtime.net.backoff import ExponentialBackoff
from wire.batch_builder import build_batch
from wire.errors import ErrorCode, KafkaError
from wire.messages import (
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from wire.records import CompressionType
from wire.topic import TopicPartition

_log = logging.getLogger(__name__)

__all__ = ["Producer", "RecordMetadata"]


class Producer:
    def __init__(
        self,
        client: Client,
        *,
        config: ProducerConfig | None = None,
        compression: CompressionType = CompressionType.NONE,
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self._clock = client.clock
        self.config = config or ProducerConfig()
        self._compression = compression
        self._owns_client = owns_client
        self._rng = random.Random(self.config.partitioner_seed)
        self._partitioner = DefaultPartitioner(batch_size=self.config.batch_size, rng=self._rng)
        self._accumulator = RecordAccumulator(
            batch_size=self.config.batch_size,
            linger_ms=self.config.linger_ms,
            delivery_timeout_ms=self.config.delivery_timeout_ms,
        )
        self._wakeup = asyncio.Event()
        self._retry_backoff = ExponentialBackoff(
            initial_ms=self.config.retry_backoff_ms, max_ms=self.config.retry_backoff_max_ms
        )
        self._idempotence: IdempotenceManager | None = None
        if self.config.idempotent:
            assert self.config.acks == ACKS_ALL, "ProducerConfig allows idempotence with acks=all"
            self._idempotence = IdempotenceManager(
                client,
                request_timeout_ms=self.config.request_timeout_ms,
                retry_backoff=self._retry_backoff,
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
                retry_backoff=self._retry_backoff,
                rng=self._rng,
                wakeup=self._wakeup.set,
            )
        # Insertion-ordered (dicts as sets): the order they are closed or woken in is part of a
        # run, and a seeded simulation must replay it (a set of objects orders them by address).
        self._in_flight: dict[ProducerBatch, None] = {}
        self._requests: dict[asyncio.Task[None], None] = {}
        self._refresh: asyncio.Task[None] | None = None
        self._sender: asyncio.Task[None] | None = None
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
        producer is closed, the record exceeds max.request.size, the partition does not exist,
        or the topic's metadata is not available within max.block.ms; for a transactional
        producer also outside a transaction (see the module docstring).
        """
        if self._closing:
            raise ClientClosedError("the producer is closed")
        record_headers: Headers = tuple(headers)
        size = estimate_record_bytes(key, value, record_headers)
        if size > self.config.max_request_size:
            raise KafkaError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"record of ~{size} bytes exceeds max.request.size={self.config.max_request_size}",
            )
        info = await self._client.wait_for_topic(topic, timeout_ms=self.config.max_block_ms)
        count = len(info.partitions)
        if partition is None:
            available = self._client.metadata.view.available_partitions(topic)
            partition = self._partitioner.partition(topic, key, count, available, size)
        elif not 0 <= partition < count:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic} has {count} partitions"
            )
        if self._closing:  # closed while waiting for metadata
            raise ClientClosedError("the producer is closed")
        tp = TopicPartition(topic, partition)
        if self._transactions is not None:
            self._transactions.maybe_add_partition(tp)
        stamp = self._clock.wall_ms() if timestamp_ms is None else timestamp_ms
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        if self._idempotence is not None and self._idempotence.fatal_error is not None:
            # As Kafka's sender aborts every batch of a producer in a fatal state.
            future.set_exception(self._idempotence.fatal_error)
            return future
        record = PendingRecord(key, value, stamp, record_headers, future)
        self._accumulator.append(tp, record, self._now_ms())
        self._ensure_sender()
        self._wakeup.set()
        return future

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
        futures = self._pending_futures()
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
        futures = self._pending_futures()
        if futures:
            await asyncio.wait(futures)

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
        futures = self._pending_futures()
        if futures:
            budget_ms = self.config.delivery_timeout_ms if timeout_ms is None else timeout_ms
            await self._wait_settled(futures, budget_ms)
        self._closed = True
        await self._stop_tasks()
        error = ClientClosedError("the producer was closed before the record was acknowledged")
        self._accumulator.abort_all(error)
        for batch in list(self._in_flight):
            batch.fail(error)
        self._in_flight.clear()
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> Producer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # ---------------------------------------------------------------------------------------
    # Sender

    def _now_ms(self) -> int:
        return self._clock.monotonic_ms()

    def _ensure_sender(self) -> None:
        if self._sender is None:
            self._sender = asyncio.create_task(self._run(), name="producer sender")

    async def _run(self) -> None:
        while not self._closed:
            now_ms = self._now_ms()
            self._expire(now_ms)
            if self._client.metadata.update_requested():
                # An error said a leader moved; the refresh runs while the batch backs off.
                self._start_refresh()
            if self._idempotence is not None and not self._idempotence.can_send():
                next_ms = self._wait_for_producer_id(self._idempotence, now_ms)
            else:
                next_ms = self._send_ready(now_ms)
            expiry_ms = self._accumulator.next_expiry_ms()
            if expiry_ms is not None:
                next_ms = expiry_ms if next_ms is None else min(next_ms, expiry_ms)
            await self._sleep_until(next_ms)

    async def _sleep_until(self, deadline_ms: int | None) -> None:
        alarm = None
        if deadline_ms is not None:
            alarm = self._clock.call_at_ns(deadline_ms * NS_PER_MS, self._wakeup.set)
        try:
            await self._wakeup.wait()
        finally:
            self._wakeup.clear()
            if alarm is not None:
                alarm.cancel()

    def _send_ready(self, now_ms: int) -> int | None:
        """Dispatch the ready partitions (those a transaction allows); returns when to look
        again (None: when woken)."""
        transactions = self._transactions
        sent_only = False
        if transactions is not None:
            if transactions.aborting_batches:
                self._abort_unsent(transactions.abort_error())
                sent_only = True
            else:
                transactions.poll_add_partitions()
        ready, next_ms = self._accumulator.ready(now_ms)
        if transactions is not None:
            ready = [tp for tp in ready if self._may_send(transactions, tp, sent_only=sent_only)]
        if self._dispatch(ready):
            # Re-check after the metadata refresh (which wakes us) or after a backoff.
            retry_ms = now_ms + self.config.retry_backoff_ms
            next_ms = retry_ms if next_ms is None else min(next_ms, retry_ms)
        return next_ms

    def _may_send(
        self, transactions: TransactionManager, tp: TopicPartition, *, sent_only: bool
    ) -> bool:
        if sent_only:
            # A batch that was sent before holds sequences the broker may have written.
            queued = self._accumulator.queued_batches(tp)
            return bool(queued) and queued[0].has_sequence
        return transactions.is_partition_added(tp)

    def _abort_unsent(self, error: Exception) -> None:
        """Fail every queued batch that was never sent (it holds no sequence yet); a retried
        one at a partition's head, or one in flight, keeps the rest of its partition queued."""
        for tp in self._accumulator.partitions_with_data():
            while True:
                queued = self._accumulator.queued_batches(tp)
                if not queued or queued[0].has_sequence:
                    break
                drained = self._accumulator.drain([tp])
                if not drained:
                    break  # muted: a batch is in flight
                (batch,) = drained
                batch.fail(error)
                self._accumulator.unmute(tp)

    def _expire(self, now_ms: int) -> None:
        idempotence = self._idempotence
        for batch in self._accumulator.expire(now_ms):
            error: Exception = DeliveryTimeoutError(
                f"{len(batch.records)} record(s) for {batch.tp} not acknowledged within "
                f"delivery.timeout.ms={self.config.delivery_timeout_ms}"
            )
            if self._transactions is not None:
                self._transactions.batch_failed(batch.has_sequence, error)
            elif idempotence is not None:
                idempotence.batch_failed(batch, rejected=False)
                if not idempotence.producer_id_and_epoch.is_valid:
                    delivery_timeout_ms = self.config.delivery_timeout_ms
                    error = idempotence.no_producer_id_error(batch, delivery_timeout_ms)
            batch.fail(error)

    def _wait_for_producer_id(self, idempotence: IdempotenceManager, now_ms: int) -> int | None:
        """No batch may be drained yet: fail everything after a fatal error, else let the
        manager ask for an id while records wait (an idle producer asks nothing)."""
        if idempotence.fatal_error is not None:
            self._accumulator.abort_all(idempotence.fatal_error)
            return None
        if self._transactions is not None:
            return None  # its transaction manager gets ids (init_transactions, aborts)
        return idempotence.poll_producer_id(now_ms) if self._accumulator.has_pending() else None

    def _dispatch(self, ready: Sequence[TopicPartition]) -> bool:
        """Send ready partitions to their leaders; True if some partition has no known leader."""
        view = self._client.metadata.view
        by_leader: dict[int, list[TopicPartition]] = {}
        leaderless = False
        for tp in ready:
            leader = view.leader(tp)
            if leader is None:
                leaderless = True
                continue
            by_leader.setdefault(leader.node_id, []).append(tp)
        if leaderless:
            self._client.metadata.request_update()
            self._start_refresh()
        for node_id, partitions in by_leader.items():
            batches = self._take_batches(partitions)
            if batches:
                task = asyncio.create_task(
                    self._produce(node_id, batches), name=f"produce to {node_id}"
                )
                self._requests[task] = None
                task.add_done_callback(self._request_done)
        return leaderless

    def _take_batches(self, partitions: Sequence[TopicPartition]) -> list[ProducerBatch]:
        """Drain one batch per partition, as many as fit max.request.size (at least one)."""
        taken: list[ProducerBatch] = []
        total = 0
        for tp in partitions:
            head = self._accumulator.queued_batches(tp)
            if not head:
                continue
            if taken and total + head[0].size_bytes > self.config.max_request_size:
                break  # the rest waits for the next request
            (batch,) = self._accumulator.drain([tp])
            if self._idempotence is not None:
                self._idempotence.set_producer_state(batch)
            total += batch.size_bytes
            taken.append(batch)
            self._in_flight[batch] = None
        return taken

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._requests.pop(task, None)
        self._wakeup.set()
        if not task.cancelled() and task.exception() is not None:
            _log.error("produce request task failed", exc_info=task.exception())

    def _start_refresh(self) -> None:
        if self._refresh is not None:
            return

        async def refresh() -> None:
            try:
                await self._client.refresh_metadata()
            except Exception as exc:  # retried on the next pass of the sender
                _log.debug("metadata refresh for the producer failed: %s", exc)
            finally:
                self._refresh = None
                self._wakeup.set()

        self._refresh = asyncio.create_task(refresh(), name="producer metadata refresh")

    def _encode(self, batch: ProducerBatch) -> bytes:
        if batch.encoded is None:
            records = batch.records
            batch.encoded = build_batch(
                [(r.key, r.value) for r in records],
                timestamps=[r.timestamp_ms for r in records],
                headers=[r.headers for r in records],
                compression=self._compression,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                base_sequence=batch.base_sequence,
                is_transactional=self._transactions is not None,
            )
        return batch.encoded

    async def _produce(self, node_id: int, batches: list[ProducerBatch]) -> None:
        by_topic: dict[str, list[PartitionProduceData]] = {}
        for batch in batches:
            data = PartitionProduceData(index=batch.tp.partition, records=self._encode(batch))
            by_topic.setdefault(batch.tp.topic, []).append(data)
        request = ProduceRequest(
            transactional_id=self.config.transactional_id,
            acks=self.config.acks,
            timeout_ms=self.config.request_timeout_ms,
            topic_data=[TopicProduceData(name=t, partition_data=p) for t, p in by_topic.items()],
        )
        try:
            if self.config.acks == 0:
                await self._client.send_only(node_id, request)
                for batch in batches:
                    self._settle(batch, None)
                return
            response = await self._client.send_expect(
                node_id, request, ProduceResponse, timeout_ms=self.config.request_timeout_ms
            )
        except Exception as exc:
            for batch in batches:
                self._settle(batch, exc)
            return
        self._handle_response(response, batches)

    def _handle_response(self, response: ProduceResponse, batches: list[ProducerBatch]) -> None:
        answers: dict[TopicPartition, PartitionProduceResponse] = {}
        for topic in response.responses:
            for part in topic.partition_responses:
                answers[TopicPartition(topic.name, part.index)] = part
        for batch in batches:
            answer = answers.get(batch.tp)
            if answer is None:
                self._settle(
                    batch, KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"no answer for {batch.tp}")
                )
            elif (
                answer.error_code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER
                and self._idempotence is not None
            ):
                # The broker already has this batch (older brokers' answer to a resend; newer
                # ones answer NONE with the original offsets): done, as Kafka's Sender treats it.
                self._settle(batch, None, answer.base_offset, answer.log_append_time_ms)
            elif answer.error_code != ErrorCode.NONE:
                self._settle(batch, KafkaError(answer.error_code, answer.error_message))
            else:
                self._settle(batch, None, answer.base_offset, answer.log_append_time_ms)

    def _settle(
        self,
        batch: ProducerBatch,
        error: BaseException | None,
        base_offset: int = -1,
        log_append_time_ms: int = -1,
    ) -> None:
        self._in_flight.pop(batch, None)
        if error is None:
            batch.complete(base_offset, log_append_time_ms)
            self._accumulator.unmute(batch.tp)
            return
        if self._idempotence is not None and self._settle_idempotent(batch, error):
            return
        now_ms = self._now_ms()
        delay_ms = self._retry_backoff.delay_ms(batch.attempts - 1, self._rng)
        deadline_ms = self._accumulator.deadline_ms(batch)
        if is_retriable(error) and not self._closed and now_ms + delay_ms < deadline_ms:
            if invalidates_metadata(error):
                self._client.metadata.request_update()
            _log.debug("retrying %s after %s (attempt %d)", batch.tp, error, batch.attempts)
            self._accumulator.reenqueue(batch, now_ms + round(delay_ms))
            return
        if self._transactions is not None:
            self._transactions.batch_failed(batch.has_sequence, error)
        elif self._idempotence is not None:
            rejected = isinstance(error, KafkaError) and not error.retriable
            self._idempotence.batch_failed(batch, rejected=rejected)
        if is_retriable(error):
            timeout = DeliveryTimeoutError(
                f"{batch.tp}: not acknowledged within delivery.timeout.ms "
                f"({batch.attempts} attempts): {error}"
            )
            timeout.__cause__ = error
            error = timeout
        batch.fail(error)
        self._accumulator.unmute(batch.tp)

    def _settle_idempotent(self, batch: ProducerBatch, error: BaseException) -> bool:
        """What idempotence changes about a failed batch; True when the batch is dealt with."""
        idempotence = self._idempotence
        assert idempotence is not None
        code = error.code if isinstance(error, KafkaError) else None
        if isinstance(error, KafkaError) and code in FENCING_ERRORS:
            if self._transactions is not None:
                self._transactions.fence(error)
            else:
                idempotence.fence(error)
            self._wakeup.set()  # the sender fails what is queued
        if idempotence.fatal_error is not None:
            batch.fail(idempotence.fatal_error)
            self._accumulator.unmute(batch.tp)
            return True
        if code not in SEQUENCE_ERRORS or self._transactions is not None:
            # In a transaction a sequence error fails the batch, making the transaction
            # abortable; its abort bumps the epoch (transactions.py).
            return False
        now_ms = self._now_ms()
        delay_ms = self._retry_backoff.delay_ms(batch.attempts - 1, self._rng)
        if self._closed or now_ms + delay_ms >= self._accumulator.deadline_ms(batch):
            return False  # fails as a non-retriable error
        _log.debug("%s for %s: bumping the epoch, then resending", error, batch.tp)
        idempotence.handle_sequence_error(batch)
        self._accumulator.reenqueue(batch, now_ms + round(delay_ms))
        return True

    # ---------------------------------------------------------------------------------------
    # Shutdown helpers

    def _pending_futures(self) -> list[asyncio.Future[RecordMetadata]]:
        futures = [
            record.future
            for tp in self._accumulator.partitions_with_data()
            for batch in self._accumulator.queued_batches(tp)
            for record in batch.records
        ]
        futures += [record.future for batch in self._in_flight for record in batch.records]
        return [f for f in futures if not f.done()]

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
        tasks = [t for t in (self._sender, self._refresh, *self._requests) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._sender = None
        self._refresh = None
        self._requests.clear()
        if self._idempotence is not None:
            await self._idempotence.close()
        if self._transactions is not None:
            await self._transactions.close()
