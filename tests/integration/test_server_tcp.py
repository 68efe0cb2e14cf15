"""The request server on real TCP sockets (127.0.0.1), with and without TLS."""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from runtime.clock import SystemClock
from runtime.net import auth
from runtime.net.dialect import RequestContext
from runtime.net.server import (
    Server,
    ServerConfig,
)
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address, Stream
from wire.envelope import RequestEnvelope, ResponseEnvelope, decode_response, encode_request
from wire.errors import ErrorCode
from wire.frames import FrameDecoder, encode_frame
from wire.messages import (
    ApiKey,
    ApiVersionsRequest,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    Request,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
)

TIMEOUT_S = 10.0
SECRET = b"integration-cluster-secret-42"


class Client:
    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.frames: deque[bytes] = deque()

    async def send(self, correlation_id: int, request: Request) -> None:
        envelope = RequestEnvelope(
            request.API_KEY, request.API_VERSION, correlation_id, "it", request.to_body()
        )
        await self.stream.send(encode_frame(encode_request(envelope)))

    async def response(self) -> ResponseEnvelope | None:
        async with asyncio.timeout(TIMEOUT_S):
            while not self.frames:
                data = await self.stream.receive()
                if not data:
                    return None
                self.decoder.feed(data)
                while (frame := self.decoder.next_frame()) is not None:
                    self.frames.append(bytes(frame))
        return decode_response(self.frames.popleft())

    async def call(self, correlation_id: int, request: Request) -> dict[str, Any]:
        await self.send(correlation_id, request)
        envelope = await self.response()
        assert envelope is not None
        assert envelope.correlation_id == correlation_id
        return envelope.body


async def metadata(request: MetadataRequest, ctx: RequestContext) -> MetadataResponse:
    # Later requests finish first, so ordering is really the server's doing.
    await asyncio.sleep(0.001 * (ctx.correlation_id % 5 == 0))
    return MetadataResponse(controller_id=ctx.correlation_id, cluster_id=ctx.peer)


async def heartbeat(
    request: BrokerHeartbeatRequest, ctx: RequestContext
) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(is_fenced=not ctx.cluster_member)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server(
        TcpTransport(),
        Address("127.0.0.1", 0),
        {ApiKey.METADATA: metadata, ApiKey.BROKER_HEARTBEAT: heartbeat},
        clock=SystemClock(),
        config=ServerConfig(socket_request_max_bytes=64 * 1024, server_shutdown_timeout_ms=2000),
        cluster_secret=SECRET,
    )
    await srv.start()
    yield srv
    await srv.stop()


async def _connect(server: Server, transport: TcpTransport | None = None) -> Client:
    stream = await (transport or TcpTransport()).connect(server.address, timeout_s=TIMEOUT_S)
    return Client(stream)


async def test_pipelined_requests_over_tcp_answer_in_order(server: Server) -> None:
    client = await _connect(server)
    for cid in range(200):
        await client.send(cid, MetadataRequest())
    for cid in range(200):
        envelope = await client.response()
        assert envelope is not None
        assert envelope.correlation_id == cid
        assert MetadataResponse.from_body(envelope.body).controller_id == cid
    await client.stream.aclose()


async def test_many_connections_over_tcp(server: Server) -> None:
    clients = await asyncio.gather(*(_connect(server) for _ in range(100)))

    async def talk(client: Client) -> set[str | None]:
        for cid in range(10):
            await client.send(cid, MetadataRequest())
        peers = set()
        for cid in range(10):
            envelope = await client.response()
            assert envelope is not None
            assert envelope.correlation_id == cid
            peers.add(MetadataResponse.from_body(envelope.body).cluster_id)
        return peers

    results = await asyncio.gather(*(talk(c) for c in clients))
    assert all(len(peers) == 1 for peers in results)
    assert len(set().union(*results)) == 100
    for client in clients:
        await client.stream.aclose()


async def test_oversize_frame_closes_only_that_tcp_connection(server: Server) -> None:
    bystander = await _connect(server)
    victim = await _connect(server)
    await victim.stream.send(encode_frame(b"\x00" * (64 * 1024 + 1)))
    assert await victim.response() is None
    assert (await bystander.call(1, ApiVersionsRequest()))["error_code"] == 0
    await victim.stream.aclose()
    await bystander.stream.aclose()


async def test_client_vanishing_with_requests_outstanding(server: Server) -> None:
    client = await _connect(server)
    for cid in range(50):
        await client.send(cid, MetadataRequest())
    await client.stream.aclose()
    again = await _connect(server)
    assert (await again.call(1, ApiVersionsRequest()))["error_code"] == 0
    await again.stream.aclose()


async def _prove(client: Client, secret: bytes) -> ErrorCode:
    prover = auth.ClientAuthenticator(secret)
    await client.call(1, SaslHandshakeRequest(mechanism=auth.MECHANISM))
    first = SaslAuthenticateRequest(auth_bytes=prover.first_message())
    challenge = SaslAuthenticateResponse.from_body(await client.call(2, first))
    proof = SaslAuthenticateRequest(auth_bytes=prover.on_challenge(challenge.auth_bytes))
    final = SaslAuthenticateResponse.from_body(await client.call(3, proof))
    if final.error is ErrorCode.NONE:
        prover.on_server_proof(final.auth_bytes)
    return final.error


async def test_tls_listener_with_cluster_credential(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_transport = TcpTransport(ssl_client=ssl.create_default_context(cafile=str(cert)))
    server = Server(
        TcpTransport(ssl_server=server_ctx),
        Address("127.0.0.1", 0),
        {ApiKey.BROKER_HEARTBEAT: heartbeat},
        clock=SystemClock(),
        cluster_secret=SECRET,
    )
    await server.start()
    try:
        member = await _connect(server, client_transport)
        request = BrokerHeartbeatRequest(broker_id=0, broker_epoch=1)
        refused = BrokerHeartbeatResponse.from_body(await member.call(0, request))
        assert refused.error is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        assert await _prove(member, SECRET) is ErrorCode.NONE
        accepted = BrokerHeartbeatResponse.from_body(await member.call(4, request))
        assert accepted.error is ErrorCode.NONE
        assert accepted.is_fenced is False

        outsider = await _connect(server, client_transport)
        wrong = await _prove(outsider, b"not-the-secret-at-all")
        assert wrong is ErrorCode.SASL_AUTHENTICATION_FAILED
        body = await outsider.call(4, request)
        assert body["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        await member.stream.aclose()
        await outsider.stream.aclose()
    finally:
        await server.stop()


async def test_in_flight_cap_pushes_back_through_tcp() -> None:
    release = asyncio.Event()
    started: list[int] = []

    async def stuck(request: MetadataRequest, ctx: RequestContext) -> MetadataResponse:
        started.append(ctx.correlation_id)
        await release.wait()
        return MetadataResponse(controller_id=ctx.correlation_id)

    server = Server(
        TcpTransport(),
        Address("127.0.0.1", 0),
        {ApiKey.METADATA: stuck},
        clock=SystemClock(),
        config=ServerConfig(queued_max_requests=2),
    )
    await server.start()
    client = await _connect(server)
    big = MetadataRequest(topics=[MetadataRequestTopic(name="t" * 1000) for _ in range(60)])
    sent = 0

    async def flood() -> None:
        nonlocal sent
        for cid in range(2000):  # ~120 MB if nothing pushed back
            await client.send(cid, big)
            sent += 1

    flooding = asyncio.create_task(flood())
    try:
        # Wait (bounded) until the sender is stuck: its sent count stops moving.
        previous = -1
        for _ in range(300):
            await asyncio.sleep(0.02)
            if sent == previous:
                break
            previous = sent
        assert not flooding.done(), "two thousand 60 kB requests went through a stuck server"
        assert started == [0, 1], f"the server read past its cap: {started}"
        release.set()
        for cid in range(2000):
            envelope = await client.response()
            assert envelope is not None
            assert envelope.correlation_id == cid
        await flooding
    finally:
        release.set()
        flooding.cancel()
        await asyncio.gather(flooding, return_exceptions=True)
        await client.stream.aclose()
        await server.stop()
