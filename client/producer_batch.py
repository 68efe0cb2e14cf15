"""A batch of the producer's records (`ProducerBatch`), the records waiting in it
(`PendingRecord`) and where each one landed (`RecordMetadata`): the data the accumulator
(accumulator.py) queues and the sender (sender.py) sends, settles and retries.

Record size: `estimate_record_bytes` counts the key, value and headers plus the largest varint
overheads of a v2 record (length 5, attributes 1, timestamp delta 10, offset delta 5, key and
value lengths 5 each, header count 5), over a 61-byte batch header, so a batch never exceeds
`batch.size` by more than one record's rounding. The same estimate is what buffer.memory
counts (client/buffer_pool.py): a batch gives its records' bytes back through `on_done` once
every future is resolved.

Per-record cost. One `PendingRecord` and one `RecordMetadata` exist per record sent, so both are
named tuples (built in a third of a frozen dataclass's time) and the hot paths build them with
`tuple.__new__` directly; a batch keeps its records flat (see `ProducerBatch`), and a
`RecordMetadata` holds only strings and ints, which the garbage collector stops tracking.

A batch belongs to one producer and is touched only from its event loop: no locks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Final, NamedTuple, overload

from wire.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE
from wire.topic import TopicPartition

BATCH_HEADER_BYTES = 61
RECORD_OVERHEAD_BYTES = 5 + 1 + 10 + 5 + 5 + 5 + 5
HEADER_OVERHEAD_BYTES = 5 + 5

Headers = tuple[tuple[str, bytes | None], ...]


class RecordMetadata(NamedTuple):
    """Where an acknowledged record landed. `offset` is -1 with acks=0 (nothing came back).

    A named tuple (immutable, compared by value) rather than a frozen dataclass: one is made
    per record, and a tuple of strings and ints is one the garbage collector stops tracking,
    where thousands of dataclass instances per batch were walked again and again.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int


_new_tuple: Final = tuple.__new__


_FIELDS: Final = 5  # a PendingRecord's, flat in a ProducerBatch


class PendingRecord(NamedTuple):
    """A record waiting in a batch. A named tuple rather than a frozen dataclass: one is made
    per `send()`, and a tuple is built in a third of the time."""

    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: Headers
    future: asyncio.Future[RecordMetadata]


def estimate_record_bytes(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    size = RECORD_OVERHEAD_BYTES
    if key is not None:
        size += len(key)
    if value is not None:
        size += len(value)
    for header_key, header_value in headers:
        size += HEADER_OVERHEAD_BYTES + len(header_key.encode("utf-8")) + len(header_value or b"")
    return size


class _Records(Sequence[PendingRecord]):
    """A batch's records as `PendingRecord`s, made when read (see `ProducerBatch`)."""

    __slots__ = ("_fields",)

    def __init__(self, fields: list[Any]) -> None:
        self._fields = fields

    def __len__(self) -> int:
        return len(self._fields) // _FIELDS

    @overload
    def __getitem__(self, index: int) -> PendingRecord: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[PendingRecord]: ...
    def __getitem__(self, index: int | slice) -> PendingRecord | Sequence[PendingRecord]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        start = index * _FIELDS
        return PendingRecord._make(self._fields[start : start + _FIELDS])

    def __iter__(self) -> Iterator[PendingRecord]:
        fields = iter(self._fields)
        return map(PendingRecord._make, zip(fields, fields, fields, fields, fields, strict=True))


class ProducerBatch:
    """Records of one partition that are sent, acknowledged or failed together.

    The records are kept as one flat list, five entries per record (a `PendingRecord`'s
    fields in order), and read as `PendingRecord`s through `records`: a record waiting in a
    batch is then no object of its own for the garbage collector to walk, only its future is,
    and with thousands of records waiting that walk was a third of the producer's time.
    """

    __slots__ = (
        "_fields",
        "attempts",
        "base_sequence",
        "created_ms",
        "encoded",
        "last_error",
        "node_id",
        "on_done",
        "order",
        "producer_epoch",
        "producer_id",
        "retry_at_ms",
        "size_bytes",
        "tp",
    )

    def __init__(
        self,
        tp: TopicPartition,
        created_ms: int,
        records: Iterable[PendingRecord] = (),
        *,
        order: int = 0,
        on_done: Callable[[ProducerBatch], None] | None = None,
    ) -> None:
        self.tp = tp
        self.created_ms = created_ms
        self._fields: list[Any] = []
        # The header and the records' estimates: more than the header once it holds a record.
        self.size_bytes = BATCH_HEADER_BYTES
        for record in records:
            self.add(record, estimate_record_bytes(record.key, record.value, record.headers))
        self.attempts = 0
        self.retry_at_ms: int | None = None
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE
        # The batch's bytes, built on first send and resent as they are on a retry (built
        # again only when an epoch bump rewrites the producer state).
        self.encoded: bytes | None = None
        # Creation order within its accumulator: retries go back into the queue by it.
        self.order = order
        # The broker the batch was last sent to (None before its first send).
        self.node_id: int | None = None
        # The last retriable error the batch met (a refusal, a lost connection, no leader to
        # send to), named when it runs out of delivery.timeout.ms. Set only on errors.
        self.last_error: BaseException | None = None
        # Called once, when every record's future is resolved (the accumulator's buffer
        # release).
        self.on_done = on_done

    def __repr__(self) -> str:
        return (
            f"ProducerBatch({self.tp}, {len(self)} records, order={self.order}, "
            f"attempts={self.attempts}, producer=({self.producer_id}, {self.producer_epoch}, "
            f"{self.base_sequence}))"
        )

    def __len__(self) -> int:
        """How many records the batch holds."""
        return len(self._fields) // _FIELDS

    @property
    def records(self) -> Sequence[PendingRecord]:
        return _Records(self._fields)

    def add(self, record: PendingRecord, size: int) -> None:
        """Append one record of `size` estimated bytes (`estimate_record_bytes`)."""
        self._fields += record
        self.size_bytes += size

    def columns(
        self,
    ) -> tuple[list[bytes | None], list[bytes | None], list[int], list[Headers]]:
        """The records' keys, values, timestamps and headers, each in record order."""
        fields = self._fields
        return fields[0::_FIELDS], fields[1::_FIELDS], fields[2::_FIELDS], fields[3::_FIELDS]

    @property
    def has_sequence(self) -> bool:
        return self.base_sequence != NO_SEQUENCE

    @property
    def records_bytes(self) -> int:
        """The records' estimated bytes (what buffer.memory counts)."""
        return self.size_bytes - BATCH_HEADER_BYTES

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

    def clear_producer_state(self) -> None:
        """Forget a sequence the broker never wrote (client/sender.py says when), so the batch
        takes its partition's next one when it is drained again."""
        self.producer_id = NO_PRODUCER_ID
        self.producer_epoch = NO_PRODUCER_EPOCH
        self.base_sequence = NO_SEQUENCE
        self.encoded = None

    def complete(self, base_offset: int, log_append_time_ms: int = -1) -> None:
        """Resolve every record's future; record i sits at `base_offset + i`."""
        topic, partition = self.tp.topic, self.tp.partition
        fields = self._fields
        stamps = fields[2::_FIELDS] if log_append_time_ms < 0 else None
        for index, future in enumerate(fields[4::_FIELDS]):
            if future.done():
                continue  # cancelled by its caller
            offset = -1 if base_offset < 0 else base_offset + index
            stamp = log_append_time_ms if stamps is None else stamps[index]
            # What RecordMetadata(...) runs, without its Python-level __new__: once per record.
            future.set_result(_new_tuple(RecordMetadata, (topic, partition, offset, stamp)))
        self._done()

    def fail(self, error: BaseException) -> None:
        for future in self._fields[4::_FIELDS]:
            if not future.done():
                future.set_exception(error)
        self._done()

    def futures(self) -> list[asyncio.Future[RecordMetadata]]:
        return self._fields[4::_FIELDS]

    def _done(self) -> None:
        on_done, self.on_done = self.on_done, None
        if on_done is not None:
            on_done(self)
