"""Kafka request and response frames, sans-IO, with kio's schemas for the bodies.

A Kafka request frame (after the 4-byte length that `wire.frames` cuts) is a request header and a
body. Every header version starts with api key (int16), api version (int16) and correlation id
(int32); v1 adds the client id (nullable string), v2 (the flexible versions) adds tagged fields.
Which header a request carries, and which header its response carries (v0: the correlation id;
v1: plus tagged fields), is fixed per API version by Kafka's schemas, which kio knows.
ApiVersions always answers with response header v0, even to its flexible v3 request, so that a
client can read the answer whatever version it tried.

Everything kio can raise while decoding (buffer underflow, an unknown tagged field's KeyError,
bad UTF-8, an unknown API or version) becomes `KafkaFrameError`, a `ProtocolError`: the server
closes that connection, as Kafka does with a request it cannot parse. Only the answer to an
unsupported ApiVersions version is built without a schema of its version: a v0 body (error code,
then the API list), which every client can read, so that it retries with a version we have.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any, Final

from kio.index import load_payload_module
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from wire.errors import ErrorCode, ProtocolError
from wire.frames import encode_frame
from wire.kafka.guard import check_request

_PREFIX: Final = struct.Struct(">hhi")
_API_VERSIONS_V0_ERROR: Final = struct.Struct(">ihi")  # correlation id, error code, array length
_API_VERSION_ENTRY: Final = struct.Struct(">hhh")


class KafkaFrameError(ProtocolError):
    """A Kafka request that cannot be decoded; its connection is closed."""


@dataclass(frozen=True, slots=True)
class RequestPrefix:
    """The three fields every request header version starts with."""

    api_key: int
    api_version: int
    correlation_id: int


@dataclass(frozen=True, slots=True)
class KafkaRequest:
    """A decoded request: its header fields and its kio body entity."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any


def read_prefix(frame: bytes | memoryview) -> RequestPrefix:
    if len(frame) < _PREFIX.size:
        raise KafkaFrameError(f"request of {len(frame)} bytes is shorter than a request header")
    api_key, api_version, correlation_id = _PREFIX.unpack_from(frame)
    return RequestPrefix(api_key, api_version, correlation_id)


# kio resolves schema modules by import; the classes and their (de)serializers are looked up once.
_schemas: dict[tuple[int, int, EntityType], type[Any]] = {}
_readers: dict[type[Any], Any] = {}
_writers: dict[type[Any], Any] = {}


def schema(api_key: int, api_version: int, kind: EntityType) -> type[Any]:
    """kio's request or response class of one API version (KafkaFrameError if kio has none)."""
    key = (api_key, api_version, kind)
    cls = _schemas.get(key)
    if cls is None:
        try:
            module = load_payload_module(api_key, api_version, kind)  # type: ignore[arg-type]
        except Exception as exc:  # kio's UnknownAPIKey / UnknownEntity / import failures
            raise KafkaFrameError(f"no schema for API {api_key} v{api_version}: {exc}") from None
        suffix = "Request" if kind is EntityType.request else "Response"
        (cls,) = (
            value
            for name, value in vars(module).items()
            if name.endswith(suffix) and getattr(value, "__type__", None) is kind
        )
        _schemas[key] = cls
    return cls


def _reader(cls: type[Any]) -> Any:
    reader = _readers.get(cls)
    if reader is None:
        reader = _readers[cls] = entity_reader(cls)
    return reader


def _writer(cls: type[Any]) -> Any:
    writer = _writers.get(cls)
    if writer is None:
        writer = _writers[cls] = entity_writer(cls)
    return writer


def decode_request(frame: bytes | memoryview, prefix: RequestPrefix) -> KafkaRequest:
    """Header and body of a request whose API version ketch serves."""
    request_cls = schema(prefix.api_key, prefix.api_version, EntityType.request)
    try:
        # Before kio: a count its frame cannot hold would make kio's native reader reserve
        # gigabytes and abort the process (wire/kafka/guard.py).
        check_request(frame, request_cls)
        header, used = _reader(request_cls.__header_schema__)(frame, 0)
        body, _ = _reader(request_cls)(frame, used)
    except Exception as exc:
        # The guard's RequestLayoutError, kio's DecodeError family, KeyError for an unknown
        # tagged field, ValueError for a bad enum or UTF-8, IndexError, ...: none of it may
        # escape into the server.
        raise KafkaFrameError(
            f"malformed API {prefix.api_key} v{prefix.api_version} request "
            f"(correlation id {prefix.correlation_id}): {type(exc).__name__}: {exc}"
        ) from None
    return KafkaRequest(
        prefix.api_key, prefix.api_version, prefix.correlation_id, header.client_id, body
    )


def encode_response(correlation_id: int, response: Any) -> bytes:
    """A response frame: length, the header version the response's schema names, the body."""
    buffer = io.BytesIO()
    header_cls = type(response).__header_schema__
    _writer(header_cls)(buffer, header_cls(correlation_id=correlation_id))
    _writer(type(response))(buffer, response)
    return encode_frame(buffer.getvalue())


def unsupported_api_versions(correlation_id: int, low: int, high: int) -> bytes:
    """The v0-format ApiVersions answer to a version ketch does not serve: UNSUPPORTED_VERSION
    and ApiVersions' own range, so the client retries with a version inside it."""
    return encode_frame(
        _API_VERSIONS_V0_ERROR.pack(correlation_id, ErrorCode.UNSUPPORTED_VERSION, 1)
        + _API_VERSION_ENTRY.pack(18, low, high)
    )
