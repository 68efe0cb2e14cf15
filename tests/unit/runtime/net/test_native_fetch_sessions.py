"""Fetch sessions on the native listener (runtime/net/native_dialect.py): a real `Server` with the
native dialect and a `FetchSessionCache`, over the in-memory network (seed 27), ketch's Client
sending FetchRequests with session fields. The handler answers every partition it is asked for
at the high watermark the test sets, so what comes back is what the session kept."""

from __future__ import annotations

import contextlib
import dataclasses
import random
from collections.abc import AsyncIterator
from typing import Final

from client.client import Client
from runtime.clock import ManualClock
from runtime.net.fetch_session import FetchSessionCache
from runtime.net.memory import MemoryNetwork
from runtime.net.native_dialect import native_dialect
from runtime.net.server import Server
from runtime.net.transport import Address
from tests.unit.runtime.net.test_kafka_fetch_sessions import TOPIC, Partitions, fetch_request
from wire.errors import ErrorCode
from wire.messages import FetchResponse, ForgottenTopic

SEED: Final = 27
ADDRESS: Final = Address("broker", 9092)
FOLLOWER: Final = 2


class Native:
    """A client of one native listener: `fetch` sends one Fetch and reads its answer."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def fetch(
        self,
        session_id: int,
        epoch: int,
        partitions: list[int],
        *,
        replica_id: int = FOLLOWER,
        forgotten: list[int] | None = None,
    ) -> tuple[ErrorCode, int, list[int]]:
        """(top-level error, session id, answered partitions)."""
        request = dataclasses.replace(
            fetch_request(partitions),
            replica_id=replica_id,
            session_id=session_id,
            session_epoch=epoch,
            forgotten_topics_data=(
                [ForgottenTopic(topic=TOPIC, partitions=forgotten)] if forgotten else []
            ),
        )
        response = await self.client.send(ADDRESS, request)
        assert isinstance(response, FetchResponse)
        answered = [p.partition_index for t in response.responses for p in t.partitions]
        return response.error, response.session_id, answered


@contextlib.asynccontextmanager
async def listener(
    handler: Partitions, cache: FetchSessionCache | None, clock: ManualClock
) -> AsyncIterator[Native]:
    network = MemoryNetwork(seed=SEED, clock=clock)
    server = Server(
        network.transport("broker"),
        ADDRESS,
        dict(handler.handlers()),
        clock=clock,
        dialect=native_dialect(None, cache),
    )
    await server.start()
    client = Client([ADDRESS], transport=network.transport("follower"), clock=clock)
    try:
        yield Native(client)
    finally:
        await client.close()
        await server.stop()


async def test_a_follower_session_is_opened_used_and_refused_on_errors() -> None:
    handler = Partitions()
    clock = ManualClock()
    cache = FetchSessionCache(clock, 10, rng=random.Random(SEED))
    async with listener(handler, cache, clock) as native:
        error, session_id, answered = await native.fetch(0, 0, [0, 1, 2])
        assert (error, answered) == (ErrorCode.NONE, [0, 1, 2])
        assert session_id != 0
        session = cache.get(session_id)
        assert session is not None
        assert session.privileged  # a follower's: it may take a consumer's slot
        # Nothing listed, nothing changed: all three fetched, none answered.
        assert await native.fetch(session_id, 1, []) == (ErrorCode.NONE, session_id, [])
        assert handler.asked[-1] == [0, 1, 2]
        handler.high_watermarks[1] = 7
        assert await native.fetch(session_id, 2, []) == (ErrorCode.NONE, session_id, [1])
        # Forgetting 2 leaves 0 and 1 fetched.
        assert await native.fetch(session_id, 3, [], forgotten=[2]) == (
            ErrorCode.NONE,
            session_id,
            [],
        )
        assert handler.asked[-1] == [0, 1]
        asked = len(handler.asked)
        wrong = await native.fetch(session_id, 9, [])
        assert wrong == (ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, [])
        unknown = await native.fetch(session_id + 1, 1, [])
        assert unknown == (ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
        assert len(handler.asked) == asked  # session errors never reach the handler
        # The old id with epoch 0 closes it and opens another, answered in full.
        error, renewed, answered = await native.fetch(session_id, 0, [0, 1])
        assert (error, answered) == (ErrorCode.NONE, [0, 1])
        assert renewed not in (0, session_id)
        assert len(cache) == 1


async def test_a_consumer_fetch_is_served_without_a_session() -> None:
    handler = Partitions()
    clock = ManualClock()
    cache = FetchSessionCache(clock, 10, rng=random.Random(SEED))
    async with listener(handler, cache, clock) as native:
        answer = await native.fetch(0, 0, [0, 1], replica_id=-1)
        assert answer == (ErrorCode.NONE, 0, [0, 1])
        # Its session fields are not even looked at.
        assert await native.fetch(77, 3, [0], replica_id=-1) == (ErrorCode.NONE, 0, [0])
        assert len(cache) == 0


async def test_without_a_cache_every_follower_fetch_is_full_and_sessionless() -> None:
    async with listener(Partitions(), None, ManualClock()) as native:
        assert await native.fetch(0, 0, [0, 1]) == (ErrorCode.NONE, 0, [0, 1])
        assert await native.fetch(5, 1, [0]) == (ErrorCode.NONE, 0, [0])
