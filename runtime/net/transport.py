"""The transport interface: byte streams between nodes, independent of sockets.

Servers and clients are written against these three protocols only, so the same code runs over
TCP (`runtime.net.tcp.TcpTransport`) and over the in-memory network used by tests and by the
seeded whole-cluster simulation (`runtime.net.memory.MemoryNetwork`).

Contract shared by every implementation:

* `Stream.receive()` returns the next chunk of bytes, of any size (framing is `wire.frames`'
  job). It returns `b""` once the stream is finished: the peer closed it, the connection broke,
  or this side called `aclose()` (a reader blocked in `receive()` is then woken with `b""`).
  After the first `b""` every later call returns `b""` too.
* `Stream.receive_into(buffer)` writes the next received bytes (at most `len(buffer)`) into
  `buffer` and returns how many; 0 once the stream is finished, as `b""` for `receive()`. A
  reader that frames the stream itself (`wire.frames.FrameDecoder`) receives this way, straight
  into the frame being assembled. One stream may be read both ways, one call at a time.
* `Stream.send(data)` queues all of `data` for delivery, in order, and returns when the
  transport has accepted it; it waits (backpressure) while the peer is not reading and the
  transport's buffer is full. It raises `ConnectionClosedError` if the stream is closed or
  broken. Only one task may send on a stream at a time. `send_buffers(buffers)` is the same
  for several buffers sent back to back, handed to the transport without being joined (a
  response whose record batches are views of what was read from a segment).
* `Stream.aclose()` is idempotent. Data already accepted by `send()` is still delivered.
* `Transport.connect()` raises `ConnectionRefusedError` when nothing listens at the address and
  `TimeoutError` when no connection is established within `timeout_s`.
* `Transport.listen()` calls `on_stream(stream)` in a new task for every accepted connection;
  the callee owns the stream and must close it. `Listener.aclose()` stops accepting and leaves
  the streams already handed out alone.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

Buffer = bytes | bytearray | memoryview
"""What streams send and receive into: any contiguous bytes-like object."""


class ConnectionClosedError(ConnectionError):
    """A send on a stream that this side closed or that the peer or the network broke."""


@dataclass(frozen=True, slots=True)
class Address:
    """A listener's host and port. Port 0 asks `listen()` for any free port."""

    host: str
    port: int

    def __post_init__(self) -> None:
        if not self.host:
            raise ValueError("address host is empty")
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port {self.port} is outside 0..65535")

    @classmethod
    def parse(cls, text: str) -> Address:
        """Parse `host:port`, with IPv6 hosts in brackets (`[::1]:9092`)."""
        host, sep, port_text = text.strip().rpartition(":")
        if not sep or not host or not port_text.isdigit():
            raise ValueError(f"not a host:port address: {text!r}")
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        elif ":" in host:
            raise ValueError(f"IPv6 hosts need brackets ([::1]:9092): {text!r}")
        return cls(host, int(port_text))

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


class Stream(Protocol):
    """One bidirectional byte stream (one connection)."""

    @property
    def peer(self) -> str:
        """A printable name of the remote end, for logs and `RequestContext.peer`."""
        ...

    @property
    def tls_principal(self) -> str | None:
        """Who a TLS client certificate proved the peer to be (`User:` + its subject, Kafka's
        default SSL principal), on a stream this side accepted; None otherwise."""
        ...

    async def receive(self) -> bytes:
        """The next chunk of received bytes; `b""` once the stream is finished."""
        ...

    async def receive_into(self, buffer: memoryview) -> int:
        """Receive into `buffer`: the count written, 0 once the stream is finished."""
        ...

    async def send(self, data: bytes) -> None:
        """Queue `data` for delivery; raises `ConnectionClosedError` if the stream is gone."""
        ...

    async def send_buffers(self, buffers: Sequence[Buffer]) -> None:
        """Queue every buffer, in order, as if joined and sent with `send()`."""
        ...

    async def aclose(self) -> None:
        """Close both directions. Idempotent."""
        ...


def take_chunks(chunks: deque[bytes] | deque[memoryview], into: memoryview) -> int:
    """Move bytes from the front of `chunks` into `into`, as many as fit (a chunk taken in
    part stays, shortened); the count. For streams whose received bytes wait in a queue of
    chunks (TCP's stash, the in-memory network's inbox) to serve `receive_into`."""
    copied = 0
    room = len(into)
    while chunks and copied < room:
        chunk = chunks[0]
        count = min(len(chunk), room - copied)
        into[copied : copied + count] = chunk[:count]
        copied += count
        if count == len(chunk):
            chunks.popleft()
        else:
            chunks[0] = chunk[count:]  # type: ignore[assignment]  # same type as the deque's
    return copied


StreamHandler = Callable[[Stream], Awaitable[None]]


class Listener(Protocol):
    @property
    def address(self) -> Address:
        """The bound address; a requested port 0 is replaced by the real port."""
        ...

    async def aclose(self) -> None:
        """Stop accepting connections. Streams already accepted stay open."""
        ...


class Transport(Protocol):
    async def connect(self, address: Address, *, timeout_s: float) -> Stream:
        """Open a stream to `address` (ConnectionRefusedError, TimeoutError)."""
        ...

    async def listen(self, address: Address, on_stream: StreamHandler) -> Listener:
        """Accept connections at `address`, handing each to `on_stream` in its own task."""
        ...
