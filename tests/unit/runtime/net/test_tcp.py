"""TCP transport: the `runtime.net.transport` contract on real sockets (127.0.0.1 only)."""

from __future__ import annotations

import asyncio
import mmap
from collections.abc import Callable, Coroutine

import pytest
import uvloop

from runtime.net import tcp
from runtime.net.transport import Address, Buffer, ConnectionClosedError, Stream

TIMEOUT_S = 5.0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9092", Address("127.0.0.1", 9092)),
        ("broker-0:0", Address("broker-0", 0)),
        ("[::1]:19092", Address("::1", 19092)),
    ],
)
def test_address_parse_and_str_round_trip(text: str, expected: Address) -> None:
    assert Address.parse(text) == expected
    assert str(expected) == text


@pytest.mark.parametrize("text", ["", "host", "host:", ":9092", "host:x", "::1:9092", "h:70000"])
def test_address_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        Address.parse(text)


async def _receive_exactly(stream: Stream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive()
        if not chunk:
            break
        data += chunk
    return bytes(data)


class _Accepted:
    """Collects the server ends of accepted streams and keeps each handler alive until released."""

    def __init__(self) -> None:
        self.streams: asyncio.Queue[Stream] = asyncio.Queue()
        self.release = asyncio.Event()

    async def __call__(self, stream: Stream) -> None:
        await self.streams.put(stream)
        await self.release.wait()

    async def next(self) -> Stream:
        async with asyncio.timeout(TIMEOUT_S):
            return await self.streams.get()


async def test_tcp_echo_and_close_semantics() -> None:
    transport = tcp.TcpTransport()
    accepted = _Accepted()
    listener = await transport.listen(Address("127.0.0.1", 0), accepted)
    assert listener.address.port != 0
    client = await transport.connect(listener.address, timeout_s=TIMEOUT_S)
    server = await accepted.next()
    assert client.peer == str(listener.address)
    assert server.peer.startswith("127.0.0.1:")

    await client.send(b"hello ")
    await client.send(b"world")
    assert await _receive_exactly(server, 11) == b"hello world"
    await server.send(b"back")
    assert await _receive_exactly(client, 4) == b"back"

    # Closing one end: the other sees the end of the stream, then its sends fail.
    await client.aclose()
    await client.aclose()  # idempotent
    async with asyncio.timeout(TIMEOUT_S):
        assert await server.receive() == b""
    assert await server.receive() == b""
    with pytest.raises(ConnectionClosedError):
        await client.send(b"late")
    await server.aclose()
    accepted.release.set()
    await listener.aclose()


async def test_tcp_aclose_wakes_a_blocked_receive() -> None:
    transport = tcp.TcpTransport()
    accepted = _Accepted()
    listener = await transport.listen(Address("127.0.0.1", 0), accepted)
    client = await transport.connect(listener.address, timeout_s=TIMEOUT_S)
    server = await accepted.next()
    receiving = asyncio.create_task(client.receive())
    await asyncio.sleep(0)
    await client.aclose()
    async with asyncio.timeout(TIMEOUT_S):
        assert await receiving == b""
    await server.aclose()
    accepted.release.set()
    await listener.aclose()


async def test_tcp_connect_refused_after_listener_closed() -> None:
    transport = tcp.TcpTransport()
    accepted = _Accepted()
    listener = await transport.listen(Address("127.0.0.1", 0), accepted)
    address = listener.address
    await listener.aclose()
    with pytest.raises(ConnectionRefusedError):
        await transport.connect(address, timeout_s=TIMEOUT_S)


async def test_tcp_listener_close_leaves_accepted_streams_open() -> None:
    transport = tcp.TcpTransport()
    accepted = _Accepted()
    listener = await transport.listen(Address("127.0.0.1", 0), accepted)
    client = await transport.connect(listener.address, timeout_s=TIMEOUT_S)
    server = await accepted.next()
    await listener.aclose()
    await client.send(b"still here")
    assert await _receive_exactly(server, 10) == b"still here"
    await client.aclose()
    await server.aclose()
    accepted.release.set()


async def test_tcp_reader_that_stops_reading_pushes_back_on_the_sender() -> None:
    transport = tcp.TcpTransport()
    accepted = _Accepted()
    listener = await transport.listen(Address("127.0.0.1", 0), accepted)
    client = await transport.connect(listener.address, timeout_s=TIMEOUT_S)
    server = await accepted.next()
    assert isinstance(server, tcp.TcpStream)
    chunk = b"x" * 65536
    total_bytes = 64 * 1024 * 1024

    async def flood() -> None:
        for _ in range(total_bytes // len(chunk)):
            await client.send(chunk)

    sender = asyncio.create_task(flood())
    # The sender must end up blocked: the server does not read, so its socket is paused, the
    # kernel buffers fill and the client transport pauses writing.
    for _ in range(500):
        if client._protocol._write_paused:
            break
        await asyncio.sleep(0.01)
    assert client._protocol._write_paused, "the sender was never paused"
    assert not sender.done()
    assert server._protocol.reading_paused
    assert server._protocol.buffered_bytes <= tcp.READ_HIGH_WATER_BYTES + 1024 * 1024

    async with asyncio.timeout(30):
        received = len(await _receive_exactly(server, total_bytes))
        await sender
    assert received == total_bytes
    await client.aclose()
    await server.aclose()
    accepted.release.set()
    await listener.aclose()


async def test_tcp_handler_exception_closes_the_stream() -> None:
    transport = tcp.TcpTransport()

    async def broken(stream: Stream) -> None:
        raise RuntimeError("handler bug")

    listener = await transport.listen(Address("127.0.0.1", 0), broken)
    client = await transport.connect(listener.address, timeout_s=TIMEOUT_S)
    async with asyncio.timeout(TIMEOUT_S):
        assert await client.receive() == b""
    await client.aclose()
    await listener.aclose()


def _on_both_loops(test: Callable[[], Coroutine[None, None, None]]) -> Callable[[str], None]:
    """Run `test` on asyncio's loop and on uvloop's, whose transports (BufferedProtocol reads,
    writelines) are the ones the nodes run on."""

    @pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
    def run(loop: str) -> None:
        factory = uvloop.new_event_loop if loop == "uvloop" else asyncio.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(test())

    run.__name__ = test.__name__
    run.__doc__ = test.__doc__
    return run


async def _receive_into_exactly(stream: Stream, size: int) -> bytes:
    buffer = bytearray(size)
    view = memoryview(buffer)
    filled = 0
    while filled < size:
        count = await stream.receive_into(view[filled:])
        assert count >= 0
        if not count:
            break
        filled += count
    return bytes(buffer[:filled])


@_on_both_loops
async def test_tcp_receive_into_takes_waiting_and_stashed_bytes_in_order() -> None:
    """Bytes reach a reader waiting in receive_into() directly, and bytes that arrived while
    nobody waited come out first, in order, through either receive method."""
    transport = tcp.TcpTransport()
    accepted = _Accepted()
    listener = await transport.listen(Address("127.0.0.1", 0), accepted)
    client = await transport.connect(listener.address, timeout_s=TIMEOUT_S)
    server = await accepted.next()
    assert isinstance(server, tcp.TcpStream)
    # Nobody reads yet: these are stashed.
    await client.send(b"early-")
    async with asyncio.timeout(TIMEOUT_S):
        # The bytes arrive through the loop's socket callbacks: nothing to wait on but time.
        while server._protocol.buffered_bytes < 6:  # noqa: ASYNC110
            await asyncio.sleep(0.001)
    small = memoryview(bytearray(3))
    assert await server.receive_into(small) == 3
    assert bytes(small) == b"ear"
    payload = bytes(range(256)) * 781 + b"tail"  # several reads' worth
    waiting = asyncio.create_task(_receive_into_exactly(server, 3 + len(payload)))
    await asyncio.sleep(0)
    await client.send(payload)
    async with asyncio.timeout(TIMEOUT_S):
        assert await waiting == b"ly-" + payload
    await client.send(b"then chunks")
    async with asyncio.timeout(TIMEOUT_S):
        assert await _receive_exactly(server, 11) == b"then chunks"
    await client.aclose()
    async with asyncio.timeout(TIMEOUT_S):
        assert await server.receive_into(memoryview(bytearray(8))) == 0
    await server.aclose()
    accepted.release.set()
    await listener.aclose()


@_on_both_loops
async def test_tcp_send_buffers_delivers_views_back_to_back() -> None:
    """send_buffers() takes bytes, bytearrays and memoryviews (of a memory map too) and the
    peer receives them joined, in order."""
    transport = tcp.TcpTransport()
    accepted = _Accepted()
    listener = await transport.listen(Address("127.0.0.1", 0), accepted)
    client = await transport.connect(listener.address, timeout_s=TIMEOUT_S)
    server = await accepted.next()
    mapped = mmap.mmap(-1, 3 * 1024 * 1024)
    mapped[:] = b"m" * len(mapped)
    big = bytes(range(256)) * 8192
    buffers: list[Buffer] = [b"head", bytearray(b"-"), memoryview(big)[100:], memoryview(mapped)]
    # Sent from a task: the send waits for the peer to drain what is above the high-water mark.
    sending = asyncio.create_task(server.send_buffers(buffers))
    expected = b"".join(bytes(b) for b in buffers)
    async with asyncio.timeout(TIMEOUT_S):
        assert await _receive_into_exactly(client, len(expected)) == expected
        await sending
    await client.aclose()
    await server.aclose()
    with pytest.raises(ConnectionClosedError):
        await server.send_buffers([b"late"])
    accepted.release.set()
    await listener.aclose()
