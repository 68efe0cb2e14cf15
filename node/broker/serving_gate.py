"""`MetadataGate`: the Kafka listener serves nothing before the broker has the cluster's metadata.

A broker that has just started (or restarted after kill -9) knows no topics until the controller's
first UpdateMetadata arrives. Answered from that empty cache, a Kafka client's Metadata request
reads "every partition unknown": librdkafka then takes every partition of the topic away from its
leader's connection and re-sends the batches in flight there, which an idempotence-less producer
writes twice (issue 18, finding 11). Kafka's KRaft broker does not process client requests until
it has caught up with the metadata log (BrokerServer enables request processing only after its
initial catch-up); ketch's broker holds each Kafka-listener request until its first
UpdateMetadata is applied, then serves it. The connection is accepted meanwhile (its listener
must be bound before registration, which advertises its port), so a client sees a slow first
answer, never a wrong one. ApiVersions is answered by the dialect itself and is not held.

The native listener is not gated: it carries the controller's own LeaderAndIsr and
UpdateMetadata, and ketch's client retries an empty metadata answer.

The node opens it once the first UpdateMetadata is applied *and* the broker knows its cluster id
(on a first start the controller names it at registration, whose answer the UpdateMetadata may
overtake): a Metadata answer without a cluster id crashes librdkafka's describe_cluster.

Owned by the broker node; `open()` is called from the node's hooks (the ReplicaManager's
metadata hook, the lifecycle's cluster id), on the event loop, and waiters are request tasks on
that loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from runtime.net.dialect import Handler, RequestContext
from wire.messages import Response


class MetadataGate:
    def __init__(self) -> None:
        self._open = asyncio.Event()

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    def open(self) -> None:
        """The first metadata is in: every held request goes on, and nothing waits again."""
        self._open.set()

    def wrap(self, handlers: Mapping[int, Handler]) -> dict[int, Handler]:
        """The same handlers, each holding its request until the gate is open."""
        return {api_key: self._gated(handler) for api_key, handler in handlers.items()}

    def _gated(self, handler: Handler) -> Handler:
        async def serve(request: Any, ctx: RequestContext) -> Response | None:
            if not self._open.is_set():
                await self._open.wait()
            return await handler(request, ctx)

        return serve
