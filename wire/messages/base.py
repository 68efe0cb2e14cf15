"""Typed messages: the base classes, the API-key registry and the generic body codec.

A message is a frozen, slotted, keyword-only dataclass whose fields are built from

    Int8, Int16, Int32, int             msgpack int within Kafka's int8/16/32/64 range
    bool, str, bytes, float             msgpack bool, str, bin, float
    Uuid                                bin of exactly 16 bytes (topic ids; ZERO_UUID = unset)
    X | None                            X or nil (only where the field says Optional)
    list[X]                             array of X
    a nested frozen dataclass           map of its fields (topics, partitions, ...)

and travels as the `body` map of an envelope (wire/envelope.py): one key per field, named as the
field. Field names are Kafka's JSON message-spec names in snake_case.

Codec. Each class gets an encoder and a decoder generated once, when the class is defined, from
its field types: straight-line Python that reads each key, checks its exact type (`type(v) is
int`, so a bool is not an int and bytes are not str) and range, recurses into nested dataclasses
and lists, and sets the fields. A body with a missing or unknown key, or any value of the wrong
type or out of range, raises `MessageError` naming the message and the path of the field (e.g.
`ProduceRequest.topic_data[0].partition_data[2].records: expected bytes, got str`). Encoding
trusts the dataclass (mypy checks its construction) and does no checks.

Responses. Every response has a top-level `error_code` (Kafka has one on most responses; ketch
adds it to all of them) for errors that concern the whole request: UNSUPPORTED_VERSION,
CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST, UNKNOWN_SERVER_ERROR from a failed handler. All
other response fields have defaults, so `Resp.error_response(code)` builds a well-formed error
answer for any request, and the bare body `{"error_code": N}` (from `error_body(N)`, what a
server sends when it cannot even name the response type) decodes to it, for any response class.

Registry. A concrete `Request` or `Response` subclass must define `API_KEY` and `API_VERSION` in
its own body; a request also names its `RESPONSE` class. Defining a second class for a taken
(key, version), or a class without them, raises at import time.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum
from typing import Annotated, Any, ClassVar, Self, TypeAlias, TypeVar

from wire.errors import ErrorCode, ProtocolError


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
    DESCRIBE_CONFIGS = 32
    SASL_AUTHENTICATE = 36
    ALTER_PARTITION = 56
    DESCRIBE_CLUSTER = 60
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    ALLOCATE_PRODUCER_IDS = 67


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
    }
)
"""APIs that only cluster members may call: they need the cluster credential."""


@dataclass(frozen=True, slots=True)
class FixedLen:
    """`Annotated` marker: a bytes field of exactly `size` bytes."""

    size: int


@dataclass(frozen=True, slots=True)
class IntRange:
    """`Annotated` marker: an int field limited to Kafka's fixed-width type `name`."""

    name: str
    low: int
    high: int


_INT8 = IntRange("int8", -(2**7), 2**7 - 1)
_INT16 = IntRange("int16", -(2**15), 2**15 - 1)
_INT32 = IntRange("int32", -(2**31), 2**31 - 1)
_INT64 = IntRange("int64", -(2**63), 2**63 - 1)
Int8: TypeAlias = Annotated[int, _INT8]
Int16: TypeAlias = Annotated[int, _INT16]
Int32: TypeAlias = Annotated[int, _INT32]
# A plain `int` field is Kafka's int64: msgpack could carry up to 2**64-1, which no field means.

UUID_BYTES = 16
Uuid: TypeAlias = Annotated[bytes, FixedLen(UUID_BYTES)]
"""A UUID as its 16 raw bytes (Kafka's wire form), e.g. a topic id."""
ZERO_UUID = bytes(UUID_BYTES)
"""Kafka's ZERO_UUID: "no id" (a topic whose id is not known or not asked for)."""


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


class _FieldError(Exception):
    """Raised inside generated decoders; `path` grows innermost-first while it unwinds."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path: list[str] = []

    def format_path(self) -> str:
        parts: list[str] = []
        for seg in reversed(self.path):
            parts.append(seg if seg.startswith("[") or not parts else "." + seg)
        return "".join(parts)


_M = TypeVar("_M", bound=type)
Encoder = Callable[[Any], Any]
Decoder = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class _Codec:
    encode: Encoder
    decode: Decoder


_codecs: dict[type, _Codec] = {}
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
        codec = _build_codec(cls)  # before registering, so a bad field type never registers
        _register(cls, final=True)
        _codecs[cls] = codec

    def to_body(self) -> dict[str, Any]:
        """The msgpack-ready map of this message's fields."""
        body: dict[str, Any] = _codecs[type(self)].encode(self)
        return body

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Self:
        """Decode and type-check a body; raises MessageError naming the bad field."""
        try:
            msg: Self = _codecs[cls].decode(body)
        except _FieldError as exc:
            raise MessageError(cls.__name__, exc.format_path(), exc.reason) from None
        return msg


@dataclass(frozen=True, slots=True)
class Response(Message):
    """A response; `error_code` is a request-level error (NONE when only parts failed)."""

    error_code: Int16 = dataclasses.field(default=0, kw_only=True)

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


# -- codec generation ----------------------------------------------------------------------------
#
# Every field type is reduced to scalars, options, lists and nested dataclasses. A class's
# generated decoder checks its scalar and optional-scalar fields inline (one expression each, no
# call); lists and nested dataclasses cost one call each to their own (also generated) decoders.


@dataclass(frozen=True, slots=True)
class _Scalar:
    """A leaf type: `test` is an expression over `{v}` that is true for an acceptable value."""

    test: str
    desc: str

    def ok(self, var: str) -> str:
        return self.test.format(v=var)


def _int_scalar(bounds: IntRange) -> _Scalar:
    return _Scalar(f"type({{v}}) is int and {bounds.low} <= {{v}} <= {bounds.high}", bounds.name)


_SCALARS: dict[Any, _Scalar] = {
    int: _int_scalar(_INT64),
    bool: _Scalar("type({v}) is bool", "bool"),
    str: _Scalar("type({v}) is str", "str"),
    bytes: _Scalar("type({v}) is bytes", "bytes"),
    float: _Scalar("type({v}) is float", "float"),
}


def _describe(value: Any) -> str:
    """How an unacceptable value is shown in an error: its type, and its size or value if the
    type was right but the value was not."""
    if value is None:
        return "nil"
    if type(value) is int:
        return f"int {value}"
    if type(value) is bytes:
        return f"bytes of length {len(value)}"
    return type(value).__name__


def _codec_for(cls: type) -> _Codec:
    codec = _codecs.get(cls)
    if codec is None:
        codec = _codecs[cls] = _build_codec(cls)
    return codec


def _build_codec(cls: type) -> _Codec:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__qualname__} is not a dataclass")
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in dataclasses.fields(cls)]
    env: dict[str, Any] = {
        "_cls": cls,
        "_FieldError": _FieldError,
        "_bad": _bad,
        "_describe": _describe,
        "_slow": _slow_path(cls, frozenset(names)),
    }
    enc_items = [f"{n!r}: {_enc_expr(hints[n], f'o.{n}', env, 0)}" for n in names]
    exec("def encode(o):\n    return {" + ", ".join(enc_items) + "}\n", env)

    lines = [
        "def decode(body):",
        "    if type(body) is not dict:",
        "        raise _FieldError(f'expected map, got {_describe(body)}')",
        f"    if len(body) != {len(names)}:",
        "        return _slow(body)",
        "    try:",
        "        " + ("; ".join(f"v{i} = body[{n!r}]" for i, n in enumerate(names)) or "pass"),
        "    except KeyError:",
        "        return _slow(body)",
    ]
    for i, n in enumerate(names):
        lines.extend("    " + line for line in _dec_field(hints[n], n, f"v{i}", env))
    if hasattr(cls, "__post_init__") or "__slots__" not in cls.__dict__:
        lines.append("    return _cls(" + ", ".join(f"{n}=v{i}" for i, n in enumerate(names)) + ")")
    else:
        # Setting the slots through their descriptors skips the frozen __init__'s per-field
        # object.__setattr__ calls: half the cost of decoding a small struct. Every field is set,
        # so defaults play no part.
        env["_new"] = object.__new__
        lines.append("    o = _new(_cls)")
        for i, n in enumerate(names):
            env[f"_set{i}"] = getattr(cls, n).__set__
            lines.append(f"    _set{i}(o, v{i})")
        lines.append("    return o")
    # The source is built only from the class's own field names and types, never from input.
    exec("\n".join(lines) + "\n", env)
    return _Codec(encode=env["encode"], decode=env["decode"])


def _slow_path(cls: type, names: frozenset[str]) -> Decoder:
    """Called only when the key set is wrong: an error-only response, or a MessageError."""
    response = issubclass(cls, Response)
    check_error_code = _scalar_decoder(_int_scalar(_INT16))

    def slow(body: dict[Any, Any]) -> Any:
        if response and body.keys() == {"error_code"}:
            try:
                code = check_error_code(body["error_code"])
            except _FieldError as exc:
                exc.path.append("error_code")
                raise
            return cls(error_code=code)
        missing = sorted(names - body.keys())
        if missing:
            err = _FieldError("missing field")
            err.path.append(missing[0])
            raise err
        extra = sorted(repr(k) for k in body.keys() - names)
        raise _FieldError(f"unknown field(s) {', '.join(extra)}")

    return slow


def _unwrap(hint: Any) -> tuple[str, Any]:
    """Classify a field type: ("scalar", _Scalar) | ("opt", inner) | ("list", inner) |
    ("dc", class)."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *meta = typing.get_args(hint)
        for mark in meta:
            if isinstance(mark, FixedLen) and base is bytes:
                desc = f"{mark.size} bytes"
                return "scalar", _Scalar(
                    f"type({{v}}) is bytes and len({{v}}) == {mark.size}", desc
                )
            if isinstance(mark, IntRange) and base is int:
                return "scalar", _int_scalar(mark)
        return _unwrap(base)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1 or len(typing.get_args(hint)) != 2:
            raise TypeError(f"unsupported union {hint!r}: only X | None")
        return "opt", args[0]
    if origin is list:
        (inner,) = typing.get_args(hint)
        return "list", inner
    if hint in _SCALARS:
        return "scalar", _SCALARS[hint]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return "dc", hint
    raise TypeError(f"unsupported field type {hint!r}")


def _enc_expr(hint: Any, src: str, env: dict[str, Any], depth: int) -> str:
    """An expression turning `src` (a field value) into its msgpack-ready form."""
    kind, arg = _unwrap(hint)
    if kind == "scalar":
        return src
    if kind == "dc":
        name = f"_enc_{arg.__name__}"
        env[name] = _codec_for(arg).encode
        return f"{name}({src})"
    var = f"x{depth}"
    inner = _enc_expr(arg, var, env, depth + 1)
    if inner == var:
        return src  # lists and options of scalars are already msgpack-ready
    if kind == "opt":
        return f"(None if ({var} := {src}) is None else {inner})"
    return f"[{inner} for {var} in {src}]"


def _dec_field(hint: Any, name: str, var: str, env: dict[str, Any]) -> list[str]:
    """Statements that check (and, for nested types, convert) local `var` holding field `name`."""
    kind, arg = _unwrap(hint)
    if kind == "scalar":
        return [f"if not ({arg.ok(var)}): raise _bad({name!r}, {arg.desc!r}, {var})"]
    if kind == "opt" and _unwrap(arg)[0] == "scalar":
        scalar = _unwrap(arg)[1]
        test = f"{var} is not None and not ({scalar.ok(var)})"
        return [f"if {test}: raise _bad({name!r}, {scalar.desc + ' or nil'!r}, {var})"]
    dec = f"_dec_{name}"
    env[dec] = _decoder(hint)
    return [
        "try:",
        f"    {var} = {dec}({var})",
        "except _FieldError as e:",
        f"    e.path.append({name!r})",
        "    raise",
    ]


def _bad(name: str, expected: str, value: Any) -> _FieldError:
    err = _FieldError(f"expected {expected}, got {_describe(value)}")
    err.path.append(name)
    return err


def _decoder(hint: Any) -> Decoder:
    """A function that checks one value of type `hint` and returns it decoded."""
    kind, arg = _unwrap(hint)
    if kind == "dc":
        return _codec_for(arg).decode
    if kind == "scalar":
        return _scalar_decoder(arg)
    if kind == "opt":
        inner = _decoder(arg)
        return lambda v: None if v is None else inner(v)
    if _unwrap(arg)[0] == "scalar":
        return _scalar_list_decoder(_unwrap(arg)[1])
    return _list_decoder(_decoder(arg))


def _scalar_decoder(scalar: _Scalar) -> Decoder:
    env: dict[str, Any] = {"_FieldError": _FieldError, "_describe": _describe}
    src = (
        "def check(v):\n"
        f"    if not ({scalar.ok('v')}):\n"
        f"        raise _FieldError(f'expected {scalar.desc}, got {{_describe(v)}}')\n"
        "    return v\n"
    )
    exec(src, env)
    check: Decoder = env["check"]
    return check


def _scalar_list_decoder(scalar: _Scalar) -> Decoder:
    env: dict[str, Any] = {"_FieldError": _FieldError, "_describe": _describe, "_bad": _bad}
    src = (
        "def check(v):\n"
        "    if type(v) is not list:\n"
        f"        raise _FieldError(f'expected list of {scalar.desc}, got {{_describe(v)}}')\n"
        "    for i, x in enumerate(v):\n"
        f"        if not ({scalar.ok('x')}):\n"
        f"            raise _bad(f'[{{i}}]', {scalar.desc!r}, x)\n"
        "    return v\n"
    )
    exec(src, env)
    check: Decoder = env["check"]
    return check


def _list_decoder(inner: Decoder) -> Decoder:
    def decode(v: Any) -> Any:
        if type(v) is not list:
            raise _FieldError(f"expected list, got {_describe(v)}")
        try:
            return [inner(x) for x in v]
        except _FieldError:
            pass
        # Slow path, only on error: find which item failed, for the error's path.
        for i, x in enumerate(v):
            try:
                inner(x)
            except _FieldError as exc:
                exc.path.append(f"[{i}]")
                raise
        raise AssertionError("list decoder failed once and then succeeded")

    return decode
