"""The line a client command prints when it fails (cli/reasons.py): it names the Kafka error code
or the operating system's reason, says what to do, and never shows Python's exception text."""

from __future__ import annotations

import re

import pytest

from cli.reasons import advice, describe_error
from client.errors import (
    AuthenticationError,
    ConnectionFailedError,
    ConnectionLostError,
    DeliveryTimeoutError,
    NoBrokersAvailableError,
    RequestTimeoutError,
    os_error_reason,
)
from runtime.net.transport import Address
from wire.errors import ErrorCode, KafkaError

BOOTSTRAP = (Address("a", 1), Address("b", 2), Address("c", 3))
# What leaks when an exception is formatted with repr(): `ConnectionRefusedError(111, ...)`.
PYTHON_REPR = re.compile(r"\b[A-Z]\w*(Error|Exception)\(|Traceback")


def no_broker_reachable() -> NoBrokersAvailableError:
    """As the client raises it: from the last failed connect, from the OS error."""
    try:
        try:
            try:
                raise ConnectionRefusedError(111, "Connect call failed ('c', 3)")
            except OSError as exc:
                raise ConnectionFailedError(
                    f"cannot connect to c:3: {os_error_reason(exc)}"
                ) from exc
        except ConnectionFailedError as exc:
            raise NoBrokersAvailableError("no broker reachable among a:1, b:2, c:3") from exc
    except NoBrokersAvailableError as exc:
        return exc


def timed_out(last: BaseException, topic: str | None = "orders") -> DeliveryTimeoutError:
    error = DeliveryTimeoutError(
        "1 record(s) for orders-0 not acknowledged within delivery.timeout.ms (30000 ms, never "
        "sent); last error: LEADER_NOT_AVAILABLE (partition orders-0 has no leader)",
        topic=topic,
    )
    error.__cause__ = last
    return error


def test_no_broker_reachable_names_the_whole_list_and_the_os_reason() -> None:
    line = describe_error(no_broker_reachable(), BOOTSTRAP)
    assert line.startswith("cannot reach the cluster at a:1,b:2,c:3: connection refused;")
    assert "is `ketch up` running?" in line
    assert not PYTHON_REPR.search(line), line


def test_a_delivery_timeout_names_its_last_error_and_what_to_do() -> None:
    last = KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, "partition orders-0 has no leader")
    line = describe_error(timed_out(last), BOOTSTRAP)
    assert "not acknowledged within delivery.timeout.ms (30000 ms" in line
    assert "last error: LEADER_NOT_AVAILABLE (partition orders-0 has no leader)" in line
    assert line.endswith("is a broker down? see `ketch topic describe orders`")


def test_a_delivery_timeout_of_an_unreachable_cluster_says_cannot_reach() -> None:
    line = describe_error(timed_out(no_broker_reachable()), BOOTSTRAP)
    assert line.startswith("cannot reach the cluster at a:1,b:2,c:3: connection refused")


def test_a_delivery_timeout_of_one_unreachable_leader_does_not_blame_the_cluster() -> None:
    leader_down = ConnectionFailedError("cannot connect to b:2: connection refused")
    line = describe_error(timed_out(leader_down), BOOTSTRAP)
    assert line.startswith("timed out: ")
    assert "cannot reach the cluster" not in line
    assert line.endswith("is a broker down? see `ketch cluster status`")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ConnectionLostError("connection to a:1 closed by peer"), "a broker may have stopped"),
        (RequestTimeoutError("request to a:1 got no response"), "`ketch cluster status`"),
        (AuthenticationError("SaslAuthenticate failed"), "cluster secret"),
        (ConnectionRefusedError(111, "Connect call failed"), "connection refused"),
        (TimeoutError(), "cannot reach the cluster at a:1,b:2,c:3: timed out"),
        (
            KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "orders-0"),
            "NOT_ENOUGH_REPLICAS (orders-0); fewer replicas are in sync than min.insync.replicas",
        ),
        (
            KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "metadata of 'x'"),
            "UNKNOWN_TOPIC_OR_PARTITION",
        ),
        (KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION), "1 to 249 characters"),
    ],
)
def test_each_failure_says_why_without_python_text(error: BaseException, expected: str) -> None:
    line = describe_error(error, BOOTSTRAP)
    assert expected in line
    assert not PYTHON_REPR.search(line), line


@pytest.mark.parametrize("code", [c for c in ErrorCode if c is not ErrorCode.NONE])
def test_every_kafka_code_is_named(code: ErrorCode) -> None:
    line = describe_error(KafkaError(code), None)
    assert code.name in line
    assert not PYTHON_REPR.search(line), line


def test_advice_fills_in_the_topic_and_falls_back_for_retriable_codes() -> None:
    assert (
        advice(ErrorCode.LEADER_NOT_AVAILABLE, "t")
        == "is a broker down? see `ketch topic describe t`"
    )
    assert "TOPIC" in advice(ErrorCode.LEADER_NOT_AVAILABLE)
    assert advice(ErrorCode.CONCURRENT_TRANSACTIONS) == "try again in a moment"  # retriable
    assert advice(ErrorCode.INVALID_TIMESTAMP) == ""  # nothing better than the code itself


def test_a_refused_record_points_at_the_compacted_topics_key_rule() -> None:
    """A null-keyed record sent to a compacted topic came back as a bare INVALID_RECORD."""
    told = describe_error(KafkaError(ErrorCode.INVALID_RECORD, None), None)
    assert "INVALID_RECORD" in told
    assert "cleanup.policy=compact" in told
    assert "-K SEP" in told
