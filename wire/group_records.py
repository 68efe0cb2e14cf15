"""The records of `__consumer_offsets`, in Kafka's own formats, sans-IO.

The group coordinator keeps its state as records of the compacted internal topic
`__consumer_offsets`, whose key says what a record is about and whose value is the latest state
(a null value, a tombstone, deletes it). ketch writes Kafka's formats, so Kafka's tools can read
ketch's offsets topic and ketch can read Kafka's:

    key    int16 version, then
           v0, v1  offset commit:   group string, topic string, partition int32
           v2      group metadata:  group string
    offset commit value    int16 version, then
           v0  offset int64, metadata string, timestamp int64
           v1  offset int64, metadata string, commit_timestamp int64, expire_timestamp int64
           v2  offset int64, metadata string, commit_timestamp int64
           v3  offset int64, leader_epoch int32, metadata string, commit_timestamp int64
    group metadata value   int16 version, then
           protocol_type string, generation int32, protocol string?, leader string?,
           [v2+] current_state_timestamp int64,
           members array of: member_id string, [v3+] group_instance_id string?,
               client_id string, client_host string, [v1+] rebalance_timeout int32,
               session_timeout int32, subscription bytes, assignment bytes

Strings are int16-length UTF-8 (-1: null), bytes int32-length, arrays int32-counted: these are
the non-flexible versions, which Kafka still reads and which ketch writes (offset value v3 or
v1 when an explicit expiry is kept, group value v3). Version 4 of both values (flexible) is
read too, since newer Kafka brokers write it.

A group belongs to partition `(hash & 0x7fffffff) % partitions` of the topic, with Java's
String.hashCode, so ketch and Kafka place a group alike.

Key versions 3 to 8 are the records of consumer groups of the new protocol (KIP-848): this
module dispatches them to wire/consumer_group_records.py, which says their layouts.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from wire import consumer_group_records as cgr
from wire.batch_builder import build_batch
from wire.field_reader import FieldReader
from wire.record_reader import iter_records
from wire.records import iter_batches

OFFSETS_TOPIC: Final = "__consumer_offsets"

_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")

OFFSET_KEY_VERSION: Final = 1
GROUP_KEY_VERSION: Final = 2
OFFSET_VALUE_VERSION: Final = 3
OFFSET_VALUE_WITH_EXPIRY: Final = 1
GROUP_VALUE_VERSION: Final = 3
NO_TIMESTAMP: Final = -1
NO_LEADER_EPOCH: Final = -1


class GroupRecordError(ValueError):
    """A record of the offsets topic that does not decode."""


# -- Java's String.hashCode and the partition of a group -------------------------------------------


def java_string_hashcode(text: str) -> int:
    """Java's `String.hashCode()`: s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as a
    signed 32-bit int."""
    value = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        value = (31 * value + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def partition_for(group_id: str, partitions: int) -> int:
    """The offsets-topic partition of a group (Kafka's `Utils.abs(hash) % partitions`, where
    that abs is `hash & 0x7fffffff`)."""
    if partitions < 1:
        raise ValueError(f"the offsets topic needs at least one partition, not {partitions}")
    return (java_string_hashcode(group_id) & 0x7FFFFFFF) % partitions


# -- keys and values -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = NO_TIMESTAMP
    leader_epoch: int = NO_LEADER_EPOCH
    expire_timestamp: int | None = None  # only v1 carries one


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = NO_TIMESTAMP
    members: tuple[MemberValue, ...] = ()


# Consumer groups of the new protocol (KIP-848) have key versions 3..8 of their own
# (wire/consumer_group_records.py).
Key = OffsetKey | GroupKey | cgr.ConsumerGroupKey
Value = OffsetValue | GroupValue | cgr.ConsumerGroupValue


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def i16(self, value: int) -> None:
        self.out += _I16.pack(value)

    def i32(self, value: int) -> None:
        self.out += _I32.pack(value)

    def i64(self, value: int) -> None:
        self.out += _I64.pack(value)

    def string(self, value: str | None) -> None:
        if value is None:
            self.i16(-1)
            return
        data = value.encode()
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes is too long for an int16 length")
        self.i16(len(data))
        self.out += data

    def bytes_(self, value: bytes) -> None:
        self.i32(len(value))
        self.out += value


class _Reader(FieldReader):
    error = GroupRecordError

    def string(self, *, flexible: bool = False) -> str | None:
        size = self.uvarint() - 1 if flexible else self.i16()
        if size < 0:
            return None
        try:
            return bytes(self._take(size)).decode()
        except UnicodeDecodeError as exc:
            raise GroupRecordError(f"{self.what}: string is not UTF-8 ({exc})") from None

    def text(self, *, flexible: bool = False) -> str:
        value = self.string(flexible=flexible)
        if value is None:
            raise GroupRecordError(f"{self.what}: null where a string is required")
        return value

    def bytes_(self, *, flexible: bool = False) -> bytes:
        size = self.uvarint() - 1 if flexible else self.i32()
        return b"" if size < 0 else bytes(self._take(size))

    def count(self, *, flexible: bool = False) -> int:
        size = self.uvarint() - 1 if flexible else self.i32()
        return max(size, 0)

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


def encode_key(key: Key) -> bytes:
    if isinstance(key, cgr.ConsumerGroupKey):
        return cgr.encode_key(key)
    writer = _Writer()
    if isinstance(key, OffsetKey):
        writer.i16(OFFSET_KEY_VERSION)
        writer.string(key.group)
        writer.string(key.topic)
        writer.i32(key.partition)
    else:
        writer.i16(GROUP_KEY_VERSION)
        writer.string(key.group)
    return bytes(writer.out)


def decode_key(data: bytes) -> Key:
    reader = _Reader(data, "offsets-topic key")
    version = reader.i16()
    if version in (0, 1):
        key: Key = OffsetKey(reader.text(), reader.text(), reader.i32())
    elif version == GROUP_KEY_VERSION:
        key = GroupKey(reader.text())
    elif version in cgr.KEY_VERSIONS:
        return cgr.decode_key(data)
    else:
        raise GroupRecordError(f"offsets-topic key version {version} is unknown")
    reader.end()
    return key


def encode_offset_value(value: OffsetValue) -> bytes:
    writer = _Writer()
    if value.expire_timestamp is not None:
        writer.i16(OFFSET_VALUE_WITH_EXPIRY)
        writer.i64(value.offset)
        writer.string(value.metadata)
        writer.i64(value.commit_timestamp)
        writer.i64(value.expire_timestamp)
    else:
        writer.i16(OFFSET_VALUE_VERSION)
        writer.i64(value.offset)
        writer.i32(value.leader_epoch)
        writer.string(value.metadata)
        writer.i64(value.commit_timestamp)
    return bytes(writer.out)


def decode_offset_value(data: bytes) -> OffsetValue:
    reader = _Reader(data, "offset commit value")
    version = reader.i16()
    flexible = version >= 4
    if version in (0, 2):
        value = OffsetValue(reader.i64(), reader.string() or "", reader.i64())
    elif version == 1:
        offset, metadata = reader.i64(), reader.string() or ""
        commit, expire = reader.i64(), reader.i64()
        value = OffsetValue(offset, metadata, commit, expire_timestamp=expire)
    elif version in (3, 4):
        offset, epoch = reader.i64(), reader.i32()
        metadata = reader.string(flexible=flexible) or ""
        value = OffsetValue(offset, metadata, reader.i64(), epoch)
    else:
        raise GroupRecordError(f"offset commit value version {version} is unknown")
    if flexible:
        reader.skip_tags()
    reader.end()
    return value


def encode_group_value(value: GroupValue) -> bytes:
    writer = _Writer()
    writer.i16(GROUP_VALUE_VERSION)
    writer.string(value.protocol_type)
    writer.i32(value.generation)
    writer.string(value.protocol)
    writer.string(value.leader)
    writer.i64(value.current_state_timestamp)
    writer.i32(len(value.members))
    for member in value.members:
        writer.string(member.member_id)
        writer.string(member.group_instance_id)
        writer.string(member.client_id)
        writer.string(member.client_host)
        writer.i32(member.rebalance_timeout)
        writer.i32(member.session_timeout)
        writer.bytes_(member.subscription)
        writer.bytes_(member.assignment)
    return bytes(writer.out)


def decode_group_value(data: bytes) -> GroupValue:
    reader = _Reader(data, "group metadata value")
    version = reader.i16()
    if not 0 <= version <= 4:
        raise GroupRecordError(f"group metadata value version {version} is unknown")
    flex = version >= 4
    protocol_type = reader.text(flexible=flex)
    generation = reader.i32()
    protocol = reader.string(flexible=flex)
    leader = reader.string(flexible=flex)
    state_timestamp = reader.i64() if version >= 2 else NO_TIMESTAMP
    members = []
    for _ in range(reader.count(flexible=flex)):
        member_id = reader.text(flexible=flex)
        instance_id = reader.string(flexible=flex) if version >= 3 else None
        client_id = reader.text(flexible=flex)
        client_host = reader.text(flexible=flex)
        session_timeout = rebalance_timeout = reader.i32()
        if version >= 1:
            session_timeout = reader.i32()
        subscription = reader.bytes_(flexible=flex)
        assignment = reader.bytes_(flexible=flex)
        if flex:
            reader.skip_tags()
        members.append(
            MemberValue(
                member_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                subscription,
                assignment,
                instance_id,
            )
        )
    if flex:
        reader.skip_tags()
    reader.end()
    return GroupValue(protocol_type, generation, protocol, leader, state_timestamp, tuple(members))


def decode_value(key: Key, data: bytes | None) -> Value | None:
    """The value of a record with `key`; None for a tombstone."""
    if data is None:
        return None
    if isinstance(key, OffsetKey):
        return decode_offset_value(data)
    if isinstance(key, cgr.ConsumerGroupKey):
        return cgr.decode_value(key, data)
    return decode_group_value(data)


def encode_value(value: Value | None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, OffsetValue):
        return encode_offset_value(value)
    if isinstance(value, GroupValue):
        return encode_group_value(value)
    return cgr.encode_value(value)


# -- batches ---------------------------------------------------------------------------------------


def build_group_batch(entries: Sequence[tuple[Key, Value | None]], *, timestamp_ms: int) -> bytes:
    """One RecordBatch v2 of offsets-topic records (None values are tombstones), for an append
    as leader (offsets are assigned then)."""
    return build_batch(
        [(encode_key(key), encode_value(value)) for key, value in entries],
        timestamps=[timestamp_ms] * len(entries),
    )


def iter_group_records(records: bytes) -> Iterator[tuple[int, Key, Value | None]]:
    """(offset, key, value-or-None) of every record in stored batches (compressed too). Raises
    GroupRecordError for a record without a key or one that does not decode."""
    for position, header in iter_batches(records):
        if header.is_control:
            continue  # transaction markers: the group shard's loader reads them (txn_offsets.py)
        for record in iter_records(records, position):
            if record.key is None:
                raise GroupRecordError(f"offsets-topic record at offset {record.offset} has no key")
            key = decode_key(record.key)
            yield record.offset, key, decode_value(key, record.value)
