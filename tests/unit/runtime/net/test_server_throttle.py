"""The server's mute after a throttled answer (KIP-219, runtime/net/server.py): once an answer
carries throttle_time_ms > 0, the connection's next request is not read until that time has
passed on the injected clock; other connections are not held; an answer without a throttle
time mutes nothing; and stopping the server ends a muted connection's wait."""

from __future__ import annotations

import asyncio

from runtime.net.dialect import RequestContext
from tests.unit.runtime.net.server_harness import Harness, until
from wire.messages import ApiKey, MetadataRequest, MetadataResponse

THROTTLE_MS = 500


class Throttling:
    """Answers every request; the ones whose correlation id is in `throttle` carry a throttle
    time (what the broker's quota layer does)."""

    def __init__(self, *throttle: int) -> None:
        self.throttle = set(throttle)
        self.served: list[int] = []

    async def __call__(self, request: MetadataRequest, ctx: RequestContext) -> MetadataResponse:
        self.served.append(ctx.correlation_id)
        throttle_ms = THROTTLE_MS if ctx.correlation_id in self.throttle else 0
        return MetadataResponse(controller_id=ctx.correlation_id, throttle_time_ms=throttle_ms)


async def test_the_request_after_a_throttled_answer_waits_out_the_throttle_time() -> None:
    handler = Throttling(1)
    async with Harness({ApiKey.METADATA: handler}) as h:
        client = await h.connect()
        other = await h.connect()
        body = await client.call(1, MetadataRequest())
        assert body["throttle_time_ms"] == THROTTLE_MS

        await client.send(2, MetadataRequest())
        # Another connection is served meanwhile: only the throttled one is muted.
        assert (await other.call(7, MetadataRequest()))["controller_id"] == 7
        for _ in range(50):
            await asyncio.sleep(0)
        assert handler.served == [1, 7]

        h.clock.advance(THROTTLE_MS - 1)
        for _ in range(50):
            await asyncio.sleep(0)
        assert handler.served == [1, 7], "read before the throttle time passed"

        h.clock.advance(1)
        await until(lambda: handler.served == [1, 7, 2], "the held request is served")
        envelope = await client.response()
        assert envelope is not None
        assert envelope.correlation_id == 2
        assert "throttle_time_ms" not in envelope.body  # 0 is not sent (wire/messages/fields.py)


async def test_an_unthrottled_answer_mutes_nothing() -> None:
    handler = Throttling()
    async with Harness({ApiKey.METADATA: handler}) as h:
        client = await h.connect()
        for correlation_id in range(1, 4):
            assert (await client.call(correlation_id, MetadataRequest()))["controller_id"] == (
                correlation_id
            )
        assert handler.served == [1, 2, 3]


async def test_stopping_the_server_ends_a_muted_connections_wait() -> None:
    handler = Throttling(1)
    h = Harness({ApiKey.METADATA: handler})
    await h.server.start()
    client = await h.connect()
    await client.call(1, MetadataRequest())
    await client.send(2, MetadataRequest())
    for _ in range(20):
        await asyncio.sleep(0)
    async with asyncio.timeout(5):  # the clock never moves: only close() can wake the reader
        await h.server.stop()
    assert h.server.connection_count == 0
    assert handler.served == [1]
