"""Length-prefixed framing: layout, incremental decoding, limits."""

from __future__ import annotations

import itertools
import mmap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire import frames
from wire.errors import ProtocolError
from wire.frames import (
    ANONYMOUS_MAP_THRESHOLD_BYTES,
    DEFAULT_MAX_FRAME_BYTES,
    INITIAL_RECEIVE_BUFFER_BYTES,
    RECEIVE_BUFFER_BYTES,
    FrameDecoder,
    FrameError,
    encode_frame,
)


def drain(decoder: FrameDecoder) -> list[bytes]:
    frames = []
    while (frame := decoder.next_frame()) is not None:
        frames.append(bytes(frame))
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
    assert bytes(decoder.next_frame() or b"?") == b"hello"
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
    assert bytes(decoder.next_frame() or b"?") == b"x" * 16


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
    assert bytes(decoder.next_frame() or b"?") == b"ok"
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


def receive(decoder: FrameDecoder, wire: bytes, read_size: int) -> list[bytes]:
    """Feed `wire` through receive_buffer()/filled() as a transport would, `read_size` bytes
    at most per read; the frames, copied out as they come."""
    frames: list[bytes] = []
    position = 0
    while position < len(wire):
        target = decoder.receive_buffer()
        assert len(target) > 0
        count = min(len(target), read_size, len(wire) - position)
        target[:count] = wire[position : position + count]
        decoder.filled(count)
        position += count
        frames.extend(drain(decoder))
    return frames


@pytest.mark.parametrize("read_size", [1, 3, 4096, 65536, 10**7])
def test_receiving_in_place_yields_the_frames_of_any_read_size(read_size: int) -> None:
    payloads = [b"", b"a" * 10, bytes(range(256)) * 300, b"z" * (RECEIVE_BUFFER_BYTES - 4)]
    payloads += [b"big" * (ANONYMOUS_MAP_THRESHOLD_BYTES // 3 + 7), b"after"]
    wire = b"".join(encode_frame(p) for p in payloads)
    decoder = FrameDecoder()
    assert receive(decoder, wire, read_size) == payloads
    assert decoder.buffered_bytes == 0


def test_frames_are_read_only_views_that_stay_valid_as_more_arrives() -> None:
    decoder = FrameDecoder()
    decoder.feed(encode_frame(b"first"))
    first = decoder.next_frame()
    assert isinstance(first, memoryview)
    assert first.readonly
    # Enough traffic behind it to fill and replace the receive buffer several times.
    filler = [bytes([i % 251]) * 1000 for i in range(300)]
    assert receive(decoder, b"".join(encode_frame(p) for p in filler), 70_000) == filler
    assert bytes(first) == b"first"


def test_a_large_frame_gets_a_buffer_of_its_own_size_received_in_place() -> None:
    decoder = FrameDecoder()
    size = 3 * RECEIVE_BUFFER_BYTES
    wire = encode_frame(b"q" * size)
    decoder.feed(wire[:100])  # the length and a little of the body
    target = decoder.receive_buffer()
    # Room for all the rest of the frame (a spare may be larger): the body is read in place.
    rest = len(wire) - 100
    assert len(target) >= rest
    target[:rest] = wire[100:]
    decoder.filled(rest)
    frame = decoder.next_frame()
    assert frame is not None
    assert bytes(frame) == b"q" * size


def test_announcing_a_large_frame_allocates_address_space_not_memory() -> None:
    """A length alone gets a lazily backed anonymous map: its pages appear as bytes arrive."""
    decoder = FrameDecoder()
    announced = 64 * 1024 * 1024
    decoder.feed(announced.to_bytes(4, "big"))
    target = decoder.receive_buffer()
    assert len(target) == announced
    assert isinstance(target.obj, mmap.mmap)


def test_filled_beyond_the_buffer_is_refused() -> None:
    decoder = FrameDecoder()
    room = len(decoder.receive_buffer())
    with pytest.raises(ValueError, match="beyond the receive buffer"):
        decoder.filled(room + 1)


def test_a_replaced_buffer_is_reused_once_no_frame_view_holds_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Large frames one after another cycle through a few buffers when each frame is let go
    before the next arrives, and never reuse one whose frame is still held."""
    allocated: list[int] = []

    def counting(size: int) -> bytearray | mmap.mmap:
        allocated.append(size)
        return new_buffer(size)

    new_buffer = frames._new_buffer
    monkeypatch.setattr(frames, "_new_buffer", counting)
    decoder = FrameDecoder()
    wire = encode_frame(b"x" * 200_000)
    for _ in range(20):
        decoder.feed(wire)
        frame = decoder.next_frame()
        assert frame is not None
        del frame
    assert len(allocated) <= 3, allocated
    held = []
    for index in range(4):
        decoder.feed(encode_frame(bytes([index]) * 200_000))
        frame = decoder.next_frame()
        assert frame is not None
        held.append(frame)
    assert len({id(frame.obj) for frame in held}) == len(held)
    assert [bytes(frame[:1]) for frame in held] == [b"\x00", b"\x01", b"\x02", b"\x03"]


def test_a_drained_decoder_keeps_only_a_small_buffer() -> None:
    """What an idle connection costs: after its frames are taken, 4 KiB, whatever it received."""
    decoder = FrameDecoder()
    decoder.feed(encode_frame(b"z" * 300_000))
    frame = decoder.next_frame()
    assert frame is not None
    assert len(decoder.receive_buffer()) == INITIAL_RECEIVE_BUFFER_BYTES
    assert bytes(frame[:3]) == b"zzz"  # the frame's own buffer lives on with its view
