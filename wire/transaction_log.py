"""The records of `__transaction_state`, in Kafka's own format, sans-IO.

The transaction coordinator keeps one record per transactional id in the compacted internal
topic `__transaction_state`: the key names the id, the value is its latest state (Kafka's
TransactionLogKey/TransactionLogValue), and a null value (a tombstone) deletes the id once it has
expired. ketch writes Kafka's format, so Kafka's tools can read ketch's transaction log and ketch
can load Kafka's:

    key      int16 version (0), transactional_id string
    value    int16 version, then
             v0  producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
                 transaction_status int8, transaction_partitions array? of
                     {topic string, partition_ids array of int32},
                 transaction_last_update_timestamp_ms int64,
                 transaction_start_timestamp_ms int64
             v1  the same fields in the flexible encoding (compact strings and arrays: unsigned
                 varint length + 1; a tag buffer after each partitions entry and at the end),
                 and the tagged fields 0 previous_producer_id int64 (default -1),
                 1 next_producer_id int64 (default -1), 2 client_transaction_version int16
                 (default 0)

Strings are int16-length UTF-8, arrays int32-counted (-1: null). The partitions array is
nullable: Kafka writes null for an Empty transaction, and so does `TransactionLogValue` with
`transaction_partitions=None`. ketch writes value version 0, as Kafka 3.x does; version 1 (Kafka
4's, for KIP-890's transaction version 2) is decoded, unknown tags skipped, and encoding a value
whose v1-only tagged fields are set is refused rather than silently dropping them. Kafka 3.x never
writes the states Dead and PrepareEpochFence, but every status byte of Kafka's TransactionState
decodes.

A transactional id belongs to partition `(hash & 0x7fffffff) % partitions` of the topic, with
Java's String.hashCode (Kafka's `Utils.abs(transactionalId.hashCode) % numPartitions`), the same
rule as a group's partition of `__consumer_offsets`, so ketch and Kafka place an id alike.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from wire.batch_builder import build_batch
from wire.field_reader import FieldReader
from wire.group_records import java_string_hashcode
from wire.record_reader import iter_records
from wire.records import NO_PRODUCER_ID, iter_batches

TRANSACTION_STATE_TOPIC: Final = "__transaction_state"

KEY_VERSION: Final = 0
VALUE_VERSION: Final = 0  # what ketch writes
FLEXIBLE_VALUE_VERSION: Final = 1  # read only
NO_CLIENT_TRANSACTION_VERSION: Final = 0

_I8: Final = struct.Struct(">b")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")

# The tags of v1's tagged fields (Kafka 4.0's schema); other tags are skipped, as Kafka does.
_TAG_PREVIOUS_PRODUCER_ID: Final = 0
_TAG_NEXT_PRODUCER_ID: Final = 1
_TAG_CLIENT_TRANSACTION_VERSION: Final = 2


class TransactionLogError(ValueError):
    """A record of the transaction log that does not decode."""


class TransactionState(enum.IntEnum):
    """A transaction's state; the value is Kafka's TransactionState id, the status byte of the
    log value. `kafka_name` is the name Kafka shows (DescribeTransactions, ListTransactions)."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(word.capitalize() for word in self.name.split("_"))


# -- the partition of a transactional id -----------------------------------------------------------


def partition_for(transactional_id: str, partitions: int) -> int:
    """The `__transaction_state` partition that owns a transactional id (Kafka's
    `Utils.abs(hashCode) % transaction.state.log.num.partitions`, where that abs is
    `hash & 0x7fffffff`)."""
    if partitions < 1:
        raise ValueError(f"the transaction log needs at least one partition, not {partitions}")
    return (java_string_hashcode(transactional_id) & 0x7FFFFFFF) % partitions


# -- the value -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TxnPartitions:
    """The partitions of one topic in a transaction (Kafka's PartitionsSchema)."""

    topic: str
    partition_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: TransactionState
    transaction_partitions: tuple[TxnPartitions, ...] | None  # None: Kafka's null (Empty)
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    # Tagged fields of version 1 only; the defaults are the schema's.
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    client_transaction_version: int = NO_CLIENT_TRANSACTION_VERSION


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def pack(self, fmt: struct.Struct, value: int, what: str) -> None:
        try:
            self.out += fmt.pack(value)
        except struct.error:
            raise ValueError(f"{what} {value} does not fit {fmt.size * 8} bits") from None

    def string(self, value: str, what: str) -> None:
        data = value.encode()
        if len(data) > 0x7FFF:
            raise ValueError(f"{what} of {len(data)} bytes is too long for an int16 length")
        self.pack(_I16, len(data), what)
        self.out += data


class _Reader(FieldReader):
    error = TransactionLogError

    def length(self, *, flexible: bool, wide: bool) -> int:
        """A string's (int16) or an array's (int32) length; -1 is null. Flexible: varint + 1."""
        if flexible:
            return self.uvarint() - 1
        return self.i32() if wide else self.i16()

    def count(self, field: str, *, flexible: bool) -> int:
        size = self.length(flexible=flexible, wide=True)
        if size < 0:
            raise TransactionLogError(f"{self.what}: {field} is null, which it may not be")
        # Every element takes at least one byte: a count past the end is corrupt, and checking
        # it here keeps a bad count from building a huge list.
        if size > len(self.data) - self.pos:
            raise TransactionLogError(f"{self.what}: {field} count {size} passes the end")
        return size

    def text(self, field: str, *, flexible: bool) -> str:
        size = self.length(flexible=flexible, wide=False)
        if size < 0:
            raise TransactionLogError(f"{self.what}: {field} is null, which it may not be")
        try:
            return bytes(self._take(size)).decode()
        except UnicodeDecodeError as exc:
            raise TransactionLogError(f"{self.what}: {field} is not UTF-8 ({exc})") from None

    def tags(self) -> dict[int, memoryview]:
        fields: dict[int, memoryview] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            if tag in fields:
                raise TransactionLogError(f"{self.what}: tag {tag} appears twice")
            fields[tag] = self._take(self.uvarint())
        return fields


# -- keys ------------------------------------------------------------------------------------------


def encode_key(transactional_id: str) -> bytes:
    writer = _Writer()
    writer.pack(_I16, KEY_VERSION, "key version")
    writer.string(transactional_id, "transactional id")
    return bytes(writer.out)


def decode_key(data: bytes) -> str:
    """The transactional id of a key; TransactionLogError for an unknown version or bad bytes."""
    reader = _Reader(data, "transaction log key")
    version = reader.i16()
    if version != KEY_VERSION:
        raise TransactionLogError(f"transaction log key version {version} is unknown")
    transactional_id = reader.text("transactional_id", flexible=False)
    reader.end()
    return transactional_id


# -- values ----------------------------------------------------------------------------------------


def encode_value(value: TransactionLogValue) -> bytes:
    """Version 0, as Kafka 3.x writes it."""
    if (
        value.previous_producer_id != NO_PRODUCER_ID
        or value.next_producer_id != NO_PRODUCER_ID
        or value.client_transaction_version != NO_CLIENT_TRANSACTION_VERSION
    ):
        raise ValueError(f"value version 0 has no place for v1's tagged fields: {value}")
    writer = _Writer()
    writer.pack(_I16, VALUE_VERSION, "value version")
    writer.pack(_I64, value.producer_id, "producer_id")
    writer.pack(_I16, value.producer_epoch, "producer_epoch")
    writer.pack(_I32, value.transaction_timeout_ms, "transaction_timeout_ms")
    writer.pack(_I8, value.transaction_status, "transaction_status")
    if value.transaction_partitions is None:
        writer.pack(_I32, -1, "partitions count")
    else:
        writer.pack(_I32, len(value.transaction_partitions), "partitions count")
        for entry in value.transaction_partitions:
            writer.string(entry.topic, "topic")
            writer.pack(_I32, len(entry.partition_ids), "partition ids count")
            for partition in entry.partition_ids:
                writer.pack(_I32, partition, "partition id")
    writer.pack(_I64, value.transaction_last_update_timestamp_ms, "last update timestamp")
    writer.pack(_I64, value.transaction_start_timestamp_ms, "start timestamp")
    return bytes(writer.out)


def decode_value(data: bytes | None) -> TransactionLogValue | None:
    """The value of a record; None for a tombstone. TransactionLogError for an unknown version
    or malformed bytes."""
    if data is None:
        return None
    reader = _Reader(data, "transaction log value")
    version = reader.i16()
    if version not in (VALUE_VERSION, FLEXIBLE_VALUE_VERSION):
        raise TransactionLogError(f"transaction log value version {version} is unknown")
    flexible = version == FLEXIBLE_VALUE_VERSION
    producer_id, producer_epoch, timeout_ms = reader.i64(), reader.i16(), reader.i32()
    status = reader.i8()
    try:
        state = TransactionState(status)
    except ValueError:
        raise TransactionLogError(f"transaction status {status} is unknown") from None
    partitions = _read_partitions(reader, flexible=flexible)
    last_update_ms, start_ms = reader.i64(), reader.i64()
    value = TransactionLogValue(
        producer_id, producer_epoch, timeout_ms, state, partitions, last_update_ms, start_ms
    )
    if flexible:
        value = _with_tagged_fields(value, reader.tags(), reader.what)
    reader.end()
    return value


def _read_partitions(reader: _Reader, *, flexible: bool) -> tuple[TxnPartitions, ...] | None:
    size = reader.length(flexible=flexible, wide=True)
    if size < 0:
        return None
    if size > len(reader.data) - reader.pos:
        raise TransactionLogError(f"{reader.what}: partitions count {size} passes the end")
    entries = []
    for _ in range(size):
        topic = reader.text("topic", flexible=flexible)
        ids = tuple(reader.i32() for _ in range(reader.count("partition_ids", flexible=flexible)))
        if flexible:
            reader.tags()  # a partitions entry has no known tagged fields
        entries.append(TxnPartitions(topic, ids))
    return tuple(entries)


def _with_tagged_fields(
    value: TransactionLogValue, tags: dict[int, memoryview], what: str
) -> TransactionLogValue:
    def number(tag: int, fmt: struct.Struct, default: int) -> int:
        raw = tags.get(tag)
        if raw is None:
            return default
        if len(raw) != fmt.size:
            raise TransactionLogError(f"{what}: tag {tag} has {len(raw)} bytes, not {fmt.size}")
        return int(fmt.unpack(raw)[0])

    return TransactionLogValue(
        value.producer_id,
        value.producer_epoch,
        value.transaction_timeout_ms,
        value.transaction_status,
        value.transaction_partitions,
        value.transaction_last_update_timestamp_ms,
        value.transaction_start_timestamp_ms,
        previous_producer_id=number(_TAG_PREVIOUS_PRODUCER_ID, _I64, NO_PRODUCER_ID),
        next_producer_id=number(_TAG_NEXT_PRODUCER_ID, _I64, NO_PRODUCER_ID),
        client_transaction_version=number(
            _TAG_CLIENT_TRANSACTION_VERSION, _I16, NO_CLIENT_TRANSACTION_VERSION
        ),
    )


# -- batches ---------------------------------------------------------------------------------------


def build_transaction_batch(
    entries: Sequence[tuple[str, TransactionLogValue | None]], *, timestamp_ms: int
) -> bytes:
    """One uncompressed RecordBatch v2 of transaction log records (None values are tombstones),
    for an append as leader (offsets are assigned then). Kafka enforces no compression on this
    topic."""
    return build_batch(
        [(encode_key(tid), None if v is None else encode_value(v)) for tid, v in entries],
        timestamps=[timestamp_ms] * len(entries),
    )


def iter_transaction_records(
    records: bytes | memoryview,
) -> Iterator[tuple[int, str, TransactionLogValue | None]]:
    """(offset, transactional id, value-or-None) of every record in stored batches. Raises
    TransactionLogError for a record without a key or one that does not decode."""
    for position, header in iter_batches(records):
        if header.is_control:
            continue  # markers have no place here, but a foreign log may hold them: not state
        for record in iter_records(records, position):
            if record.key is None:
                raise TransactionLogError(
                    f"transaction log record at offset {record.offset} has no key"
                )
            yield record.offset, decode_key(record.key), decode_value(record.value)
