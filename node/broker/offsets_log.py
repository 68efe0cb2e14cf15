"""An internal topic's partitions as a coordinator sees them (`__consumer_offsets` for the group
coordinator, `__transaction_state` for the transaction coordinator), on the broker's own data
path.

Appends are produce requests with acks=all (bounded by offsets.commit.timeout.ms), so a commit
or a group's assignment is answered only once every in-sync replica has it, exactly as a
client's acks=all write; reads are consumer fetches, so they stop at the high watermark and the
coordinator never loads what a new leader might still truncate.
"""

from __future__ import annotations

import logging
from typing import Final

from actors.partition_log import LogChunk
from actors.replication.partition_messages import ACKS_ALL
from actors.replication.request_path import RequestPath
from runtime.clock import Clock
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC
from wire.messages import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from wire.messages.data import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
)
from wire.records import iter_batches

log = logging.getLogger(__name__)

COMMITTED_POLLS: Final = 200
COMMITTED_POLL_S: Final = 0.025  # 5 s at most: followers fetch far more often than that


class RequestPathOffsetsLog:
    def __init__(
        self,
        request_path: RequestPath,
        commit_timeout_ms: int,
        clock: Clock,
        *,
        topic: str = OFFSETS_TOPIC,
    ) -> None:
        self._topic = topic
        self._path = request_path
        self._commit_timeout_ms = commit_timeout_ms
        self._clock = clock

    async def wait_committed(self, partition: int) -> ErrorCode:
        # The partition answers the latest offset with OFFSET_NOT_AVAILABLE while a new
        # leader's HW is below the start of its epoch (KIP-207): poll until it answers an
        # offset. Any other error (the partition actor not leader yet, say) is waited out too:
        # only an answered offset says the HW covers what the old leader acknowledged. After
        # the polls, the last error: the shard must not load up to a HW that may miss commits,
        # so it fails this load and retries it later.
        error = ErrorCode.REQUEST_TIMED_OUT
        for _ in range(COMMITTED_POLLS):
            latest = await self._offset(partition, LATEST_TIMESTAMP)
            if not isinstance(latest, ErrorCode):
                return ErrorCode.NONE
            error = latest
            await self._clock.sleep(COMMITTED_POLL_S)
        log.warning("%s-%d: HW still behind: %s", self._topic, partition, error.name)
        return error

    async def append(self, partition: int, records: bytes) -> ErrorCode:
        response = await self._path.produce(
            ProduceRequest(
                acks=ACKS_ALL,
                timeout_ms=self._commit_timeout_ms,
                topic_data=[
                    TopicProduceData(
                        name=self._topic,
                        partition_data=[PartitionProduceData(index=partition, records=records)],
                    )
                ],
            )
        )
        [topic] = response.responses
        [answer] = topic.partition_responses
        return ErrorCode.from_code(answer.error_code)

    async def read(self, partition: int, offset: int, max_bytes: int) -> LogChunk | ErrorCode:
        chunk = await self._fetch(partition, offset, max_bytes)
        if chunk is ErrorCode.OFFSET_OUT_OF_RANGE:
            start = await self._offset(partition, EARLIEST_TIMESTAMP)
            if isinstance(start, ErrorCode):
                return start
            chunk = await self._fetch(partition, max(offset, start), max_bytes)
        return chunk

    async def _fetch(self, partition: int, offset: int, max_bytes: int) -> LogChunk | ErrorCode:
        response = await self._path.fetch(
            FetchRequest(
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=max_bytes,
                topics=[
                    FetchTopic(
                        topic=self._topic,
                        partitions=[
                            FetchPartition(
                                partition=partition,
                                fetch_offset=offset,
                                partition_max_bytes=max_bytes,
                            )
                        ],
                    )
                ],
            )
        )
        [topic] = response.responses
        [answer] = topic.partitions
        if answer.error_code != ErrorCode.NONE:
            return ErrorCode.from_code(answer.error_code)
        next_offset = offset
        for _, header in iter_batches(answer.records, validate=False):
            next_offset = header.last_offset + 1
        return LogChunk(answer.records, next_offset, answer.high_watermark, answer.log_start_offset)

    async def _offset(self, partition: int, timestamp: int) -> int | ErrorCode:
        response = await self._path.list_offsets(
            ListOffsetsRequest(
                topics=[
                    ListOffsetsTopic(
                        name=self._topic,
                        partitions=[
                            ListOffsetsPartition(partition_index=partition, timestamp=timestamp)
                        ],
                    )
                ]
            )
        )
        [topic] = response.topics
        [answer] = topic.partitions
        if answer.error_code != ErrorCode.NONE:
            return ErrorCode.from_code(answer.error_code)
        return answer.offset
