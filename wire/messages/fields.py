"""Message field types and the body codec generated from them — sans-IO.

A message (wire/messages/base.py) is a frozen, slotted, keyword-only dataclass whose fields are
built from

    Int8, Int16, Int32, int             msgpack int within Kafka's int8/16/32/64 range
    bool, str, bytes, float             msgpack bool, str, bin, float
    Uuid                                bin of exactly 16 bytes (topic ids; ZERO_UUID = unset)
    RecordSet                           bin; bytes or a memoryview (msgpack decodes bytes)
    X | None                            X or nil (only where the field says Optional)
    list[X]                             array of X
    a nested frozen dataclass           map of its fields (topics, partitions, ...)

and travels as the `body` map of an envelope (wire/envelope.py): one key per field, named as the
field. Field names are Kafka's JSON message-spec names in snake_case.

Codec. Each class gets an encoder and a decoder generated once, when it is first encoded or
decoded (base.py says why not at definition), from its field types: straight-line Python that
reads each key, checks its exact type (`type(v) is int`, so a bool is not an int and bytes are
not str) and range, recurses into nested dataclasses and lists, and sets the fields. A body
with a missing or unknown key, or any value of the wrong type or out of range, raises
`FieldError`, which the message base turns into a `MessageError` naming the message and the
path of the field (e.g.
`ProduceRequest.topic_data[0].partition_data[2].records: expected bytes, got str`). Encoding
trusts the dataclass (mypy checks its construction) and does no checks. A response's decoder
also accepts the bare body `{"error_code": N}` (see base.py, "Responses").
A response's `throttle_time_ms` is left out of its body while it is 0 (`OMITTED_WHEN_ZERO`).

State: `codecs`, the generated codecs by class, filled while message modules are imported (and
when a nested dataclass is first met), only read afterwards.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Final, TypeAlias


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


@dataclass(frozen=True, slots=True)
class AnyBuffer:
    """`Annotated` marker: a field that holds bytes or a memoryview (sent alike as a bin)."""


RecordSet: TypeAlias = Annotated[bytes | memoryview, AnyBuffer()]
"""Record batches: bytes, or a read-only view (of a request frame, of what a log read) that
reaches the disk or the socket without a copy. msgpack decodes a bin as bytes; a body built in
process may still hold the view."""

UUID_BYTES = 16
Uuid: TypeAlias = Annotated[bytes, FixedLen(UUID_BYTES)]
"""A UUID as its 16 raw bytes (Kafka's wire form), e.g. a topic id."""
ZERO_UUID = bytes(UUID_BYTES)
"""Kafka's ZERO_UUID: "no id" (a topic whose id is not known or not asked for)."""


class FieldError(Exception):
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


Encoder = Callable[[Any], Any]
Decoder = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class Codec:
    """A class's generated pair: `encode` (object -> body map), `decode` (body map -> object)."""

    encode: Encoder
    decode: Decoder


OMITTED_WHEN_ZERO: Final = "throttle_time_ms"
"""The one response field left out of a body while it is 0 (the Response base class's
`throttle_time_ms`, client quotas): a native answer pays nothing for it unless a quota
throttled the request, and a body without it (from a peer that predates it) decodes as 0."""

codecs: dict[type, Codec] = {}
"""The generated codec of every message class and nested dataclass seen so far."""


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


def _codec_for(cls: type) -> Codec:
    """The codec of a nested dataclass (never a response), generated when first met."""
    codec = codecs.get(cls)
    if codec is None:
        codec = codecs[cls] = build_codec(cls, error_only_body=False)
    return codec


def build_codec(cls: type, *, error_only_body: bool) -> Codec:
    """Generate `cls`'s encoder and decoder; raises TypeError for an unsupported field type.

    With `error_only_body` (a response class) the decoder also accepts ``{"error_code": N}``
    and builds ``cls(error_code=N)``, every other field at its default.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__qualname__} is not a dataclass")
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in dataclasses.fields(cls)]
    env: dict[str, Any] = {
        "_cls": cls,
        "FieldError": FieldError,
        "_bad": _bad,
        "_describe": _describe,
        "_slow": _slow_path(cls, frozenset(names), error_only_body),
    }
    # A response's throttle_time_ms is on the wire only when it is not 0 (OMITTED_WHEN_ZERO).
    omitted = OMITTED_WHEN_ZERO if error_only_body and OMITTED_WHEN_ZERO in names else None
    enc_items = [f"{n!r}: {_enc_expr(hints[n], f'o.{n}', env, 0)}" for n in names if n != omitted]
    encoder = ["def encode(o):", "    d = {" + ", ".join(enc_items) + "}"]
    if omitted is not None:
        encoder.append(f"    if o.{omitted}:")
        value = _enc_expr(hints[omitted], f"o.{omitted}", env, 0)
        encoder.append(f"        d[{omitted!r}] = {value}")
    encoder.append("    return d")
    exec("\n".join(encoder) + "\n", env)

    if omitted is None:
        size_check = [f"    if len(body) != {len(names)}:", "        return _slow(body)"]
    else:
        size_check = [
            f"    if len(body) != ({len(names)} if {omitted!r} in body else {len(names) - 1}):",
            "        return _slow(body)",
        ]
    fetches = [
        f"v{i} = body.get({n!r}, 0)" if n == omitted else f"v{i} = body[{n!r}]"
        for i, n in enumerate(names)
    ]
    lines = [
        "def decode(body):",
        "    if type(body) is not dict:",
        "        raise FieldError(f'expected map, got {_describe(body)}')",
        *size_check,
        "    try:",
        "        " + ("; ".join(fetches) or "pass"),
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
    return Codec(encode=env["encode"], decode=env["decode"])


def _slow_path(cls: type, names: frozenset[str], response: bool) -> Decoder:
    """Called only when the key set is wrong: an error-only response, or a MessageError."""
    check_error_code = _scalar_decoder(_int_scalar(_INT16))

    def slow(body: dict[Any, Any]) -> Any:
        if response and body.keys() == {"error_code"}:
            try:
                code = check_error_code(body["error_code"])
            except FieldError as exc:
                exc.path.append("error_code")
                raise
            return cls(error_code=code)
        optional = {OMITTED_WHEN_ZERO} if response else set()
        missing = sorted(names - body.keys() - optional)
        if missing:
            err = FieldError("missing field")
            err.path.append(missing[0])
            raise err
        extra = sorted(repr(k) for k in body.keys() - names)
        raise FieldError(f"unknown field(s) {', '.join(extra)}")

    return slow


def _unwrap(hint: Any) -> tuple[str, Any]:
    """Classify a field type: ("scalar", _Scalar) | ("opt", inner) | ("list", inner) |
    ("dc", class)."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *meta = typing.get_args(hint)
        for mark in meta:
            if isinstance(mark, AnyBuffer):
                return "scalar", _Scalar("type({v}) is bytes or type({v}) is memoryview", "bytes")
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
        "except FieldError as e:",
        f"    e.path.append({name!r})",
        "    raise",
    ]


def _bad(name: str, expected: str, value: Any) -> FieldError:
    err = FieldError(f"expected {expected}, got {_describe(value)}")
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
    env: dict[str, Any] = {"FieldError": FieldError, "_describe": _describe}
    src = (
        "def check(v):\n"
        f"    if not ({scalar.ok('v')}):\n"
        f"        raise FieldError(f'expected {scalar.desc}, got {{_describe(v)}}')\n"
        "    return v\n"
    )
    exec(src, env)
    check: Decoder = env["check"]
    return check


def _scalar_list_decoder(scalar: _Scalar) -> Decoder:
    env: dict[str, Any] = {"FieldError": FieldError, "_describe": _describe, "_bad": _bad}
    src = (
        "def check(v):\n"
        "    if type(v) is not list:\n"
        f"        raise FieldError(f'expected list of {scalar.desc}, got {{_describe(v)}}')\n"
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
            raise FieldError(f"expected list, got {_describe(v)}")
        try:
            return [inner(x) for x in v]
        except FieldError:
            pass
        # Slow path, only on error: find which item failed, for the error's path.
        for i, x in enumerate(v):
            try:
                inner(x)
            except FieldError as exc:
                exc.path.append(f"[{i}]")
                raise
        raise AssertionError("list decoder failed once and then succeeded")

    return decode
