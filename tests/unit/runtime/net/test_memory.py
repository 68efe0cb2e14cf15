"""The in-memory network: delivery, delay, drops, partitions and kills on a manual clock."""

from __future__ import annotations

import asyncio

import pytest

from runtime.clock import ManualClock
from runtime.net.memory import MemoryNetwork, MemoryStream
from runtime.net.transport import Address, ConnectionClosedError, Stream

SERVER = Address("broker-0", 9092)


async def _settle() -> None:
    """Let every ready task run: the network delivers on the clock, tasks still need turns."""
    for _ in range(20):
        await asyncio.sleep(0)


class _Node:
    """A listening node that hands its accepted streams to the test."""

    def __init__(self, network: MemoryNetwork, name: str = "broker-0") -> None:
        self.transport = network.transport(name)
        self.accepted: list[Stream] = []
        self.done = asyncio.Event()

    async def on_stream(self, stream: Stream) -> None:
        self.accepted.append(stream)
        await self.done.wait()
        await stream.aclose()

    async def listen(self, address: Address = SERVER) -> Address:
        listener = await self.transport.listen(address, self.on_stream)
        return listener.address


async def _connect(
    network: MemoryNetwork, node: _Node, client: str = "client"
) -> tuple[MemoryStream, Stream]:
    stream = await network.transport(client).connect(SERVER, timeout_s=1.0)
    await _settle()
    return stream, node.accepted[-1]


async def _received_now(stream: Stream) -> bytes | None:
    """What `receive()` returns without the clock moving; None if it would block."""
    task = asyncio.ensure_future(stream.receive())
    await _settle()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return None


async def test_zero_delay_link_delivers_immediately_and_in_order() -> None:
    network = MemoryNetwork(seed=1, clock=ManualClock())
    node = _Node(network)
    await node.listen()
    client, server = await _connect(network, node)
    assert server.peer == "client:50000"
    assert client.peer == "broker-0:9092"
    await client.send(b"a")
    await client.send(b"bc")
    assert await server.receive() == b"abc"
    await server.send(b"reply")
    assert await client.receive() == b"reply"
    node.done.set()


async def test_delay_follows_the_clock_and_jitter_never_reorders() -> None:
    seed = 7
    clock = ManualClock()
    network = MemoryNetwork(seed=seed, clock=clock)
    network.set_link("client", "broker-0", delay_ms=5, jitter_ms=20)
    node = _Node(network)
    await node.listen()
    connecting = asyncio.ensure_future(network.transport("client").connect(SERVER, timeout_s=1.0))
    await _settle()
    assert not connecting.done(), "a connection costs a round trip on a delayed link"
    clock.advance(60)
    await _settle()
    client = connecting.result()
    server = node.accepted[0]
    for i in range(50):
        await client.send(bytes([i]))
    assert await _received_now(server) is None, f"seed={seed}: delivered before any delay"
    received = b""
    for _ in range(30):
        clock.advance(1)
        received += await _received_now(server) or b""
    assert received == bytes(range(50)), f"seed={seed}: reordered or lost {received!r}"
    node.done.set()


async def test_connect_refused_without_listener() -> None:
    network = MemoryNetwork(seed=1, clock=ManualClock())
    with pytest.raises(ConnectionRefusedError):
        await network.transport("client").connect(SERVER, timeout_s=1.0)
    node = _Node(network)
    listener = await node.transport.listen(SERVER, node.on_stream)
    with pytest.raises(OSError, match="in use"):
        await node.transport.listen(SERVER, node.on_stream)
    await listener.aclose()
    with pytest.raises(ConnectionRefusedError):
        await network.transport("client").connect(SERVER, timeout_s=1.0)


async def test_port_zero_picks_distinct_ports() -> None:
    network = MemoryNetwork(seed=1, clock=ManualClock())
    node = _Node(network)
    first = await node.listen(Address("broker-0", 0))
    second = await node.listen(Address("broker-0", 0))
    assert first.port != 0
    assert second.port not in (0, first.port)


async def test_close_delivers_data_then_end_of_stream_and_fails_later_sends() -> None:
    network = MemoryNetwork(seed=1, clock=ManualClock())
    node = _Node(network)
    await node.listen()
    client, server = await _connect(network, node)
    await client.send(b"last words")
    await client.aclose()
    assert await server.receive() == b"last words"
    assert await server.receive() == b""
    with pytest.raises(ConnectionClosedError):
        await server.send(b"to nobody")
    with pytest.raises(ConnectionClosedError):
        await client.send(b"after close")
    node.done.set()
    await _settle()
    assert network.open_connections() == 0


async def test_partition_blocks_connects_and_holds_data_until_heal() -> None:
    clock = ManualClock()
    network = MemoryNetwork(seed=3, clock=clock)
    node = _Node(network)
    await node.listen()
    client, server = await _connect(network, node)
    network.partition("client", "broker-0")

    await client.send(b"held")
    assert await _received_now(server) is None
    # A new connection cannot be made: it times out on the clock.
    connecting = asyncio.ensure_future(network.transport("client").connect(SERVER, timeout_s=0.5))
    await _settle()
    clock.advance(499)
    await _settle()
    assert not connecting.done()
    clock.advance(1)
    await _settle()
    with pytest.raises(TimeoutError):
        connecting.result()
    # A connect in progress when the link heals succeeds.
    connecting = asyncio.ensure_future(network.transport("client").connect(SERVER, timeout_s=0.5))
    await _settle()
    network.heal("client", "broker-0")
    await _settle()
    assert isinstance(connecting.result(), MemoryStream)
    assert await server.receive() == b"held"
    node.done.set()


async def test_kill_resets_both_ends() -> None:
    network = MemoryNetwork(seed=1, clock=ManualClock())
    node = _Node(network)
    await node.listen()
    client, server = await _connect(network, node)
    blocked = asyncio.ensure_future(server.receive())
    await _settle()
    assert network.kill("broker-0") == 1
    await _settle()
    assert blocked.result() == b""
    assert await client.receive() == b""
    with pytest.raises(ConnectionClosedError):
        await client.send(b"x")
    node.done.set()


async def test_small_buffer_blocks_the_sender_until_the_reader_reads() -> None:
    network = MemoryNetwork(seed=1, clock=ManualClock(), buffer_bytes=10)
    node = _Node(network)
    await node.listen()
    client, server = await _connect(network, node)
    await client.send(b"0123456789")
    sending = asyncio.ensure_future(client.send(b"more"))
    await _settle()
    assert not sending.done(), "the sender went past a full buffer"
    assert await server.receive() == b"0123456789"
    await _settle()
    assert sending.done()
    assert await server.receive() == b"more"
    node.done.set()


async def _drop_trace(seed: int) -> list[tuple[int, bool]]:
    """Send 40 chunks over lossy links, reconnecting after each reset; record what happened."""
    network = MemoryNetwork(seed=seed, clock=ManualClock())
    network.set_link("client", "broker-0", drop_probability=0.2)
    node = _Node(network)
    await node.listen()
    trace: list[tuple[int, bool]] = []
    client, server = await _connect(network, node)
    for i in range(40):
        await client.send(bytes([i]))
        got = await server.receive()
        trace.append((i, got == bytes([i])))
        if not got:
            assert await client.receive() == b"", f"seed={seed}: only one end saw the reset"
            await client.aclose()
            client, server = await _connect(network, node)
    node.done.set()
    return trace


async def test_drops_reset_connections_and_replay_identically_from_the_seed() -> None:
    seed = 42
    first = await _drop_trace(seed)
    lost = [i for i, delivered in first if not delivered]
    assert 0 < len(lost) < 40, f"seed={seed}: drop rate 0.2 gave {len(lost)} losses of 40"
    assert await _drop_trace(seed) == first, f"seed={seed}: the same seed ran differently"
    assert await _drop_trace(seed + 1) != first, f"seed={seed}: different seeds ran the same"
