"""The controller's metadata records through msgpack and back, as values, and malformed ones
refused (wire/metadata_records.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.wire.metadata_helpers import through_msgpack
from wire.metadata_records import (
    RECORD_TYPES,
    AccessControlEntryRecord,
    ClientQuotaRecord,
    ClusterIdRecord,
    ControllerEpochRecord,
    Endpoint,
    FenceBrokerRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicConfigsRecord,
    TopicDeletionRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UserScramCredentialRecord,
    decode_record,
    encode_record,
)

ORDERS = bytes(range(1, 17))
AUDIT = bytes(range(17, 33))

SAMPLES: list[Record] = [
    ControllerEpochRecord(3),
    ClusterIdRecord("MkU3OEVBNTcwNTJENDM2Qg"),
    RegisterBrokerRecord(1, b"\x01" * 16, 7, (Endpoint("native", "h", 9093),), "rack-a"),
    RegisterBrokerRecord(2, b"\x02" * 16, 8, (), None, fenced=False),
    FenceBrokerRecord(1, 7),
    UnfenceBrokerRecord(1, 7),
    TopicRecord("orders", ORDERS, {"min.insync.replicas": "2", "cleanup.policy": "compact"}),
    TopicRecord("audit", AUDIT),
    TopicConfigsRecord(ORDERS, {"retention.ms": "3600000"}),
    TopicConfigsRecord(AUDIT),
    PartitionRecord(ORDERS, 0, (1, 2, 3), (3, 1), 3, 4, 9),
    PartitionRecord(ORDERS, 1, (1,), (1,), -1, 0, 0),
    TopicDeletionRecord(ORDERS),
    RemoveTopicRecord(ORDERS),
    ProducerIdsRecord(1, 7, 2_000),
    AccessControlEntryRecord(b"\x03" * 16, 2, "orders", 3, "User:alice", "*", 4, 3),
    RemoveAccessControlEntryRecord(b"\x03" * 16),
    UserScramCredentialRecord("a=b,c", 1, b"salt", b"s" * 32, b"k" * 32, 4096),
    RemoveUserScramCredentialRecord("a=b,c", 1),
    ClientQuotaRecord((("client-id", None), ("user", "alice")), "producer_byte_rate", 1024.0),
    ClientQuotaRecord((("client-id", "c"),), "consumer_byte_rate", 0.0, remove=True),
]


def test_samples_cover_every_record_type() -> None:
    assert {type(r) for r in SAMPLES} == set(RECORD_TYPES)
    assert len({cls.TYPE for cls in RECORD_TYPES}) == len(RECORD_TYPES)


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: type(r).__name__)
def test_records_round_trip_through_msgpack(record: Record) -> None:
    encoded = encode_record(record)
    assert encoded["type"] == record.TYPE
    assert through_msgpack(record) == record


def test_records_are_values() -> None:
    configs = {"a": "1"}
    topic = TopicRecord("t", ORDERS, configs)
    configs["a"] = "2"
    assert topic.configs == {"a": "1"}
    with pytest.raises(TypeError):
        topic.configs["a"] = "3"  # type: ignore[index]
    # Lists given for replicas and ISR become tuples, so equal states compare equal.
    as_lists = PartitionRecord(ORDERS, 0, [1, 2], [2], 2, 0, 0)  # type: ignore[arg-type]
    assert as_lists == PartitionRecord(ORDERS, 0, (1, 2), (2,), 2, 0, 0)
    registration = RegisterBrokerRecord(1, b"i", 0, [("native", "h", 1)], None)  # type: ignore[arg-type]
    assert registration.endpoints == (Endpoint("native", "h", 1),)


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"type": "no_such_record"},
        {"type": 3},
        {"type": "controller_epoch"},  # missing field
        {"type": "controller_epoch", "epoch": 1, "extra": 2},
        {"type": "controller_epoch", "epoch": "1"},
        {"type": "controller_epoch", "epoch": True},
        {"type": "topic_deletion", "topic_id": "not bytes"},
        {"type": "topic", "name": "t", "topic_id": ORDERS, "configs": {"a": 1}},
        {"type": "topic", "name": "t", "topic_id": ORDERS, "configs": ["a"]},
        {
            "type": "register_broker",
            "broker_id": 1,
            "incarnation_id": b"x",
            "broker_epoch": 1,
            "endpoints": [["native", "h"]],
            "rack": None,
            "fenced": True,
        },
        {
            "type": "register_broker",
            "broker_id": 1,
            "incarnation_id": b"x",
            "broker_epoch": 1,
            "endpoints": [],
            "rack": None,
            "fenced": 1,
        },
        {
            "type": "partition",
            "topic_id": ORDERS,
            "partition": 0,
            "replicas": [1, "2"],
            "isr": [1],
            "leader": 1,
            "leader_epoch": 0,
            "partition_epoch": 0,
        },
    ],
)
def test_malformed_records_are_refused(data: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011  (any ValueError: the message varies by case)
        decode_record(data)


def test_log_dirs_round_trip_and_older_records_take_the_default() -> None:
    record = RegisterBrokerRecord(3, b"\x03" * 16, 9, (), None, log_dirs=[b"\x07" * 16])  # type: ignore[arg-type]
    assert record.log_dirs == (b"\x07" * 16,)
    assert through_msgpack(record) == record
    written_before_log_dirs = encode_record(RegisterBrokerRecord(3, b"\x03" * 16, 9, (), None))
    del written_before_log_dirs["log_dirs"]
    assert decode_record(written_before_log_dirs) == RegisterBrokerRecord(
        3, b"\x03" * 16, 9, (), None
    )
