"""Typed errors of the async client, and which of them a retry may cure.

Broker answers come back as `wire.errors.KafkaError` (an error code); everything the client
itself detects is one of the `ClientError` subclasses below. `is_retriable()` says whether
sending the same request again may succeed: retriable Kafka codes, failed or lost connections
(also none of the brokers reachable: Kafka's clients keep trying their bootstrap list, with
reconnect.backoff.ms between attempts, until the caller's timeout) and request timeouts.
`invalidates_metadata()` says whether the client should also refresh its metadata first,
because the error means it talked to the wrong broker (Kafka's `InvalidMetadataException`
family) or lost the broker altogether.

`error_reason()` and `os_error_reason()` put an error in the words a message shows a user: the
Kafka error code's name with its detail, or the operating system's words for a failed
connection, never a Python repr.
"""

from __future__ import annotations

import os

from wire.errors import ErrorCode, KafkaError


class ClientError(Exception):
    """Base of the errors the client raises itself (not error codes sent by a broker)."""


class ConnectionFailedError(ClientError, ConnectionError):
    """Could not open a connection to a broker (refused, timed out); nothing was sent."""


class ConnectionLostError(ClientError, ConnectionError):
    """The connection broke while the request was in flight: it may or may not have been
    processed by the broker."""


class RequestTimeoutError(ClientError, TimeoutError):
    """No response within request.timeout.ms; the connection was reset (its order is lost)."""


class ClientClosedError(ClientError):
    """The client (or producer, consumer) was closed; pending requests fail with this."""


class AuthenticationError(ClientError):
    """The broker rejected the cluster credential; retrying with the same secret cannot help."""


class SaslAuthenticationError(AuthenticationError):
    """The broker refused a user's SASL login (client/sasl.py): a wrong password, an unknown
    user, a mechanism it does not enable. The message is the broker's; a retry fails alike."""


class UnknownBrokerError(ClientError):
    """A request addressed a node id the metadata does not list (it left, or metadata is old)."""


class NoBrokersAvailableError(ClientError, ConnectionError):
    """Neither a known broker nor any bootstrap address could be reached."""


class DeliveryTimeoutError(ClientError, TimeoutError):
    """A request (or record) could not be completed within its delivery timeout. The last
    error it met is its `__cause__` and is named in its message; `topic` is the records'
    topic when the error is a producer's (so a message can say where to look)."""

    def __init__(self, message: str, *, topic: str | None = None) -> None:
        super().__init__(message)
        self.topic = topic


# Kafka's InvalidMetadataException subclasses: the client's idea of who leads is wrong.
_METADATA_CODES = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.REPLICA_NOT_AVAILABLE,
        ErrorCode.KAFKA_STORAGE_ERROR,
        ErrorCode.UNKNOWN_TOPIC_ID,
        ErrorCode.INCONSISTENT_TOPIC_ID,
        ErrorCode.BROKER_NOT_AVAILABLE,
    }
)


_RETRIABLE_CLIENT_ERRORS = (
    ConnectionFailedError,
    ConnectionLostError,
    NoBrokersAvailableError,
    RequestTimeoutError,
    UnknownBrokerError,
)


def code_invalidates_metadata(code: int) -> bool:
    return ErrorCode.from_code(code) in _METADATA_CODES


def is_retriable(exc: BaseException) -> bool:
    if isinstance(exc, KafkaError):
        return exc.retriable
    return isinstance(exc, _RETRIABLE_CLIENT_ERRORS)


def invalidates_metadata(exc: BaseException) -> bool:
    if isinstance(exc, KafkaError):
        return exc.code in _METADATA_CODES
    return isinstance(exc, _RETRIABLE_CLIENT_ERRORS)


def error_reason(exc: BaseException) -> str:
    """`exc` as the reason in a message: `CODE (detail)` for a Kafka error, the client's own
    words otherwise (its connection errors already carry the operating system's)."""
    if isinstance(exc, KafkaError):
        return exc.code.name if not exc.message else f"{exc.code.name} ({exc.message})"
    return str(exc) or type(exc).__name__


def os_error_reason(exc: BaseException, *, timeout_ms: float | None = None) -> str:
    """Why a connection could not be opened, in the operating system's words ("connection
    refused"); a timeout says how long it waited when `timeout_ms` is given."""
    if isinstance(exc, TimeoutError) and exc.errno is None:
        return "timed out" if timeout_ms is None else f"no answer within {timeout_ms:.0f} ms"
    if isinstance(exc, OSError) and isinstance(exc.errno, int) and exc.errno > 0:
        # The errno's words: asyncio's own strerror is "Connect call failed ('host', port)".
        return os.strerror(exc.errno).lower()
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()  # a resolver error (negative errno): "name or service..."
    return str(exc) or type(exc).__name__


# -- transactions (client/transactions.py) ---------------------------------------------------------


class ProducerFencedError(KafkaError):
    """A newer instance of the producer (the same transactional id, or the same producer id under
    a newer epoch) exists: PRODUCER_FENCED or INVALID_PRODUCER_EPOCH. Fatal, as Kafka's
    ProducerFencedException: the producer fails every later call with it and must be closed."""


class TransactionStateError(ClientError):
    """A transactional call in a state that does not allow it (Kafka's IllegalStateException):
    `begin_transaction()` twice, `commit_transaction()` without a transaction, a `send()`
    outside one, a second call while one is still running. The producer's state is unchanged."""


class TransactionAbortableError(ClientError):
    """The open transaction can no longer commit (a record or a transactional request failed;
    the cause is chained): `abort_transaction()` works, and the producer can then begin another."""


class TransactionAbortedError(ClientError):
    """The record was never sent: its transaction was aborted (or became abortable) first."""
