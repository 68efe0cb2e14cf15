"""DelayedProduce and DelayedFetch on the purgatory, driven by hand-built PartitionViews and a
ManualClock: completion conditions, expiry, exactly-once answers, and the consumer long-poll
waking in the same tick as the high-watermark advance."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable
from dataclasses import replace

import pytest

from actors.replication.delayed import (
    DelayedFetch,
    DelayedOperations,
    DelayedProduce,
    FetchParams,
    FetchPartitionStatus,
    FetchWakeReason,
    ProducePartitionStatus,
    ProduceResults,
    build_produce_response,
)
from actors.views import PartitionView, Role
from runtime.clock import ManualClock
from runtime.log.offsets import LogOffsetMetadata
from wire.errors import ErrorCode
from wire.messages import PartitionProduceResponse
from wire.topic import TopicPartition

TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
TP2 = TopicPartition("audit", 0)
EPOCH = 5
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
    tp: TopicPartition, base: int, count: int, *, min_isr: int = 2, epoch: int = EPOCH
) -> ProducePartitionStatus:
    return ProducePartitionStatus(
        topic_partition=tp,
        required_offset=base + count,
        leader_epoch=epoch,
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


async def test_produce_completes_when_every_partition_reaches_its_offset() -> None:
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=0))
    cluster.publish(leader_view(TP1, hw=0))
    op, responses = produce(cluster, [appended(TP0, 0, 10), appended(TP1, 0, 5)])
    assert not cluster.ops.watch_produce(op)
    assert cluster.advance_hw(TP0, 9) == 0
    assert cluster.advance_hw(TP0, 10) == 0, "TP1 still waits"
    assert op.pending_partitions == (TP1,)
    assert cluster.advance_hw(TP1, 5) == 1
    assert responses.errors() == {TP0: ErrorCode.NONE, TP1: ErrorCode.NONE}
    answer = responses.calls[0][TP0]
    assert (answer.index, answer.base_offset, answer.log_start_offset) == (0, 0, 0)
    assert cluster.ops.delayed == (0, 0)
    cluster.clock.advance(5_000)
    assert len(responses.calls) == 1, "a completed produce never expires"


async def test_produce_already_satisfied_completes_without_watching() -> None:
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=10))
    failed = ProducePartitionStatus(topic_partition=TP1, error=ErrorCode.MESSAGE_TOO_LARGE)
    op, responses = produce(cluster, [appended(TP0, 5, 5), failed])
    assert len(op.watch_keys()) == 1, "only the partition that appended waits"
    assert cluster.ops.watch_produce(op)
    assert responses.errors() == {TP0: ErrorCode.NONE, TP1: ErrorCode.MESSAGE_TOO_LARGE}
    assert cluster.ops.produce.watched == 0


@pytest.mark.parametrize(
    "change",
    [
        {"role": Role.FOLLOWER, "leader_id": 1},
        {"leader_epoch": EPOCH + 1},
        {"gone": True},
        {"role": Role.OFFLINE},
    ],
    ids=["became-follower", "new-epoch", "replica-removed", "offline"],
)
async def test_produce_completes_on_leadership_loss(change: dict[str, object]) -> None:
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=0))
    cluster.publish(leader_view(TP1, hw=0))
    op, responses = produce(cluster, [appended(TP0, 0, 3), appended(TP1, 0, 3)])
    assert not cluster.ops.watch_produce(op)
    assert cluster.advance_hw(TP1, 3) == 0
    assert cluster.change(TP0, **change) == 1
    assert responses.errors() == {TP0: ErrorCode.NOT_LEADER_OR_FOLLOWER, TP1: ErrorCode.NONE}


async def test_produce_regained_leadership_under_new_epoch_is_not_acknowledged() -> None:
    """Leader at epoch 5, follower, leader again at 7 with a high watermark past the offset: the
    appended batch may have been truncated in between, so the answer is not NONE."""
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=0))
    op, responses = produce(cluster, [appended(TP0, 0, 3)])
    assert not cluster.ops.watch_produce(op)
    cluster.publish(leader_view(TP0, hw=10, epoch=EPOCH + 2))
    assert cluster.advance_hw(TP0, 10) == 1
    assert responses.errors() == {TP0: ErrorCode.NOT_LEADER_OR_FOLLOWER}


async def test_produce_not_enough_replicas_after_append_when_isr_shrank() -> None:
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=0, isr=(0, 1, 2)))
    op, responses = produce(cluster, [appended(TP0, 0, 4, min_isr=2)])
    assert not cluster.ops.watch_produce(op)
    # The ISR shrinks to the leader alone; the high watermark is not there yet: keep waiting.
    assert cluster.change(TP0, isr=(0,), maximal_isr=(0,)) == 0
    assert cluster.advance_hw(TP0, 4) == 1, "the leader alone now moves the high watermark"
    assert responses.errors() == {TP0: ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND}
    assert responses.calls[0][TP0].base_offset == 0, "the data was appended; say where"


async def test_produce_pending_expansion_counts_for_min_isr() -> None:
    """While an expansion is in flight the leader counts the maximal ISR, as Kafka does."""
    cluster = Cluster(ManualClock())
    cluster.publish(replace(leader_view(TP0, hw=0, isr=(0,)), maximal_isr=(0, 1)))
    op, responses = produce(cluster, [appended(TP0, 0, 1, min_isr=2)])
    assert not cluster.ops.watch_produce(op)
    assert cluster.advance_hw(TP0, 1) == 1
    assert responses.errors() == {TP0: ErrorCode.NONE}


async def test_produce_expiry_times_out_only_pending_partitions() -> None:
    clock = ManualClock(start_ms=100)
    cluster = Cluster(clock)
    cluster.publish(leader_view(TP0, hw=0))
    cluster.publish(leader_view(TP1, hw=0))
    failed = ProducePartitionStatus(topic_partition=TP2, error=ErrorCode.CORRUPT_MESSAGE)
    op, responses = produce(cluster, [appended(TP0, 0, 2), appended(TP1, 0, 2), failed], 1_000)
    assert not cluster.ops.watch_produce(op)
    assert cluster.advance_hw(TP0, 2) == 0
    clock.advance(999)
    assert responses.calls == []
    clock.advance(1)
    assert responses.errors() == {
        TP0: ErrorCode.NONE,
        TP1: ErrorCode.REQUEST_TIMED_OUT,
        TP2: ErrorCode.CORRUPT_MESSAGE,
    }
    assert cluster.advance_hw(TP1, 2) == 0
    assert len(responses.calls) == 1
    cluster.ops.produce.purge_completed()
    assert (cluster.ops.produce.watched, cluster.ops.produce.delayed) == (0, 0)


async def test_produce_completion_and_expiry_in_the_same_tick_answer_once() -> None:
    """The high watermark reaches the offset at the very millisecond of the deadline, in both
    orders: the first to run wins and the answer is sent once."""
    for hw_first in (True, False):
        clock = ManualClock()
        cluster = Cluster(clock)
        cluster.publish(leader_view(TP0, hw=0))
        op, responses = produce(cluster, [appended(TP0, 0, 1)], timeout_ms=50)
        assert not cluster.ops.watch_produce(op)
        clock.advance(49)
        if hw_first:
            assert cluster.advance_hw(TP0, 1) == 1
            clock.advance(1)
            assert responses.errors() == {TP0: ErrorCode.NONE}
        else:
            clock.advance(1)
            assert cluster.advance_hw(TP0, 1) == 0
            assert responses.errors() == {TP0: ErrorCode.REQUEST_TIMED_OUT}


@pytest.mark.parametrize("seed", range(5))
async def test_produce_random_interleavings_answer_each_request_once(seed: int) -> None:
    """Many produces on three partitions; HW advances, leadership changes and time interleave
    at random. Each request is answered once, and its answer follows from what happened first."""
    rng = random.Random(seed)
    clock = ManualClock()
    cluster = Cluster(clock)
    tps = [TP0, TP1, TP2]
    leo = dict.fromkeys(tps, 0)
    for tp in tps:
        cluster.publish(leader_view(tp, hw=0))
    requests: list[tuple[DelayedProduce, Responses, list[ProducePartitionStatus], int]] = []
    for _ in range(200):
        action = rng.random()
        if action < 0.4:
            chosen = rng.sample(tps, rng.randint(1, 3))
            statuses = []
            for tp in chosen:
                view = cluster.views[tp]
                if view.role is not Role.LEADER:
                    continue
                count = rng.randint(1, 4)
                statuses.append(appended(tp, leo[tp], count, epoch=view.leader_epoch, min_isr=1))
                leo[tp] += count
            if statuses:
                timeout_ms = rng.randint(1, 30)
                created = cluster.stamp()
                op, responses = produce(cluster, statuses, timeout_ms)
                cluster.ops.watch_produce(op)
                requests.append((op, responses, statuses, created))
        elif action < 0.75:
            tp = rng.choice(tps)
            view = cluster.views[tp]
            if view.role is Role.LEADER and view.high_watermark.message_offset < leo[tp]:
                cluster.advance_hw(tp, rng.randint(view.high_watermark.message_offset, leo[tp]))
        elif action < 0.8:
            tp = rng.choice(tps)
            view = cluster.views[tp]
            if view.role is Role.LEADER:
                cluster.change(tp, role=Role.FOLLOWER, leader_id=1)
            else:
                cluster.change(
                    tp, role=Role.LEADER, leader_id=0, leader_epoch=view.leader_epoch + 1
                )
        else:
            clock.advance(rng.randint(1, 10))
    clock.advance(100)
    for op, responses, statuses, created in requests:
        assert len(responses.calls) == 1, f"seed {seed}: {op!r} answered {len(responses.calls)}x"
        for status in statuses:
            error = ErrorCode(responses.calls[0][status.topic_partition].error_code)
            expected = replayed_answer(cluster, status, created, responses.stamps[0])
            assert error is expected, f"seed {seed}: {op!r} {status.topic_partition}"
    assert cluster.ops.produce.delayed == 0, f"seed {seed}"


def replayed_answer(
    cluster: Cluster, status: ProducePartitionStatus, created: int, answered: int
) -> ErrorCode:
    """What a partition of an acks=all produce must answer, replayed from the views published
    between its creation and its answer: the first view that settles it decides."""
    history = cluster.history[status.topic_partition]
    at_creation = [view for seq, view in history if seq < created][-1:]
    later = [view for seq, view in history if created < seq < answered]
    for view in at_creation + later:
        if view is None or view.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if view.leader_epoch != status.leader_epoch:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if view.high_watermark.message_offset >= status.required_offset:
            return ErrorCode.NONE  # min.insync.replicas is 1 here
    return ErrorCode.REQUEST_TIMED_OUT


def test_build_produce_response_groups_by_topic_in_first_seen_order() -> None:
    results = [
        (TP1, PartitionProduceResponse(index=1, base_offset=7)),
        (TP2, PartitionProduceResponse(index=0, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER)),
        (TP0, PartitionProduceResponse(index=0, base_offset=3)),
    ]
    response = build_produce_response(results)
    assert [t.name for t in response.responses] == ["orders", "audit"]
    assert [p.index for p in response.responses[0].partition_responses] == [1, 0]
    assert response.responses[1].partition_responses[0].error_code == 6


def test_produce_rejects_a_partition_twice() -> None:
    with pytest.raises(ValueError, match="twice"):
        DelayedProduce(10, [appended(TP0, 0, 1), appended(TP0, 1, 1)], lambda tp: None, print)


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


async def test_delayed_operations_is_a_partition_listener() -> None:
    """The PartitionListener methods a partition actor calls (actors/replication/partition.py) wake
    the
    right keys: leader append -> follower fetches, HW -> produces and consumer fetches,
    leadership -> everything."""
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=0, leo=0))
    listener = cluster.ops
    produce_op, responses = produce(cluster, [appended(TP0, 0, 1)])
    follower_op, follower_ready = fetch(cluster, FOLLOWER, [reading(TP0, 0)])
    consumer_op, consumer_ready = fetch(cluster, CONSUMER, [reading(TP0, 0)])
    for watched in (cluster.ops.watch_produce(produce_op), cluster.ops.watch_fetch(follower_op)):
        assert not watched
    assert not cluster.ops.watch_fetch(consumer_op)
    cluster.views[TP0] = leader_view(TP0, hw=0, leo=1)
    listener.on_leader_append(TP0)
    assert (len(follower_ready.calls), len(consumer_ready.calls), responses.calls) == (1, 0, [])
    cluster.views[TP0] = leader_view(TP0, hw=1, leo=1)
    listener.on_high_watermark_advanced(TP0)
    assert responses.errors() == {TP0: ErrorCode.NONE}
    assert consumer_ready.once()[0] is FetchWakeReason.MIN_BYTES
    waiting, waiting_ready = fetch(cluster, CONSUMER, [reading(TP0, 1)])
    assert not cluster.ops.watch_fetch(waiting)
    cluster.views[TP0] = leader_view(TP0, hw=1, leo=1, epoch=EPOCH + 1)
    listener.on_leadership_changed(TP0)
    assert waiting_ready.once()[0] is FetchWakeReason.LEADERSHIP
