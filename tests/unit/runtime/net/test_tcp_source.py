"""TcpTransport's source address (`connections.source.host`): outgoing connections bind to the
given local IP, so the accepting side sees it as the peer; unset, the kernel chooses. Linux
routes all of 127.0.0.0/8 to the loopback interface, which these tests rely on."""

from __future__ import annotations

import asyncio

import pytest

from runtime.net.tcp import SOURCE_HOST_KEY, TcpTransport, parse_source_host, source_host
from runtime.net.transport import Address, Stream

TIMEOUT_S = 5.0


async def _peer_seen_by_listener(client: TcpTransport) -> str:
    """The peer address a listener on 127.0.0.1 sees for one connection from `client`."""
    peers: asyncio.Queue[str] = asyncio.Queue()

    async def on_stream(stream: Stream) -> None:
        await peers.put(stream.peer)
        await stream.aclose()

    listener = await TcpTransport().listen(Address("127.0.0.1", 0), on_stream)
    try:
        stream = await client.connect(listener.address, timeout_s=TIMEOUT_S)
        try:
            async with asyncio.timeout(TIMEOUT_S):
                return await peers.get()
        finally:
            await stream.aclose()
    finally:
        await listener.aclose()


async def test_outgoing_connections_bind_to_the_source_host() -> None:
    peer = Address.parse(await _peer_seen_by_listener(TcpTransport(source_host="127.0.0.7")))
    assert peer.host == "127.0.0.7"
    assert peer.port != 0


async def test_without_a_source_host_the_kernel_chooses_the_loopback_address() -> None:
    peer = Address.parse(await _peer_seen_by_listener(TcpTransport()))
    assert peer.host == "127.0.0.1"


async def test_each_connection_gets_its_own_port_on_the_source_host() -> None:
    transport = TcpTransport(source_host="127.0.0.8")
    first = Address.parse(await _peer_seen_by_listener(transport))
    second = Address.parse(await _peer_seen_by_listener(transport))
    assert first.host == second.host == "127.0.0.8"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("127.0.0.2", "127.0.0.2"), (" 10.1.2.3 ", "10.1.2.3"), ("::1", "::1"), ("", None)],
)
def test_parse_source_host_takes_ip_literals(raw: str, expected: str | None) -> None:
    assert parse_source_host(SOURCE_HOST_KEY, raw) == expected


@pytest.mark.parametrize("raw", ["localhost", "127.0.0.1:9092", "300.1.1.1", 7])
def test_parse_source_host_refuses_anything_else_naming_the_key(raw: object) -> None:
    with pytest.raises(ValueError, match=r"connections\.source\.host"):
        parse_source_host(SOURCE_HOST_KEY, raw)


def test_source_host_from_properties() -> None:
    assert source_host({}) is None
    assert source_host({SOURCE_HOST_KEY: "127.0.0.3"}) == "127.0.0.3"
    with pytest.raises(ValueError, match=r"connections\.source\.host"):
        source_host({SOURCE_HOST_KEY: "a-host"})
