"""The Kafka listener's dialect in a real `Server`, over the in-memory network.

A raw client writes Kafka frames by hand (kio's writers), so it can send unsupported versions,
garbage and pipelined requests; the handlers are the test's own, recording what they were given.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import struct
from collections import deque
from collections.abc import Mapping
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from runtime.clock import ManualClock
from runtime.net.dialect import (
    Handler,
    RequestContext,
)
from runtime.net.kafka_dialect import KafkaProtocol
from runtime.net.memory import MemoryNetwork
from runtime.net.server import Server
from runtime.net.transport import Address, Stream
from tests.unit.wire.kafka.helpers import NoTopicIds
from wire.frames import FrameDecoder, encode_frame
from wire.kafka.codec import schema
from wire.kafka.convert import to_kio
from wire.messages import (
    ApiKey,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    Request,
    TopicProduceData,
)

SEED = 9
ADDRESS = Address("broker", 19092)


class KafkaRawClient:
    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.frames: deque[bytes] = deque()
        self.eof = False

    async def send_raw(self, payload: bytes) -> None:
        await self.stream.send(encode_frame(payload))

    async def send(self, api_key: int, version: int, correlation_id: int, body: Any) -> None:
        request_cls = type(body)
        header_cls = request_cls.__header_schema__
        buffer = io.BytesIO()
        entity_writer(header_cls)(
            buffer,
            header_cls(
                request_api_key=api_key,
                request_api_version=version,
                correlation_id=correlation_id,
                client_id="raw",
            ),
        )
        entity_writer(request_cls)(buffer, body)
        await self.send_raw(buffer.getvalue())

    async def send_native(
        self, request: Request, version: int, correlation_id: int, **extra: Any
    ) -> None:
        """`request` as the kio body of `version` (fields the version lacks are dropped)."""
        request_cls = schema(request.API_KEY, version, EntityType.request)
        body = to_kio(request, request_cls)
        if extra:
            body = dataclasses.replace(body, **extra)
        await self.send(request.API_KEY, version, correlation_id, body)

    async def frame(self) -> bytes | None:
        """The next response frame (without its length); None once the server closed."""
        async with asyncio.timeout(5):
            while not self.frames and not self.eof:
                data = await self.stream.receive()
                if not data:
                    self.eof = True
                    break
                self.decoder.feed(data)
                while (frame := self.decoder.next_frame()) is not None:
                    self.frames.append(bytes(frame))
        return self.frames.popleft() if self.frames else None

    async def response(self, api_key: int, version: int) -> tuple[int, Any]:
        frame = await self.frame()
        assert frame is not None, "connection closed instead of answering"
        response_cls = schema(api_key, version, EntityType.response)
        header, used = entity_reader(response_cls.__header_schema__)(frame, 0)
        body, size = entity_reader(response_cls)(frame, used)
        assert used + size == len(frame)
        return header.correlation_id, body

    async def closed(self) -> bool:
        return await self.frame() is None and self.eof


class Recorder:
    """Handlers that record their requests; Produce can be told to fail."""

    def __init__(self) -> None:
        self.requests: list[tuple[Request, RequestContext]] = []
        self.fail_produce = False

    async def metadata(self, request: MetadataRequest, ctx: RequestContext) -> MetadataResponse:
        self.requests.append((request, ctx))
        return MetadataResponse(
            brokers=[MetadataResponseBroker(node_id=3, host="h", port=1)], controller_id=3
        )

    async def produce(self, request: ProduceRequest, ctx: RequestContext) -> ProduceResponse | None:
        self.requests.append((request, ctx))
        if self.fail_produce:
            raise RuntimeError("injected handler failure")
        return None if request.acks == 0 else ProduceResponse()

    async def fetch(self, request: FetchRequest, ctx: RequestContext) -> FetchResponse:
        self.requests.append((request, ctx))
        return FetchResponse()

    def handlers(self) -> Mapping[int, Handler]:
        return {
            ApiKey.METADATA: self.metadata,
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
        }


class Harness:
    def __init__(self) -> None:
        self.recorder = Recorder()
        self.clock = ManualClock()
        self.network = MemoryNetwork(seed=SEED, clock=self.clock)
        protocol = KafkaProtocol(self.recorder.handlers(), NoTopicIds())
        self.server = Server(
            self.network.transport("broker"),
            ADDRESS,
            protocol.handlers,
            clock=self.clock,
            dialect=protocol.dialect,
        )
        self.clients = 0

    async def __aenter__(self) -> Harness:
        await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.stop()

    async def connect(self) -> KafkaRawClient:
        self.clients += 1
        transport = self.network.transport(f"client-{self.clients}")
        return KafkaRawClient(await transport.connect(ADDRESS, timeout_s=1.0))


def api_versions_request(version: int) -> Any:
    request_cls = schema(ApiKey.API_VERSIONS, version, EntityType.request)
    fields = request_cls.__dataclass_fields__
    if "client_software_name" in fields:
        return request_cls(client_software_name="raw", client_software_version="1")
    return request_cls()


PRODUCE = ProduceRequest(
    acks=1,
    timeout_ms=1000,
    topic_data=[
        TopicProduceData(name="t", partition_data=[PartitionProduceData(index=4, records=b"r")])
    ],
)


@pytest.mark.parametrize("version", range(4))
async def test_api_versions_lists_what_is_served(version: int) -> None:
    async with Harness() as h:
        client = await h.connect()
        await client.send(ApiKey.API_VERSIONS, version, 5, api_versions_request(version))
        correlation_id, body = await client.response(ApiKey.API_VERSIONS, version)
        assert correlation_id == 5
        assert body.error_code is KioErrorCode.none
        ranges = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        # Only APIs with a handler, plus ApiVersions (answered by the dialect itself).
        assert ranges == {
            ApiKey.PRODUCE: (3, 9),
            ApiKey.FETCH: (4, 16),
            ApiKey.METADATA: (0, 12),
            ApiKey.API_VERSIONS: (0, 3),
        }


@pytest.mark.parametrize("version", [4, 99])
async def test_unsupported_api_versions_gets_a_v0_answer_and_the_connection_stays(
    version: int,
) -> None:
    async with Harness() as h:
        client = await h.connect()
        # A client's newer ApiVersions: a header v2 and a body we cannot parse at that version.
        await client.send_raw(struct.pack(">hhih", ApiKey.API_VERSIONS, version, 8, -1) + b"\x00")
        correlation_id, body = await client.response(ApiKey.API_VERSIONS, 0)
        assert correlation_id == 8
        assert body.error_code is KioErrorCode.unsupported_version
        assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 3)]
        await client.send(ApiKey.API_VERSIONS, 3, 9, api_versions_request(3))
        assert (await client.response(ApiKey.API_VERSIONS, 3))[0] == 9


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">hhih", 9999, 0, 1, -1),  # unknown API
        struct.pack(">hhih", ApiKey.PRODUCE, 2, 1, -1),  # a version we do not serve
        struct.pack(">hhih", ApiKey.LEADER_AND_ISR, 5, 1, -1),  # control plane: never here
        struct.pack(">hhih", ApiKey.CREATE_TOPICS, 4, 1, -1),  # no handler registered
        struct.pack(">hhih", ApiKey.PRODUCE, 7, 1, -1) + b"\x00\x01",  # body cut short
        b"\x00\x03",  # shorter than any header
        b"\xff" * 64,  # garbage
    ],
)
async def test_requests_that_cannot_be_served_close_only_their_connection(payload: bytes) -> None:
    async with Harness() as h:
        bad = await h.connect()
        await bad.send_raw(payload)
        assert await bad.closed()
        assert h.recorder.requests == []
        good = await h.connect()
        await good.send_native(MetadataRequest(topics=None), 12, 3)
        correlation_id, body = await good.response(ApiKey.METADATA, 12)
        assert (correlation_id, body.controller_id) == (3, 3)


async def test_requests_reach_the_handlers_as_native_messages() -> None:
    async with Harness() as h:
        client = await h.connect()
        await client.send_native(PRODUCE, 9, 21)
        assert (await client.response(ApiKey.PRODUCE, 9))[0] == 21
        ((request, ctx),) = h.recorder.requests
        assert request == PRODUCE
        assert (ctx.client_id, ctx.api_version, ctx.correlation_id) == ("raw", 9, 21)
        assert not ctx.cluster_member  # the Kafka listener never authenticates cluster members


async def test_acks_zero_gets_no_answer_and_later_answers_keep_their_order() -> None:
    async with Harness() as h:
        client = await h.connect()
        await client.send_native(PRODUCE, 7, 1, acks=0)
        await client.send_native(MetadataRequest(topics=None), 1, 2)
        await client.send_native(PRODUCE, 7, 3)
        assert (await client.response(ApiKey.METADATA, 1))[0] == 2
        assert (await client.response(ApiKey.PRODUCE, 7))[0] == 3
        assert len(h.recorder.requests) == 3


async def test_a_failing_handler_is_answered_per_partition() -> None:
    async with Harness() as h:
        h.recorder.fail_produce = True
        client = await h.connect()
        await client.send_native(PRODUCE, 8, 4)
        correlation_id, body = await client.response(ApiKey.PRODUCE, 8)
        assert correlation_id == 4
        ((topic,),) = [body.responses]
        assert topic.name == "t"
        assert [(p.index, p.error_code) for p in topic.partition_responses] == [
            (4, KioErrorCode.unknown_server_error)
        ]


async def test_a_fetch_claiming_a_replica_id_is_refused_without_reaching_the_handler() -> None:
    fetch = FetchRequest(
        replica_id=1,
        max_wait_ms=0,
        min_bytes=1,
        topics=[
            FetchTopic(
                topic="t",
                partitions=[FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1024)],
            )
        ],
    )
    async with Harness() as h:
        client = await h.connect()
        await client.send_native(fetch, 12, 6)
        _, body = await client.response(ApiKey.FETCH, 12)
        (topic,) = body.responses
        assert [p.error_code for p in topic.partitions] == [
            KioErrorCode.cluster_authorization_failed
        ]
        assert h.recorder.requests == []
        await client.send_native(dataclasses.replace(fetch, replica_id=-1), 12, 7)
        assert (await client.response(ApiKey.FETCH, 12))[0] == 7
        assert len(h.recorder.requests) == 1
