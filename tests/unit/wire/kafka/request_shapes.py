"""Kafka requests of every API version the Kafka listener serves, for the guard's tests
(test_guard.py, test_guard_listener.py): random ones drawn field by field from kio's schema
classes (every Kafka type a served request has, tagged fields included), and a "full" one per
version (every array holding one element) with where each of its lengths and counts lies in the
frame, worked out here from Kafka's encodings rather than by the guard under test. Pure functions.

tests/unit/wire/kafka/kio_entities.py draws Produce and Fetch requests the same way but lacks the
types other APIs have (bool, timedelta_i64), hence this module's own strategies.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import types
import typing
import uuid
from typing import Any, Final

from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.constants import EntityType

from wire.kafka.apis import APIS
from wire.kafka.codec import schema

SERVED: Final = [
    (api.key, version) for api in APIS.values() for version in range(api.low, api.high + 1)
]
"""(api key, version) of every request the Kafka listener serves."""

# Requests on which kio alone aborts the process (a failed allocation of many gigabytes).
# 17 bytes: Metadata v12's header (client id null, no tagged fields), then a topic count of
# 2**32 - 2 as a compact varint, then one byte: kio asks for 34 GB.
METADATA_V12_HUGE: Final = bytes.fromhex("0003000c00000007ffff00ffffffff0f00")
# The same with a legacy int32 count (Metadata v4): 2**31 - 1 topics, 17 GB.
METADATA_V4_HUGE: Final = bytes.fromhex("0003000400000007ffff7fffffff00")
# Produce v9: no transactional id, acks 1, timeout 1000 ms, then 2**32 - 2 topics.
PRODUCE_V9_HUGE: Final = bytes.fromhex("0000000900000007ffff00000001000003e8ffffffff0f")

INT32: Final = st.integers(-(2**31), 2**31 - 1)
_INTEGERS: Final = {
    "int8": st.integers(-(2**7), 2**7 - 1),
    "int16": st.integers(-(2**15), 2**15 - 1),
    "int32": INT32,
    "int64": st.integers(-(2**63), 2**63 - 1),
}
# Short texts with multi-byte characters, so byte lengths differ from character counts.
_TEXT: Final = st.text(max_size=5)
_BYTES: Final = st.binary(max_size=12)
# kio reads the all-zero uuid as None, so a drawn id is never zero.
_UUIDS: Final = st.uuids().filter(lambda value: value.int != 0)
# timedelta holds about 2**56 ms, not every int64.
_MILLISECONDS_I64: Final = st.integers(-(2**48), 2**48)

# The fixed widths and length encodings of Kafka's types, by kio's names (Kafka's protocol
# guide): the layout below is computed from these, independently of wire/kafka/guard.py.
FIXED_SIZES: Final = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "timedelta_i64": 8,
    "float64": 8,
    "uuid": 16,
}


def shape(annotation: Any) -> tuple[Any, bool, bool]:
    """(element type, is an array, is nullable) of a kio field's annotation."""
    nullable = typing.get_origin(annotation) in (types.UnionType, typing.Union)
    if nullable:
        (annotation,) = [arg for arg in typing.get_args(annotation) if arg is not types.NoneType]
    if typing.get_origin(annotation) is tuple:
        return typing.get_args(annotation)[0], True, nullable
    return annotation, False, nullable


def is_struct(kind: Any) -> bool:
    return isinstance(kind, type) and dataclasses.is_dataclass(kind)


# -- random requests -------------------------------------------------------------------------------


def entities(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Random instances of a kio entity class, every field drawn by its Kafka type."""
    return st.builds(
        cls, **{field.name: _field(field) for field in dataclasses.fields(cls) if field.init}
    )


def _field(field: dataclasses.Field[Any]) -> st.SearchStrategy[Any]:
    kind, is_array, nullable = shape(field.type)
    if is_struct(kind):
        value: st.SearchStrategy[Any] = st.deferred(lambda: entities(kind))
    else:
        value = _primitive(field.metadata["kafka_type"])
    if is_array:
        value = st.lists(value, max_size=3).map(tuple)
    if "tag" in field.metadata:
        # kio writes a tagged field only when it differs from its default, and never as null.
        return st.just(field.default) | value
    if nullable:
        value = st.none() | value
    return value


def _primitive(kafka_type: str) -> st.SearchStrategy[Any]:
    if kafka_type in _INTEGERS:
        return _INTEGERS[kafka_type]
    match kafka_type:
        case "bool":
            return st.booleans()
        case "string":
            return _TEXT
        case "bytes" | "records":
            return _BYTES
        case "uuid":
            return _UUIDS
        case "timedelta_i32":
            return INT32.map(lambda ms: datetime.timedelta(milliseconds=ms))
        case "timedelta_i64":
            return _MILLISECONDS_I64.map(lambda ms: datetime.timedelta(milliseconds=ms))
        case "float64":  # AlterClientQuotas' values; NaN is left out, as it equals nothing
            return st.floats(allow_nan=False)
    raise AssertionError(f"no strategy for kio's {kafka_type!r} (a request field this test lacks)")


def frame_of(
    api_key: int, version: int, body: Any, client_id: str | None = "client", correlation_id: int = 7
) -> bytes:
    """A request as a Kafka client writes it, without the 4-byte length."""
    request_cls = type(body)
    header_cls = request_cls.__header_schema__
    buffer = io.BytesIO()
    header = header_cls(
        request_api_key=api_key,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    entity_writer(header_cls)(buffer, header)
    entity_writer(request_cls)(buffer, body)
    return buffer.getvalue()


def request_frames(api_key: int, version: int) -> st.SearchStrategy[bytes]:
    """Random requests of one API version: random correlation id, client id (null included)
    and body."""
    request_cls = schema(api_key, version, EntityType.request)
    return st.builds(
        lambda body, client_id, correlation_id: frame_of(
            api_key, version, body, client_id, correlation_id
        ),
        entities(request_cls),
        st.none() | _TEXT,
        INT32,
    )


# -- the full request and where its lengths lie ----------------------------------------------------


def full(cls: type[Any]) -> Any:
    """An instance of a kio entity class with every untagged field set: one element in every
    array, empty strings and bytes, zero numbers (tagged fields are left absent)."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if "tag" in field.metadata:
            continue
        kind, is_array, _ = shape(field.type)
        value = full(kind) if is_struct(kind) else _zero(field.metadata["kafka_type"])
        values[field.name] = (value,) if is_array else value
    return cls(**values)


def _zero(kafka_type: str) -> Any:
    match kafka_type:
        case "string":
            return ""
        case "bytes" | "records":
            return b""
        case "uuid":
            return uuid.UUID(int=1)
        case "bool":
            return False
        case "timedelta_i32" | "timedelta_i64":
            return datetime.timedelta(0)
        case "float64":
            return 0.0
    assert kafka_type in _INTEGERS, kafka_type
    return 0


@dataclasses.dataclass(frozen=True, slots=True)
class Length:
    """A length or count in a frame: where it starts, how many bytes it takes as written in
    the full request (an empty value's, or one element's count), and the field it belongs to."""

    position: int
    width: int
    encoding: str  # "int16", "int32" or "compact" (unsigned varint of the value + 1)
    field: str


def lengths(api_key: int, version: int) -> tuple[bytes, list[Length]]:
    """The full request of an API version as a frame, and every length and count in it."""
    request_cls = schema(api_key, version, EntityType.request)
    frame = frame_of(api_key, version, full(request_cls), client_id="")
    found: list[Length] = []
    end = _struct_lengths(request_cls.__header_schema__, 0, found, in_header=True)
    end = _struct_lengths(request_cls, end, found)
    assert end == len(frame), "the layout worked out here disagrees with kio's writer"
    return frame, found


def _struct_lengths(
    cls: type[Any], pos: int, found: list[Length], *, in_header: bool = False
) -> int:
    flexible: bool = cls.__flexible__
    for field in dataclasses.fields(cls):
        if "tag" in field.metadata:
            continue
        kind, is_array, _ = shape(field.type)
        # The request header's client id is a legacy string in every header version.
        compact = flexible and not (in_header and field.name == "client_id")
        if is_array:
            width = 1 if compact else 4
            found.append(Length(pos, width, "compact" if compact else "int32", field.name))
            pos += width
        if is_struct(kind):
            pos = _struct_lengths(kind, pos, found)
            continue
        kafka_type = field.metadata["kafka_type"]
        if kafka_type in FIXED_SIZES:
            pos += FIXED_SIZES[kafka_type]
            continue
        name = f"{field.name}[]" if is_array else field.name
        if compact:
            found.append(Length(pos, 1, "compact", name))
            pos += 1
        elif kafka_type == "string":
            found.append(Length(pos, 2, "int16", name))
            pos += 2
        else:
            found.append(Length(pos, 4, "int32", name))
            pos += 4
    return pos + 1 if flexible else pos  # a flexible struct's tagged-field count: 0


HUGE: Final = {
    "int16": (2**15 - 1).to_bytes(2, "big"),
    "int32": (2**31 - 1).to_bytes(4, "big"),
    "compact": b"\xff\xff\xff\xff\x0f",  # 2**32 - 1: a count or length of 2**32 - 2
}
"""The largest length or count of each encoding: what makes kio ask for gigabytes."""


def with_huge(frame: bytes, length: Length) -> bytes:
    """`frame` with one length or count replaced by the largest its encoding can say."""
    return (
        frame[: length.position] + HUGE[length.encoding] + frame[length.position + length.width :]
    )
