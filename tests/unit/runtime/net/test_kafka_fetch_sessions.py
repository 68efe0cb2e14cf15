"""Fetch sessions on the Kafka listener: a real `Server` with the Kafka dialect and a
`FetchSessionCache`, over the in-memory network (seed 9), a raw client writing Fetch v12 frames
with kio. The handler answers every partition it is asked for at the high watermark the test
sets, so what the client gets back is what the session kept."""

from __future__ import annotations

import contextlib
import random
from collections.abc import AsyncIterator, Mapping
from typing import Final

from kio.schema.errors import ErrorCode as KioErrorCode

from runtime.clock import ManualClock
from runtime.net.dialect import Handler, RequestContext
from runtime.net.fetch_session import FetchSessionCache
from runtime.net.kafka_dialect import KafkaProtocol
from runtime.net.memory import MemoryNetwork
from runtime.net.server import Server
from runtime.net.transport import Address
from tests.unit.runtime.net.test_kafka_dialect import KafkaRawClient
from tests.unit.wire.kafka.helpers import NoTopicIds
from wire.messages import (
    ApiKey,
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    FetchTopic,
)

SEED: Final = 9
ADDRESS: Final = Address("broker", 19092)
VERSION: Final = 12  # by topic name, so NoTopicIds will do
TOPIC: Final = "orders"


class Partitions:
    """The fetch handler: each asked partition at its high watermark (0 unless set)."""

    def __init__(self) -> None:
        self.high_watermarks: dict[int, int] = {}
        self.asked: list[list[int]] = []

    async def fetch(self, request: FetchRequest, ctx: RequestContext) -> FetchResponse:
        indexes = [p.partition for t in request.topics for p in t.partitions]
        self.asked.append(indexes)
        parts = [
            FetchResponsePartition(
                partition_index=i,
                high_watermark=self.high_watermarks.get(i, 0),
                last_stable_offset=0,
                log_start_offset=0,
            )
            for i in indexes
        ]
        return FetchResponse(responses=[FetchableTopicResponse(topic=TOPIC, partitions=parts)])

    def handlers(self) -> Mapping[int, Handler]:
        return {ApiKey.FETCH: self.fetch}


def fetch_request(partitions: list[int]) -> FetchRequest:
    fetches = [
        FetchPartition(partition=i, fetch_offset=0, partition_max_bytes=1 << 20) for i in partitions
    ]
    topics = [FetchTopic(topic=TOPIC, partitions=fetches)] if partitions else []
    return FetchRequest(max_wait_ms=0, min_bytes=0, topics=topics)


async def fetch(
    client: KafkaRawClient, session_id: int, epoch: int, partitions: list[int]
) -> tuple[KioErrorCode, int, list[int]]:
    """(top-level error, session id, answered partitions) of one Fetch."""
    request = fetch_request(partitions)
    await client.send_native(request, VERSION, 1, session_id=session_id, session_epoch=epoch)
    _, body = await client.response(ApiKey.FETCH, VERSION)
    answered = [p.partition_index for t in body.responses for p in t.partitions]
    return body.error_code, body.session_id, answered


@contextlib.asynccontextmanager
async def listener(
    handler: Partitions, cache: FetchSessionCache | None, clock: ManualClock
) -> AsyncIterator[KafkaRawClient]:
    """A Kafka listener serving `handler` with `cache`, and a client connected to it."""
    network = MemoryNetwork(seed=SEED, clock=clock)
    protocol = KafkaProtocol(handler.handlers(), NoTopicIds(), cache)
    transport = network.transport("broker")
    server = Server(transport, ADDRESS, protocol.handlers, clock=clock, dialect=protocol.dialect)
    await server.start()
    try:
        stream = await network.transport("client").connect(ADDRESS, timeout_s=1.0)
        yield KafkaRawClient(stream)
    finally:
        await server.stop()


async def test_a_session_is_opened_used_and_refused_on_a_wrong_epoch() -> None:
    handler = Partitions()
    clock = ManualClock()
    cache = FetchSessionCache(clock, 10, rng=random.Random(SEED))
    async with listener(handler, cache, clock) as client:
        error, session_id, answered = await fetch(client, 0, 0, [0, 1, 2])
        assert (error, answered) == (KioErrorCode.none, [0, 1, 2])
        assert session_id != 0
        # Incremental, nothing listed and nothing changed: all three fetched, none answered.
        assert await fetch(client, session_id, 1, []) == (KioErrorCode.none, session_id, [])
        assert handler.asked[-1] == [0, 1, 2]
        handler.high_watermarks[1] = 7
        assert await fetch(client, session_id, 2, []) == (KioErrorCode.none, session_id, [1])
        asked = len(handler.asked)
        wrong_epoch = await fetch(client, session_id, 9, [])
        assert wrong_epoch == (KioErrorCode.invalid_fetch_session_epoch, 0, [])
        unknown = await fetch(client, session_id + 1, 1, [])
        assert unknown == (KioErrorCode.fetch_session_id_not_found, 0, [])
        assert len(handler.asked) == asked  # session errors never reach the handler
        # FINAL: closed, answered in full without a session.
        assert await fetch(client, session_id, -1, [0, 1, 2]) == (KioErrorCode.none, 0, [0, 1, 2])
        assert len(cache) == 0


async def test_without_a_cache_every_fetch_is_full_and_sessionless() -> None:
    async with listener(Partitions(), None, ManualClock()) as client:
        assert await fetch(client, 0, 0, [0, 1]) == (KioErrorCode.none, 0, [0, 1])
