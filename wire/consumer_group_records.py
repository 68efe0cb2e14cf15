"""The records of a consumer group of the new protocol (KIP-848) in `__consumer_offsets`, sans-IO.

A group of type `consumer` keeps its state as six kinds of records beside the offset commits
(wire/group_records.py reads the offsets and classic groups, and hands these key versions here).
The key's int16 version says what a record is (Kafka 3.7+'s record types); keys are not
flexible, every value starts with its int16 version 0 and is flexible (compact strings and
arrays, +1 lengths, a trailing tagged-field section):

    key  version 3  ConsumerGroupMetadata            group string
                    value: epoch int32 (the group epoch)
         version 4  ConsumerGroupPartitionMetadata   group string
                    value: topics [topic_id uuid, topic_name string, num_partitions int32,
                                   partition_metadata [partition int32, racks [string]]]
         version 5  ConsumerGroupMemberMetadata      group string, member_id string
                    value: instance_id string?, rack_id string?, client_id string,
                           client_host string, subscribed_topic_names [string],
                           subscribed_topic_regex string?, rebalance_timeout_ms int32,
                           server_assignor string?, tag 0: classic member metadata (not written)
         version 6  ConsumerGroupTargetAssignmentMetadata  group string
                    value: assignment_epoch int32
         version 7  ConsumerGroupTargetAssignmentMember    group string, member_id string
                    value: topic_partitions [topic_id uuid, partitions [int32]]
         version 8  ConsumerGroupCurrentMemberAssignment   group string, member_id string
                    value: member_epoch int32, previous_member_epoch int32, state int8,
                           assigned_partitions [topic_id uuid, partitions [int32]],
                           partitions_pending_revocation [topic_id uuid, partitions [int32]]

A tombstone (null value) of a key removes what it names; deleting a group or a member writes
tombstones for all of its keys. Partition metadata's per-partition racks are written empty
(ketch has no racks), which is what Kafka writes when no partition has rack information.

Assignments are `Assignment`: topic id (16 bytes) -> frozenset of partitions.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from wire.field_reader import FieldReader

CONSUMER_GROUP_METADATA: Final = 3
CONSUMER_GROUP_PARTITION_METADATA: Final = 4
CONSUMER_GROUP_MEMBER_METADATA: Final = 5
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA: Final = 6
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER: Final = 7
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT: Final = 8
KEY_VERSIONS: Final = range(CONSUMER_GROUP_METADATA, CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT + 1)
_WITH_MEMBER: Final = frozenset(
    {
        CONSUMER_GROUP_MEMBER_METADATA,
        CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
        CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    }
)
VALUE_VERSION: Final = 0
UUID_BYTES: Final = 16

Assignment = Mapping[bytes, frozenset[int]]


class ConsumerGroupRecordError(ValueError):
    """A consumer-group record that does not decode."""


@dataclass(frozen=True, slots=True)
class ConsumerGroupKey:
    """`record_type` is the key version (3..8); `member_id` is set for 5, 7 and 8 only."""

    record_type: int
    group: str
    member_id: str | None = None

    def __post_init__(self) -> None:
        if self.record_type not in KEY_VERSIONS:
            raise ValueError(f"consumer group record type {self.record_type} is unknown")
        if (self.member_id is not None) != (self.record_type in _WITH_MEMBER):
            raise ValueError(f"record type {self.record_type}: member id {self.member_id!r}")


@dataclass(frozen=True, slots=True)
class GroupEpochValue:
    epoch: int


@dataclass(frozen=True, slots=True)
class TopicMetadataValue:
    topic_id: bytes
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class PartitionMetadataValue:
    topics: tuple[TopicMetadataValue, ...]


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None


@dataclass(frozen=True, slots=True)
class TargetAssignmentEpochValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class TargetAssignmentMemberValue:
    partitions: Assignment


@dataclass(frozen=True, slots=True)
class CurrentAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState: 0 stable, 1 unrevoked partitions, 2 unreleased partitions
    assigned: Assignment
    pending_revocation: Assignment


ConsumerGroupValue = (
    GroupEpochValue
    | PartitionMetadataValue
    | MemberMetadataValue
    | TargetAssignmentEpochValue
    | TargetAssignmentMemberValue
    | CurrentAssignmentValue
)

_VALUE_TYPE: Final[Mapping[type, int]] = {
    GroupEpochValue: CONSUMER_GROUP_METADATA,
    PartitionMetadataValue: CONSUMER_GROUP_PARTITION_METADATA,
    MemberMetadataValue: CONSUMER_GROUP_MEMBER_METADATA,
    TargetAssignmentEpochValue: CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    TargetAssignmentMemberValue: CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CurrentAssignmentValue: CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
}


def record_type_of(value: ConsumerGroupValue) -> int:
    return _VALUE_TYPE[type(value)]


# -- writing ---------------------------------------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def pack(self, fmt: str, value: int) -> None:
        self.out += struct.pack(fmt, value)

    def uvarint(self, value: int) -> None:
        while value >= 0x80:
            self.out.append(value & 0x7F | 0x80)
            value >>= 7
        self.out.append(value)

    def string(self, value: str | None) -> None:
        """A non-flexible string (the keys')."""
        data = b"" if value is None else value.encode()
        self.pack(">h", -1 if value is None else len(data))
        self.out += data

    def compact_string(self, value: str | None) -> None:
        if value is None:
            self.uvarint(0)
            return
        data = value.encode()
        self.uvarint(len(data) + 1)
        self.out += data

    def compact_count(self, count: int) -> None:
        self.uvarint(count + 1)

    def assignment(self, assignment: Assignment) -> None:
        # Sorted: the same assignment always encodes to the same bytes (a compacted topic's
        # replicas and a test compare them).
        self.compact_count(len(assignment))
        for topic_id in sorted(assignment):
            self.out += topic_id
            partitions = sorted(assignment[topic_id])
            self.compact_count(len(partitions))
            for partition in partitions:
                self.pack(">i", partition)
            self.uvarint(0)  # tagged fields


def encode_key(key: ConsumerGroupKey) -> bytes:
    writer = _Writer()
    writer.pack(">h", key.record_type)
    writer.string(key.group)
    if key.member_id is not None:
        writer.string(key.member_id)
    return bytes(writer.out)


def encode_value(value: ConsumerGroupValue) -> bytes:
    writer = _Writer()
    writer.pack(">h", VALUE_VERSION)
    match value:
        case GroupEpochValue(epoch=epoch) | TargetAssignmentEpochValue(assignment_epoch=epoch):
            writer.pack(">i", epoch)
        case PartitionMetadataValue(topics=topics):
            writer.compact_count(len(topics))
            for topic in topics:
                writer.out += topic.topic_id
                writer.compact_string(topic.topic_name)
                writer.pack(">i", topic.num_partitions)
                writer.compact_count(0)  # no partition racks
                writer.uvarint(0)
        case MemberMetadataValue():
            writer.compact_string(value.instance_id)
            writer.compact_string(value.rack_id)
            writer.compact_string(value.client_id)
            writer.compact_string(value.client_host)
            writer.compact_count(len(value.subscribed_topic_names))
            for name in value.subscribed_topic_names:
                writer.compact_string(name)
            writer.compact_string(value.subscribed_topic_regex)
            writer.pack(">i", value.rebalance_timeout_ms)
            writer.compact_string(value.server_assignor)
        case TargetAssignmentMemberValue(partitions=partitions):
            writer.assignment(partitions)
        case CurrentAssignmentValue():
            writer.pack(">i", value.member_epoch)
            writer.pack(">i", value.previous_member_epoch)
            writer.pack(">b", value.state)
            writer.assignment(value.assigned)
            writer.assignment(value.pending_revocation)
    writer.uvarint(0)  # the value's tagged fields
    return bytes(writer.out)


# -- reading ---------------------------------------------------------------------------------------


class _Reader(FieldReader):
    error = ConsumerGroupRecordError

    def string(self) -> str:
        size = self.i16()
        if size < 0:
            raise ConsumerGroupRecordError(f"{self.what}: null where a string is required")
        return self._text(size)

    def _text(self, size: int) -> str:
        try:
            return bytes(self._take(size)).decode()
        except UnicodeDecodeError as exc:
            raise ConsumerGroupRecordError(f"{self.what}: string is not UTF-8 ({exc})") from None

    def compact_string(self) -> str | None:
        size = self.uvarint() - 1
        return None if size < 0 else self._text(size)

    def compact_text(self) -> str:
        value = self.compact_string()
        if value is None:
            raise ConsumerGroupRecordError(f"{self.what}: null where a string is required")
        return value

    def count(self) -> int:
        return max(self.uvarint() - 1, 0)

    def uuid(self) -> bytes:
        return bytes(self._take(UUID_BYTES))

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self._take(self.uvarint())

    def assignment(self) -> dict[bytes, frozenset[int]]:
        assignment: dict[bytes, frozenset[int]] = {}
        for _ in range(self.count()):
            topic_id = self.uuid()
            assignment[topic_id] = frozenset(self.i32() for _ in range(self.count()))
            self.skip_tags()
        return assignment


def decode_key(data: bytes) -> ConsumerGroupKey:
    reader = _Reader(data, "consumer group key")
    record_type = reader.i16()
    if record_type not in KEY_VERSIONS:
        raise ConsumerGroupRecordError(f"consumer group key version {record_type} is unknown")
    group = reader.string()
    member_id = reader.string() if record_type in _WITH_MEMBER else None
    reader.end()
    return ConsumerGroupKey(record_type, group, member_id)


def decode_value(key: ConsumerGroupKey, data: bytes) -> ConsumerGroupValue:
    reader = _Reader(data, f"consumer group value of type {key.record_type}")
    version = reader.i16()
    if version != VALUE_VERSION:
        raise ConsumerGroupRecordError(f"{reader.what}: version {version} is unknown")
    value: ConsumerGroupValue
    match key.record_type:
        case 3:
            value = GroupEpochValue(reader.i32())
        case 4:
            value = PartitionMetadataValue(
                tuple(_topic_metadata(reader) for _ in range(reader.count()))
            )
        case 5:
            value = MemberMetadataValue(
                instance_id=reader.compact_string(),
                rack_id=reader.compact_string(),
                client_id=reader.compact_text(),
                client_host=reader.compact_text(),
                subscribed_topic_names=tuple(reader.compact_text() for _ in range(reader.count())),
                subscribed_topic_regex=reader.compact_string(),
                rebalance_timeout_ms=reader.i32(),
                server_assignor=reader.compact_string(),
            )
        case 6:
            value = TargetAssignmentEpochValue(reader.i32())
        case 7:
            value = TargetAssignmentMemberValue(reader.assignment())
        case _:
            value = CurrentAssignmentValue(
                member_epoch=reader.i32(),
                previous_member_epoch=reader.i32(),
                state=reader.i8(),
                assigned=reader.assignment(),
                pending_revocation=reader.assignment(),
            )
    reader.skip_tags()  # tag 0 of a member's value (classic member metadata) is not kept
    reader.end()
    return value


def _topic_metadata(reader: _Reader) -> TopicMetadataValue:
    topic_id, name, partitions = reader.uuid(), reader.compact_text(), reader.i32()
    for _ in range(reader.count()):  # per-partition racks: not used by ketch
        reader.i32()
        for _ in range(reader.count()):
            reader.compact_string()
        reader.skip_tags()
    reader.skip_tags()
    return TopicMetadataValue(topic_id, name, partitions)
