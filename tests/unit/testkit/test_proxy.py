"""The fault-injecting proxy (testkit/proxy.py) on real loopback sockets: who a connection
comes from, and what cut, blackhole, delay and heal do to each direction of a link.

"Nothing arrived" is never waited for: a test waits until the proxy reports the bytes *held*
(read from the source, not written on), which means the destination cannot have them yet."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import pytest

from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address, Stream
from testkit.probes import wait_until
from testkit.proxy import CLIENT, CONTROLLER, FaultyNetwork, Node, node_of, source_host

TIMEOUT_S = 5.0


class Echo:
    """A listener that records what each connection sent and echoes it back."""

    def __init__(self) -> None:
        self.received: list[bytearray] = []
        self.ended = 0  # connections whose peer ended the stream
        self.streams: list[Stream] = []

    async def __call__(self, stream: Stream) -> None:
        self.streams.append(stream)
        buffer = bytearray()
        self.received.append(buffer)
        while data := await stream.receive():
            buffer += data
            await stream.send(data)
        self.ended += 1
        await stream.aclose()

    async def close(self) -> None:
        """Close what is still open (a connection whose proxy was reset may not have told its
        handler yet)."""
        for stream in self.streams:
            await stream.aclose()


@pytest.fixture
def network() -> Iterator[FaultyNetwork]:
    network = FaultyNetwork()
    network.start()
    try:
        yield network
    finally:
        network.close()


@pytest.fixture
async def echo() -> AsyncIterator[tuple[Echo, Address]]:
    handler = Echo()
    listener = await TcpTransport().listen(Address("127.0.0.1", 0), handler)
    try:
        yield handler, listener.address
    finally:
        await listener.aclose()
        await handler.close()


async def connect(front: Address, source: Node = CLIENT) -> Stream:
    host = None if source == CLIENT else source_host(source)
    return await TcpTransport(source_host=host).connect(front, timeout_s=TIMEOUT_S)


async def exactly(stream: Stream, size: int) -> bytes:
    data = bytearray()
    async with asyncio.timeout(TIMEOUT_S):
        while len(data) < size:
            chunk = await stream.receive()
            if not chunk:
                break
            data += chunk
    return bytes(data)


async def reset_seen(stream: Stream) -> bool:
    """The proxy reset the connection: the stream ends (possibly after nothing)."""
    async with asyncio.timeout(TIMEOUT_S):
        return await stream.receive() == b""


async def refused(front: Address, source: Node = CLIENT) -> bool:
    """A new connection is reset: while connecting (the proxy accepts and resets at once) or
    just after."""
    try:
        stream = await connect(front, source)
    except ConnectionError:
        return True
    try:
        return await reset_seen(stream)
    finally:
        await stream.aclose()


async def held(network: FaultyNetwork, source: Node, destination: Node, size: int) -> None:
    async def holding() -> bool:
        return network.stats(source, destination).held_bytes == size

    await wait_until(holding, f"{size} bytes held on {source}->{destination}", timeout_s=TIMEOUT_S)


@pytest.mark.parametrize("node", [0, 1, 17, 253, CONTROLLER])
def test_a_node_is_known_by_its_source_host(node: Node) -> None:
    assert node_of(source_host(node)) == node


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.1.255", "127.0.3.1", "10.0.1.1", "::1"])
def test_any_other_address_is_a_client(host: str) -> None:
    assert node_of(host) == CLIENT


async def test_bytes_pass_both_ways_and_the_source_is_counted(
    network: FaultyNetwork, echo: tuple[Echo, Address]
) -> None:
    handler, target = echo
    front = network.add_route(0, target)
    from_broker = await connect(front, 1)
    from_client = await connect(front)
    await from_broker.send(b"from one")
    await from_client.send(b"from a client")
    assert await exactly(from_broker, 8) == b"from one"
    assert await exactly(from_client, 13) == b"from a client"
    assert network.stats(1, 0).connections == 1
    assert network.stats(1, 0).forwarded_bytes == 8
    assert network.stats(0, 1).forwarded_bytes == 8  # the echo: the answer's direction
    assert network.stats(CLIENT, 0).forwarded_bytes == 13
    assert network.open_connections() == 2
    await from_broker.aclose()
    await from_client.aclose()

    async def both_ended() -> bool:
        return handler.ended == 2 and network.open_connections() == 0

    await wait_until(both_ended, "the ends of stream passed on", timeout_s=TIMEOUT_S)


async def test_a_cut_resets_the_sources_connections_and_refuses_new_ones_until_healed(
    network: FaultyNetwork, echo: tuple[Echo, Address]
) -> None:
    _, target = echo
    front = network.add_route(0, target)
    from_broker = await connect(front, 1)
    from_client = await connect(front)
    await from_broker.send(b"x")
    assert await exactly(from_broker, 1) == b"x"

    network.cut(1, 0)
    assert await reset_seen(from_broker)
    assert await refused(front, 1)
    stats = network.stats(1, 0)
    assert (stats.reset, stats.refused) == (1, 1)
    await from_client.send(b"other links carry on")
    assert await exactly(from_client, 20) == b"other links carry on"

    network.heal()
    again = await connect(front, 1)
    await again.send(b"healed")
    assert await exactly(again, 6) == b"healed"
    for stream in (from_broker, from_client, again):
        await stream.aclose()


async def test_a_one_way_cut_holds_the_answers_on_the_other_sides_connections(
    network: FaultyNetwork, echo: tuple[Echo, Address]
) -> None:
    """Cut 0 -> 1: a connection broker 1 opened to broker 0 stays up, 1's request is applied
    by 0, and 0's answer is held until the heal; broker 0 cannot connect to broker 1."""
    handler, target = echo
    front_0 = network.add_route(0, target)
    front_1 = network.add_route(1, target)
    from_1 = await connect(front_0, 1)
    network.cut(0, 1)
    await from_1.send(b"request")
    await held(network, 0, 1, 7)
    assert bytes(handler.received[0]) == b"request"  # the request arrived and was answered
    assert await refused(front_1, 0)

    network.heal(0, 1)
    assert await exactly(from_1, 7) == b"request"
    assert network.stats(0, 1).held_bytes == 0
    assert network.faults() == {}
    await from_1.aclose()


async def test_a_blackhole_accepts_connections_and_holds_their_bytes_in_order(
    network: FaultyNetwork, echo: tuple[Echo, Address]
) -> None:
    handler, target = echo
    front = network.add_route(CONTROLLER, target)
    network.blackhole(2, CONTROLLER)
    stream = await connect(front, 2)
    await stream.send(b"first ")
    await stream.send(b"second")
    await held(network, 2, CONTROLLER, 12)
    assert handler.received in ([], [bytearray()])  # accepted upstream, nothing passed on
    network.heal()
    assert await exactly(stream, 12) == b"first second"
    await stream.aclose()


async def test_a_delay_holds_each_chunk_for_its_time(
    network: FaultyNetwork, echo: tuple[Echo, Address]
) -> None:
    _, target = echo
    front = network.add_route(0, target)
    network.delay(CLIENT, 0, 150)
    stream = await connect(front)
    started = time.monotonic()
    await stream.send(b"slow")
    assert await exactly(stream, 4) == b"slow"
    assert time.monotonic() - started >= 0.15
    assert network.stats(CLIENT, 0).delay_ms == 150
    await stream.aclose()


async def test_a_node_that_is_down_looks_down_through_its_proxy(network: FaultyNetwork) -> None:
    # A listener that is closed again: nothing listens on its port.
    listener = await TcpTransport().listen(Address("127.0.0.1", 0), Echo())
    target = listener.address
    await listener.aclose()
    front = network.add_route(0, target)
    assert await refused(front)


async def test_closing_the_network_resets_its_connections_and_stops_listening(
    echo: tuple[Echo, Address],
) -> None:
    _, target = echo
    network = FaultyNetwork()
    network.start()
    front = network.add_route(0, target)
    stream = await connect(front)
    network.close()
    assert await reset_seen(stream)
    with pytest.raises(ConnectionRefusedError):
        await connect(front)
    network.close()  # idempotent
    await stream.aclose()
