"""The producer's record accumulator: records wait here, per partition, until a batch is sent.

Each partition has a queue of open batches. `append()` adds a record to the last batch of its
partition, or starts a new batch when the record would push that batch past `batch.size` (a
record bigger than `batch.size` gets a batch of its own, as in Kafka). A partition is *ready*
to send when

* its first batch is full (a later batch exists, or it reached `batch.size`), or
* its first batch has waited `linger.ms` since it was created, or
* a `flush()` is in progress, or the producer is closing, or
* its first batch is a retry whose backoff (`retry.backoff.ms`) elapsed.

Order: at most one batch per partition is in flight (the partition is *muted* until its
response arrives), and a retried batch goes back to the front of its queue, so records of a
partition are appended in the order `send()` was called even across retries — what Kafka gets
with `max.in.flight.requests.per.connection=1` without idempotence. Different partitions still
travel together in one request and requests to different brokers overlap.

Producer state: an idempotent producer stamps each batch with its producer id, epoch and base
sequence when the batch is first drained (see client/idempotence.py); the batch keeps them on
every retry, so the broker can recognise a resend. Batches of a non-idempotent producer keep
-1 in all three, as Kafka writes them.

Expiry: a batch that is not acknowledged within `delivery.timeout.ms` of its creation fails with
`DeliveryTimeoutError`, whether it is still queued or waiting for a retry.

Record size: the estimate counts the key, value and headers plus the largest varint overheads of
a v2 record (length 5, attributes 1, timestamp delta 10, offset delta 5, key and value lengths
5 each, header count 5), over a 61-byte batch header, so a batch never exceeds `batch.size`
by more than one record's rounding.

The accumulator is owned by one producer and touched only from the event loop: no locks.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from wire.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from wire.topic import TopicPartition

BATCH_HEADER_BYTES = 61
RECORD_OVERHEAD_BYTES = 5 + 1 + 10 + 5 + 5 + 5 + 5
HEADER_OVERHEAD_BYTES = 5 + 5

Headers = tuple[tuple[str, bytes | None], ...]


class DeliveryTimeoutError(TimeoutError):
    """A record was not acknowledged within delivery.timeout.ms."""


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record landed. `offset` is -1 with acks=0 (nothing came back)."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class PendingRecord:
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: Headers
    future: asyncio.Future[RecordMetadata]


def estimate_record_bytes(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    size = RECORD_OVERHEAD_BYTES + len(key or b"") + len(value or b"")
    for header_key, header_value in headers:
        size += HEADER_OVERHEAD_BYTES + len(header_key.encode("utf-8")) + len(header_value or b"")
    return size


@dataclass(slots=True, eq=False)
class ProducerBatch:
    """Records of one partition that are sent, acknowledged or failed together."""

    tp: TopicPartition
    created_ms: int
    records: list[PendingRecord] = field(default_factory=list)
    size_bytes: int = BATCH_HEADER_BYTES
    attempts: int = 0
    retry_at_ms: int | None = None
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    base_sequence: int = NO_SEQUENCE
    # The batch's bytes, built on first send and resent as they are on a retry (built again
    # only when an epoch bump rewrites the producer state).
    encoded: bytes | None = None

    @property
    def has_sequence(self) -> bool:
        return self.base_sequence != NO_SEQUENCE

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int) -> None:
        """Stamp the idempotent producer's state (on first drain, or rewritten after an epoch
        bump); the batch's bytes must be built again afterwards."""
        assert producer_id >= 0, producer_id
        assert producer_epoch >= 0, producer_epoch
        assert base_sequence >= 0, base_sequence
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.encoded = None

    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> None:
        """Resolve every record's future; record i sits at `base_offset + i`."""
        for index, record in enumerate(self.records):
            if not record.future.done():
                offset = -1 if base_offset < 0 else base_offset + index
                stamp = log_append_time_ms if log_append_time_ms >= 0 else record.timestamp_ms
                meta = RecordMetadata(self.tp.topic, self.tp.partition, offset, stamp)
                record.future.set_result(meta)

    def fail(self, error: BaseException) -> None:
        for record in self.records:
            if not record.future.done():
                record.future.set_exception(error)


class RecordAccumulator:
    def __init__(self, *, batch_size: int, linger_ms: int, delivery_timeout_ms: int) -> None:
        if batch_size <= 0 or linger_ms < 0 or delivery_timeout_ms <= 0:
            raise ValueError(
                f"bad accumulator settings: batch_size={batch_size} linger_ms={linger_ms} "
                f"delivery_timeout_ms={delivery_timeout_ms}"
            )
        self._batch_size = batch_size
        self._linger_ms = linger_ms
        self._delivery_timeout_ms = delivery_timeout_ms
        self._queues: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._muted: set[TopicPartition] = set()
        self._flushing = 0
        self._closing = False

    def append(
        self,
        tp: TopicPartition,
        record: PendingRecord,
        now_ms: int,
    ) -> bool:
        """Queue `record`; True when this filled a batch (the sender should wake up now)."""
        size = estimate_record_bytes(record.key, record.value, record.headers)
        queue = self._queues.setdefault(tp, deque())
        last = queue[-1] if queue else None
        if (
            last is None
            or last.retry_at_ms is not None
            or last.attempts > 0
            or (last.records and last.size_bytes + size > self._batch_size)
        ):
            # A batch that was already sent once is closed: retrying must resend the same bytes.
            last = ProducerBatch(tp, created_ms=now_ms)
            queue.append(last)
        last.records.append(record)
        last.size_bytes += size
        return len(queue) > 1 or last.size_bytes >= self._batch_size

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
        """
        ready: list[TopicPartition] = []
        next_ms: int | None = None
        for tp, queue in self._queues.items():
            if not queue or tp in self._muted:
                continue
            head = queue[0]
            if head.retry_at_ms is not None:
                due = head.retry_at_ms
            elif self._is_full(queue) or self._flushing or self._closing:
                due = now_ms
            else:
                due = head.created_ms + self._linger_ms
            if due <= now_ms:
                ready.append(tp)
            elif next_ms is None or due < next_ms:
                next_ms = due
        return ready, next_ms

    def _is_full(self, queue: deque[ProducerBatch]) -> bool:
        return len(queue) > 1 or queue[0].size_bytes >= self._batch_size

    def drain(self, partitions: Iterable[TopicPartition]) -> list[ProducerBatch]:
        """Take the first batch of each partition and mute the partition until `unmute()`."""
        drained = []
        for tp in partitions:
            queue = self._queues.get(tp)
            if not queue or tp in self._muted:
                continue
            batch = queue.popleft()
            batch.attempts += 1
            batch.retry_at_ms = None
            self._muted.add(tp)
            drained.append(batch)
        return drained

    def unmute(self, tp: TopicPartition) -> None:
        self._muted.discard(tp)

    def reenqueue(self, batch: ProducerBatch, retry_at_ms: int) -> None:
        """Put a failed batch back at the front of its queue, to be resent at `retry_at_ms`."""
        batch.retry_at_ms = retry_at_ms
        self._queues.setdefault(batch.tp, deque()).appendleft(batch)
        self._muted.discard(batch.tp)

    def deadline_ms(self, batch: ProducerBatch) -> int:
        return batch.created_ms + self._delivery_timeout_ms

    def expire(self, now_ms: int) -> list[ProducerBatch]:
        """Remove and return queued batches whose delivery timeout passed.

        Batches of a muted partition are left alone: one is in flight and its outcome decides.
        """
        expired: list[ProducerBatch] = []
        for tp, queue in self._queues.items():
            if tp in self._muted:
                continue
            while queue and self.deadline_ms(queue[0]) <= now_ms:
                expired.append(queue.popleft())
        return expired

    def next_expiry_ms(self) -> int | None:
        deadlines = [self.deadline_ms(q[0]) for q in self._queues.values() if q]
        return min(deadlines, default=None)

    def abort_all(self, error: BaseException) -> int:
        """Fail every queued batch with `error`; returns how many records failed."""
        failed = 0
        for queue in self._queues.values():
            while queue:
                batch = queue.popleft()
                failed += len(batch.records)
                batch.fail(error)
        return failed

    def queued_batches(self, tp: TopicPartition) -> Sequence[ProducerBatch]:
        return tuple(self._queues.get(tp, ()))
