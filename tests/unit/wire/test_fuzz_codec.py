"""Fuzzing the decoders with random and mutated bytes and bodies.

Contract under test: hostile input yields a typed ProtocolError (FrameError, EnvelopeError,
MessageError, UnsupportedVersionError) or a valid value, never another exception, never a hang
(every loop below is bounded by the input size), and never more buffered memory than one frame.
Example counts are fixed so the whole module runs in a few seconds.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.wire.messages.strategies import MESSAGES, REQUESTS, dataclass_strategy
from wire import messages as m
from wire.envelope import (
    RequestEnvelope,
    ResponseEnvelope,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from wire.errors import ProtocolError
from wire.frames import FrameDecoder, FrameError, encode_frame
from wire.messages.fields import OMITTED_WHEN_ZERO

MAX_FRAME = 512

# msgpack-shaped values: what a hostile peer can make decode_request hand to from_body.
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(max_size=8)
    | st.binary(max_size=20)
)
VALUES = st.recursive(
    LEAVES,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def mutated(draw: st.DrawFn, data: bytes) -> bytes:
    """`data` with a few random byte flips, insertions, deletions or a truncation."""
    buf = bytearray(data)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        op = draw(st.sampled_from(["flip", "insert", "delete", "truncate"]))
        pos = draw(st.integers(min_value=0, max_value=max(len(buf) - 1, 0)))
        if op == "flip" and buf:
            buf[pos] = draw(st.integers(min_value=0, max_value=255))
        elif op == "insert":
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=6))
        elif op == "delete" and buf:
            del buf[pos : pos + draw(st.integers(min_value=1, max_value=6))]
        elif op == "truncate":
            del buf[pos:]
    return bytes(buf)


def feed_and_drain(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(max_frame_bytes=MAX_FRAME)
    total = sum(len(c) for c in chunks)
    for chunk in chunks:
        try:
            decoder.feed(chunk)
        except FrameError:
            return
        steps = 0
        try:
            while decoder.next_frame() is not None:
                steps += 1
                # Each frame consumes at least its 4 length bytes.
                assert steps <= total // 4 + 1
        except FrameError:
            assert decoder.buffered_bytes == 0
            return
        assert decoder.buffered_bytes < 4 + MAX_FRAME


@settings(max_examples=300)
@given(st.lists(st.binary(max_size=700), max_size=8))
def test_frame_decoder_on_random_bytes(chunks: list[bytes]) -> None:
    feed_and_drain(chunks)


@settings(max_examples=200)
@given(data=st.data(), payloads=st.lists(st.binary(max_size=600), min_size=1, max_size=5))
def test_frame_decoder_on_mutated_streams(data: st.DataObject, payloads: list[bytes]) -> None:
    stream = data.draw(mutated(b"".join(encode_frame(p) for p in payloads)))
    cut = data.draw(st.integers(min_value=0, max_value=len(stream)))
    feed_and_drain([stream[:cut], stream[cut:]])


def decode_everything(payload: bytes) -> None:
    """Run a payload through both envelope decoders and, for a request, the message decoder;
    only ProtocolError subclasses may come out."""
    try:
        env = decode_request(payload)
    except ProtocolError:
        pass
    else:
        with contextlib.suppress(ProtocolError):
            m.request_class(env.api_key, env.api_version).from_body(env.body)
    with contextlib.suppress(ProtocolError):
        decode_response(payload)


@settings(max_examples=400)
@given(st.binary(max_size=200))
def test_envelope_decoders_on_random_bytes(payload: bytes) -> None:
    decode_everything(payload)


@settings(max_examples=300)
@given(data=st.data(), cls=st.sampled_from(REQUESTS))
def test_decoders_on_mutated_requests(data: st.DataObject, cls: type[m.Request]) -> None:
    msg = data.draw(dataclass_strategy(cls))
    payload = encode_request(RequestEnvelope(cls.API_KEY, cls.API_VERSION, 1, "c", msg.to_body()))
    decode_everything(data.draw(mutated(payload)))


@settings(max_examples=200)
@given(data=st.data(), cls=st.sampled_from(REQUESTS))
def test_decoders_on_mutated_responses(data: st.DataObject, cls: type[m.Request]) -> None:
    msg = data.draw(dataclass_strategy(cls.RESPONSE))
    payload = data.draw(mutated(encode_response(ResponseEnvelope(1, msg.to_body()))))
    try:
        env = decode_response(payload)
        cls.RESPONSE.from_body(env.body)
    except ProtocolError:
        pass


@settings(max_examples=250)
@given(data=st.data(), cls=st.sampled_from(MESSAGES))
def test_from_body_on_random_values(data: st.DataObject, cls: type[m.Message]) -> None:
    # The message's own keys with random values (sometimes one key dropped or one added), so
    # the type checks of every field are reached, not only the key-set check.
    keys = [f.name for f in dataclasses.fields(cls)]
    body = {k: data.draw(VALUES) for k in keys}
    dropping = data.draw(st.booleans())
    if dropping and keys:  # DescribeClusterRequest has no fields
        body.pop(data.draw(st.sampled_from(keys)))
    if data.draw(st.booleans()):
        body[data.draw(st.text(max_size=12))] = data.draw(VALUES)
    with contextlib.suppress(m.MessageError):
        cls.from_body(body)


@st.composite
def replaced_somewhere(draw: st.DrawFn, value: Any) -> Any:
    """`value` with one nested element (or itself) replaced by a random msgpack value."""
    if isinstance(value, dict) and value and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(value)))
        return {**value, key: draw(replaced_somewhere(value[key]))}
    if isinstance(value, list) and value and draw(st.booleans()):
        i = draw(st.integers(min_value=0, max_value=len(value) - 1))
        return [*value[:i], draw(replaced_somewhere(value[i])), *value[i + 1 :]]
    return draw(VALUES)


@settings(max_examples=300)
@given(data=st.data(), cls=st.sampled_from(MESSAGES))
def test_from_body_on_mutated_bodies(data: st.DataObject, cls: type[m.Message]) -> None:
    body = data.draw(dataclass_strategy(cls)).to_body()
    bad = data.draw(replaced_somewhere(body))
    try:
        decoded = cls.from_body(bad)
    except m.MessageError:
        return
    # Whatever decoded must encode back to the very body it came from; but a response's
    # throttle_time_ms of 0, which the encoder leaves out (fields.OMITTED_WHEN_ZERO).
    if isinstance(bad, dict) and bad.get(OMITTED_WHEN_ZERO, None) == 0:
        bad = {k: v for k, v in bad.items() if k != OMITTED_WHEN_ZERO}
    assert decoded.to_body() == bad
