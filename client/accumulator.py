"""The producer's record accumulator: records wait here, per partition, until a batch is sent.

Each partition has a queue of open batches. `append()` adds a record to the last batch of its
partition, or starts a new batch when the record would push that batch past `batch.size` (a
record bigger than `batch.size` gets a batch of its own, as in Kafka). A partition is *ready*
to send when its first batch may go (see In flight) and

* its first batch is full (a later batch exists, or it reached `batch.size`), or
* its first batch has waited `linger.ms` since it was created, or
* a `flush()` is in progress, or the producer is closing, or
* its first batch is a retry whose backoff (`retry.backoff.ms`) elapsed.

In flight. `drain()` moves a partition's first batch to the partition's in-flight list, where it
stays until `settled()` (acknowledged or failed for good) or `reenqueue()` (to be sent again).
A partition holds at most `max_in_flight` batches in flight, and a retried batch goes out only
when nothing else of its partition is in flight. A retried batch goes back into the queue in
creation order (`ProducerBatch.order`): ahead of every batch created after it, behind the
retries created before it. So with `max_in_flight=1` (the producer's choice without idempotence)
records of a partition are appended in the order `send()` was called, across retries. With more
(an idempotent producer, up to 5: client/sender.py says when it uses them) a failure can leave
later batches of the partition written or not, and their sequence numbers sort it out: the
broker refuses a batch whose sequence does not follow the last one written, and answers a
resent one it already has (it remembers the last 5) with its original offsets. Kafka keeps the
same cap for the same reason.

Producer state: an idempotent producer stamps each batch with its producer id, epoch and base
sequence when the batch is first drained (see client/idempotence.py); the batch keeps them on
every retry, so the broker can recognise a resend. Batches of a non-idempotent producer keep
-1 in all three, as Kafka writes them.

Expiry: a batch that is not acknowledged within `delivery.timeout.ms` of its creation fails with
`DeliveryTimeoutError`, whether it is still queued or waiting for a retry; a partition with a
batch in flight waits for that batch's outcome first. The error names the last error the batch
met (`ProducerBatch.last_error`, which the sender sets), so a timeout says why.

Record size: batches fill by `estimate_record_bytes` (producer_batch.py), so a batch never
exceeds `batch.size` by more than one record's rounding; the batch types (`ProducerBatch`,
`PendingRecord`, `RecordMetadata`) live in producer_batch.py and are re-exported here.

The accumulator is owned by one producer and touched only from the event loop: no locks.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from client.errors import DeliveryTimeoutError  # the client's one type, re-exported
from client.producer_batch import (
    BATCH_HEADER_BYTES,
    HEADER_OVERHEAD_BYTES,
    RECORD_OVERHEAD_BYTES,
    Headers,
    PendingRecord,
    ProducerBatch,
    RecordMetadata,
    estimate_record_bytes,
)
from wire.topic import TopicPartition

# The batch types were defined here first: importers of client.accumulator keep working.
__all__ = [
    "BATCH_HEADER_BYTES",
    "HEADER_OVERHEAD_BYTES",
    "RECORD_OVERHEAD_BYTES",
    "DeliveryTimeoutError",
    "Headers",
    "PendingRecord",
    "ProducerBatch",
    "RecordAccumulator",
    "RecordMetadata",
    "estimate_record_bytes",
]


class RecordAccumulator:
    def __init__(
        self,
        *,
        batch_size: int,
        linger_ms: int,
        delivery_timeout_ms: int,
        max_in_flight: int = 1,
        on_batch_done: Callable[[ProducerBatch], None] | None = None,
    ) -> None:
        if batch_size <= 0 or linger_ms < 0 or delivery_timeout_ms <= 0 or max_in_flight <= 0:
            raise ValueError(
                f"bad accumulator settings: batch_size={batch_size} linger_ms={linger_ms} "
                f"delivery_timeout_ms={delivery_timeout_ms} max_in_flight={max_in_flight}"
            )
        self._batch_size = batch_size
        self._linger_ms = linger_ms
        self._delivery_timeout_ms = delivery_timeout_ms
        self._max_in_flight = max_in_flight
        self._on_batch_done = on_batch_done
        # A partition's queue is created once and never replaced: `_by_topic` holds the same
        # deques, indexed by partition number.
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._by_topic: dict[str, list[deque[ProducerBatch] | None]] = {}
        # Per partition, its batches in flight in the order they were drained (only partitions
        # with at least one).
        self._in_flight: dict[TopicPartition, list[ProducerBatch]] = {}
        self._orders = itertools.count()
        # Whether the last `append()` filled a batch (closed it, or brought it to batch.size),
        # and whether it started one: what the sender must hear of (a batch to send now, a
        # linger deadline to wait for); a record joining an open batch changes neither.
        self.filled = False
        self.started = False
        self._flushing = 0
        self._closing = False

    @property
    def max_in_flight(self) -> int:
        return self._max_in_flight

    def append(
        self,
        tp: TopicPartition,
        record: PendingRecord,
        now_ms: int,
        size: int | None = None,
    ) -> bool:
        """Queue `record` (`size`: its `estimate_record_bytes`, when the caller has it); True
        when the partition has a full batch (the sender should wake up now). `filled` and
        `started` tell whether this very append filled a batch or started one."""
        if size is None:
            size = estimate_record_bytes(record.key, record.value, record.headers)
        # By topic, then partition number: a str's hash is cached, a TopicPartition's is a
        # Python call, and this runs once per record.
        queues = self._by_topic.get(tp.topic)
        partition = tp.partition
        queue = queues[partition] if queues is not None and partition < len(queues) else None
        if queue is None:
            queue = self._add_queue(tp)
        last = queue[-1] if queue else None
        self.filled = self.started = False
        if last is None or last.attempts > 0:
            # A batch that was already sent once is closed: retrying must resend the same bytes.
            last = self._new_batch(tp, queue, now_ms)
        elif last.size_bytes > BATCH_HEADER_BYTES and last.size_bytes + size > self._batch_size:
            # Not empty, and the record does not fit: closed (reported as filled once: one at
            # batch.size was reported when it got there).
            self.filled = last.size_bytes < self._batch_size
            last = self._new_batch(tp, queue, now_ms)
        before = last.size_bytes
        last.add(record, size)
        if before < self._batch_size <= before + size:
            self.filled = True
        return len(queue) > 1 or before + size >= self._batch_size

    def _add_queue(self, tp: TopicPartition) -> deque[ProducerBatch]:
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        queues = self._by_topic.setdefault(tp.topic, [])
        if len(queues) <= tp.partition:
            queues.extend([None] * (tp.partition + 1 - len(queues)))
        queues[tp.partition] = queue
        return queue

    def _new_batch(
        self, tp: TopicPartition, queue: deque[ProducerBatch], now_ms: int
    ) -> ProducerBatch:
        self.started = True
        batch = ProducerBatch(
            tp, created_ms=now_ms, order=next(self._orders), on_done=self._on_batch_done
        )
        queue.append(batch)
        return batch

    def begin_flush(self) -> None:
        self._flushing += 1

    def end_flush(self) -> None:
        assert self._flushing > 0, "end_flush without begin_flush"
        self._flushing -= 1

    def close(self) -> None:
        """From now on every queued batch is ready: the producer drains before it stops."""
        self._closing = True

    def has_pending(self) -> bool:
        return any(self._queues.values())

    def partitions_with_data(self) -> list[TopicPartition]:
        return [tp for tp, queue in self._queues.items() if queue]

    def ready(self, now_ms: int) -> tuple[list[TopicPartition], int | None]:
        """Partitions whose first batch may be sent now, and the next time another may be.

        The second value is the earliest future monotonic ms at which a linger or retry
        backoff ends (None when nothing waits on time), so the sender can sleep until then.
        A partition waiting for an answer (its in-flight list is full, or its first batch is a
        retry while others are in flight) waits on no time: the answer wakes the sender.
        """
        ready: list[TopicPartition] = []
        next_ms: int | None = None
        in_flight = self._in_flight
        for tp, queue in self._queues.items():
            if not queue:
                continue
            head = queue[0]
            if tp in in_flight and not self._may_drain(in_flight[tp], head):
                continue
            if head.retry_at_ms is not None:
                due = head.retry_at_ms
            elif (
                len(queue) > 1
                or head.size_bytes >= self._batch_size
                or self._flushing
                or self._closing
            ):
                due = now_ms
            else:
                due = head.created_ms + self._linger_ms
            if due <= now_ms:
                ready.append(tp)
            elif next_ms is None or due < next_ms:
                next_ms = due
        return ready, next_ms

    def _may_drain(self, in_flight: list[ProducerBatch], head: ProducerBatch) -> bool:
        # A retry goes alone: what else of its partition was in flight has settled, so its
        # outcome (written, or refused by sequence) is known before anything follows it.
        return len(in_flight) < self._max_in_flight and head.attempts == 0

    def drain(self, partitions: Iterable[TopicPartition]) -> list[ProducerBatch]:
        """Take the first batch of each partition that may go (see `ready`) and count it in
        flight until `settled()` or `reenqueue()`."""
        drained = []
        for tp in partitions:
            queue = self._queues.get(tp)
            if not queue:
                continue
            in_flight = self._in_flight.get(tp)
            if in_flight is not None and not self._may_drain(in_flight, queue[0]):
                continue
            batch = queue.popleft()
            batch.attempts += 1
            batch.retry_at_ms = None
            if in_flight is None:
                self._in_flight[tp] = [batch]
            else:
                in_flight.append(batch)
            drained.append(batch)
        return drained

    def in_flight(self, tp: TopicPartition) -> Sequence[ProducerBatch]:
        return self._in_flight.get(tp, ())

    def settled(self, batch: ProducerBatch) -> None:
        """`batch` left flight for good (acknowledged or failed)."""
        in_flight = self._in_flight.get(batch.tp)
        if in_flight is None:
            return
        # Usually the first: answers come back in the order the batches were sent.
        for index, flying in enumerate(in_flight):
            if flying is batch:
                del in_flight[index]
                break
        if not in_flight:
            del self._in_flight[batch.tp]

    def unmute(self, tp: TopicPartition) -> None:
        """Every batch of `tp` in flight settled (with one in flight: the partition may send
        again)."""
        self._in_flight.pop(tp, None)

    def reenqueue(self, batch: ProducerBatch, retry_at_ms: int) -> None:
        """Put a failed batch back into its queue, by creation order (so ahead of every batch
        created after it), to be resent at `retry_at_ms`."""
        self.settled(batch)
        batch.retry_at_ms = retry_at_ms
        queue = self._queues.get(batch.tp)
        if queue is None:
            queue = self._add_queue(batch.tp)
        position = 0
        for queued in queue:
            if queued.order > batch.order:
                break
            position += 1
        queue.insert(position, batch)

    def has_earlier_unresolved(self, batch: ProducerBatch) -> bool:
        """Whether a batch of the same partition created before `batch` is still in flight or
        queued (to be resent): `batch`'s sequence then cannot have followed it yet."""
        for other in self._in_flight.get(batch.tp, ()):
            if other.order < batch.order:
                return True
        queue = self._queues.get(batch.tp)
        if not queue:
            return False
        return queue[0].order < batch.order

    def pop_unsent(self, tp: TopicPartition) -> ProducerBatch | None:
        """Remove and return `tp`'s first queued batch if it was never sent (it holds no
        sequence) and nothing of `tp` is in flight; else None."""
        queue = self._queues.get(tp)
        if not queue or queue[0].has_sequence or tp in self._in_flight:
            return None
        return queue.popleft()

    def deadline_ms(self, batch: ProducerBatch) -> int:
        return batch.created_ms + self._delivery_timeout_ms

    def expire(self, now_ms: int) -> list[ProducerBatch]:
        """Remove and return queued batches whose delivery timeout passed.

        Batches of a partition with a batch in flight are left alone: its outcome decides.
        """
        expired: list[ProducerBatch] = []
        for tp, queue in self._queues.items():
            if tp in self._in_flight:
                continue
            while queue and self.deadline_ms(queue[0]) <= now_ms:
                expired.append(queue.popleft())
        return expired

    def next_expiry_ms(self, *, actionable: bool = False) -> int | None:
        """The earliest deadline of a partition's first queued batch; with `actionable`, of
        those `expire()` may act on (a partition with a batch in flight waits for its answer,
        which wakes the sender, so sleeping until its past deadline would only spin)."""
        deadlines = [
            self.deadline_ms(queue[0])
            for tp, queue in self._queues.items()
            if queue and not (actionable and tp in self._in_flight)
        ]
        return min(deadlines, default=None)

    def abort_all(self, error: BaseException) -> int:
        """Fail every queued batch with `error`; returns how many records failed."""
        failed = 0
        for queue in self._queues.values():
            while queue:
                batch = queue.popleft()
                failed += len(batch)
                batch.fail(error)
        return failed

    def queued_batches(self, tp: TopicPartition) -> Sequence[ProducerBatch]:
        """A copy of `tp`'s queue (O(queue)); `head()` for the first one alone."""
        return tuple(self._queues.get(tp, ()))

    def head(self, tp: TopicPartition) -> ProducerBatch | None:
        queue = self._queues.get(tp)
        return queue[0] if queue else None

    def queued_resends(self, tp: TopicPartition) -> list[ProducerBatch]:
        """`tp`'s queued batches that were sent before: they lead the queue (creation order),
        and there are at most the in-flight window of them."""
        queue = self._queues.get(tp, ())
        return list(itertools.takewhile(lambda batch: batch.attempts > 0, queue))
