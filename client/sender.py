"""The producer's sender: one task that turns the accumulator's ready batches into Produce
requests and settles each batch by its answer (Kafka's `Sender`; the producer's public side is
client/producer.py). Long (~550 lines): the loop, the answers and the in-flight rules below
are one piece of state handled together, and read best as one story.

Loop. Each pass expires batches past delivery.timeout.ms, starts a metadata refresh an error
asked for, and (once an idempotent producer has its id) drains the ready partitions
(accumulator.py) that a transaction allows, grouped by their leader's node: one Produce request
per leader with one batch per partition, as many as fit max.request.size. It passes again at
once while that sent something (a partition may have more batches to put in flight), then
sleeps until the next linger deadline, retry backoff or expiry, or until `send()`, an answer or
a refresh wakes it. A batch's bytes are built once, by `wire.batch_builder.build_producer_batch`
(one pass, one CRC), when it is first sent; a retry resends them.

Answers. Per partition: NONE completes the batch's futures with `base_offset + i`; a retriable
error (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, a lost connection, ...)
puts the batch back into its partition's queue (by creation order) after retry.backoff.ms
(exponential, capped by retry.backoff.max.ms) and, when the error says the leader moved,
refreshes metadata first; anything else, or running out of delivery.timeout.ms, fails the
batch's futures. With acks=0 the broker sends no response: futures complete with offset -1 as
soon as the request was written. A batch keeps the last retriable error it met, or why its
partition has no leader to send to (`ProducerBatch.last_error`, set only on those error paths),
and its delivery-timeout error names it: "... last error: LEADER_NOT_AVAILABLE (...)".

In flight (max.in.flight.requests.per.connection, the client's setting, Kafka's default 5).
Requests to one broker share its connection, which keeps up to that many outstanding
(client/connection.py). Per partition:

* Without idempotence one batch is in flight at a time and a retried batch goes first, so a
  partition's records keep their `send()` order across retries. (Kafka's producer lets up to
  max.in.flight go and may then reorder on a retry; ketch keeps the order it always had.)
* With idempotence up to min(max.in.flight, 5) batches are in flight, sent in sequence order on
  the leader's one connection, which the broker appends in that order. The broker refuses a
  batch whose sequence does not follow the last one it wrote, and answers one it already has
  (it remembers 5 per producer) with the original offsets, so after any failure the partition's
  records still land once each and in order, as Kafka's idempotent producer guarantees. A
  partition goes past one batch in flight only when (a) the batches in flight went to the
  partition's current leader, (b) they carry the producer's current id and epoch, and (c) a
  batch of the partition was acknowledged under that epoch: before that the broker may hold no
  state for the producer and would accept any sequence, so a later batch could overtake a
  refused first one. A failed batch goes back into the queue by creation order, and a retried
  batch is sent only when nothing else of its partition is in flight (accumulator.py), so
  retries go one by one, oldest first.
* OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID for a batch while an earlier batch of its
  partition is unresolved (in flight, or queued to be resent) is that earlier batch's doing:
  the batch is resent after it, like a retriable error, as Kafka does. For a partition's first
  unresolved batch the error means the broker's sequence differs from ours: the idempotence
  manager bumps the epoch and rewrites the batch at sequence 0 (idempotence.py). The later
  batches of that partition still hold the old epoch's sequences; the broker wrote none of them
  (their sequences follow the refused one), so they give them up (`clear_producer_state`) when
  the rewritten batch is drained, and take the next ones under the new epoch.

Idempotence (enable.idempotence, on by default with acks=all; see ProducerConfig.idempotent).
The sender first gets a producer id and epoch with InitProducerId and drains nothing until it
has one; each batch takes its partition's next sequence when first drained and keeps it on
every retry, so a resend after a lost answer is recognised by the broker (answered NONE with the
original offsets) instead of being appended twice. INVALID_PRODUCER_EPOCH or PRODUCER_FENCED
fail every pending and later record. The bookkeeping is in idempotence.py.

Transactions (transactions.py). A partition's batches are drained only after AddPartitionsToTxn
added it, and carry the transactional attribute. While the transaction is abortable or being
aborted, batches never sent are failed with `TransactionAbortedError` and only batches already
sent (holding sequences) are sent again.

Owned by its producer, and touched only from the event loop (the sender task, the producer's
calls, and the request tasks, each between awaits): no locks.

Size: over the ~500-line guide, because a batch's lifecycle (drain, encode, produce, settle,
retry, expire) is one state machine and reads best in one place, as it did in producer.py; the
idempotent and transactional producers' own state stays in idempotence.py and transactions.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Sequence

from client.accumulator import ProducerBatch, RecordAccumulator, RecordMetadata
from client.client import Client
from client.config import ProducerConfig
from client.errors import (
    DeliveryTimeoutError,
    error_reason,
    invalidates_metadata,
    is_retriable,
)
from client.idempotence import (
    FENCING_ERRORS,
    SEQUENCE_ERRORS,
    IdempotenceManager,
    ProducerIdAndEpoch,
)
from client.metadata import NO_LEADER, ClusterView
from client.transactions import TransactionManager
from runtime.clock import NS_PER_MS
from runtime.net.backoff import ExponentialBackoff
from wire.batch_builder import build_producer_batch
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

# The broker remembers the last 5 batches of each producer per partition (Kafka's
# NUM_BATCHES_TO_RETAIN), so more in flight could make a resend look out of order.
MAX_IDEMPOTENT_IN_FLIGHT = 5


def partition_window(max_in_flight_per_connection: int, *, idempotent: bool) -> int:
    """How many batches of one partition may be in flight (see the module docstring)."""
    if not idempotent:
        return 1
    return max(1, min(max_in_flight_per_connection, MAX_IDEMPOTENT_IN_FLIGHT))


class Sender:
    def __init__(
        self,
        client: Client,
        accumulator: RecordAccumulator,
        *,
        config: ProducerConfig,
        compression: CompressionType,
        rng: random.Random,
        retry_backoff: ExponentialBackoff,
        wakeup: asyncio.Event,
        idempotence: IdempotenceManager | None,
        transactions: TransactionManager | None,
    ) -> None:
        self._client = client
        self._clock = client.clock
        self._accumulator = accumulator
        self._config = config
        self._compression = compression
        self._rng = rng
        self._retry_backoff = retry_backoff
        self._wakeup = wakeup
        self._idempotence = idempotence
        self._transactions = transactions
        # Insertion-ordered (dicts as sets): the order they are closed or woken in is part of a
        # run, and a seeded simulation must replay it (a set of objects orders them by address).
        self.in_flight: dict[ProducerBatch, None] = {}
        self._requests: dict[asyncio.Task[None], None] = {}
        self._refresh: asyncio.Task[None] | None = None
        self._task: asyncio.Task[None] | None = None
        # Per partition, the producer id and epoch of its last acknowledged batch (condition
        # (c) of the module docstring).
        self._acked: dict[TopicPartition, ProducerIdAndEpoch] = {}
        # Set by the producer once close() stops waiting: no more retries.
        self.closed = False
        # Why the last metadata refresh failed (None once one succeeds): the reason a batch
        # that finds no leader gives, since the cached metadata is then stale.
        self._refresh_error: Exception | None = None

    def wake(self) -> None:
        """Something to send: start the sender task if need be, and wake it."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="producer sender")
        self._wakeup.set()

    # ---------------------------------------------------------------------------------------
    # The loop

    def _now_ms(self) -> int:
        return self._clock.monotonic_ms()

    async def _run(self) -> None:
        while not self.closed:
            now_ms = self._now_ms()
            self._expire(now_ms)
            if self._client.metadata.update_requested():
                # An error said a leader moved; the refresh runs while the batch backs off.
                self._start_refresh()
            if self._idempotence is not None and not self._idempotence.can_send():
                next_ms = self._wait_for_producer_id(self._idempotence, now_ms)
            else:
                next_ms = self._send_ready(now_ms)
            expiry_ms = self._accumulator.next_expiry_ms(actionable=True)
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
        """Dispatch the ready partitions (those a transaction allows) until nothing more may
        go; returns when to look again (None: when woken)."""
        transactions = self._transactions
        sent_only = False
        if transactions is not None:
            if transactions.aborting_batches:
                self._abort_unsent(transactions.abort_error())
                sent_only = True
            else:
                transactions.poll_add_partitions()
        # Each round puts at most one more batch per partition in flight, so the windows
        # bound the rounds.
        while True:
            ready, next_ms = self._accumulator.ready(now_ms)
            if transactions is not None:
                ready = [tp for tp in ready if self._may_send(transactions, tp, sent_only)]
            sent, leaderless = self._dispatch(ready)
            if leaderless:
                # Re-check after the metadata refresh (which wakes us) or after a backoff.
                retry_ms = now_ms + self._config.retry_backoff_ms
                return retry_ms if next_ms is None else min(next_ms, retry_ms)
            if not sent:
                return next_ms

    def _may_send(
        self, transactions: TransactionManager, tp: TopicPartition, sent_only: bool
    ) -> bool:
        if sent_only:
            # A batch that was sent before holds sequences the broker may have written.
            head = self._accumulator.head(tp)
            return head is not None and head.has_sequence
        return transactions.is_partition_added(tp)

    def _abort_unsent(self, error: Exception) -> None:
        """Fail every queued batch that was never sent (it holds no sequence yet); a retried
        one at a partition's head, or one in flight, keeps the rest of its partition queued."""
        for tp in self._accumulator.partitions_with_data():
            while (batch := self._accumulator.pop_unsent(tp)) is not None:
                batch.fail(error)

    def _expire(self, now_ms: int) -> None:
        idempotence = self._idempotence
        # A partition's batches met the same trouble: one that never reached the queue's
        # head (where errors are noted) gives the reason of the one before it.
        last_errors: dict[TopicPartition, BaseException] = {}
        for batch in self._accumulator.expire(now_ms):
            last = batch.last_error or last_errors.get(batch.tp)
            if last is not None:
                last_errors[batch.tp] = last
            error: Exception = self._timeout_error(batch, last)
            if self._transactions is not None:
                self._transactions.batch_failed(batch.has_sequence, error)
            elif idempotence is not None:
                idempotence.batch_failed(batch, rejected=False)
                if not idempotence.producer_id_and_epoch.is_valid:
                    delivery_timeout_ms = self._config.delivery_timeout_ms
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

    # ---------------------------------------------------------------------------------------
    # Requests

    def _dispatch(self, ready: Sequence[TopicPartition]) -> tuple[bool, bool]:
        """Send ready partitions to their leaders; (whether a request left, whether some
        partition has no known leader)."""
        view = self._client.metadata.view
        by_leader: dict[int, list[TopicPartition]] = {}
        leaderless = False
        for tp in ready:
            leader = view.leader(tp)
            if leader is None:
                leaderless = True
                self._note_no_leader(tp, view)
                continue
            if self._accumulator.in_flight(tp) and not self._may_pipeline(tp, leader.node_id):
                continue
            by_leader.setdefault(leader.node_id, []).append(tp)
        if leaderless:
            self._client.metadata.request_update()
            self._start_refresh()
        sent = False
        for node_id, partitions in by_leader.items():
            batches = self._take_batches(node_id, partitions)
            if batches:
                sent = True
                task = asyncio.create_task(
                    self._produce(node_id, batches), name=f"produce to {node_id}"
                )
                self._requests[task] = None
                task.add_done_callback(self._request_done)
        return sent, leaderless

    def _note_no_leader(self, tp: TopicPartition, view: ClusterView) -> None:
        """Note on `tp`'s first batch why it cannot go now (an error path: it waits)."""
        head = self._accumulator.head(tp)
        if head is None:
            return
        info = view.partition(tp)
        if self._refresh_error is not None:
            head.last_error = self._refresh_error  # the metadata is stale: this is the cause
        elif info is None:
            head.last_error = KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"partition {tp} is not in the metadata"
            )
        elif info.leader_id == NO_LEADER:
            code = info.error or ErrorCode.LEADER_NOT_AVAILABLE
            head.last_error = KafkaError(code, f"partition {tp} has no leader")
        else:
            head.last_error = KafkaError(
                ErrorCode.LEADER_NOT_AVAILABLE,
                f"the leader of {tp}, broker {info.leader_id}, is not among the live brokers",
            )

    def _may_pipeline(self, tp: TopicPartition, leader: int) -> bool:
        """Whether a fresh batch may follow `tp`'s batches in flight (conditions (a) to (c) of
        the module docstring; the accumulator has checked the window)."""
        idempotence = self._idempotence
        if idempotence is None:
            return False  # one in flight without idempotence (the window says so too)
        current = idempotence.producer_id_and_epoch
        if self._acked.get(tp) != current:
            return False
        for batch in self._accumulator.in_flight(tp):
            if batch.node_id != leader:
                return False
            if (batch.producer_id, batch.producer_epoch) != (current.producer_id, current.epoch):
                return False
        return True

    def _take_batches(
        self, node_id: int, partitions: Sequence[TopicPartition]
    ) -> list[ProducerBatch]:
        """Drain one batch per partition, as many as fit max.request.size (at least one)."""
        taken: list[ProducerBatch] = []
        total = 0
        for tp in partitions:
            head = self._accumulator.head(tp)
            if head is None:
                continue
            if taken and total + head.size_bytes > self._config.max_request_size:
                break  # the rest waits for the next request
            drained = self._accumulator.drain([tp])
            if not drained:
                continue
            (batch,) = drained
            if self._idempotence is not None:
                self._idempotence.set_producer_state(batch)
                self._drop_stale_sequences(batch)
            batch.node_id = node_id
            total += batch.size_bytes
            taken.append(batch)
            self.in_flight[batch] = None
        return taken

    def _drop_stale_sequences(self, head: ProducerBatch) -> None:
        """`head`, just drained, goes out again with new producer state (a rewrite: it was
        sent before, and its bytes are gone): the batches queued behind it that hold an older
        epoch's sequences were not written (see the module docstring) and take new ones when
        drained; sent after `head`, the broker would refuse their old epoch."""
        if self._transactions is not None or head.attempts == 1 or head.encoded is not None:
            return  # a first send, or a resend of the same bytes (a transaction never rewrites)
        current = (head.producer_id, head.producer_epoch)
        for later in self._accumulator.queued_resends(head.tp):
            if later.has_sequence and (later.producer_id, later.producer_epoch) != current:
                later.clear_producer_state()

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
                self._refresh_error = None
            except Exception as exc:  # retried on the next pass of the sender
                _log.debug("metadata refresh for the producer failed: %s", exc)
                self._refresh_error = exc
            finally:
                self._refresh = None
                self._wakeup.set()

        self._refresh = asyncio.create_task(refresh(), name="producer metadata refresh")

    def _encode(self, batch: ProducerBatch) -> bytes:
        if batch.encoded is None:
            keys, values, timestamps, headers = batch.columns()
            batch.encoded = build_producer_batch(
                keys,
                values,
                timestamps,
                headers,
                producer_id=batch.producer_id,
                producer_epoch=batch.producer_epoch,
                base_sequence=batch.base_sequence,
                is_transactional=self._transactions is not None,
                compression=self._compression,
            )
        return batch.encoded

    async def _produce(self, node_id: int, batches: list[ProducerBatch]) -> None:
        by_topic: dict[str, list[PartitionProduceData]] = {}
        for batch in batches:
            data = PartitionProduceData(index=batch.tp.partition, records=self._encode(batch))
            by_topic.setdefault(batch.tp.topic, []).append(data)
        config = self._config
        request = ProduceRequest(
            transactional_id=config.transactional_id,
            acks=config.acks,
            timeout_ms=config.request_timeout_ms,
            topic_data=[TopicProduceData(name=t, partition_data=p) for t, p in by_topic.items()],
        )
        try:
            if config.acks == 0:
                await self._client.send_only(node_id, request)
                for batch in batches:
                    self._settle(batch, None)
                return
            response = await self._client.send_expect(
                node_id, request, ProduceResponse, timeout_ms=config.request_timeout_ms
            )
        except Exception as exc:
            for batch in batches:
                self._settle(batch, exc)
            return
        self._handle_response(response, batches)

    def _handle_response(self, response: ProduceResponse, batches: list[ProducerBatch]) -> None:
        answers: dict[tuple[str, int], PartitionProduceResponse] = {}
        for topic in response.responses:
            for part in topic.partition_responses:
                answers[(topic.name, part.index)] = part
        for batch in batches:
            answer = answers.get((batch.tp.topic, batch.tp.partition))
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

    # ---------------------------------------------------------------------------------------
    # Settling a batch

    def _settle(
        self,
        batch: ProducerBatch,
        error: BaseException | None,
        base_offset: int = -1,
        log_append_time_ms: int = -1,
    ) -> None:
        self.in_flight.pop(batch, None)
        if error is None:
            self._accumulator.settled(batch)
            if batch.has_sequence:
                self._acked[batch.tp] = ProducerIdAndEpoch(batch.producer_id, batch.producer_epoch)
            batch.complete(base_offset, log_append_time_ms)
            return
        if self._idempotence is not None and self._settle_idempotent(batch, error):
            return
        now_ms = self._clock.monotonic_ms()
        delay_ms = self._retry_backoff.delay_ms(batch.attempts - 1, self._rng)
        deadline_ms = self._accumulator.deadline_ms(batch)
        if is_retriable(error) and not self.closed and now_ms + delay_ms < deadline_ms:
            if invalidates_metadata(error):
                self._client.metadata.request_update()
            _log.debug("retrying %s after %s (attempt %d)", batch.tp, error, batch.attempts)
            batch.last_error = error
            self._accumulator.reenqueue(batch, now_ms + round(delay_ms))
            return
        rejected = isinstance(error, KafkaError) and not error.retriable
        self._fail(batch, error, rejected=rejected, timed_out=is_retriable(error))

    def _fail(
        self, batch: ProducerBatch, error: BaseException, *, rejected: bool, timed_out: bool
    ) -> None:
        """`batch` failed for good: `rejected` when the broker refused it (it was not
        written), `timed_out` when it ran out of delivery.timeout.ms retrying `error`."""
        if self._transactions is not None:
            self._transactions.batch_failed(batch.has_sequence, error)
        elif self._idempotence is not None:
            self._idempotence.batch_failed(batch, rejected=rejected)
        if timed_out:
            error = self._timeout_error(batch, error)
        self._accumulator.settled(batch)
        batch.fail(error)

    def _timeout_error(
        self, batch: ProducerBatch, last: BaseException | None
    ) -> DeliveryTimeoutError:
        """`batch` ran out of delivery.timeout.ms: the error names `last`, the last error it
        met, and has it as its cause."""
        reason = "" if last is None else f"; last error: {error_reason(last)}"
        # A batch that never found a leader to go to was never sent: "0 attempt(s)" read oddly.
        tries = f"{batch.attempts} attempt(s)" if batch.attempts else "never sent"
        error = DeliveryTimeoutError(
            f"{len(batch)} record(s) for {batch.tp} not acknowledged within delivery.timeout.ms "
            f"({self._config.delivery_timeout_ms} ms, {tries}){reason}",
            topic=batch.tp.topic,
        )
        error.__cause__ = last
        return error

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
            self._accumulator.settled(batch)
            batch.fail(idempotence.fatal_error)
            return True
        if code not in SEQUENCE_ERRORS:
            return False
        now_ms = self._clock.monotonic_ms()
        delay_ms = self._retry_backoff.delay_ms(batch.attempts - 1, self._rng)
        out_of_time = self.closed or now_ms + delay_ms >= self._accumulator.deadline_ms(batch)
        if self._accumulator.has_earlier_unresolved(batch):
            # An earlier batch of the partition failed or is still out: this one's sequence
            # could not follow it yet. Resent after it; its outcome is still unknown if time
            # runs out (the broker wrote nothing of it so far, but it may have the earlier one).
            if out_of_time:
                self._fail(batch, error, rejected=False, timed_out=True)
            else:
                _log.debug("%s for %s behind an unresolved batch: resending", error, batch.tp)
                self._accumulator.reenqueue(batch, now_ms + round(delay_ms))
            return True
        if self._transactions is not None or out_of_time:
            # In a transaction a sequence error fails the batch, making the transaction
            # abortable; its abort bumps the epoch (transactions.py). Out of time it fails as
            # a non-retriable error.
            return False
        _log.debug("%s for %s: bumping the epoch, then resending", error, batch.tp)
        idempotence.handle_sequence_error(batch)
        self._accumulator.reenqueue(batch, now_ms + round(delay_ms))
        return True

    # ---------------------------------------------------------------------------------------
    # Shutdown

    def pending_futures(self) -> list[asyncio.Future[RecordMetadata]]:
        futures = [
            future
            for tp in self._accumulator.partitions_with_data()
            for batch in self._accumulator.queued_batches(tp)
            for future in batch.futures()
        ]
        futures += [future for batch in self.in_flight for future in batch.futures()]
        return [f for f in futures if not f.done()]

    def fail_in_flight(self, error: BaseException) -> None:
        for batch in list(self.in_flight):
            self._accumulator.settled(batch)
            batch.fail(error)
        self.in_flight.clear()

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._refresh, *self._requests) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None
        self._refresh = None
        self._requests.clear()
