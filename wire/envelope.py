"""Request and response envelopes of the native protocol: one msgpack map per frame payload.

Layout (msgpack, strings as str, byte strings as bin)::

    request  = {"api_key": int16 >= 0, "api_version": int16 >= 0, "correlation_id": int32,
                "client_id": str | nil, "body": map}
    response = {"correlation_id": int32, "body": map}

The body is a message's `to_body()` map (see wire/messages.py); the envelope does not look inside
it. Responses carry no API key: a connection answers in request order, and the client matches a
response to its request by correlation id, as in Kafka.

Decoding treats the payload as hostile. msgpack runs with `raw=False` (str must be UTF-8),
`strict_map_key=True` (map keys only str or bytes, so no unhashable or odd keys), no object or
list hooks, extension types capped at zero bytes (a zero-length ext decodes to an ExtType, which
no field accepts), and every container capped at `max_container_len` items and every string at
the payload's own length, so decoding allocates memory proportional to the payload. Any failure,
from msgpack or from shape checks, is an `EnvelopeError`; nothing else escapes.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from typing import Any

import msgpack

from wire.errors import ProtocolError
from wire.frames import frame_prefix

DEFAULT_MAX_CONTAINER_LEN = 1 << 20
"""Most items in one msgpack array or map: far above any real body (a Metadata response for a
100k-partition cluster), far below what would let a small frame claim gigabytes of list slots."""

_INT16_MAX = 2**15 - 1
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_REQUEST_KEYS = frozenset({"api_key", "api_version", "correlation_id", "client_id", "body"})
_RESPONSE_KEYS = frozenset({"correlation_id", "body"})

# msgpack raises ValueError subclasses (ExtraData, FormatError, StackError), UnpackException
# (OutOfData), TypeError (unhashable key), UnicodeDecodeError (a ValueError) and, for hostile
# nesting, RecursionError; OverflowError covers ints that do not fit 64 bits when packing.
_CODEC_ERRORS = (
    ValueError,
    TypeError,
    OverflowError,
    RecursionError,
    msgpack.UnpackException,
)


class EnvelopeError(ProtocolError):
    """A payload that is not a well-formed envelope (bad msgpack, wrong shape or types)."""


@dataclass(frozen=True, slots=True)
class RequestEnvelope:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ResponseEnvelope:
    correlation_id: int
    body: dict[str, Any]


def encode_request(env: RequestEnvelope) -> bytes:
    """The msgpack payload for `env` (without the frame length)."""
    return _pack(
        {
            "api_key": env.api_key,
            "api_version": env.api_version,
            "correlation_id": env.correlation_id,
            "client_id": env.client_id,
            "body": env.body,
        }
    )


def encode_response(env: ResponseEnvelope) -> bytes:
    """The msgpack payload for `env` (without the frame length)."""
    return _pack({"correlation_id": env.correlation_id, "body": env.body})


def encode_response_buffers(env: ResponseEnvelope) -> list[bytes | bytearray | memoryview]:
    """The whole frame of `env` (its 4-byte length first) as buffers to send back to back,
    every bin of at least `LARGE_BIN_BYTES` (a fetch answer's record batches) its own buffer,
    never copied into the msgpack output.

    msgpack has no way to leave a value out, so each large bin is first replaced by a token (a
    16-byte bin: a per-process random prefix and its index), the small remainder is packed in C,
    and the output is cut at each token, where the bin's own header and the bin itself go in.
    The prefix is random so that no bin left in the output can pass for a token (a record set
    from a client could otherwise be made to).
    """
    large: list[bytes | memoryview] = []
    body = _lift_large_bins(env.body, large)
    packed = _pack({"correlation_id": env.correlation_id, "body": body})
    if not large:
        return [frame_prefix(len(packed)), packed]
    view = memoryview(packed)
    parts: list[bytes | bytearray | memoryview] = []
    size = 0
    position = 0
    for index, value in enumerate(large):
        token = _TOKEN_HEADER + _TOKEN_PREFIX + index.to_bytes(4, "big")
        at = packed.find(token, position)
        if at < 0:
            raise EnvelopeError(f"lost track of bin {index} while encoding")
        header = _bin_header(len(value))
        parts += (view[position:at], header, value)
        size += at - position + len(header) + len(value)
        position = at + len(token)
    parts.append(view[position:])
    size += len(packed) - position
    return [frame_prefix(size), *parts]


LARGE_BIN_BYTES = 16 * 1024
"""Bins at least this large are sent as buffers of their own by `encode_response_buffers`."""
_TOKEN_PREFIX = secrets.token_bytes(12)
_TOKEN_HEADER = b"\xc4\x10"  # msgpack bin 8 of 16 bytes: how a token is packed


def _lift_large_bins(value: Any, large: list[bytes | memoryview]) -> Any:
    """`value` with each large bin replaced by its token (appended to `large`, in the order
    msgpack will write them: maps in insertion order, arrays in order)."""
    kind = type(value)
    if kind is dict:
        return {key: _lift_large_bins(item, large) for key, item in value.items()}
    if kind is list:
        return [_lift_large_bins(item, large) for item in value]
    if (kind is bytes or kind is memoryview) and len(value) >= LARGE_BIN_BYTES:
        large.append(value)
        return _TOKEN_PREFIX + (len(large) - 1).to_bytes(4, "big")
    return value


def _bin_header(size: int) -> bytes:
    if size < 0x100:
        return b"\xc4" + size.to_bytes(1, "big")
    if size < 0x10000:
        return b"\xc5" + size.to_bytes(2, "big")
    return b"\xc6" + size.to_bytes(4, "big")


def decode_request(
    payload: bytes | bytearray | memoryview,
    *,
    max_container_len: int = DEFAULT_MAX_CONTAINER_LEN,
) -> RequestEnvelope:
    """Parse a request payload; raises EnvelopeError on anything malformed."""
    obj = _unpack(payload, max_container_len)
    if type(obj) is not dict or obj.keys() != _REQUEST_KEYS:
        raise EnvelopeError(f"request envelope must be a map with keys {sorted(_REQUEST_KEYS)}")
    api_key = _int_in(obj, "api_key", 0, _INT16_MAX)
    api_version = _int_in(obj, "api_version", 0, _INT16_MAX)
    correlation_id = _int_in(obj, "correlation_id", _INT32_MIN, _INT32_MAX)
    client_id = obj["client_id"]
    if client_id is not None and type(client_id) is not str:
        raise EnvelopeError(f"client_id must be str or nil, got {type(client_id).__name__}")
    return RequestEnvelope(api_key, api_version, correlation_id, client_id, _body(obj))


def decode_response(
    payload: bytes | bytearray | memoryview,
    *,
    max_container_len: int = DEFAULT_MAX_CONTAINER_LEN,
) -> ResponseEnvelope:
    """Parse a response payload; raises EnvelopeError on anything malformed."""
    obj = _unpack(payload, max_container_len)
    if type(obj) is not dict or obj.keys() != _RESPONSE_KEYS:
        raise EnvelopeError(f"response envelope must be a map with keys {sorted(_RESPONSE_KEYS)}")
    correlation_id = _int_in(obj, "correlation_id", _INT32_MIN, _INT32_MAX)
    return ResponseEnvelope(correlation_id, _body(obj))


class _PackerCache(threading.local):
    """One msgpack Packer per thread.

    Reusing a Packer saves most of the cost of `msgpack.packb` on small envelopes (it builds a
    Packer per call); a Packer keeps internal state, so threads (e.g. `asyncio.to_thread` work)
    must not share one.
    """

    def __init__(self) -> None:
        self.packer = msgpack.Packer(use_bin_type=True, autoreset=True)


_packers = _PackerCache()


def _pack(obj: dict[str, Any]) -> bytes:
    try:
        packed: bytes = _packers.packer.pack(obj)
    except _CODEC_ERRORS as exc:
        raise EnvelopeError(f"cannot encode envelope: {exc}") from exc
    return packed


def _unpack(payload: bytes | bytearray | memoryview, max_container_len: int) -> Any:
    size = len(payload)
    try:
        return msgpack.unpackb(
            payload,
            raw=False,
            use_list=True,
            strict_map_key=True,
            max_str_len=size,
            max_bin_len=size,
            max_array_len=min(size, max_container_len),
            max_map_len=min(size, max_container_len),
            max_ext_len=0,
        )
    except _CODEC_ERRORS as exc:
        raise EnvelopeError(f"undecodable envelope: {exc}") from exc


def _int_in(obj: dict[str, Any], key: str, low: int, high: int) -> int:
    value = obj[key]
    # bool is an int subclass in Python but a distinct msgpack type; it is never a valid id.
    if type(value) is not int or not low <= value <= high:
        raise EnvelopeError(f"{key} must be an int in [{low}, {high}], got {value!r:.40}")
    return value


def _body(obj: dict[str, Any]) -> dict[str, Any]:
    body = obj["body"]
    if type(body) is not dict:
        raise EnvelopeError(f"body must be a map, got {type(body).__name__}")
    return body
