"""ListOffsets for the client: offsets by timestamp from each partition's leader, with retries.

`list_offsets` asks each partition's current leader (one request per leader, concurrently) for
the earliest offset whose timestamp is >= the one given, or by sentinel the log start
(`EARLIEST_TIMESTAMP`, -2) or the end (`LATEST_TIMESTAMP`, -1: the high watermark for a
consumer). A partition's retriable error (NOT_LEADER_OR_FOLLOWER and the like) refreshes
metadata if it names a stale leader and is retried through `Client.call`, for the partitions
not yet answered; a non-retriable one is raised. The consumer uses it for its offset lookups
and to reset positions.

No state: each call owns its results until it returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

from client.client import Client
from client.errors import invalidates_metadata
from wire.errors import ErrorCode, KafkaError
from wire.messages import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from wire.topic import TopicPartition


@dataclass(frozen=True, slots=True)
class OffsetAndTimestamp:
    """One partition's answer: the offset found (-1: no record at or after the timestamp)."""

    offset: int
    timestamp_ms: int
    leader_epoch: int = -1


async def list_offsets(
    client: Client,
    timestamps: Mapping[TopicPartition, int],
    *,
    replica_id: int,
    timeout_ms: float,
    isolation_level: int = 0,
) -> dict[TopicPartition, OffsetAndTimestamp]:
    """ListOffsets to each partition's leader, retrying retriable errors per partition.
    `isolation_level` 1 (read_committed) asks for the last stable offset where 0 asks for the
    high watermark (latest) and leaves out open transactions' records (by timestamp)."""
    results: dict[TopicPartition, OffsetAndTimestamp] = {}

    async def attempt() -> None:
        remaining = {tp: ts for tp, ts in timestamps.items() if tp not in results}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in remaining:
            leader, _ = await client.leader_for(tp)
            by_leader.setdefault(leader.node_id, []).append(tp)
        outcomes = await asyncio.gather(
            *(
                _list_from(client, node, tps, remaining, replica_id, isolation_level)
                for node, tps in by_leader.items()
            ),
            return_exceptions=True,
        )
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        for outcome in outcomes:
            if isinstance(outcome, dict):
                results.update(outcome)
        if errors:
            raise errors[0]  # retried by call() if retriable; others are kept in results
        missing = [tp for tp in timestamps if tp not in results]
        if missing:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no answer for {missing}")

    await client.call(attempt, timeout_ms=timeout_ms, what="ListOffsets")
    return results


async def _list_from(
    client: Client,
    node_id: int,
    partitions: list[TopicPartition],
    timestamps: Mapping[TopicPartition, int],
    replica_id: int,
    isolation_level: int,
) -> dict[TopicPartition, OffsetAndTimestamp]:
    """One request to `node_id`: the partitions it answered. A retriable partition error leaves
    the partition out (the caller's retry asks again); a non-retriable one is raised."""
    by_topic: dict[str, list[ListOffsetsPartition]] = {}
    view = client.metadata.view
    for tp in partitions:
        info = view.partition(tp)
        epoch = -1 if info is None else info.leader_epoch
        by_topic.setdefault(tp.topic, []).append(
            ListOffsetsPartition(
                partition_index=tp.partition,
                current_leader_epoch=epoch,
                timestamp=timestamps[tp],
            )
        )
    request = ListOffsetsRequest(
        replica_id=replica_id,
        isolation_level=isolation_level,
        topics=[ListOffsetsTopic(name=t, partitions=p) for t, p in by_topic.items()],
    )
    response = await client.send_expect(node_id, request, ListOffsetsResponse)
    found: dict[TopicPartition, OffsetAndTimestamp] = {}
    first_error: KafkaError | None = None
    for topic in response.topics:
        for part in topic.partitions:
            tp = TopicPartition(topic.name, part.partition_index)
            if part.error_code == ErrorCode.NONE:
                found[tp] = OffsetAndTimestamp(part.offset, part.timestamp, part.leader_epoch)
            elif first_error is None:
                first_error = KafkaError(part.error_code, str(tp))
    if first_error is not None:
        if invalidates_metadata(first_error):
            client.metadata.request_update()
        if not first_error.retriable:
            raise first_error
    return found
