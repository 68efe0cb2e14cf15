"""The partitions of an internal topic as a coordinator uses them: `InternalTopicLog` (the group
coordinator's `__consumer_offsets`, the transaction coordinator's `__transaction_state`), and
`LogChunk`, what one read returns. The broker node implements it on its own request path
(node/broker/offsets_log.py), so appends are acks=all produces and reads are consumer fetches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from wire.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class LogChunk:
    """What a read of a partition returns: stored batches from an offset, the next offset to
    read, and the partition's high watermark and log start."""

    records: bytes | memoryview
    next_offset: int
    high_watermark: int
    log_start_offset: int


class InternalTopicLog(Protocol):
    async def append(self, partition: int, records: bytes) -> ErrorCode:
        """Append as leader with acks=all; NONE once every in-sync replica has the records."""
        ...

    async def read(self, partition: int, offset: int, max_bytes: int) -> LogChunk | ErrorCode:
        """Committed records (below the high watermark) from `offset`, or from the log start
        when that is later."""
        ...

    async def wait_committed(self, partition: int) -> ErrorCode:
        """Until the high watermark of a new leader covers its whole log as of its election
        (everything the previous leader acknowledged): a follower learns the HW one fetch
        late, so loading up to a fresh leader's HW at once could miss the last commits. NONE
        once it does; an error when it gives up first (the load then fails and is retried)."""
        ...
