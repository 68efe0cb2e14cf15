"""Which client errors are retried, and which make the client refresh its metadata."""

from __future__ import annotations

import pytest

from client.errors import (
    AuthenticationError,
    ClientClosedError,
    ConnectionFailedError,
    ConnectionLostError,
    DeliveryTimeoutError,
    RequestTimeoutError,
    UnknownBrokerError,
    code_invalidates_metadata,
    invalidates_metadata,
    is_retriable,
)
from wire.errors import ErrorCode, KafkaError


@pytest.mark.parametrize(
    "error",
    [
        ConnectionFailedError("x"),
        ConnectionLostError("x"),
        RequestTimeoutError("x"),
        UnknownBrokerError("x"),
        KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER),
        KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        KafkaError(ErrorCode.FENCED_LEADER_EPOCH),
    ],
)
def test_retriable_errors_that_point_at_stale_metadata(error: Exception) -> None:
    assert is_retriable(error)
    assert invalidates_metadata(error)


@pytest.mark.parametrize(
    "code", [ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.NOT_COORDINATOR]
)
def test_retriable_errors_that_keep_metadata(code: ErrorCode) -> None:
    assert is_retriable(KafkaError(code))
    assert not invalidates_metadata(KafkaError(code))
    assert not code_invalidates_metadata(code)


@pytest.mark.parametrize(
    "error",
    [
        ClientClosedError("x"),
        AuthenticationError("x"),
        DeliveryTimeoutError("x"),
        KafkaError(ErrorCode.MESSAGE_TOO_LARGE),
        KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
        ValueError("a bug"),
    ],
)
def test_errors_that_are_never_retried(error: Exception) -> None:
    assert not is_retriable(error)
