"""`TxnMarkerSender`: the transaction coordinator's WriteTxnMarkers to the partitions' leaders
(Kafka's TransactionMarkerChannelManager, simplified to one retry loop per decided transaction).

For one decided transaction, the partitions are grouped by their leader in this broker's
metadata and each leader gets one WriteTxnMarkers request on the native listener, with the
cluster credential (a control-plane API). A partition is done when its leader answers NONE; when
it answers INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED (a newer producer epoch or a
newer coordinator already decided there, so this marker is obsolete: Kafka gives up the same
way); or when its topic no longer exists. Anything else (no leader yet, NOT_LEADER_OR_FOLLOWER,
NOT_ENOUGH_REPLICAS, a timeout, a dead connection) is retried after retry.backoff.ms, doubling
up to retry.backoff.max.ms, for as long as it takes: the decision is durable and the markers are
owed. The shard's task that awaits `send` is cancelled when the shard unloads; the next
coordinator sends them again.

Runs in the coordinator shard's task on the broker's event loop; holds no state between calls
but its client's connections.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from actors.metadata_cache import MetadataSnapshot
from client.client import Client
from client.errors import ClientError
from runtime.clock import Clock
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from wire.topic import TopicPartition

log = logging.getLogger(__name__)

_OBSOLETE: Final = frozenset(
    {ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.TRANSACTION_COORDINATOR_FENCED}
)


class TxnMarkerSender:
    def __init__(
        self,
        client: Client,
        metadata: Callable[[], MetadataSnapshot],
        *,
        clock: Clock,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
    ) -> None:
        self._client = client
        self._metadata = metadata
        self._clock = clock
        self._backoff_ms = retry_backoff_ms
        self._backoff_max_ms = retry_backoff_max_ms

    async def send(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        commit: bool,
        partitions: frozenset[TopicPartition],
    ) -> None:
        remaining = set(partitions)
        backoff_ms = self._backoff_ms
        while remaining:
            snapshot = self._metadata()
            by_leader: dict[Address, list[TopicPartition]] = {}
            for tp in sorted(remaining, key=str):
                if not snapshot.has_topic(tp.topic):
                    log.info("marker for %s dropped: the topic is gone", tp)
                    remaining.discard(tp)
                    continue
                state = snapshot.partition_state(tp)
                endpoint = None if state is None else snapshot.endpoint(state.leader)
                if endpoint is not None:
                    address = Address(endpoint.host, endpoint.port)
                    by_leader.setdefault(address, []).append(tp)
            answers = await asyncio.gather(
                *(
                    self._write(
                        address, tps, producer_id, producer_epoch, coordinator_epoch, commit
                    )
                    for address, tps in by_leader.items()
                )
            )
            for done in answers:
                remaining -= done
            if remaining:
                await self._clock.sleep(backoff_ms / 1000)
                backoff_ms = min(2 * backoff_ms, self._backoff_max_ms)

    async def _write(
        self,
        address: Address,
        tps: list[TopicPartition],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
    ) -> set[TopicPartition]:
        """The partitions this leader is done with."""
        by_topic: dict[str, list[int]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = WriteTxnMarkersRequest(
            markers=[
                WritableTxnMarker(
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transaction_result=commit,
                    topics=[
                        WritableTxnMarkerTopic(name=name, partition_indexes=indexes)
                        for name, indexes in by_topic.items()
                    ],
                    coordinator_epoch=coordinator_epoch,
                )
            ]
        )
        try:
            response = await self._client.send(address, request)
        except (ClientError, ConnectionError, TimeoutError) as exc:
            log.info("WriteTxnMarkers to %s failed: %r; will retry", address, exc)
            return set()
        assert isinstance(response, WriteTxnMarkersResponse), response
        done: set[TopicPartition] = set()
        for marker in response.markers:
            for topic in marker.topics:
                for partition in topic.partitions:
                    tp = TopicPartition(topic.name, partition.partition_index)
                    error = ErrorCode.from_code(partition.error_code)
                    if error is ErrorCode.NONE:
                        done.add(tp)
                    elif error in _OBSOLETE:
                        log.warning("marker for %s not written: %s", tp, error.name)
                        done.add(tp)
                    else:
                        log.info("marker for %s: %s; will retry", tp, error.name)
        return done


__all__ = ["TxnMarkerSender"]
