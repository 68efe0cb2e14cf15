"""Length-prefixed framing of the native protocol (sans-IO).

Byte layout of one frame, as on Kafka's wire::

    offset  size  field
    0       4     length   int32, big-endian, signed; number of payload bytes that follow
    4       N     payload  one msgpack-encoded request or response envelope

A stream is a plain concatenation of frames; there is no padding, magic or checksum (TCP and TLS
already protect the bytes; the record batches inside carry their own CRC).

`FrameDecoder` is fed whatever bytes the transport read, in chunks of any size, and hands back
whole payloads. A length that is negative or larger than `max_frame_bytes`
(socket.request.max.bytes, 100 MiB by default) is a `FrameError`, raised by the first
`next_frame()` after the 4 length bytes arrive, before the body is waited for: a hostile or
confused peer cannot make a draining caller buffer more than one maximum frame. After a
`FrameError` the stream has lost its framing and cannot be resynchronised, so the decoder stays
failed and the connection must close.

Memory: the decoder holds at most the bytes fed since the last complete frame was taken, so a
caller that drains `next_frame()` after every `feed()` holds at most one partial frame plus one
read chunk.
"""

from __future__ import annotations

import struct

from wire.errors import ProtocolError

DEFAULT_MAX_FRAME_BYTES = 104857600
"""Kafka's socket.request.max.bytes default (100 MiB)."""

LENGTH_PREFIX_BYTES = 4
_MAX_INT32 = 2**31 - 1
_LENGTH = struct.Struct(">i")

# Consumed bytes are dropped from the front of the buffer only once they are this many and more
# than half of it: deleting a bytearray prefix is a memmove of the tail, and doing it after every
# small frame of a pipelined burst would make draining the burst quadratic.
_COMPACT_THRESHOLD_BYTES = 64 * 1024


class FrameError(ProtocolError):
    """An oversize, negative or otherwise unusable frame length; the stream is unrecoverable."""


def encode_frame(payload: bytes) -> bytes:
    """The frame carrying `payload`: a 4-byte big-endian length, then the payload itself."""
    size = len(payload)
    if size > _MAX_INT32:
        raise FrameError(f"payload of {size} bytes does not fit an int32 frame length")
    return _LENGTH.pack(size) + payload


class FrameDecoder:
    """Incremental frame decoder: `feed()` bytes in, take whole payloads with `next_frame()`."""

    __slots__ = ("_buf", "_failure", "_max_frame_bytes", "_pos")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if not 0 <= max_frame_bytes <= _MAX_INT32:
            raise ValueError(f"max_frame_bytes must be in [0, 2**31-1], got {max_frame_bytes}")
        self._max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._pos = 0  # start of the first byte not yet returned in a frame
        self._failure: FrameError | None = None

    @property
    def max_frame_bytes(self) -> int:
        return self._max_frame_bytes

    @property
    def buffered_bytes(self) -> int:
        """Bytes fed but not yet returned as part of a frame."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes read from the stream. Raises the stored FrameError once failed."""
        if self._failure is not None:
            raise self._failure
        self._buf += data

    def next_frame(self) -> bytes | None:
        """The next whole payload, or None until enough bytes have been fed.

        Raises FrameError when the next length is negative or above the maximum; every later
        call raises it again.
        """
        if self._failure is not None:
            raise self._failure
        buf = self._buf
        pos = self._pos
        available = len(buf) - pos
        if available < LENGTH_PREFIX_BYTES:
            return None
        (length,) = _LENGTH.unpack_from(buf, pos)
        if length < 0 or length > self._max_frame_bytes:
            self._failure = FrameError(
                f"frame length {length} outside [0, {self._max_frame_bytes}]"
            )
            # Nothing after a bad length can be trusted; release the memory now.
            self._buf = bytearray()
            self._pos = 0
            raise self._failure
        end = pos + LENGTH_PREFIX_BYTES + length
        if end > len(buf):
            return None
        payload = bytes(buf[pos + LENGTH_PREFIX_BYTES : end])
        if end == len(buf):
            # The common case for request/response traffic: the buffer drained exactly.
            buf.clear()
            self._pos = 0
        elif end >= _COMPACT_THRESHOLD_BYTES and end * 2 >= len(buf):
            del buf[:end]
            self._pos = 0
        else:
            self._pos = end
        return payload
