"""A leader's ISR and high-watermark rules (actors/replication/isr.py), as pure functions over
hand-built remote replicas; tests/unit/actors/replication/test_partition_replication.py checks
them through the partition actor. Last, the partition actor reports ISR changes to its
`IsrChangeListener` (the broker's IsrShrinksPerSec, IsrExpandsPerSec and
FailedIsrUpdatesPerSec) only once committed, and each failed attempt."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.replication.alter_partition import IsrProposalResult
from actors.replication.config import PartitionConfig
from actors.replication.isr import (
    IsrAnswer,
    enough_replicas_for_append,
    high_watermark_candidate,
    isr_expansion,
    isr_shrink,
    judge_alter_partition,
    next_high_watermark,
)
from actors.replication.partition import PartitionActor
from actors.replication.partition_messages import (
    ACKS_ALL,
    ACKS_LEADER,
    BecomeLeader,
    MaybeShrinkIsr,
)
from actors.replication.replica_state import NEVER_MS, RemoteReplica
from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.log import Log
from runtime.log.offsets import LogOffsetMetadata
from runtime.metrics.broker import IsrChangeCounter
from tests.unit.actors.replication.partition_harness import (
    TP,
    RecordingListener,
    RecordingSink,
    Replica,
    follower_fetch,
    produce,
    settle,
    state,
)
from wire.errors import ErrorCode

LEADER = 1
NOW_MS = 100_000
LAG_MS = 10_000


def replica(broker_id: int, end: int, *, caught_up_ms: int = NEVER_MS) -> RemoteReplica:
    return RemoteReplica(broker_id, LogOffsetMetadata(end, 0, end), last_caught_up_ms=caught_up_ms)


def everyone(broker_id: int) -> bool:
    return True


# -- joining and leaving --------------------------------------------------------------------------


def test_a_follower_joins_once_it_reached_the_hw_and_the_epoch_start() -> None:
    def join(end: int, *, eligible: bool = True) -> tuple[int, ...] | None:
        return isr_expansion(
            (LEADER,),
            replica(2, end),
            high_watermark=10,
            leader_epoch_start_offset=12,
            is_eligible=lambda broker_id: eligible,
        )

    assert join(10) is None, "at the HW but below the start of the leader's epoch (KAFKA-7128)"
    assert join(12) == (LEADER, 2)
    assert join(12, eligible=False) is None, "a broker that is not eligible never joins (KIP-841)"
    member = isr_expansion(
        (LEADER, 2),
        replica(2, 50),
        high_watermark=0,
        leader_epoch_start_offset=0,
        is_eligible=everyone,
    )
    assert member is None, "already a member"


def test_the_isr_shrinks_to_the_members_caught_up_within_the_lag() -> None:
    remote = {
        2: replica(2, 20, caught_up_ms=NOW_MS - LAG_MS),  # just within the allowance
        3: replica(3, 5, caught_up_ms=NOW_MS - LAG_MS - 1),
    }

    def shrink(isr: tuple[int, ...]) -> tuple[int, ...] | None:
        return isr_shrink(
            isr, LEADER, remote, leader_end_offset=20, now_ms=NOW_MS, max_lag_ms=LAG_MS
        )

    assert shrink((LEADER, 2, 3)) == (LEADER, 2)
    assert shrink((LEADER, 2)) is None, "everyone caught up: no change"
    assert shrink((LEADER, 4)) == (LEADER,), "a member the leader knows nothing of leaves"
    assert shrink((LEADER,)) is None, "the leader never removes itself"


def test_min_insync_replicas_counts_only_for_acks_all() -> None:
    assert enough_replicas_for_append(ACKS_ALL, (1, 2), 2)
    assert not enough_replicas_for_append(ACKS_ALL, (1,), 2)
    assert enough_replicas_for_append(ACKS_LEADER, (1,), 2)


# -- high watermark -------------------------------------------------------------------------------


def test_hw_candidate_is_the_smallest_end_of_the_counted_isr_and_caught_up_replicas() -> None:
    leader_end = LogOffsetMetadata(30, 0, 30)
    remote = [
        replica(2, 25),  # in the counted ISR
        replica(3, 20, caught_up_ms=NOW_MS),  # outside, but caught up: it holds the HW back
        replica(4, 10),  # outside and lagging: ignored
    ]

    def candidate(counted_isr: tuple[int, ...], eligible: bool = True) -> int:
        return high_watermark_candidate(
            leader_end,
            remote,
            counted_isr,
            now_ms=NOW_MS,
            max_lag_ms=LAG_MS,
            is_eligible=lambda broker_id: eligible,
        ).message_offset

    assert candidate((LEADER, 2)) == 20
    assert candidate((LEADER, 2), eligible=False) == 25, "an ineligible outsider never counts"
    assert candidate((LEADER,), eligible=False) == 30


def test_the_hw_never_moves_back_and_learns_its_segment_position() -> None:
    old = LogOffsetMetadata(10)  # the offset alone, as read from a checkpoint
    placed = LogOffsetMetadata(10, 0, 1_000)
    assert next_high_watermark(old, LogOffsetMetadata(9, 0, 900)) is old
    assert next_high_watermark(old, placed) is placed
    assert next_high_watermark(placed, LogOffsetMetadata(10)) is placed
    assert next_high_watermark(placed, LogOffsetMetadata(11)).message_offset == 11


# -- the controller's answer ----------------------------------------------------------------------


def answered(leader_epoch: int, partition_epoch: int) -> IsrProposalResult:
    return IsrProposalResult(ErrorCode.NONE, LEADER, leader_epoch, (LEADER, 2), partition_epoch)


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (answered(4, 8), IsrAnswer.COMMIT),
        (answered(4, 7), IsrAnswer.COMMIT),  # the partition epoch the leader is at
        (answered(5, 8), IsrAnswer.OTHER_LEADER_EPOCH),
        (answered(4, 6), IsrAnswer.OLDER_PARTITION_EPOCH),
        (IsrProposalResult.failed(ErrorCode.OPERATION_NOT_ATTEMPTED), IsrAnswer.REVERT),
        (IsrProposalResult.failed(ErrorCode.INELIGIBLE_REPLICA), IsrAnswer.REVERT),
        (IsrProposalResult.failed(ErrorCode.FENCED_LEADER_EPOCH), IsrAnswer.WAIT_FOR_METADATA),
        (IsrProposalResult.failed(ErrorCode.INVALID_UPDATE_VERSION), IsrAnswer.WAIT_FOR_METADATA),
        (IsrProposalResult.failed(ErrorCode.REQUEST_TIMED_OUT), IsrAnswer.RESUBMIT),
        (IsrProposalResult.failed(ErrorCode.NOT_CONTROLLER), IsrAnswer.RESUBMIT),
    ],
)
def test_what_an_alter_partition_answer_means(
    result: IsrProposalResult, expected: IsrAnswer
) -> None:
    assert judge_alter_partition(result, leader_epoch=4, partition_epoch=7) is expected


# -- committed ISR changes reported by the partition actor ----------------------------------------
# The actor is configured with this module's LAG_MS (the partition harness's is the same 10 s).


async def test_partition_counts_committed_isr_changes_and_failed_attempts(tmp_path: Path) -> None:
    clock = ManualClock(start_ms=1_000_000)
    counter = IsrChangeCounter()
    sink = RecordingSink()
    partition_log = Log.open(tmp_path / TP.dir_name, LogConfig(), clock)
    actor = PartitionActor(
        TP,
        1,
        partition_log,
        alter_partition_sink=sink,
        config=PartitionConfig(replica_lag_time_max_ms=LAG_MS, min_insync_replicas=1),
        isr_change_listener=counter,
        clock=clock,
    )
    await actor.start()
    try:
        await actor.ask(BecomeLeader(state(1, 0, (1, 2, 3))))
        replica = Replica(actor, partition_log, sink, RecordingListener(), tmp_path)
        await produce(replica, 2)
        clock.advance(LAG_MS + 1)  # neither follower fetched: both are out of sync
        assert await actor.ask(MaybeShrinkIsr())
        assert (counter.shrinks, counter.failed) == (0, 0), "proposed is not committed"

        sink.fail(ErrorCode.REQUEST_TIMED_OUT)  # one attempt failed; the proposal goes again
        await settle(lambda: len(sink.submitted) == 2)
        assert (counter.shrinks, counter.failed) == (0, 1)

        sink.accept(partition_epoch=1)
        await settle(lambda: actor.view.isr == (1,))
        assert (counter.shrinks, counter.expands, counter.failed) == (1, 0, 1)

        # Follower 2 catches up to the HW and LEO: the expansion counts once committed.
        await follower_fetch(replica, 2, 2)
        await settle(lambda: actor.pending_isr_change is not None)
        assert counter.expands == 0
        sink.accept(partition_epoch=2)
        await settle(lambda: actor.view.isr == (1, 2))
        assert (counter.shrinks, counter.expands, counter.failed) == (1, 1, 1)
    finally:
        await actor.stop()
        partition_log.close()
