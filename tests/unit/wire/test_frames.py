"""Length-prefixed framing: layout, incremental decoding, limits."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.errors import ProtocolError
from wire.frames import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FrameError, encode_frame


def drain(decoder: FrameDecoder) -> list[bytes]:
    frames = []
    while (frame := decoder.next_frame()) is not None:
        frames.append(frame)
    return frames


def test_layout_is_big_endian_int32_length_then_payload() -> None:
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(b"") == b"\x00\x00\x00\x00"
    assert encode_frame(b"x" * 258)[:4] == b"\x00\x00\x01\x02"


def test_default_maximum_is_kafkas_socket_request_max_bytes() -> None:
    assert DEFAULT_MAX_FRAME_BYTES == 100 * 1024 * 1024
    assert FrameDecoder().max_frame_bytes == DEFAULT_MAX_FRAME_BYTES


def test_incomplete_frame_yields_none_until_complete() -> None:
    decoder = FrameDecoder()
    wire = encode_frame(b"hello")
    for i, byte in enumerate(wire[:-1]):
        decoder.feed(bytes([byte]))
        assert decoder.next_frame() is None
        assert decoder.buffered_bytes == i + 1
    decoder.feed(wire[-1:])
    assert decoder.next_frame() == b"hello"
    assert decoder.next_frame() is None
    assert decoder.buffered_bytes == 0


def test_several_frames_in_one_feed_come_out_in_order() -> None:
    decoder = FrameDecoder()
    payloads = [b"", b"a", b"bc" * 100, b"\x00\x00\x00\x05"]
    decoder.feed(b"".join(encode_frame(p) for p in payloads) + b"\x00\x00")
    assert drain(decoder) == payloads
    assert decoder.buffered_bytes == 2


def test_accepts_bytearray_and_memoryview() -> None:
    decoder = FrameDecoder()
    decoder.feed(bytearray(encode_frame(b"one")))
    decoder.feed(memoryview(encode_frame(b"two")))
    assert drain(decoder) == [b"one", b"two"]


def test_long_pipelined_burst_drains_completely() -> None:
    # Enough small frames to cross the buffer-compaction threshold several times.
    payloads = [i.to_bytes(4, "big") * 30 for i in range(5000)]
    decoder = FrameDecoder()
    wire = b"".join(encode_frame(p) for p in payloads)
    for start in range(0, len(wire), 70001):
        decoder.feed(wire[start : start + 70001])
    assert drain(decoder) == payloads
    assert decoder.buffered_bytes == 0


def test_frame_of_exactly_the_maximum_is_accepted() -> None:
    decoder = FrameDecoder(max_frame_bytes=16)
    decoder.feed(encode_frame(b"x" * 16))
    assert decoder.next_frame() == b"x" * 16


def test_oversize_length_fails_before_the_body_arrives() -> None:
    decoder = FrameDecoder(max_frame_bytes=16)
    decoder.feed(b"\x00\x00\x00\x11")  # 17: only the length has arrived
    with pytest.raises(FrameError, match="17"):
        decoder.next_frame()
    assert decoder.buffered_bytes == 0


def test_negative_length_is_a_frame_error() -> None:
    decoder = FrameDecoder()
    decoder.feed(b"\xff\xff\xff\xff")
    with pytest.raises(FrameError, match="-1"):
        decoder.next_frame()


def test_decoder_stays_failed() -> None:
    decoder = FrameDecoder(max_frame_bytes=4)
    decoder.feed(encode_frame(b"ok") + b"\x7f\xff\xff\xff" + encode_frame(b"later"))
    assert decoder.next_frame() == b"ok"
    with pytest.raises(FrameError):
        decoder.next_frame()
    with pytest.raises(FrameError):
        decoder.next_frame()
    with pytest.raises(FrameError):
        decoder.feed(encode_frame(b"more"))


def test_frame_error_is_a_protocol_error() -> None:
    assert issubclass(FrameError, ProtocolError)


@pytest.mark.parametrize("bad", [-1, 2**31])
def test_rejects_impossible_maximum(bad: int) -> None:
    with pytest.raises(ValueError, match="max_frame_bytes"):
        FrameDecoder(max_frame_bytes=bad)


@settings(max_examples=150)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=20),
)
def test_any_chunking_yields_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    wire = b"".join(encode_frame(p) for p in payloads)
    bounds = sorted({0, len(wire), *(c for c in cuts if c < len(wire))})
    decoder = FrameDecoder(max_frame_bytes=300)
    got: list[bytes] = []
    for start, end in itertools.pairwise(bounds):
        decoder.feed(wire[start:end])
        got.extend(drain(decoder))
        # Between feeds at most one partial frame is held.
        assert decoder.buffered_bytes < 4 + 300
    assert got == payloads
    assert decoder.buffered_bytes == 0
