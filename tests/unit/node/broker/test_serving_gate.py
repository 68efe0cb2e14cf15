"""The Kafka listener holds requests until the broker's first UpdateMetadata (issue 18, the
window left by finding 11): a request that arrives first is answered only after the gate opens,
and then from the filled cache; nothing waits once it is open."""

from __future__ import annotations

import asyncio
from typing import Any

from node.broker.serving_gate import MetadataGate
from runtime.net.dialect import RequestContext
from wire.messages import MetadataResponse, Response


async def test_requests_wait_for_the_first_metadata_then_are_served() -> None:
    gate = MetadataGate()
    cache: dict[str, int] = {}
    calls: list[int] = []

    async def metadata(request: Any, ctx: RequestContext) -> Response | None:
        calls.append(len(cache))
        return MetadataResponse()

    handlers = gate.wrap({3: metadata})
    ctx: Any = object()
    waiting = asyncio.ensure_future(handlers[3](object(), ctx))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not waiting.done(), "served from an empty cache"
    assert calls == []
    cache["orders"] = 3  # the first UpdateMetadata fills the cache, then opens the gate
    gate.open()
    assert isinstance(await waiting, MetadataResponse)
    assert calls == [1]
    assert gate.is_open
    # Open: served at once.
    assert isinstance(await handlers[3](object(), ctx), MetadataResponse)
    assert calls == [1, 1]
