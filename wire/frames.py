"""Length-prefixed framing of the native protocol (sans-IO).

Byte layout of one frame, as on Kafka's wire::

    offset  size  field
    0       4     length   int32, big-endian, signed; number of payload bytes that follow
    4       N     payload  one msgpack-encoded request or response envelope

A stream is a plain concatenation of frames; there is no padding, magic or checksum (TCP and TLS
already protect the bytes; the record batches inside carry their own CRC).

`FrameDecoder` cuts frames out of a stream's bytes without copying them where it can. A reader
either hands it chunks it already has (`feed()`, one copy into the decoder's buffer), or, on the
hot path, receives straight into the decoder's buffer: `receive_buffer()` says where the next
bytes go, the transport writes there (`Stream.receive_into`, a `recv_into` underneath), and
`filled(n)` says how many arrived. Frames come out of `next_frame()` as read-only views of that
buffer, so a request's record batches reach the disk write without a copy in user space:

* small frames are cut from a shared receive buffer (`RECEIVE_BUFFER_BYTES`); a buffer that has
  handed out views is never written over, only replaced, so every view stays valid for as long
  as its holder keeps it;
* once a frame's length is known and it will not fit the current buffer, the decoder gives it a
  buffer of its own size and moves the few bytes already received there: the rest of the frame
  is then received in place (one copy: the kernel's). A buffer above
  `ANONYMOUS_MAP_THRESHOLD_BYTES` is an anonymous memory map, whose pages the kernel provides as
  bytes arrive: announcing a large frame costs address space, not memory, so a peer that sends a
  length and stalls holds no more memory than the bytes it actually sent (as before).

A length that is negative or larger than `max_frame_bytes` (socket.request.max.bytes, 100 MiB by
default) is a `FrameError`, raised by the first `next_frame()` after the 4 length bytes arrive,
before the body is waited for. After a `FrameError` the stream has lost its framing and cannot be
resynchronised, so the decoder stays failed and the connection must close.

Memory: the decoder holds the unconsumed bytes (at most one partial frame plus what arrived
behind it) in its receive buffer; a drained decoder keeps only `INITIAL_RECEIVE_BUFFER_BYTES`,
so an idle connection costs 4 KiB. Replaced buffers become spares of the thread (at most
`SPARE_BUFFERS_BYTES` in all), reused once no frame view holds them: a fresh buffer costs a zero
fill and page faults as large as itself, about one copy. Views handed out keep their buffer
alive, nothing more.
"""

from __future__ import annotations

import mmap
import struct
import sys
import threading
from collections import deque

from wire.errors import ProtocolError

DEFAULT_MAX_FRAME_BYTES = 104857600
"""Kafka's socket.request.max.bytes default (100 MiB)."""

LENGTH_PREFIX_BYTES = 4
_MAX_INT32 = 2**31 - 1
_LENGTH = struct.Struct(">i")

RECEIVE_BUFFER_BYTES = 64 * 1024
"""Size of the shared receive buffer small frames are cut from (one read's worth)."""
INITIAL_RECEIVE_BUFFER_BYTES = 4096
"""A decoder's buffer while its connection is idle: what an idle connection costs."""
SPARE_BUFFERS_BYTES = 32 * 1024 * 1024
"""Replaced receive buffers kept for reuse, per thread, at most this many bytes in all."""
_UNREFERENCED = 3  # sys.getrefcount of a spare buffer nobody else holds (see _take_spare)
ANONYMOUS_MAP_THRESHOLD_BYTES = 1024 * 1024
"""Frame buffers at least this large are anonymous memory maps (pages provided on first write)."""


class FrameError(ProtocolError):
    """An oversize, negative or otherwise unusable frame length; the stream is unrecoverable."""


def encode_frame(payload: bytes) -> bytes:
    """The frame carrying `payload`: a 4-byte big-endian length, then the payload itself."""
    size = len(payload)
    if size > _MAX_INT32:
        raise FrameError(f"payload of {size} bytes does not fit an int32 frame length")
    return _LENGTH.pack(size) + payload


def frame_prefix(size: int) -> bytes:
    """The 4-byte length that goes in front of a payload of `size` bytes sent in pieces."""
    if not 0 <= size <= _MAX_INT32:
        raise FrameError(f"payload of {size} bytes does not fit an int32 frame length")
    return _LENGTH.pack(size)


class _SpareBuffers(threading.local):
    """Receive buffers the decoders of one thread have replaced, oldest first. A buffer is
    reused only once no frame view holds it; the oldest go when the total passes
    SPARE_BUFFERS_BYTES. Per thread, so no lock: each event loop runs in its own thread."""

    def __init__(self) -> None:
        self.buffers: deque[bytearray | mmap.mmap] = deque()
        self.total = 0


_spares = _SpareBuffers()


def _take_spare(size: int) -> bytearray | mmap.mmap | None:
    """A spare buffer of `size` to 4 x `size` bytes that no frame view holds any more."""
    spares = _spares
    buffers = spares.buffers
    for index in range(len(buffers)):
        candidate = buffers[index]
        # References: the deque's and `candidate`'s, plus getrefcount's argument (no enumerate:
        # its reused result tuple would hold one more). A view of the buffer (every frame view
        # shares one managed buffer) adds one: taken, the buffer would be written under a frame
        # somebody still reads.
        if size <= len(candidate) <= 4 * size and sys.getrefcount(candidate) == _UNREFERENCED:
            del buffers[index]
            spares.total -= len(candidate)
            return candidate
    return None


def _offer_spare(buf: bytearray | mmap.mmap) -> None:
    if len(buf) < RECEIVE_BUFFER_BYTES:
        return  # small ones cost less to make than to find
    spares = _spares
    spares.buffers.append(buf)
    spares.total += len(buf)
    while spares.total > SPARE_BUFFERS_BYTES:
        spares.total -= len(spares.buffers.popleft())


def _new_buffer(size: int) -> bytearray | mmap.mmap:
    # bytearray(n) writes n zero bytes, touching every page at once; an anonymous map's pages are
    # provided (zeroed) by the kernel as they are first written.
    return mmap.mmap(-1, size) if size >= ANONYMOUS_MAP_THRESHOLD_BYTES else bytearray(size)


class FrameDecoder:
    """Incremental frame decoder: bytes in (`feed()`, or `receive_buffer()` + `filled()`),
    whole payloads out of `next_frame()` as read-only memoryviews."""

    __slots__ = ("_buf", "_end", "_failure", "_max_frame_bytes", "_shared", "_start", "_view")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if not 0 <= max_frame_bytes <= _MAX_INT32:
            raise ValueError(f"max_frame_bytes must be in [0, 2**31-1], got {max_frame_bytes}")
        self._max_frame_bytes = max_frame_bytes
        self._buf: bytearray | mmap.mmap = bytearray(INITIAL_RECEIVE_BUFFER_BYTES)
        self._view = memoryview(self._buf)
        self._start = 0  # first byte not yet returned in a frame
        self._end = 0  # one past the last byte received
        # Whether a frame view of the buffer was handed out: then it is replaced, not rewound,
        # when it has been consumed to its end.
        self._shared = False
        self._failure: FrameError | None = None

    @property
    def max_frame_bytes(self) -> int:
        return self._max_frame_bytes

    @max_frame_bytes.setter
    def max_frame_bytes(self, value: int) -> None:
        # A connection's limit may change between frames (the Kafka listener's
        # sasl.server.max.receive.size holds only until the client has authenticated).
        if not 0 <= value <= _MAX_INT32:
            raise ValueError(f"max_frame_bytes must be in [0, 2**31-1], got {value}")
        self._max_frame_bytes = value

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as part of a frame."""
        return self._end - self._start

    def incomplete_frame_size(self) -> int:
        """The size (length prefix included) of the frame being received when its length is
        known and its body has not all arrived; 0 otherwise."""
        start, pending = self._start, self._end - self._start
        if pending < LENGTH_PREFIX_BYTES or self._failure is not None:
            return 0
        (length,) = _LENGTH.unpack_from(self._buf, start)
        if not 0 <= length <= self._max_frame_bytes:
            return 0  # next_frame() will fail the stream
        size = LENGTH_PREFIX_BYTES + length
        return size if pending < size else 0

    def receive_buffer(self) -> memoryview:
        """Where the next received bytes go (never empty); report them with `filled(n)`."""
        if self._failure is not None:
            raise self._failure
        self._make_room()
        return self._view[self._end :]

    def filled(self, count: int) -> None:
        """`count` bytes were written at the start of the last `receive_buffer()`."""
        if not 0 <= count <= len(self._buf) - self._end:
            raise ValueError(f"filled({count}) beyond the receive buffer")
        self._end += count

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes read from the stream. Raises the stored FrameError once failed."""
        source = memoryview(data).cast("B")
        while source:
            target = self.receive_buffer()
            count = min(len(target), len(source))
            target[:count] = source[:count]
            self._end += count
            source = source[count:]

    def next_frame(self) -> memoryview | None:
        """The next whole payload, or None until enough bytes have arrived.

        Raises FrameError when the next length is negative or above the maximum; every later
        call raises it again.
        """
        if self._failure is not None:
            raise self._failure
        start = self._start
        if self._end - start < LENGTH_PREFIX_BYTES:
            return None
        (length,) = _LENGTH.unpack_from(self._buf, start)
        if length < 0 or length > self._max_frame_bytes:
            self._failure = FrameError(
                f"frame length {length} outside [0, {self._max_frame_bytes}]"
            )
            # Nothing after a bad length can be trusted; release the memory now.
            self._buf = bytearray()
            self._view = memoryview(self._buf)
            self._start = self._end = 0
            raise self._failure
        end = start + LENGTH_PREFIX_BYTES + length
        if end > self._end:
            return None
        self._start = end
        self._shared = True
        frame = self._view[start + LENGTH_PREFIX_BYTES : end].toreadonly()
        if end == self._end and len(self._buf) > INITIAL_RECEIVE_BUFFER_BYTES:
            # Drained: a quiet connection keeps only a small buffer; this one becomes a spare,
            # reused (by any decoder of this thread) once its frames are let go.
            _offer_spare(self._buf)
            self._buf = bytearray(INITIAL_RECEIVE_BUFFER_BYTES)
            self._view = memoryview(self._buf)
            self._start = self._end = 0
            self._shared = False
        return frame

    def _make_room(self) -> None:
        """Ensure the buffer has free space after `_end`, and room for the whole of a frame
        whose length is known."""
        buf, start, end = self._buf, self._start, self._end
        if start == end and not self._shared and end:
            self._start = self._end = 0  # consumed and never lent out: rewind in place
            return
        pending = end - start
        needed = pending + 1  # the length not known yet: room for one more byte will do
        if pending >= LENGTH_PREFIX_BYTES:
            (length,) = _LENGTH.unpack_from(buf, start)
            if 0 <= length <= self._max_frame_bytes:
                needed = max(needed, LENGTH_PREFIX_BYTES + length)
        if end < len(buf) and start + needed <= len(buf):
            return  # the frame in progress fits where it is, and there is space to read into
        # A new buffer: the frame in progress (at most one partial frame) moves to its front.
        size = max(needed, RECEIVE_BUFFER_BYTES)
        fresh = _take_spare(size) or _new_buffer(size)
        _offer_spare(buf)
        view = memoryview(fresh)
        view[:pending] = self._view[start:end]
        self._buf = fresh
        self._view = view
        self._start, self._end = 0, pending
        self._shared = False
