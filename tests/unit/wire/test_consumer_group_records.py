"""The records of KIP-848 consumer groups in `__consumer_offsets`: Kafka's byte layouts (keys
not flexible, values flexible with version 0), and every type through the offsets-topic codec."""

from __future__ import annotations

import pytest

from wire import consumer_group_records as cgr
from wire.group_records import decode_key, decode_value, encode_key, encode_value

TOPIC = bytes(range(16))


def test_group_epoch_bytes() -> None:
    key = cgr.ConsumerGroupKey(cgr.CONSUMER_GROUP_METADATA, "g")
    assert encode_key(key) == b"\x00\x03\x00\x01g"
    # version 0, epoch 5, no tagged fields
    assert encode_value(cgr.GroupEpochValue(5)) == b"\x00\x00\x00\x00\x00\x05\x00"


def test_member_key_bytes() -> None:
    key = cgr.ConsumerGroupKey(cgr.CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, "g", "m")
    assert encode_key(key) == b"\x00\x08\x00\x01g\x00\x01m"


def test_current_assignment_bytes() -> None:
    value = cgr.CurrentAssignmentValue(3, 2, 1, {TOPIC: frozenset({1, 0})}, {})
    assert encode_value(value) == (
        b"\x00\x00"  # version
        + b"\x00\x00\x00\x03\x00\x00\x00\x02\x01"  # epochs, state
        + b"\x02"
        + TOPIC
        + b"\x03\x00\x00\x00\x00\x00\x00\x00\x01\x00"  # one topic, [0, 1]
        + b"\x01"  # nothing pending revocation
        + b"\x00"  # tagged fields
    )


VALUES = [
    (cgr.ConsumerGroupKey(3, "g"), cgr.GroupEpochValue(7)),
    (
        cgr.ConsumerGroupKey(4, "g"),
        cgr.PartitionMetadataValue((cgr.TopicMetadataValue(TOPIC, "orders", 4),)),
    ),
    (
        cgr.ConsumerGroupKey(5, "g", "m"),
        cgr.MemberMetadataValue("i", None, "client", "/h", ("a", "b"), "x.*", 30_000, "range"),
    ),
    (cgr.ConsumerGroupKey(6, "g"), cgr.TargetAssignmentEpochValue(7)),
    (cgr.ConsumerGroupKey(7, "g", "m"), cgr.TargetAssignmentMemberValue({TOPIC: frozenset({2})})),
    (
        cgr.ConsumerGroupKey(8, "g", "m"),
        cgr.CurrentAssignmentValue(7, 6, 0, {TOPIC: frozenset({2})}, {TOPIC: frozenset({3})}),
    ),
]


@pytest.mark.parametrize(("key", "value"), VALUES)
def test_round_trip(key: cgr.ConsumerGroupKey, value: cgr.ConsumerGroupValue) -> None:
    assert cgr.record_type_of(value) == key.record_type
    assert decode_key(encode_key(key)) == key
    data = encode_value(value)
    assert data is not None
    assert decode_value(key, data) == value


def test_bad_records_raise() -> None:
    with pytest.raises(ValueError, match="member id"):
        cgr.ConsumerGroupKey(5, "g")
    key = cgr.ConsumerGroupKey(3, "g")
    with pytest.raises(cgr.ConsumerGroupRecordError):
        decode_value(key, b"\x00\x01\x00\x00\x00\x05\x00")  # version 1 is not known
    with pytest.raises(cgr.ConsumerGroupRecordError):
        decode_value(key, b"\x00\x00\x00\x00")  # cut short
