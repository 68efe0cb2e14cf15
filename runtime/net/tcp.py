"""TCP transport on asyncio's protocol/transport layer (uvloop when the running loop is uvloop).

Streams sit directly on `asyncio.Protocol` rather than on `asyncio.StreamReader/StreamWriter`:
one object fewer per chunk on the hot path, and the close/broken semantics of
`runtime.net.transport` (receive -> `b""`, send -> `ConnectionClosedError`) are stated once here.

Flow control in both directions:

* Reading: a reader waiting in `receive_into()` has the socket read straight into its buffer;
  bytes that arrive while no reader waits queue in the protocol. Once more than
  `READ_HIGH_WATER_BYTES` are queued the socket is paused, so a server that stops receiving
  (its per-connection in-flight cap) pushes back on the peer through TCP's window.
* Writing: `send()` and `send_buffers()` write into the transport's buffer and wait only while
  the transport has paused writing (its buffer is above its high-water mark).

TLS is the standard `ssl` module's: pass an `ssl.SSLContext` for the server side, the client
side, or both (runtime/net/tls.py builds them from Kafka's ssl.* properties). The handshake
completes before a stream is handed out; one that fails or stalls (garbage bytes, a plaintext
request on a TLS port) ends that connection only. A TLS stream tells its negotiated version
(`tls_version`) and, when the client sent a certificate, Kafka's principal for it
(`tls_principal`, `User:` + the subject's RFC 2253 name).

Source address. By default the kernel picks the local address of an outgoing connection. A node
given `connections.source.host` (`SOURCE_HOST_KEY`, an IP literal) binds every connection it
opens to that address (port 0: any free port) before connecting, so whoever accepts it can tell
the node by its peer address; the fault-injecting proxy of testkit/proxy.py names a link's
source that way (on Linux all of 127.0.0.0/8 is the loopback interface, so each node of a local
cluster can have its own 127.0.0.x). Listening is not affected.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Final, cast

from runtime.net.transport import (
    Address,
    Buffer,
    ConnectionClosedError,
    StreamHandler,
    take_chunks,
)

READ_HIGH_WATER_BYTES = 256 * 1024
# Size of the chunks bytes received while no reader waits are stashed in.
STASH_CHUNK_BYTES = 64 * 1024
# How long `aclose()` waits for buffered output to flush before it aborts the connection.
CLOSE_FLUSH_TIMEOUT_S = 5.0
TLS_HANDSHAKE_TIMEOUT_S = 10.0
# The property naming the local address a node's outgoing connections bind to (unset: the
# kernel's choice). Read by the broker and the controller processes.
SOURCE_HOST_KEY: Final = "connections.source.host"

_log = logging.getLogger(__name__)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """An event loop for a node process: uvloop's when it is installed, else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def parse_source_host(key: str, raw: object) -> str | None:
    """A `connections.source.host` value: an IP address literal, or None for empty text (the
    kernel chooses). A host name is refused: the point is to know the address exactly, and
    resolving it could give a different one than a peer expects."""
    text = str(raw).strip()
    if not text:
        return None
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(
            f"{key}: expected an IP address for outgoing connections to bind to, got {raw!r}"
        ) from None
    return text


def source_host(properties: Mapping[str, object]) -> str | None:
    """`connections.source.host` from a node's properties; None when it is not set."""
    raw = properties.get(SOURCE_HOST_KEY)
    return None if raw is None else parse_source_host(SOURCE_HOST_KEY, raw)


def _format_peer(peername: object) -> str:
    if isinstance(peername, tuple) and len(peername) >= 2:
        return str(Address(str(peername[0]), int(peername[1])))
    return str(peername)


def tls_principal_of(certificate_der: bytes) -> str:
    """`User:` + the subject of a DER certificate in RFC 2253 form, as Kafka's default
    principal builder names an SSL client (most specific attribute first: CN=..,OU=..,O=..)."""
    # Imported here: only a TLS connection with a client certificate needs the parser.
    from cryptography import x509

    subject = x509.load_der_x509_certificate(certificate_der).subject
    return "User:" + subject.rfc4514_string()


class _StreamProtocol(asyncio.BufferedProtocol):
    """Receives into the waiting reader's buffer (or a stash when none waits) and tracks the
    write-pause state for one connection.

    A `BufferedProtocol`: the transport asks `get_buffer()` where to put each read and reports
    the count in `buffer_updated()`. While a reader waits in `receive_into()` its own buffer is
    lent out, so the bytes land where the reader wants them (for ketch's servers: in the frame
    they belong to) with no copy in user space. Bytes that arrive while no reader waits go to
    stash chunks, copied out by the next `receive_into()` or joined by `receive()`.
    """

    def __init__(self, on_connected: StreamHandler | None, listener: _TcpListener | None) -> None:
        self._on_connected = on_connected
        self._listener = listener
        self.transport: asyncio.Transport | None = None
        self.stash: deque[memoryview] = deque()
        self.buffered_bytes = 0  # bytes in the stash
        self.reading_paused = False
        self.finished = False  # no more data will be received
        self.lost = False  # connection_lost has run
        self.target: memoryview | None = None  # the waiting reader's buffer
        self.target_filled = 0
        self._lent_target = False  # whether the last get_buffer() lent the reader's buffer
        self._spare = memoryview(bytearray(0))
        self._spare_used = 0
        self._read_waiter: asyncio.Future[None] | None = None
        self._drain_waiter: asyncio.Future[None] | None = None
        self._write_paused = False
        self._lost_waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        if self._on_connected is not None and self._listener is not None:
            self._listener.spawn(self._on_connected, TcpStream(self.transport, self))

    def get_buffer(self, sizehint: int) -> memoryview:
        target = self.target
        if target is not None and self.target_filled < len(target):
            # The event loop reads several times per readiness event (libuv up to 32): each
            # read goes on where the last stopped, until the reader's buffer is full.
            self._lent_target = True
            return target[self.target_filled :]
        self._lent_target = False
        if self._spare_used == len(self._spare):
            # Stash views keep the old chunk alive; a fresh one is never written under them.
            self._spare = memoryview(bytearray(STASH_CHUNK_BYTES))
            self._spare_used = 0
        return self._spare[self._spare_used :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._lent_target:
            self._lent_target = False
            self.target_filled += nbytes
        else:
            used = self._spare_used
            self.stash.append(self._spare[used : used + nbytes])
            self._spare_used = used + nbytes
            self.buffered_bytes += nbytes
            if self.buffered_bytes > READ_HIGH_WATER_BYTES and not self.reading_paused:
                assert self.transport is not None
                self.reading_paused = True
                self.transport.pause_reading()
        self._wake_reader()

    def eof_received(self) -> bool:
        # The native protocol never half-closes: the peer's FIN ends the conversation, so let
        # asyncio close our side too (returning False).
        self.finish()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.finish()
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(ConnectionClosedError("connection lost"))
        if not self._lost_waiter.done():
            self._lost_waiter.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)

    # used by TcpStream

    def finish(self) -> None:
        self.finished = True
        self._wake_reader()

    def _wake_reader(self) -> None:
        if self._read_waiter is not None and not self._read_waiter.done():
            self._read_waiter.set_result(None)

    def take_stash(self, into: memoryview) -> int:
        """Copy stashed bytes into `into` (as many as fit); the count."""
        copied = take_chunks(self.stash, into)
        self.consumed(copied)
        return copied

    def consumed(self, count: int) -> None:
        self.buffered_bytes -= count
        if self.reading_paused and not self.lost and self.buffered_bytes <= READ_HIGH_WATER_BYTES:
            self.reading_paused = False
            assert self.transport is not None
            self.transport.resume_reading()

    async def wait_readable(self) -> None:
        assert self._read_waiter is None, "receive() called concurrently on one stream"
        self._read_waiter = asyncio.get_running_loop().create_future()
        try:
            await self._read_waiter
        finally:
            self._read_waiter = None

    async def wait_writable(self) -> None:
        if not self._write_paused:
            return
        assert self._drain_waiter is None, "send() called concurrently on one stream"
        self._drain_waiter = asyncio.get_running_loop().create_future()
        try:
            await self._drain_waiter
        finally:
            self._drain_waiter = None

    async def wait_lost(self, timeout_s: float) -> bool:
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(self._lost_waiter)
        except TimeoutError:
            return False
        return True


class TcpStream:
    """One TCP (or TLS over TCP) connection as a `runtime.net.transport.Stream`."""

    __slots__ = ("_peer", "_protocol", "_transport")

    def __init__(self, transport: asyncio.Transport, protocol: _StreamProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self._peer = _format_peer(transport.get_extra_info("peername"))

    @property
    def peer(self) -> str:
        return self._peer

    @property
    def tls_version(self) -> str | None:
        """The negotiated TLS version (`"TLSv1.3"`), or None on a plain TCP connection."""
        ssl_object = self._transport.get_extra_info("ssl_object")
        return ssl_object.version() if isinstance(ssl_object, ssl.SSLObject) else None

    @property
    def tls_principal(self) -> str | None:
        """Kafka's default principal of a TLS client that presented a certificate: `User:` and
        the certificate's subject as an RFC 2253 string (`User:CN=alice,OU=eng`); None on a
        plain connection or when the peer sent none (ssl.client.auth none or requested)."""
        ssl_object = self._transport.get_extra_info("ssl_object")
        # On a connection this side opened the peer's certificate is a server's, not a client's.
        if not isinstance(ssl_object, ssl.SSLObject) or not ssl_object.server_side:
            return None
        der = ssl_object.getpeercert(binary_form=True)
        return None if der is None else tls_principal_of(der)

    async def receive(self) -> bytes:
        protocol = self._protocol
        while not protocol.stash:
            if protocol.finished:
                return b""
            await protocol.wait_readable()
        data = b"".join(protocol.stash)
        protocol.stash.clear()
        protocol.consumed(len(data))
        return data

    async def receive_into(self, buffer: memoryview) -> int:
        protocol = self._protocol
        while True:
            if protocol.stash:
                return protocol.take_stash(buffer)
            if protocol.finished:
                return 0
            protocol.target = buffer
            protocol.target_filled = 0
            try:
                await protocol.wait_readable()
                filled = protocol.target_filled
            finally:
                protocol.target = None
                protocol.target_filled = 0
            if filled:
                return filled

    async def send(self, data: bytes) -> None:
        if self._transport.is_closing() or self._protocol.lost:
            raise ConnectionClosedError(f"connection to {self._peer} is closed")
        self._transport.write(data)
        await self._protocol.wait_writable()

    async def send_buffers(self, buffers: Sequence[Buffer]) -> None:
        if self._transport.is_closing() or self._protocol.lost:
            raise ConnectionClosedError(f"connection to {self._peer} is closed")
        # uvloop queues each buffer as it is (a vectored write), never joining them.
        self._transport.writelines(buffers)
        await self._protocol.wait_writable()

    async def aclose(self) -> None:
        protocol = self._protocol
        protocol.stash.clear()
        protocol.buffered_bytes = 0
        protocol.finish()
        if protocol.lost:
            return
        if not self._transport.is_closing():
            self._transport.close()
        # close() flushes what send() accepted, then connection_lost runs; a peer that stops
        # reading would hold that forever, hence the bound and the abort.
        if not await protocol.wait_lost(CLOSE_FLUSH_TIMEOUT_S):
            self._transport.abort()
            await protocol.wait_lost(CLOSE_FLUSH_TIMEOUT_S)


class _TcpListener:
    """Owns the listening sockets and keeps the per-connection handler tasks referenced."""

    def __init__(self, on_stream: StreamHandler) -> None:
        self.on_stream = on_stream
        self._server: asyncio.Server | None = None
        self._address: Address | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def protocol_factory(self) -> _StreamProtocol:
        return _StreamProtocol(self.on_stream, self)

    def bind(self, server: asyncio.Server, requested: Address) -> None:
        self._server = server
        sockets = server.sockets
        port = int(sockets[0].getsockname()[1]) if sockets else requested.port
        self._address = Address(requested.host, port)

    @property
    def address(self) -> Address:
        assert self._address is not None
        return self._address

    def spawn(self, on_stream: StreamHandler, stream: TcpStream) -> None:
        task = asyncio.get_running_loop().create_task(self._run(on_stream, stream))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _run(on_stream: StreamHandler, stream: TcpStream) -> None:
        try:
            await on_stream(stream)
        except Exception:
            # The handler owns the stream; a bug there must not leak the socket or go silent.
            _log.exception("connection handler for %s failed", stream.peer)
            await stream.aclose()

    async def aclose(self) -> None:
        if self._server is not None:
            # Not wait_closed(): since Python 3.12 it also waits for every accepted connection,
            # and those belong to the caller (the server closes them itself).
            self._server.close()


class TcpTransport:
    """`runtime.net.transport.Transport` over TCP, optionally with TLS on either side."""

    def __init__(
        self,
        ssl_server: ssl.SSLContext | None = None,
        ssl_client: ssl.SSLContext | None = None,
        *,
        server_hostname: str | None = None,
        source_host: str | None = None,
    ) -> None:
        self._ssl_server = ssl_server
        self._ssl_client = ssl_client
        # Overrides the name checked against the server certificate (default: the address host).
        self._server_hostname = server_hostname
        # The local address every outgoing connection binds to (None: the kernel chooses).
        self._local_addr = None if source_host is None else (source_host, 0)

    async def connect(self, address: Address, *, timeout_s: float) -> TcpStream:
        loop = asyncio.get_running_loop()
        hostname = None
        if self._ssl_client is not None:
            hostname = self._server_hostname or address.host
        async with asyncio.timeout(timeout_s):
            transport, protocol = await loop.create_connection(
                lambda: _StreamProtocol(None, None),
                address.host,
                address.port,
                ssl=self._ssl_client,
                server_hostname=hostname,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if self._ssl_client else None,
                local_addr=self._local_addr,
            )
        return TcpStream(transport, protocol)

    async def listen(self, address: Address, on_stream: StreamHandler) -> _TcpListener:
        loop = asyncio.get_running_loop()
        listener = _TcpListener(on_stream)
        server = await loop.create_server(
            listener.protocol_factory,
            address.host,
            address.port,
            ssl=self._ssl_server,
            ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S if self._ssl_server else None,
            reuse_address=True,
        )
        listener.bind(server, address)
        return listener
