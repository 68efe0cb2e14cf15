"""DelayedFetch: a fetch waiting for min_bytes (Kafka's DelayedFetch).

When a fetch's first read finds fewer than min_bytes and max_wait_ms > 0, the ReplicaManager
builds a `DelayedFetch` holding, per partition, the position the read started at (a
`LogOffsetMetadata`: offset, segment base offset and byte position) and puts it in the fetch
purgatory under the partitions' CONSUMER_FETCH or FOLLOWER_FETCH keys. A consumer reads up to
the high watermark, a follower up to the log end offset, so a consumer fetch is woken by
high-watermark advances and a follower fetch by leader appends.

`try_complete` decides from the latest `PartitionView` of each partition, without touching the
disk, and completes when any partition

* is gone, no longer led here, or led under another leader epoch than the first read was served
  under (the final read then answers NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH or
  UNKNOWN_LEADER_EPOCH, or reads the new epoch's log);
* was truncated below the fetch offset: the fetch offset is beyond the log end offset, or the end
  offset lies on an older segment than the fetch position (OFFSET_OUT_OF_RANGE or a diverging
  epoch is for the final read to report);
* is read from an older segment than the one the end offset is on: the read stopped at a segment
  end, and Kafka counts a whole segment behind as enough data;

or when the bytes between fetch position and end offset, each partition's share capped at its
partition_max_bytes, reach min_bytes over all partitions. When the end offset has the same
message offset as the fetch position nothing is new, whatever segment each names: after a roll
the log end sits at offset N on the new segment while a fetch position taken just before it
names offset N on the old one, and reading that as "older segment" would return an empty fetch
at once.

One departure from Kafka: a position known only by its offset (no segment) cannot be measured.
If the end offset is beyond it the fetch completes, since data exists and waiting for bytes that
cannot be counted could hold it for the whole max wait.

On completion, by condition or by expiry, `on_ready(fetch)` is called once, synchronously; the
owner then reads the data from the partition actors (asynchronously, outside the purgatory) and
answers. Kafka reads inside `onComplete`; here a read is a message to another actor, and
`on_complete` must not await.

Ownership and why no lock: the operation is created, checked, completed and expired on the event
loop thread only, reads only frozen `PartitionView` values, and never awaits; the purgatory makes
`on_complete` run exactly once.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from actors.views import PartitionView, Role, TopicPartitionKey, WatchKind
from runtime.log.offsets import LogOffsetMetadata
from runtime.purgatory import DelayedOperation
from wire.topic import TopicPartition

ViewLookup = Callable[[TopicPartition], PartitionView | None]

CONSUMER_REPLICA_ID = -1


@dataclass(frozen=True, slots=True)
class FetchParams:
    """The request-wide part of a fetch. `replica_id` is the follower's broker id, or negative
    for a consumer (-1, or -2 for Kafka's debugging consumer, which is served like one)."""

    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int = 0  # 1: read_committed, up to the last stable offset

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def watch_kind(self) -> WatchKind:
        return WatchKind.FOLLOWER_FETCH if self.is_from_follower else WatchKind.CONSUMER_FETCH


@dataclass(frozen=True, slots=True)
class FetchPartitionStatus:
    """One partition of a delayed fetch.

    `fetch_offset` is where the first read started (its `FetchDataInfo.fetch_offset_metadata`);
    `read_leader_epoch` the leader epoch of the partition that read was served under;
    `current_leader_epoch` what the fetcher sent (-1 for none), kept for the final read.
    """

    topic_partition: TopicPartition
    fetch_offset: LogOffsetMetadata
    partition_max_bytes: int
    read_leader_epoch: int
    current_leader_epoch: int = -1
    read_committed: bool = False


class FetchWakeReason(enum.Enum):
    """Why a delayed fetch completed (for logs, metrics and tests)."""

    MIN_BYTES = "min-bytes"
    LEADERSHIP = "leadership"  # gone, not leader, or another leader epoch
    TRUNCATED = "truncated"
    OLDER_SEGMENT = "older-segment"
    UNMEASURED = "unmeasured"  # new data behind a position without a segment
    EXPIRED = "expired"


def partition_progress(
    status: FetchPartitionStatus, view: PartitionView | None, *, from_follower: bool
) -> FetchWakeReason | int:
    """A reason to answer now, or the readable bytes (capped at partition_max_bytes)."""
    if view is None or view.role is not Role.LEADER:
        return FetchWakeReason.LEADERSHIP
    if view.leader_epoch != status.read_leader_epoch:
        return FetchWakeReason.LEADERSHIP
    fetch = status.fetch_offset
    # Beyond the log end is truncation for consumers too: a consumer's offset never exceeds a
    # leader's LEO unless data it could see is gone. (Beyond the high watermark alone is not: a
    # new leader's high watermark can briefly lag the offsets consumers saw from the old one.)
    if fetch.message_offset > view.log_end_offset.message_offset:
        return FetchWakeReason.TRUNCATED
    if from_follower:
        end = view.log_end_offset
    elif status.read_committed and view.last_stable_offset < view.high_watermark.message_offset:
        # An open transaction holds the readable end below the HW; its position is not known.
        end = LogOffsetMetadata(view.last_stable_offset)
    else:
        end = view.high_watermark
    if end.message_offset == fetch.message_offset:
        return 0
    if end.message_offset_only or fetch.message_offset_only:
        return FetchWakeReason.UNMEASURED if end.message_offset > fetch.message_offset else 0
    if end.on_older_segment(fetch):
        return FetchWakeReason.TRUNCATED
    if fetch.on_older_segment(end):
        return FetchWakeReason.OLDER_SEGMENT
    if fetch.message_offset < end.message_offset:
        return min(end.position_diff(fetch), status.partition_max_bytes)
    return 0


class DelayedFetch(DelayedOperation):
    """A fetch waiting for min_bytes; `on_ready(self)` runs once when it may be answered."""

    __slots__ = ("_on_ready", "_reason", "_views", "params", "partitions")

    def __init__(
        self,
        params: FetchParams,
        partitions: Sequence[FetchPartitionStatus],
        views: ViewLookup,
        on_ready: Callable[[DelayedFetch], None],
    ) -> None:
        super().__init__(params.max_wait_ms)
        if not partitions:
            raise ValueError("a delayed fetch needs at least one partition")
        tps = [status.topic_partition for status in partitions]
        if len(set(tps)) != len(tps):
            raise ValueError(f"a partition appears twice in a delayed fetch: {tps}")
        self.params = params
        self.partitions = tuple(partitions)
        self._views = views
        self._on_ready = on_ready
        self._reason: FetchWakeReason | None = None

    def watch_keys(self) -> list[TopicPartitionKey]:
        kind = self.params.watch_kind
        return [TopicPartitionKey(status.topic_partition, kind) for status in self.partitions]

    @property
    def reason(self) -> FetchWakeReason | None:
        """Why it completed; None while it waits."""
        return self._reason

    def try_complete(self) -> bool:
        from_follower = self.params.is_from_follower
        accumulated_bytes = 0
        for status in self.partitions:
            view = self._views(status.topic_partition)
            progress = partition_progress(status, view, from_follower=from_follower)
            if isinstance(progress, FetchWakeReason):
                return self._complete(progress)
            accumulated_bytes += progress
        if accumulated_bytes >= self.params.min_bytes:
            return self._complete(FetchWakeReason.MIN_BYTES)
        return False

    def _complete(self, reason: FetchWakeReason) -> bool:
        if self.is_completed:
            return False
        self._reason = reason
        return self.force_complete()

    def run(self) -> None:
        # The timer's entry point: record the reason before on_complete reads it. A fetch that
        # already completed keeps its reason (the purgatory cancels its timer task anyway).
        if not self.is_completed:
            self._reason = FetchWakeReason.EXPIRED
        super().run()

    def on_complete(self) -> None:
        self._on_ready(self)

    def on_expiration(self) -> None:
        # An expired fetch is answered with whatever the final read finds; on_complete has
        # already handed it to the owner.
        pass

    def __repr__(self) -> str:
        tps = [str(status.topic_partition) for status in self.partitions]
        return f"DelayedFetch(replica={self.params.replica_id}, partitions={tps}, {self._reason})"
