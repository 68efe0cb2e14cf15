"""Why a client command failed, in one line a user can act on: what went wrong in Kafka's terms
(the error code's name, or the operating system's words for a connection) and what to do next.

`describe_error(exc, bootstrap)` is the line cli/common.py's `run_async` prints for the client
layer's typed errors (`client.errors`, `wire.errors.KafkaError`, `OSError`); `advice(code)` is the
hint for one Kafka error code, phrased with ketch's commands. Neither ever shows a Python repr
or traceback: an error this module does not know is printed by its own message.

Pure functions over the error and its chain of causes: no state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from client.errors import (
    AuthenticationError,
    ClientError,
    ConnectionFailedError,
    ConnectionLostError,
    DeliveryTimeoutError,
    NoBrokersAvailableError,
    RequestTimeoutError,
    SaslAuthenticationError,
    error_reason,
    os_error_reason,
)
from runtime.net.transport import Address
from wire.errors import ErrorCode, KafkaError

_BROKER_DOWN: Final = "is a broker down? see `ketch topic describe {topic}`"
_COORDINATOR: Final = "the group coordinator is starting or moving; try again in a moment"
_CONTROLLER: Final = "the controller is changing or unreachable; see `ketch cluster status`"
_TOPIC_NAMES: Final = "a topic name is 1 to 249 characters of letters, digits, '.', '_' and '-'"
_SEE_LOG: Final = "see the broker's log (<data-dir>/logs/broker-<id>.log)"

# What to do about each code a command can meet; `{topic}` is filled in when it is known.
_ADVICE: Final[Mapping[ErrorCode, str]] = {
    ErrorCode.LEADER_NOT_AVAILABLE: _BROKER_DOWN,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: _BROKER_DOWN,
    ErrorCode.FENCED_LEADER_EPOCH: _BROKER_DOWN,
    ErrorCode.UNKNOWN_LEADER_EPOCH: _BROKER_DOWN,
    ErrorCode.REPLICA_NOT_AVAILABLE: _BROKER_DOWN,
    ErrorCode.NOT_ENOUGH_REPLICAS: (
        "fewer replicas are in sync than min.insync.replicas: start the brokers that are down "
        "(`ketch cluster status`), or produce with --acks 1"
    ),
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: (
        "the record was written but too few replicas are in sync to acknowledge it: "
        "see `ketch topic describe {topic}`"
    ),
    ErrorCode.REQUEST_TIMED_OUT: (
        "the leader did not hear from enough replicas in time; see `ketch cluster status`"
    ),
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: (
        "see `ketch topic list`, or create it with `ketch topic create`"
    ),
    ErrorCode.UNKNOWN_TOPIC_ID: "the topic was deleted or recreated; see `ketch topic list`",
    ErrorCode.TOPIC_ALREADY_EXISTS: "see `ketch topic describe {topic}`",
    ErrorCode.INVALID_REPLICATION_FACTOR: (
        "a topic can have at most as many replicas as there are brokers alive "
        "(`ketch cluster status`)"
    ),
    ErrorCode.INVALID_PARTITIONS: "a topic needs at least one partition",
    ErrorCode.INVALID_TOPIC_EXCEPTION: _TOPIC_NAMES,
    ErrorCode.INVALID_CONFIG: "check the --config properties and their values",
    ErrorCode.POLICY_VIOLATION: "check the --config properties and their values",
    ErrorCode.INVALID_RECORD: (
        "a compacted topic (cleanup.policy=compact) needs a key on every record: give lines "
        "as KEY<SEP>VALUE with -K SEP"
    ),
    ErrorCode.MESSAGE_TOO_LARGE: "the record is larger than the topic's max.message.bytes",
    ErrorCode.RECORD_LIST_TOO_LARGE: "the batch is larger than the topic's max.message.bytes",
    ErrorCode.INVALID_REQUIRED_ACKS: "use --acks 0, 1 or all",
    ErrorCode.OFFSET_OUT_OF_RANGE: (
        "the offset is outside the partition's log (retention may have deleted it)"
    ),
    ErrorCode.COORDINATOR_NOT_AVAILABLE: _COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: _COORDINATOR,
    ErrorCode.NOT_COORDINATOR: _COORDINATOR,
    ErrorCode.GROUP_ID_NOT_FOUND: "see `ketch group list`",
    ErrorCode.NON_EMPTY_GROUP: "stop the group's consumers first (`ketch group describe GROUP`)",
    ErrorCode.NOT_CONTROLLER: _CONTROLLER,
    ErrorCode.BROKER_NOT_AVAILABLE: _CONTROLLER,
    ErrorCode.KAFKA_STORAGE_ERROR: f"a broker's log dir failed; {_SEE_LOG}",
    ErrorCode.UNKNOWN_SERVER_ERROR: f"the broker met an unexpected error; {_SEE_LOG}",
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED: "the cluster's ACLs do not allow this",
    ErrorCode.TOPIC_AUTHORIZATION_FAILED: "the cluster's ACLs do not allow this on the topic",
    ErrorCode.GROUP_AUTHORIZATION_FAILED: "the cluster's ACLs do not allow this on the group",
    ErrorCode.ILLEGAL_SASL_STATE: (
        "the listener wants a SASL login first: --command-config FILE with "
        "security.protocol=SASL_PLAINTEXT (or SASL_SSL), sasl.mechanism, sasl.username, "
        "sasl.password"
    ),
    ErrorCode.UNSUPPORTED_VERSION: "the broker runs a ketch version this command does not speak",
    ErrorCode.THROTTLING_QUOTA_EXCEEDED: "a quota was hit; try again later",
}

_NOT_REACHED: Final = (
    "is `ketch up` running? (else pass --bootstrap HOST:PORT[,HOST:PORT...] or set KETCH_BOOTSTRAP)"
)
_CAUSE_DEPTH: Final = 10  # a chain of causes is a few links long; bounded all the same


def advice(code: ErrorCode, topic: str | None = None) -> str:
    """What to do about `code` (empty when there is nothing better than the code itself)."""
    text = _ADVICE.get(code)
    if text is None:
        return "try again in a moment" if code.retriable else ""
    return text.format(topic=topic or "TOPIC")


def describe_error(exc: BaseException, bootstrap: Sequence[Address] | None) -> str:
    """One line for an error of the client layer, as a user should read it."""
    where = "the cluster" if not bootstrap else f"the cluster at {_addresses(bootstrap)}"
    if isinstance(exc, NoBrokersAvailableError | ConnectionFailedError):
        return f"cannot reach {where}: {_root_reason(exc)}; {_NOT_REACHED}"
    if isinstance(exc, ConnectionLostError):
        return f"lost the connection to {where}: {exc}; a broker may have stopped, try again"
    if isinstance(exc, RequestTimeoutError):
        return f"no answer from {where} in time: {exc}; see `ketch cluster status`"
    if isinstance(exc, DeliveryTimeoutError):
        return _describe_timeout(exc, where)
    if isinstance(exc, SaslAuthenticationError):
        return (
            f"authentication failed: {exc}; check sasl.mechanism, sasl.username and "
            "sasl.password in --command-config"
        )
    if isinstance(exc, AuthenticationError):
        return (
            f"authentication failed: {exc}; is the cluster secret this cluster's "
            "(--secret-file, <data-dir>/cluster.secret)?"
        )
    if isinstance(exc, KafkaError):
        return _with_advice(_describe_kafka_error(exc), exc.code, None)
    if isinstance(exc, OSError):
        return f"cannot reach {where}: {os_error_reason(exc)}; {_NOT_REACHED}"
    return str(exc) or type(exc).__name__


def _describe_kafka_error(exc: KafkaError) -> str:
    if exc.code is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
        return f"unknown topic or partition ({exc.code.name}): {exc.message or exc}"
    return f"the cluster refused: {error_reason(exc)}"


def _describe_timeout(exc: DeliveryTimeoutError, where: str) -> str:
    """A timeout names its last error (the client's message does); this adds what to do."""
    last = exc.__cause__
    if isinstance(last, NoBrokersAvailableError):
        return f"cannot reach {where}: {_root_reason(last)}; {_NOT_REACHED}"
    if isinstance(last, DeliveryTimeoutError):
        return _describe_timeout(last, where)  # a retry loop around another one
    message = f"timed out: {exc}"
    if isinstance(last, KafkaError):
        return _with_advice(message, last.code, exc.topic)
    if isinstance(last, ConnectionFailedError | ConnectionLostError | RequestTimeoutError):
        # One broker (a partition's leader) failed, not the whole list.
        return f"{message}; is a broker down? see `ketch cluster status`"
    return message


def _with_advice(message: str, code: ErrorCode, topic: str | None) -> str:
    hint = advice(code, topic)
    return f"{message}; {hint}" if hint else message


def _root_reason(exc: BaseException) -> str:
    """The operating system's words for a failed connection ("connection refused") when the
    chain of causes has them, else the innermost client error's message."""
    reason = str(exc)
    cause: BaseException | None = exc
    for _ in range(_CAUSE_DEPTH):
        if cause is None:
            break
        # The client's own errors are ConnectionErrors too (OSErrors): look past them.
        if isinstance(cause, OSError) and not isinstance(cause, ClientError):
            return os_error_reason(cause)
        reason = str(cause) or reason
        cause = cause.__cause__ or cause.__context__
    return reason


def _addresses(bootstrap: Sequence[Address]) -> str:
    return ",".join(str(a) for a in bootstrap)
