"""DelayedFetch on the purgatory, driven by hand-built PartitionViews and a ManualClock
(tests/unit/actors/replication/delayed_harness.py): min_bytes across partitions, the wake-up
reasons (leadership, truncation, older segment, unmeasurable position, expiry), and the consumer
long-poll waking in the same tick as the high-watermark advance."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace

import pytest

from actors.replication.delayed_fetch import (
    DelayedFetch,
    FetchWakeReason,
)
from actors.views import PartitionView, Role
from runtime.clock import ManualClock
from runtime.log.offsets import LogOffsetMetadata
from tests.unit.actors.replication.delayed_harness import (
    CONSUMER,
    EPOCH,
    FOLLOWER,
    TP0,
    TP1,
    Cluster,
    at,
    fetch,
    leader_view,
    reading,
)
from wire.topic import TopicPartition


async def test_fetch_completes_when_bytes_across_partitions_reach_min_bytes() -> None:
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=10))
    cluster.publish(leader_view(TP1, hw=20))
    params = replace(CONSUMER, min_bytes=250)
    op, ready = fetch(cluster, params, [reading(TP0, 10), reading(TP1, 20)])
    assert not cluster.ops.watch_fetch(op)
    assert cluster.advance_hw(TP0, 11) == 0, "100 bytes < 250"
    assert cluster.advance_hw(TP1, 21) == 0, "200 bytes < 250"
    assert ready.calls == []
    assert cluster.advance_hw(TP1, 22) == 1, "300 bytes"
    assert ready.once() == (FetchWakeReason.MIN_BYTES, 0)


async def test_fetch_counts_at_most_partition_max_bytes_per_partition() -> None:
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=0))
    cluster.publish(leader_view(TP1, hw=0))
    params = replace(CONSUMER, min_bytes=300)
    op, ready = fetch(cluster, params, [reading(TP0, 0, max_bytes=150), reading(TP1, 0)])
    assert not cluster.ops.watch_fetch(op)
    assert cluster.advance_hw(TP0, 10) == 0, "1000 bytes, of which 150 count"
    assert cluster.advance_hw(TP1, 1) == 0, "150 + 100 < 300"
    assert cluster.advance_hw(TP1, 2) == 1, "150 + 200 >= 300"
    assert ready.once()[0] is FetchWakeReason.MIN_BYTES


@pytest.mark.parametrize(
    "change",
    [
        {"leader_epoch": EPOCH + 1},
        {"role": Role.FOLLOWER, "leader_id": 2},
        {"gone": True},
        {"role": Role.OFFLINE},
    ],
    ids=["new-epoch", "became-follower", "replica-removed", "offline"],
)
async def test_fetch_completes_on_leadership_or_epoch_change(change: dict[str, object]) -> None:
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=4))
    cluster.publish(leader_view(TP1, hw=4))
    op, ready = fetch(cluster, FOLLOWER, [reading(TP0, 4), reading(TP1, 4)])
    assert not cluster.ops.watch_fetch(op)
    assert cluster.change(TP1, **change) == 1
    assert ready.once()[0] is FetchWakeReason.LEADERSHIP


async def test_fetch_completes_on_truncation_below_the_fetch_offset() -> None:
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=8, leo=12))
    op, ready = fetch(cluster, FOLLOWER, [reading(TP0, 12)])
    assert not cluster.ops.watch_fetch(op)
    # The log is truncated to 9 (e.g. after an unclean election) while the epoch stays.
    assert cluster.change(TP0, log_end_offset=at(9)) == 1
    assert ready.once()[0] is FetchWakeReason.TRUNCATED


async def test_fetch_completes_when_end_offset_is_on_an_older_segment() -> None:
    """The fetch position is on segment 100; truncation left the log end on segment 0."""
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=at(105, segment=100), leo=at(105, segment=100)))
    op, ready = fetch(cluster, FOLLOWER, [reading(TP0, at(105, segment=100))])
    assert not cluster.ops.watch_fetch(op)
    assert cluster.change(TP0, log_end_offset=at(110, segment=0)) == 1
    assert ready.once()[0] is FetchWakeReason.TRUNCATED


async def test_fetch_completes_when_the_log_rolled_past_its_segment() -> None:
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=10, leo=10))
    params = replace(FOLLOWER, min_bytes=10_000)
    op, ready = fetch(cluster, params, [reading(TP0, 10)])
    assert not cluster.ops.watch_fetch(op)
    # The roll alone moves the log end to offset 10 on the new segment: nothing new to read.
    assert cluster.append(TP0, at(10, segment=10)) == 0
    # One record on the new segment: 100 bytes, far from min_bytes, but the fetch is a whole
    # segment behind, which Kafka counts as enough.
    assert cluster.append(TP0, at(11, segment=10)) == 1
    assert ready.once()[0] is FetchWakeReason.OLDER_SEGMENT


async def test_fetch_expires_at_max_wait_and_answers_with_what_is_there() -> None:
    clock = ManualClock(start_ms=1_000)
    cluster = Cluster(clock)
    cluster.publish(leader_view(TP0, hw=3))
    params = replace(CONSUMER, min_bytes=1_000, max_wait_ms=500)
    op, ready = fetch(cluster, params, [reading(TP0, 3)])
    assert not cluster.ops.watch_fetch(op)
    assert cluster.advance_hw(TP0, 5) == 0, "200 bytes < 1000: the owner will read these"
    clock.advance(499)
    assert ready.calls == []
    clock.advance(1)
    assert ready.once() == (FetchWakeReason.EXPIRED, 1_500)
    assert cluster.advance_hw(TP0, 50) == 0
    assert len(ready.calls) == 1, "an expired fetch is never answered twice"
    assert ready.calls[0][0].partitions[0].fetch_offset == at(3), "the owner reads from here"


async def test_fetch_completed_by_condition_does_not_expire() -> None:
    clock = ManualClock()
    cluster = Cluster(clock)
    cluster.publish(leader_view(TP0, hw=0))
    op, ready = fetch(cluster, CONSUMER, [reading(TP0, 0)])
    assert not cluster.ops.watch_fetch(op)
    assert cluster.advance_hw(TP0, 1) == 1
    clock.advance(1_000)
    assert ready.once()[0] is FetchWakeReason.MIN_BYTES
    assert cluster.ops.fetch.delayed == 0


async def test_follower_fetch_wakes_on_leader_append_consumer_fetch_on_hw() -> None:
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=5, leo=5))
    follower_op, follower_ready = fetch(cluster, FOLLOWER, [reading(TP0, 5)])
    consumer_op, consumer_ready = fetch(cluster, CONSUMER, [reading(TP0, 5)])
    assert not cluster.ops.watch_fetch(follower_op)
    assert not cluster.ops.watch_fetch(consumer_op)
    assert cluster.append(TP0, 6) == 1, "the follower reads up to the LEO"
    assert follower_ready.once()[0] is FetchWakeReason.MIN_BYTES
    assert consumer_ready.calls == [], "the consumer reads up to the high watermark"
    assert cluster.advance_hw(TP0, 6) == 1
    assert consumer_ready.once()[0] is FetchWakeReason.MIN_BYTES


async def test_consumer_ahead_of_a_lagging_high_watermark_waits() -> None:
    """A new leader's HW may lag the offset a consumer reached on the old leader: the consumer
    waits for it (no busy loop of empty answers) until it passes the fetch offset."""
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=7, leo=12))
    op, ready = fetch(cluster, CONSUMER, [reading(TP0, 10)])
    assert not cluster.ops.watch_fetch(op)
    assert cluster.advance_hw(TP0, 10) == 0
    assert cluster.advance_hw(TP0, 11) == 1
    assert ready.once()[0] is FetchWakeReason.MIN_BYTES


async def test_fetch_with_unmeasurable_position_completes_on_new_data() -> None:
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=LogOffsetMetadata(4), leo=at(4)))
    params = replace(CONSUMER, min_bytes=1_000_000)
    op, ready = fetch(cluster, params, [reading(TP0, 4)])
    assert not cluster.ops.watch_fetch(op)
    assert cluster.advance_hw(TP0, LogOffsetMetadata(5)) == 1
    assert ready.once()[0] is FetchWakeReason.UNMEASURED


async def test_consumer_long_poll_returns_in_the_same_tick_as_the_hw_advance() -> None:
    """DESIGN.md: a consumer long-poll returns within ~1 ms of the HW advance, not at max wait.

    The owner's on_ready starts an asynchronous read (as the ReplicaManager asks partition
    actors); the consumer's answer arrives with the manual clock still at the advance's tick."""
    clock = ManualClock(start_ms=0)
    cluster = Cluster(clock)
    cluster.publish(leader_view(TP0, hw=20, leo=20))
    answered: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    reads: set[asyncio.Task[None]] = set()

    async def read_and_answer(op: DelayedFetch) -> None:
        await asyncio.sleep(0)  # the read is a message to another actor
        view = cluster.lookup(TP0)
        assert view is not None
        answered.set_result(view.high_watermark.message_offset)

    def on_ready(op: DelayedFetch) -> None:
        task = asyncio.get_running_loop().create_task(read_and_answer(op))
        reads.add(task)
        task.add_done_callback(reads.discard)

    op = DelayedFetch(CONSUMER, [reading(TP0, 20)], cluster.lookup, on_ready)
    assert not cluster.ops.watch_fetch(op)
    clock.advance(37)
    assert cluster.append(TP0, 21) == 0, "replicated but not committed yet"
    assert cluster.advance_hw(TP0, 21) == 1
    for _ in range(10):
        if answered.done():
            break
        await asyncio.sleep(0)
    assert answered.done(), "the answer did not arrive within 10 loop turns"
    assert answered.result() == 21
    assert clock.monotonic_ms() == 37, "answered in the tick of the advance, not at max wait"
    assert op.reason is FetchWakeReason.MIN_BYTES


def test_fetch_needs_partitions_and_distinct_ones() -> None:
    lookup: Callable[[TopicPartition], PartitionView | None] = lambda tp: None  # noqa: E731
    with pytest.raises(ValueError, match="at least one"):
        DelayedFetch(CONSUMER, [], lookup, print)
    with pytest.raises(ValueError, match="twice"):
        DelayedFetch(CONSUMER, [reading(TP0, 0), reading(TP0, 1)], lookup, print)
