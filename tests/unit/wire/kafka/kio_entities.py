"""Hypothesis strategies for the hand-written Kafka codecs' differential tests
(test_produce_codec.py, test_fetch_codec.py): random kio request entities of any version, built
from kio's own schema classes field by field (so every field a version has is drawn, tagged ones
included), written into frames as a Kafka client writes them; the general path's decode and
encode to compare with; and a `TopicIds` that knows a few fixed topic ids. Pure functions and a
stateless stub.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import io
import types
import typing
import uuid
from typing import Any, Final

from hypothesis import strategies as st
from kio.serial import entity_writer
from kio.static.constants import EntityType

from wire.kafka.apis import APIS
from wire.kafka.codec import decode_request, encode_response, read_prefix, schema
from wire.messages import Response

INT8: Final = st.integers(-(2**7), 2**7 - 1)
INT16: Final = st.integers(-(2**15), 2**15 - 1)
INT32: Final = st.integers(-(2**31), 2**31 - 1)
INT64: Final = st.integers(-(2**63), 2**63 - 1)
# Short texts, multi-byte characters included, so byte lengths differ from character counts.
TEXT: Final = st.text(max_size=6)
RECORDS: Final = st.binary(max_size=40)

KNOWN_IDS: Final = {
    uuid.UUID(int=1).bytes: "orders",
    uuid.UUID(int=2).bytes: "payments",
    uuid.UUID(int=3).bytes: "orders",  # two ids of one name: the later one names it in the note
}
UNKNOWN_ID: Final = uuid.UUID(int=4).bytes
# Topic ids a request names: known ones, an unknown one, and random ones (never all zeros,
# which the general path cannot decode; test_fetch_codec.py covers it on its own).
TOPIC_IDS: Final = st.sampled_from([*KNOWN_IDS, UNKNOWN_ID]) | st.uuids().filter(
    lambda value: value.int != 0
).map(lambda value: value.bytes)


class KnownIds:
    """The broker's topic ids: `KNOWN_IDS`, and an id derived from the name for the rest."""

    def name_of(self, topic_id: bytes) -> str | None:
        return KNOWN_IDS.get(topic_id)

    def id_of(self, name: str) -> bytes:
        return hashlib.blake2b(name.encode(), digest_size=16).digest()


def entities(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Random instances of a kio entity class, every field drawn by its Kafka type."""
    return st.builds(
        cls, **{field.name: _field(field) for field in dataclasses.fields(cls) if field.init}
    )


def _shape(annotation: Any) -> tuple[Any, bool, bool]:
    """(element type, is an array, is nullable) of a kio field's annotation."""
    args = typing.get_args(annotation)
    optional = typing.get_origin(annotation) in (types.UnionType, typing.Union)
    if optional:
        (annotation,) = [arg for arg in args if arg is not types.NoneType]
    if typing.get_origin(annotation) is tuple:
        return typing.get_args(annotation)[0], True, optional
    return annotation, False, optional


def _field(field: dataclasses.Field[Any]) -> st.SearchStrategy[Any]:
    inner, is_array, optional = _shape(field.type)
    if dataclasses.is_dataclass(inner):
        element: st.SearchStrategy[Any] = st.deferred(
            lambda: entities(typing.cast(type[Any], inner))
        )
    else:
        element = _primitive(field.metadata["kafka_type"])
    if is_array:
        element = st.lists(element, max_size=3).map(tuple)
    kafka_type = field.metadata.get("kafka_type")
    if optional and "tag" not in field.metadata and kafka_type != "uuid":
        # A tagged field's None is "absent", which a random value covers when it equals the
        # default (kio writes a tagged string with a non-nullable writer); kio's None topic id
        # is the zero id (see TOPIC_IDS).
        element = st.none() | element
    return element


def _primitive(kafka_type: str) -> st.SearchStrategy[Any]:
    match kafka_type:
        case "int8":
            return INT8
        case "int16":
            return INT16
        case "int32":
            return INT32
        case "int64":
            return INT64
        case "string":
            return TEXT
        case "records" | "bytes":
            return RECORDS
        case "uuid":
            return TOPIC_IDS.map(lambda raw: uuid.UUID(bytes=raw))
        case "timedelta_i32":
            return INT32.map(lambda ms: datetime.timedelta(milliseconds=ms))
    raise AssertionError(f"no strategy for kio's {kafka_type!r} (a request field this test lacks)")


def request_frames(api_key: int, version: int) -> st.SearchStrategy[bytes]:
    """A random request of one API version, as a Kafka client writes it (without the 4-byte
    length): random correlation id and client id (null included), then a random body."""
    request_cls = schema(api_key, version, EntityType.request)
    header_cls = request_cls.__header_schema__

    def frame(correlation_id: int, client_id: str | None, body: Any) -> bytes:
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

    return st.builds(frame, INT32, st.none() | TEXT, entities(request_cls))


def general_decode(frame: bytes | memoryview, topics: KnownIds) -> tuple[str | None, Any, object]:
    """(client id, native request, note) as the Kafka listener gets them today, through kio."""
    prefix = read_prefix(frame)
    request = decode_request(frame, prefix)
    native, note = APIS[prefix.api_key].native_request(request.body, prefix.api_version, topics)
    return request.client_id, native, note


def general_encode(
    api_key: int, version: int, correlation_id: int, response: Response, note: object
) -> bytes:
    """A native response as the Kafka listener frames it today, through kio."""
    response_cls = schema(api_key, version, EntityType.response)
    answer = APIS[api_key].kio_response(response, response_cls, note, KnownIds())
    return encode_response(correlation_id, answer)


def mutated(frame: bytes, changes: list[tuple[int, int]]) -> bytes:
    """`frame` with some bytes after its 8-byte prefix overwritten: (position, byte) pairs,
    positions taken modulo what follows the prefix."""
    out = bytearray(frame)
    body = len(out) - 8
    for position, byte in changes:
        if body > 0:
            out[8 + position % body] = byte
    return bytes(out)


# The malformed requests on which the general path must not be run: kio's native reader
# reserves room for an array's count before reading its elements, so a huge compact count
# aborts the whole process (and one the hand codec refuses as null, kio reads on past). The
# hand codec's messages name those cases.
UNSAFE_FOR_KIO: Final = ("array length", "null where the array")
