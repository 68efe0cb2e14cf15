"""Field-by-field conversion between ketch's native messages and kio's Kafka entities.

ketch's native messages use Kafka's field names in snake_case, so one converter serves every API:
a kio entity class (one per API version) and a native dataclass meet on field names. Where the
two spell a field differently it is always the same rule: kio turns Kafka's `*Ms` durations and
times into `timedelta` / `datetime` fields without the suffix (`timeout` for `TimeoutMs`), the
native messages keep integer milliseconds (`timeout_ms`). The other type differences are fixed
ones: error codes (kio's enum vs int), topic ids (`uuid.UUID` vs 16 bytes), null record sets
(None vs b"").

Converting *to* kio fills what the native message does not carry with what Kafka sends for it:
kio's own default where it has one, zero throttle time, error NONE, false flags, null strings,
empty arrays.
An integer field with neither a native value nor a kio default is a schema mismatch (a bug, found
by the tests that encode every advertised version): it raises `SchemaMismatch` rather than
inventing a number.

Conversion plans are built once per (source class, target class) and cached, so the per-request
cost is a loop over precomputed steps.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
import uuid
from collections.abc import Callable
from types import NoneType, UnionType
from typing import Any, Final, TypeVar

from kio.schema.errors import ErrorCode as KioErrorCode

from wire.messages.fields import ZERO_UUID

T = TypeVar("T")

_MS: Final = "_ms"
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_TIME_TYPES: Final = frozenset({"timedelta_i32", "timedelta_i64", "datetime_i64"})
_MISSING: Final = dataclasses.MISSING


class SchemaMismatch(TypeError):
    """A native message and a kio entity do not line up (a bug in ketch, not in a request)."""


Step = Callable[[Any, dict[str, Any]], None]
"""One field's conversion: read it from the source object, store it in the target kwargs."""


# -- native -> kio ---------------------------------------------------------------------------------


def to_kio(value: object, cls: type[T], **given: Any) -> T:
    """The kio entity `cls` holding `value`'s fields (a native message or nested struct);
    `given` fields are taken as they are instead (what a caller converts by other rules)."""
    kwargs: dict[str, Any] = dict(given)
    for name, step in _kio_plan(type(value), cls):
        if name not in given:
            step(value, kwargs)
    return cls(**kwargs)


_kio_plans: dict[tuple[type, type], list[tuple[str, Step]]] = {}


def _kio_plan(source: type, target: type) -> list[tuple[str, Step]]:
    plan = _kio_plans.get((source, target))
    if plan is None:
        names = {f.name for f in dataclasses.fields(source)}
        plan = [
            (field.name, _kio_step(field, names, target)) for field in dataclasses.fields(target)
        ]
        _kio_plans[(source, target)] = plan
    return plan


def _kio_step(field: dataclasses.Field[Any], names: set[str], target: type) -> Step:
    name = field.name
    kafka_type = field.metadata.get("kafka_type")
    source = name + _MS if kafka_type in _TIME_TYPES else name
    inner, is_array, optional = _shape(field.type)
    if source not in names:
        return _filler(field, kafka_type, is_array, optional, target)
    if dataclasses.is_dataclass(inner):
        entity = typing.cast(type[Any], inner)
        if is_array:
            return _store(
                name, source, lambda v: None if v is None else tuple(to_kio(i, entity) for i in v)
            )
        return _store(name, source, lambda v: None if v is None else to_kio(v, entity))
    if is_array:
        return _store(name, source, lambda v: None if v is None else tuple(v))
    convert = _KIO_PRIMITIVES.get(kafka_type or "")
    if convert is None:
        if kafka_type in _EMPTY_FOR_NULL and not optional:
            # A field nullable in newer versions only (JoinGroup's protocol_name before v7):
            # Kafka writes the empty value where the version cannot say null.
            empty = _EMPTY_FOR_NULL[kafka_type]
            return _store(name, source, lambda v: empty if v is None else v)
        return _store(name, source, None)
    if kafka_type == "datetime_i64" and optional:
        return _store(name, source, _optional_datetime)
    return _store(name, source, convert)


def _store(name: str, source: str, convert: Callable[[Any], Any] | None) -> Step:
    if convert is None:

        def step(value: Any, kwargs: dict[str, Any]) -> None:
            kwargs[name] = getattr(value, source)

    else:

        def step(value: Any, kwargs: dict[str, Any]) -> None:
            kwargs[name] = convert(getattr(value, source))

    return step


def _filler(
    field: dataclasses.Field[Any],
    kafka_type: str | None,
    is_array: bool,
    optional: bool,
    target: type,
) -> Step:
    """What Kafka sends for a field the native message does not have."""
    if field.default is not _MISSING or field.default_factory is not _MISSING:
        return _skip
    filler: object
    if is_array:
        filler = ()
    elif kafka_type == "error_code":
        filler = KioErrorCode.none
    elif kafka_type in ("timedelta_i32", "timedelta_i64"):
        filler = datetime.timedelta(0)
    elif kafka_type == "bool":
        filler = False  # Kafka's type default for a flag its schema gives no default
    elif optional:
        filler = None
    else:
        raise SchemaMismatch(
            f"{target.__module__}.{target.__name__}.{field.name} ({kafka_type}) has no native "
            "value and no default"
        )
    name = field.name

    def step(value: Any, kwargs: dict[str, Any]) -> None:
        kwargs[name] = filler

    return step


def _skip(value: Any, kwargs: dict[str, Any]) -> None:
    """The kio default applies."""


def _error_code(code: int) -> KioErrorCode:
    try:
        return KioErrorCode(code)
    except ValueError:
        return KioErrorCode.unknown_server_error


def _timedelta(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def _datetime(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def _optional_datetime(ms: int) -> datetime.datetime | None:
    # Kafka's -1 ("no time", e.g. log append time under CreateTime) is kio's None.
    return None if ms < 0 else _EPOCH + datetime.timedelta(milliseconds=ms)


def _uuid(raw: bytes) -> uuid.UUID:
    return uuid.UUID(bytes=bytes(raw))


_EMPTY_FOR_NULL: Final[dict[str, object]] = {"string": "", "bytes": b""}

_KIO_PRIMITIVES: Final[dict[str, Callable[[Any], Any]]] = {
    "error_code": _error_code,
    "timedelta_i32": _timedelta,
    "timedelta_i64": _timedelta,
    "datetime_i64": _datetime,
    "uuid": _uuid,
}


# -- kio -> native ---------------------------------------------------------------------------------


def to_native(entity: object, cls: type[T], **given: Any) -> T:
    """The native message (or nested struct) `cls` holding a kio entity's fields; `given`
    fields are taken as they are instead."""
    kwargs: dict[str, Any] = dict(given)
    for name, step in _native_plan(type(entity), cls):
        if name not in given:
            step(entity, kwargs)
    return cls(**kwargs)


_native_plans: dict[tuple[type, type], list[tuple[str, Step]]] = {}


def _native_plan(source: type, target: type) -> list[tuple[str, Step]]:
    plan = _native_plans.get((source, target))
    if plan is None:
        kio_fields = {f.name: f for f in dataclasses.fields(source)}
        hints = typing.get_type_hints(target)
        plan = []
        for field in dataclasses.fields(target):
            step = _native_step(field.name, hints[field.name], kio_fields)
            if step is not None:
                plan.append((field.name, step))
        _native_plans[(source, target)] = plan
    return plan


def _native_step(
    name: str, hint: Any, kio_fields: dict[str, dataclasses.Field[Any]]
) -> Step | None:
    field = kio_fields.get(name)
    if field is None and name.endswith(_MS):
        field = kio_fields.get(name[: -len(_MS)])
    if field is None:
        return None  # this version does not carry it: the native default applies
    source = field.name
    kafka_type = field.metadata.get("kafka_type")
    inner, is_array, _ = _shape(field.type)
    if dataclasses.is_dataclass(inner):
        native_inner = _native_item_type(hint, name)
        if is_array:
            return _store(
                name,
                source,
                lambda v: None if v is None else [to_native(e, native_inner) for e in v],
            )
        return _store(name, source, lambda v: None if v is None else to_native(v, native_inner))
    if is_array:
        return _store(name, source, lambda v: None if v is None else list(v))
    convert = _NATIVE_PRIMITIVES.get(kafka_type or "")
    return _store(name, source, convert)


def _native_item_type(hint: Any, name: str) -> type[Any]:
    """`X` of a native field typed `list[X]`, `list[X] | None` or `X | None`."""
    for candidate in (hint, *typing.get_args(hint)):
        if typing.get_origin(candidate) is list:
            (item,) = typing.get_args(candidate)
            return typing.cast(type[Any], item)
        if dataclasses.is_dataclass(candidate):
            return typing.cast(type[Any], candidate)
    raise SchemaMismatch(f"native field {name} ({hint}) holds no message type")


def _ms_of_timedelta(value: datetime.timedelta) -> int:
    return value // datetime.timedelta(milliseconds=1)


def _ms_of_datetime(value: datetime.datetime | None) -> int:
    return -1 if value is None else (value - _EPOCH) // datetime.timedelta(milliseconds=1)


def _uuid_bytes(value: uuid.UUID | None) -> bytes:
    return ZERO_UUID if value is None else value.bytes


def _records(value: bytes | None) -> bytes:
    return b"" if value is None else bytes(value)


_NATIVE_PRIMITIVES: Final[dict[str, Callable[[Any], Any]]] = {
    "error_code": int,
    "timedelta_i32": _ms_of_timedelta,
    "timedelta_i64": _ms_of_timedelta,
    "datetime_i64": _ms_of_datetime,
    "uuid": _uuid_bytes,
    "records": _records,
}


# -- kio field shapes ------------------------------------------------------------------------------


def element_class(cls: type[Any], name: str) -> type[Any]:
    """The entity class of field `name` of kio class `cls` (of its elements, for an array)."""
    inner, _, _ = _shape(cls.__dataclass_fields__[name].type)
    assert dataclasses.is_dataclass(inner), (cls, name)
    return typing.cast(type[Any], inner)


def _shape(annotation: Any) -> tuple[Any, bool, bool]:
    """(element type, is an array, is nullable) of a kio field's annotation."""
    optional = False
    if typing.get_origin(annotation) in (UnionType, typing.Union):
        args = [a for a in typing.get_args(annotation) if a is not NoneType]
        optional = len(args) < len(typing.get_args(annotation))
        annotation = args[0]
    if typing.get_origin(annotation) is tuple:
        return typing.get_args(annotation)[0], True, optional
    return annotation, False, optional
