"""The delayed-operation test bench: hand-built PartitionViews on a ManualClock, and builders for
delayed produces and fetches.

`Cluster` holds the views a broker's partition actors would publish and the `DelayedOperations`
they wake; it also keeps every view it published, stamped, so a test can replay what an
operation could see. `appended` / `produce` build a DelayedProduce whose answers `Responses`
records; `reading` / `fetch` build a DelayedFetch whose wake-ups `Ready` records. Used by
test_delayed_produce.py, test_delayed_fetch.py and test_delayed.py."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

from actors.replication.delayed import DelayedOperations
from actors.replication.delayed_fetch import (
    DelayedFetch,
    FetchParams,
    FetchPartitionStatus,
    FetchWakeReason,
)
from actors.replication.delayed_produce import (
    DelayedProduce,
    ProducePartitionStatus,
    ProduceResults,
)
from actors.views import PartitionView, Role
from runtime.clock import ManualClock
from runtime.log.offsets import LogOffsetMetadata
from wire.errors import ErrorCode
from wire.topic import TopicPartition

TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
TP2 = TopicPartition("audit", 0)
EPOCH = 5
LEADERSHIP = 1  # the leadership every leader_view and appended status belong to by default
RECORD_BYTES = 100  # every test record takes 100 bytes of its segment


def at(offset: int, segment: int = 0) -> LogOffsetMetadata:
    """The position of `offset` in a log whose records are RECORD_BYTES each."""
    return LogOffsetMetadata(offset, segment, (offset - segment) * RECORD_BYTES)


def leader_view(
    tp: TopicPartition,
    *,
    hw: LogOffsetMetadata | int = 0,
    leo: LogOffsetMetadata | int | None = None,
    epoch: int = EPOCH,
    isr: tuple[int, ...] = (0, 1, 2),
    leadership: int = LEADERSHIP,
) -> PartitionView:
    hw_meta = at(hw) if isinstance(hw, int) else hw
    leo_meta = hw_meta if leo is None else at(leo) if isinstance(leo, int) else leo
    return PartitionView(
        topic_partition=tp,
        role=Role.LEADER,
        local_broker_id=0,
        leader_id=0,
        leader_epoch=epoch,
        partition_epoch=3,
        replicas=(0, 1, 2),
        isr=isr,
        maximal_isr=isr,
        high_watermark=hw_meta,
        log_end_offset=leo_meta,
        log_start_offset=0,
        leader_epoch_start_offset=0,
        leadership=leadership,
    )


class Cluster:
    """The views a broker's partition actors would publish, and the purgatories they wake."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.views: dict[TopicPartition, PartitionView] = {}
        self.ops = DelayedOperations(clock)
        # Every view ever published (None: the replica went away), stamped with a sequence
        # number shared with `stamp()`, so a test can replay what an operation could see.
        self.history: dict[TopicPartition, list[tuple[int, PartitionView | None]]] = {}
        self._seq = itertools.count()

    def stamp(self) -> int:
        return next(self._seq)

    def lookup(self, tp: TopicPartition) -> PartitionView | None:
        return self.views.get(tp)

    def publish(self, view: PartitionView) -> None:
        self.views[view.topic_partition] = view
        self.history.setdefault(view.topic_partition, []).append((self.stamp(), view))

    def advance_hw(self, tp: TopicPartition, hw: LogOffsetMetadata | int) -> int:
        """What a leader does when its high watermark moves: publish, then wake waiters."""
        meta = at(hw) if isinstance(hw, int) else hw
        view = self.views[tp]
        leo = view.log_end_offset
        if leo.message_offset < meta.message_offset:
            leo = meta
        self.publish(replace(view, high_watermark=meta, log_end_offset=leo))
        return self.ops.high_watermark_advanced(tp)

    def append(self, tp: TopicPartition, leo: LogOffsetMetadata | int) -> int:
        meta = at(leo) if isinstance(leo, int) else leo
        self.publish(replace(self.views[tp], log_end_offset=meta))
        return self.ops.leader_appended(tp)

    def change(self, tp: TopicPartition, **fields: object) -> int:
        if fields.pop("gone", False):
            del self.views[tp]
            self.history[tp].append((self.stamp(), None))
        else:
            self.publish(replace(self.views[tp], **fields))  # type: ignore[arg-type]
        return self.ops.partition_changed(tp)


# -- DelayedProduce --------------------------------------------------------------------------------


def appended(
    tp: TopicPartition, base: int, count: int, *, min_isr: int = 2, leadership: int = LEADERSHIP
) -> ProducePartitionStatus:
    return ProducePartitionStatus(
        topic_partition=tp,
        required_offset=base + count,
        leadership=leadership,
        min_insync_replicas=min_isr,
        base_offset=base,
        log_start_offset=0,
    )


class Responses:
    def __init__(self, stamp: Callable[[], int] | None = None) -> None:
        self.calls: list[ProduceResults] = []
        self.stamps: list[int] = []
        self._stamp = stamp

    def __call__(self, results: ProduceResults) -> None:
        self.calls.append(results)
        if self._stamp is not None:
            self.stamps.append(self._stamp())

    def errors(self) -> dict[TopicPartition, ErrorCode]:
        assert len(self.calls) == 1, f"answered {len(self.calls)} times"
        return {tp: ErrorCode(r.error_code) for tp, r in self.calls[0].items()}


def produce(
    cluster: Cluster, statuses: list[ProducePartitionStatus], timeout_ms: int = 1_000
) -> tuple[DelayedProduce, Responses]:
    responses = Responses(cluster.stamp)
    return DelayedProduce(timeout_ms, statuses, cluster.lookup, responses), responses


# -- DelayedFetch ----------------------------------------------------------------------------------


CONSUMER = FetchParams(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20)
FOLLOWER = FetchParams(replica_id=1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20)


def reading(
    tp: TopicPartition,
    offset: LogOffsetMetadata | int,
    *,
    max_bytes: int = 1 << 20,
    epoch: int = EPOCH,
) -> FetchPartitionStatus:
    return FetchPartitionStatus(
        topic_partition=tp,
        fetch_offset=at(offset) if isinstance(offset, int) else offset,
        partition_max_bytes=max_bytes,
        read_leader_epoch=epoch,
        current_leader_epoch=epoch,
    )


class Ready:
    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.calls: list[tuple[DelayedFetch, int]] = []

    def __call__(self, fetch: DelayedFetch) -> None:
        self.calls.append((fetch, self.clock.monotonic_ms()))

    def once(self) -> tuple[FetchWakeReason | None, int]:
        assert len(self.calls) == 1, f"on_ready ran {len(self.calls)} times"
        fetch, at_ms = self.calls[0]
        return fetch.reason, at_ms


def fetch(
    cluster: Cluster, params: FetchParams, statuses: list[FetchPartitionStatus]
) -> tuple[DelayedFetch, Ready]:
    ready = Ready(cluster.clock)
    return DelayedFetch(params, statuses, cluster.lookup, ready), ready
