"""wire/errors.py: the error codes are Kafka's (name, number and retriable flag, from Kafka's
Errors.java and its exception hierarchy), unknown codes map to UNKNOWN_SERVER_ERROR, and
`raise_for_code` raises `KafkaError`."""

from __future__ import annotations

import pytest

from wire.errors import ErrorCode, KafkaError, raise_for_code

# (name, code, retriable) from Kafka's Errors.java and its exception hierarchy.
KAFKA_ERRORS = [
    ("UNKNOWN_SERVER_ERROR", -1, False),
    ("NONE", 0, False),
    ("OFFSET_OUT_OF_RANGE", 1, False),
    ("CORRUPT_MESSAGE", 2, True),
    ("UNKNOWN_TOPIC_OR_PARTITION", 3, True),
    ("LEADER_NOT_AVAILABLE", 5, True),
    ("NOT_LEADER_OR_FOLLOWER", 6, True),
    ("REQUEST_TIMED_OUT", 7, True),
    ("MESSAGE_TOO_LARGE", 10, False),
    ("STALE_CONTROLLER_EPOCH", 11, False),
    ("NETWORK_EXCEPTION", 13, True),
    ("NOT_ENOUGH_REPLICAS", 19, True),
    ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", 20, True),
    ("CLUSTER_AUTHORIZATION_FAILED", 31, False),
    ("UNSUPPORTED_SASL_MECHANISM", 33, False),
    ("UNSUPPORTED_VERSION", 35, False),
    ("TOPIC_ALREADY_EXISTS", 36, False),
    ("NOT_CONTROLLER", 41, True),
    ("INVALID_REQUEST", 42, False),
    ("KAFKA_STORAGE_ERROR", 56, True),
    ("SASL_AUTHENTICATION_FAILED", 58, False),
    ("FENCED_LEADER_EPOCH", 74, True),
    ("UNKNOWN_LEADER_EPOCH", 75, True),
    ("STALE_BROKER_EPOCH", 77, False),
    ("OFFSET_NOT_AVAILABLE", 78, True),
    ("INVALID_RECORD", 87, False),
    ("UNKNOWN_TOPIC_ID", 100, True),
    ("INCONSISTENT_TOPIC_ID", 103, True),
    ("INELIGIBLE_REPLICA", 107, False),
    ("NEW_LEADER_ELECTED", 108, False),
    ("INVALID_REGISTRATION", 119, False),
    ("TRANSACTION_ABORTABLE", 120, False),
]


@pytest.mark.parametrize(("name", "code", "retriable"), KAFKA_ERRORS)
def test_error_codes_match_kafka(name: str, code: int, retriable: bool) -> None:
    assert ErrorCode[name] == code
    assert ErrorCode(code).name == name
    assert ErrorCode(code).retriable is retriable


def test_error_table_is_complete_through_120() -> None:
    assert set(range(-1, 121)) <= {int(c) for c in ErrorCode}


def test_unknown_error_code_maps_to_unknown_server_error() -> None:
    assert ErrorCode.from_code(31) is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert ErrorCode.from_code(30000) is ErrorCode.UNKNOWN_SERVER_ERROR


def test_kafka_error() -> None:
    raise_for_code(0)
    with pytest.raises(KafkaError, match="NOT_LEADER_OR_FOLLOWER: moved") as info:
        raise_for_code(6, "moved")
    assert info.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert info.value.retriable
    assert str(KafkaError(30000)) == "UNKNOWN_SERVER_ERROR"
