"""DelayedProduce on the purgatory, driven by hand-built PartitionViews and a ManualClock
(tests/unit/actors/replication/delayed_harness.py): completion when every partition reaches its
offset, leadership loss (but not a leader-epoch bump under the same leadership), min.insync.replicas
after the append, expiry, exactly-once answers under random interleavings, and the response's
shape."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from actors.replication.delayed_produce import (
    DelayedProduce,
    ProducePartitionStatus,
    build_produce_response,
)
from actors.views import Role
from runtime.clock import ManualClock
from tests.unit.actors.replication.delayed_harness import (
    EPOCH,
    LEADERSHIP,
    TP0,
    TP1,
    TP2,
    Cluster,
    Responses,
    appended,
    leader_view,
    produce,
)
from wire.errors import ErrorCode
from wire.messages import PartitionProduceResponse


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
        {"gone": True},
        {"role": Role.STOPPED},
        {"role": Role.OFFLINE},
    ],
    ids=["became-follower", "replica-removed", "stopped", "offline"],
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


async def test_produce_waits_through_a_leader_epoch_bump_while_leading() -> None:
    """The controller bumps the leader epoch (a replica left the replica set) but this broker
    stays leader: Kafka's DelayedProduce never compares epochs, so the produce keeps waiting and
    is acknowledged when the high watermark reaches it."""
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=0))
    op, responses = produce(cluster, [appended(TP0, 0, 3)])
    assert not cluster.ops.watch_produce(op)
    assert cluster.change(TP0, leader_epoch=EPOCH + 1, isr=(0, 1), maximal_isr=(0, 1)) == 0
    assert op.pending_partitions == (TP0,), "still leader: the produce still waits"
    assert cluster.advance_hw(TP0, 3) == 1
    assert responses.errors() == {TP0: ErrorCode.NONE}


async def test_produce_from_an_earlier_leadership_is_not_acknowledged() -> None:
    """Leader, deposed and re-elected between two checks (never seen as follower here), with a
    high watermark past the offset: the appended batch may have been truncated in between, so
    the answer is not NONE."""
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=0))
    op, responses = produce(cluster, [appended(TP0, 0, 3)])
    assert not cluster.ops.watch_produce(op)
    cluster.publish(leader_view(TP0, hw=10, epoch=EPOCH + 2, leadership=LEADERSHIP + 1))
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
    leaderships = itertools.count(LEADERSHIP + 1)
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
                statuses.append(appended(tp, leo[tp], count, leadership=view.leadership, min_isr=1))
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
            if view.role is Role.LEADER and rng.random() < 0.5:
                # A leader-epoch bump under the same leadership: waiting produces keep waiting.
                cluster.change(tp, leader_epoch=view.leader_epoch + 1)
            elif view.role is Role.LEADER:
                cluster.change(tp, role=Role.FOLLOWER, leader_id=1)
            else:
                cluster.change(
                    tp,
                    role=Role.LEADER,
                    leader_id=0,
                    leader_epoch=view.leader_epoch + 1,
                    leadership=next(leaderships),
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
        if view.leadership != status.leadership:  # leader epochs are never compared
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
