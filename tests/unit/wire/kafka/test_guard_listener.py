"""A Kafka listener on a real TCP socket (127.0.0.1) sent a request whose array count would make
kio reserve gigabytes (and abort the broker, before wire/kafka/guard.py): that connection is
closed, as Kafka closes one whose request it cannot parse, and the listener keeps serving the
connections it had and new ones. The listener runs in the test's process, so without the guard
this test aborts the run; test_guard.py's child-process test reports the same regression as a
plain failure."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Mapping

import pytest
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from runtime.clock import SystemClock
from runtime.net.dialect import Handler, RequestContext
from runtime.net.kafka_dialect import KafkaProtocol
from runtime.net.server import Server
from runtime.net.tcp import TcpStream, TcpTransport
from runtime.net.transport import Address
from wire.frames import FrameDecoder, encode_frame
from wire.kafka.codec import schema
from wire.kafka.convert import to_kio
from wire.messages import ApiKey, MetadataRequest, MetadataResponse, MetadataResponseBroker

from .helpers import NoTopicIds
from .request_shapes import METADATA_V4_HUGE, METADATA_V12_HUGE

TIMEOUT_S = 10.0
VERSION = 12


class Client:
    """A Kafka client that writes its frames by hand, so it can send any bytes."""

    def __init__(self, stream: TcpStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()

    async def send_raw(self, payload: bytes) -> None:
        await self.stream.send(encode_frame(payload))

    async def metadata(self, correlation_id: int) -> int:
        """A Metadata v12 request for every topic: the controller id of the answer."""
        request_cls = schema(ApiKey.METADATA, VERSION, EntityType.request)
        header_cls = request_cls.__header_schema__
        buffer = io.BytesIO()
        header = header_cls(
            request_api_key=ApiKey.METADATA,
            request_api_version=VERSION,
            correlation_id=correlation_id,
            client_id="guard-test",
        )
        entity_writer(header_cls)(buffer, header)
        entity_writer(request_cls)(buffer, to_kio(MetadataRequest(topics=None), request_cls))
        await self.send_raw(buffer.getvalue())
        frame = await self.frame()
        assert frame is not None, "the connection closed instead of answering"
        response_cls = schema(ApiKey.METADATA, VERSION, EntityType.response)
        header, used = entity_reader(response_cls.__header_schema__)(frame, 0)
        assert header.correlation_id == correlation_id
        body, _ = entity_reader(response_cls)(frame, used)
        return int(body.controller_id)

    async def frame(self) -> bytes | None:
        """The next response frame; None once the listener closed the connection."""
        async with asyncio.timeout(TIMEOUT_S):
            while (frame := self.decoder.next_frame()) is None:
                data = await self.stream.receive()
                if not data:
                    return None
                self.decoder.feed(data)
        return bytes(frame)


class Recorder:
    def __init__(self) -> None:
        self.peers: list[str] = []

    async def metadata(self, request: MetadataRequest, ctx: RequestContext) -> MetadataResponse:
        self.peers.append(ctx.peer)
        return MetadataResponse(
            brokers=[MetadataResponseBroker(node_id=3, host="127.0.0.1", port=1)], controller_id=3
        )

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.METADATA: self.metadata}


@pytest.fixture
async def served() -> AsyncIterator[tuple[Server, Recorder]]:
    recorder = Recorder()
    protocol = KafkaProtocol(recorder.handlers(), NoTopicIds())
    server = Server(
        TcpTransport(),
        Address("127.0.0.1", 0),
        protocol.handlers,
        clock=SystemClock(),
        dialect=protocol.dialect,
        listener="kafka",
    )
    await server.start()
    yield server, recorder
    await server.stop()


async def connect(server: Server) -> Client:
    return Client(await TcpTransport().connect(server.address, timeout_s=TIMEOUT_S))


@pytest.mark.parametrize("payload", [METADATA_V12_HUGE, METADATA_V4_HUGE], ids=["compact", "int32"])
async def test_a_huge_count_closes_its_connection_and_the_listener_serves_on(
    served: tuple[Server, Recorder], payload: bytes
) -> None:
    server, recorder = served
    bystander = await connect(server)
    assert await bystander.metadata(1) == 3
    attacker = await connect(server)
    await attacker.send_raw(payload)
    assert await attacker.frame() is None  # closed, and nothing answered
    # The process is alive and the listener serves: the connection it had, and a new one.
    assert await bystander.metadata(2) == 3
    newcomer = await connect(server)
    assert await newcomer.metadata(3) == 3
    assert len(recorder.peers) == 3  # the refused request never reached a handler
    for client in (bystander, attacker, newcomer):
        await client.stream.aclose()
