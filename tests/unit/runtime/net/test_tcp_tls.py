"""TLS on the TCP transport with a self-signed certificate made at test time by the openssl CLI."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from runtime.net import tcp
from runtime.net.transport import Address, Stream

TIMEOUT_S = 5.0


def _contexts(cert: Path, key: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    return server, client


async def test_tls_round_trip_with_verified_certificate(certificate: tuple[Path, Path]) -> None:
    server_ctx, client_ctx = _contexts(*certificate)
    server_transport = tcp.TcpTransport(ssl_server=server_ctx)
    client_transport = tcp.TcpTransport(ssl_client=client_ctx)
    accepted: asyncio.Queue[Stream] = asyncio.Queue()
    done = asyncio.Event()

    async def on_stream(stream: Stream) -> None:
        await accepted.put(stream)
        await done.wait()

    listener = await server_transport.listen(Address("127.0.0.1", 0), on_stream)
    client = await client_transport.connect(listener.address, timeout_s=TIMEOUT_S)
    async with asyncio.timeout(TIMEOUT_S):
        server = await accepted.get()
        assert client.tls_version is not None
        assert client.tls_version.startswith("TLS")
        await client.send(b"secret frame")
        received = b""
        while len(received) < 12:
            received += await server.receive()
        assert received == b"secret frame"
        await client.aclose()
        assert await server.receive() == b""
    await server.aclose()
    done.set()
    await listener.aclose()


async def test_tls_client_rejects_an_untrusted_server(certificate: tuple[Path, Path]) -> None:
    server_ctx, _ = _contexts(*certificate)
    untrusting = ssl.create_default_context()  # system CAs only: the self-signed cert fails
    done = asyncio.Event()

    async def on_stream(stream: Stream) -> None:
        await done.wait()
        await stream.aclose()

    listener = await tcp.TcpTransport(ssl_server=server_ctx).listen(
        Address("127.0.0.1", 0), on_stream
    )
    with pytest.raises(ssl.SSLCertVerificationError):
        await tcp.TcpTransport(ssl_client=untrusting).connect(listener.address, timeout_s=TIMEOUT_S)
    done.set()
    await listener.aclose()
