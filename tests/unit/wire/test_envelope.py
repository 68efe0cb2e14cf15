"""Request/response envelopes: layout, round trips, and rejection of malformed payloads."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.envelope import (
    LARGE_BIN_BYTES,
    EnvelopeError,
    RequestEnvelope,
    ResponseEnvelope,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_buffers,
)
from wire.errors import ProtocolError


def _request_map(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "api_key": 3,
        "api_version": 0,
        "correlation_id": 42,
        "client_id": "cli",
        "body": {"topics": None},
    }
    base.update(changes)
    return base


def _pack(obj: Any) -> bytes:
    packed: bytes = msgpack.packb(obj, use_bin_type=True)
    return packed


def test_request_round_trip() -> None:
    env = RequestEnvelope(0, 0, -(2**31), None, {"records": b"\x00\x01", "name": "t", "n": [1]})
    assert decode_request(encode_request(env)) == env


def test_response_round_trip() -> None:
    env = ResponseEnvelope(2**31 - 1, {"error_code": 0, "auth_bytes": b""})
    assert decode_response(encode_response(env)) == env


def test_request_layout_is_a_msgpack_map_with_bin_bytes() -> None:
    payload = encode_request(RequestEnvelope(18, 0, 1, "c", {"b": b"xy"}))
    assert msgpack.unpackb(payload, raw=True) == {
        b"api_key": 18,
        b"api_version": 0,
        b"correlation_id": 1,
        b"client_id": b"c",
        b"body": {b"b": b"xy"},
    }
    assert b"\xc4\x02xy" in payload  # bin 8, not str
    assert payload == _pack(
        {
            "api_key": 18,
            "api_version": 0,
            "correlation_id": 1,
            "client_id": "c",
            "body": {"b": b"xy"},
        }
    )


def test_response_layout() -> None:
    payload = encode_response(ResponseEnvelope(5, {"error_code": 0}))
    assert msgpack.unpackb(payload) == {"correlation_id": 5, "body": {"error_code": 0}}


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"api_key": True}, "api_key"),
        ({"api_key": -1}, "api_key"),
        ({"api_key": 2**15}, "api_key"),
        ({"api_key": "3"}, "api_key"),
        ({"api_version": -1}, "api_version"),
        ({"api_version": 1.0}, "api_version"),
        ({"correlation_id": 2**31}, "correlation_id"),
        ({"correlation_id": None}, "correlation_id"),
        ({"client_id": b"cli"}, "client_id"),
        ({"client_id": 7}, "client_id"),
        ({"body": []}, "body must be a map"),
        ({"body": None}, "body must be a map"),
        ({"extra": 1}, "keys"),
    ],
)
def test_request_fields_are_validated(changes: dict[str, Any], match: str) -> None:
    with pytest.raises(EnvelopeError, match=match):
        decode_request(_pack(_request_map(**changes)))


def test_request_missing_key() -> None:
    obj = _request_map()
    del obj["client_id"]
    with pytest.raises(EnvelopeError, match="keys"):
        decode_request(_pack(obj))


@pytest.mark.parametrize(
    "obj",
    [
        [],
        None,
        5,
        {"correlation_id": 1},
        {"correlation_id": 1, "body": {}, "x": 0},
        {"correlation_id": True, "body": {}},
        {"correlation_id": 1, "body": "b"},
    ],
)
def test_response_shape_is_validated(obj: Any) -> None:
    with pytest.raises(EnvelopeError):
        decode_response(_pack(obj))


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (b"", "empty"),
        (b"\xc1", "reserved byte"),
        (_pack(_request_map())[:-3], "truncated"),
        (_pack(_request_map()) + b"\x00", "trailing bytes"),
        (b"\xa2\xff\xfe", "invalid utf-8 str"),
        (b"\x81\x01\x02", "int map key"),
        (b"\x81\x80\x01", "map as map key"),
        (b"\xd4\x05\x00", "fixext 1"),
        (b"\xc7\x00\x05", "zero-length ext 8 (decodes to ExtType, not a map)"),
        (b"\xd6\xff\x00\x00\x00\x00", "timestamp ext"),
        (b"\xdd\xff\xff\xff\xff", "array claiming 4G items"),
        (b"\xdf\xff\xff\xff\xff", "map claiming 4G pairs"),
        (b"\xdb\xff\xff\xff\xff", "str claiming 4 GiB"),
        (b"\xc6\x7f\xff\xff\xff", "bin claiming 2 GiB"),
        (b"\x91" * 100_000 + b"\x00", "nested 100k deep"),
    ],
)
def test_garbage_is_an_envelope_error(payload: bytes, why: str) -> None:
    with pytest.raises(EnvelopeError):
        decode_request(payload)
    with pytest.raises(EnvelopeError):
        decode_response(payload)


def test_container_limit() -> None:
    body = {"items": list(range(20))}
    payload = encode_request(RequestEnvelope(1, 0, 1, None, body))
    assert decode_request(payload, max_container_len=20).body == body
    with pytest.raises(EnvelopeError, match="max_array_len"):
        decode_request(payload, max_container_len=19)


def test_unencodable_body_is_an_envelope_error() -> None:
    with pytest.raises(EnvelopeError, match="cannot encode"):
        encode_request(RequestEnvelope(1, 0, 1, None, {"x": object()}))
    with pytest.raises(EnvelopeError, match="cannot encode"):
        encode_response(ResponseEnvelope(1, {"x": 2**64}))
    # The per-thread packer is left clean after a failure.
    env = ResponseEnvelope(1, {"x": 1})
    assert decode_response(encode_response(env)) == env


def test_envelope_error_is_a_protocol_error() -> None:
    assert issubclass(EnvelopeError, ProtocolError)


def test_decode_accepts_bytearray_and_memoryview() -> None:
    payload = encode_request(RequestEnvelope(18, 0, 9, "c", {}))
    assert decode_request(bytearray(payload)) == decode_request(memoryview(payload))


def _joined_frame(buffers: list[bytes | bytearray | memoryview]) -> bytes:
    frame = b"".join(bytes(b) for b in buffers)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    return frame[4:]


@settings(max_examples=60, derandomize=True)
@given(
    sizes=st.lists(
        st.sampled_from([0, 5, LARGE_BIN_BYTES - 1, LARGE_BIN_BYTES, 70_000]), max_size=5
    ),
    as_views=st.booleans(),
)
def test_response_buffers_equal_the_packed_frame(sizes: list[int], as_views: bool) -> None:
    """Any mix of small and large bins (the large ones views or bytes) gives the frame that
    packing the whole envelope gives, byte for byte, and each large bin is passed through as
    the very object the body held."""
    records: list[bytes | memoryview] = []
    for index, size in enumerate(sizes):
        data = bytes([index + 1]) * size
        records.append(memoryview(data) if as_views else data)
    body = {
        "responses": [
            {
                "topic": "t",
                "partitions": [{"index": i, "records": r} for i, r in enumerate(records)],
            }
        ],
        "uuid": bytes(16),  # a small bin of a token's size stays where it is
    }
    envelope = ResponseEnvelope(7, body)
    buffers = encode_response_buffers(envelope)
    plain = {**body, "responses": [{"topic": "t", "partitions": [
        {"index": i, "records": bytes(r)} for i, r in enumerate(records)
    ]}]}  # fmt: skip
    assert _joined_frame(buffers) == encode_response(ResponseEnvelope(7, plain))
    large = [r for r in records if len(r) >= LARGE_BIN_BYTES]
    passed = [b for b in buffers if any(b is r for r in large)]
    assert len(passed) == len(large)
    assert decode_response(_joined_frame(buffers)).body == plain
