"""A partition's answer to ListOffsets for one timestamp (Kafka's
`Partition.fetchOffsetForTimestamp`).

A consumer (replica id < 0) is answered from the committed records only (below the high watermark;
a read_committed one below the last stable offset); a replica from the whole log. LATEST is the end
of what the asker may read, EARLIEST the log start, any other timestamp the first record at or
after it, with the leader epoch that wrote that record. A new leader whose high watermark has not
yet reached the start of its own epoch does not know what is committed, so a consumer gets
OFFSET_NOT_AVAILABLE and retries (KIP-207).

`offset_for_timestamp` only reads the log and changes nothing. The PartitionActor calls it from
its handler, after its read fence (actors/replication/leadership.py), so the log is read by its
one owner's task.
"""

from __future__ import annotations

from actors.replication.partition_messages import (
    NO_EPOCH,
    NO_TIMESTAMP,
    READ_COMMITTED,
    FetchOffsetForTimestamp,
    OffsetForTimestampResult,
)
from actors.views import Role
from runtime.log.log import Log
from wire.errors import ErrorCode
from wire.messages.data import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
)


def offset_for_timestamp(
    partition_log: Log,
    message: FetchOffsetForTimestamp,
    *,
    role: Role,
    leader_epoch: int,
    leader_epoch_start_offset: int,
) -> OffsetForTimestampResult:
    """The answer of a replica in `role` at `leader_epoch` whose epoch began at
    `leader_epoch_start_offset` (-1 unless it leads)."""
    is_consumer = message.replica_id < 0
    if not is_consumer:
        last_fetchable = partition_log.log_end_offset
    elif message.isolation_level == READ_COMMITTED:
        last_fetchable = partition_log.last_stable_offset
    else:
        last_fetchable = partition_log.high_watermark
    not_available = (
        is_consumer
        and role is Role.LEADER
        and leader_epoch_start_offset > partition_log.high_watermark
    )
    if message.timestamp == LATEST_TIMESTAMP:
        if not_available:
            return OffsetForTimestampResult(ErrorCode.OFFSET_NOT_AVAILABLE)
        return OffsetForTimestampResult(ErrorCode.NONE, NO_TIMESTAMP, last_fetchable, leader_epoch)
    found = partition_log.fetch_offset_by_timestamp(message.timestamp)
    if found is None or (
        message.timestamp != EARLIEST_TIMESTAMP and found.offset >= last_fetchable
    ):
        if not_available:
            return OffsetForTimestampResult(ErrorCode.OFFSET_NOT_AVAILABLE)
        return OffsetForTimestampResult(ErrorCode.NONE)
    epoch = partition_log.epoch_cache.epoch_for_offset(found.offset)
    return OffsetForTimestampResult(
        ErrorCode.NONE, found.timestamp, found.offset, NO_EPOCH if epoch is None else epoch
    )
