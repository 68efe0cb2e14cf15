"""Typed messages: the base classes, the API-key registry and the request-level errors.

A message is a frozen, slotted, keyword-only dataclass of the field types in
wire/messages/fields.py, which also generates each class's body codec when the class is first
used (`Message.to_body` / `Message.from_body` use it).

Responses. Every response has a top-level `error_code` (Kafka has one on most responses; ketch
adds it to all of them) for errors that concern the whole request: UNSUPPORTED_VERSION,
CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, UNKNOWN_SERVER_ERROR from a failed handler. All
other response fields have defaults, so `Resp.error_response(code)` builds a well-formed error
answer for any request, and the bare body `{"error_code": N}` (from `error_body(N)`, what a
server sends when it cannot even name the response type) decodes to it, for any response class.
Every response also has `throttle_time_ms` (Kafka has it on nearly every response): the time a
client quota asks the client to wait (0 unless node/broker/quotas.py throttled the request).

Registry. A concrete `Request` or `Response` subclass must define `API_KEY` and `API_VERSION` in
its own body; a request also names its `RESPONSE` class. Defining a second class for a taken
(key, version), or a class without them, raises at import time. The registry is filled while
the message modules are imported and only read afterwards.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, ClassVar, Self, TypeVar

from wire.errors import ErrorCode, ProtocolError
from wire.messages.fields import Codec, FieldError, Int16, Int32, build_codec, codecs


class ApiKey(IntEnum):
    """Kafka's API keys, for the APIs ketch implements now or has reserved."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    ALTER_PARTITION = 56
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


CONTROL_PLANE_API_KEYS: frozenset[int] = frozenset(
    {
        ApiKey.LEADER_AND_ISR,
        ApiKey.STOP_REPLICA,
        ApiKey.UPDATE_METADATA,
        ApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.ALTER_PARTITION,
        ApiKey.BROKER_REGISTRATION,
        ApiKey.BROKER_HEARTBEAT,
        ApiKey.ALLOCATE_PRODUCER_IDS,
        ApiKey.WRITE_TXN_MARKERS,
    }
)
"""APIs that only cluster members may call: they need the cluster credential."""


class MessageError(ProtocolError):
    """A body that does not match its message's fields."""

    def __init__(self, message_name: str, field_path: str, reason: str) -> None:
        self.message_name = message_name
        self.field_path = field_path
        self.reason = reason
        where = f"{message_name}.{field_path}" if field_path else message_name
        super().__init__(f"{where}: {reason}")


class UnsupportedVersionError(ProtocolError):
    """No request class is registered for this API key and version."""

    def __init__(self, api_key: int, api_version: int) -> None:
        self.api_key = api_key
        self.api_version = api_version
        super().__init__(f"unsupported API key {api_key} version {api_version}")


_M = TypeVar("_M", bound=type)

_requests: dict[tuple[int, int], type[Request]] = {}
_responses: dict[tuple[int, int], type[Response]] = {}
_pending: dict[str, type] = {}  # classes seen by __init_subclass__ but not yet made dataclasses


@dataclass(frozen=True, slots=True)
class Message:
    """Base of all requests and responses."""

    API_KEY: ClassVar[int]
    API_VERSION: ClassVar[int]

    def __init_subclass__(cls) -> None:
        if cls.__module__ == __name__:
            return  # Request and Response themselves
        # @dataclass(slots=True) builds a second class from the first: only that one is final.
        if "__dataclass_fields__" not in cls.__dict__:
            _register(cls, final=False)
            return
        # The codec is generated when the class is first encoded or decoded (`_codec`), not
        # here: generating all ~170 at import cost every process (each `ketch` command, each
        # node) about 70 ms. `build_all_codecs()` generates them at once; a test calls it, so a
        # field type the generator cannot handle still fails before it ships.
        _register(cls, final=True)

    def to_body(self) -> dict[str, Any]:
        """The msgpack-ready map of this message's fields."""
        cls = type(self)
        codec = codecs.get(cls) or _codec(cls)
        body: dict[str, Any] = codec.encode(self)
        return body

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Self:
        """Decode and type-check a body; raises MessageError naming the bad field."""
        codec = codecs.get(cls) or _codec(cls)
        try:
            msg: Self = codec.decode(body)
        except FieldError as exc:
            raise MessageError(cls.__name__, exc.format_path(), exc.reason) from None
        return msg


@dataclass(frozen=True, slots=True)
class Response(Message):
    """A response; `error_code` is a request-level error (NONE when only parts failed)."""

    error_code: Int16 = dataclasses.field(default=0, kw_only=True)
    # How long the client must wait before its next request (client quotas, KIP-219): the
    # broker's quota layer sets it (node/broker/quotas.py) and the server then mutes the
    # connection that long (runtime/net/server.py). 0 everywhere else.
    throttle_time_ms: Int32 = dataclasses.field(default=0, kw_only=True)

    @classmethod
    def error_response(cls, code: ErrorCode | int) -> Self:
        """This response with `error_code` set and every other field at its empty default."""
        return cls(error_code=int(code))

    @property
    def error(self) -> ErrorCode:
        return ErrorCode.from_code(self.error_code)


@dataclass(frozen=True, slots=True)
class Request(Message):
    """A request; `RESPONSE` is the class that answers it."""

    RESPONSE: ClassVar[type[Response]]


def error_body(code: ErrorCode | int) -> dict[str, Any]:
    """A response body that every response class decodes as `error_response(code)`."""
    return {"error_code": int(code)}


def request_class(api_key: int, api_version: int) -> type[Request]:
    """The request class for (key, version); raises UnsupportedVersionError if none."""
    try:
        return _requests[(api_key, api_version)]
    except KeyError:
        raise UnsupportedVersionError(api_key, api_version) from None


def supported_versions() -> dict[int, tuple[int, int]]:
    """API key -> (min version, max version) over registered requests, for ApiVersions."""
    out: dict[int, tuple[int, int]] = {}
    for key, version in _requests:
        low, high = out.get(key, (version, version))
        out[key] = (min(low, version), max(high, version))
    return dict(sorted(out.items()))


def registered_requests() -> list[type[Request]]:
    """Every registered request class, by (API key, version)."""
    return [cls for _, cls in sorted(_requests.items())]


def check_registry() -> None:
    """Raise TypeError if a message class was declared without @dataclass (so never registered)."""
    if _pending:
        raise TypeError(f"message classes must be @dataclass(slots=True): {sorted(_pending)}")


# -- registration --------------------------------------------------------------------------------


def _codec(cls: type[Message]) -> Codec:
    """Generate a message class's codec on its first use (raises TypeError for a field type
    the generator does not support)."""
    codec = codecs[cls] = build_codec(cls, error_only_body=issubclass(cls, Response))
    return codec


def build_all_codecs() -> int:
    """Generate every registered message's codec now; how many there are."""
    classes = [*_requests.values(), *_responses.values()]
    for cls in classes:
        if cls not in codecs:
            _codec(cls)
    return len(classes)


def _register(cls: type[Message], final: bool) -> None:
    """Check a message class and, once @dataclass has made its final (slotted) form, register it.

    The draft class Python creates first is only checked and remembered as pending, so a class
    whose dataclass processing fails never lands in the registry, and one that was never made a
    dataclass stays pending (check_registry() reports it).
    """
    for name in ("API_KEY", "API_VERSION"):
        value = cls.__dict__.get(name)
        if type(value) is not int and not isinstance(value, IntEnum):
            raise TypeError(f"{cls.__qualname__} must define {name} as an int in its own body")
    key = (int(cls.API_KEY), int(cls.API_VERSION))
    if issubclass(cls, Request):
        response = cls.__dict__.get("RESPONSE")
        if not (isinstance(response, type) and issubclass(response, Response)):
            raise TypeError(f"{cls.__qualname__} must name its RESPONSE class")
        if key != (response.API_KEY, response.API_VERSION):
            raise TypeError(f"{cls.__qualname__}.RESPONSE has a different API key or version")
        _claim(_requests, key, cls, final)
    elif issubclass(cls, Response):
        if final:
            missing = [f.name for f in dataclasses.fields(cls) if not _has_default(f)]
            if missing:
                raise TypeError(f"{cls.__qualname__}: response fields need defaults: {missing}")
        _claim(_responses, key, cls, final)
    else:
        raise TypeError(f"{cls.__qualname__} must derive from Request or Response")


def _claim(table: dict[tuple[int, int], _M], key: tuple[int, int], cls: _M, final: bool) -> None:
    existing = table.get(key)
    if existing is not None:
        raise TypeError(
            f"API key {key[0]} version {key[1]} is already registered to {existing.__qualname__}"
        )
    name = f"{cls.__module__}.{cls.__qualname__}"
    if final:
        _pending.pop(name, None)
        table[key] = cls
    else:
        _pending[name] = cls


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
