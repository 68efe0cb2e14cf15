"""PartitionActor as leader of followers: follower fetch state, HW, ISR shrink/expand through
AlterPartition, and the KIP-101 scenarios with two actors and batches moved by hand."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.replication.alter_partition import IsrProposalResult
from actors.replication.partition_messages import (
    AppendAsFollower,
    AppendAsLeader,
    BecomeFollower,
    BecomeLeader,
    GetView,
    LastOffsetForEpoch,
    MaybeShrinkIsr,
    ReadRecords,
    TruncateFullyAndStartAt,
    TruncateTo,
)
from actors.views import Role
from runtime.clock import ManualClock
from tests.unit.actors.replication.partition_harness import (
    LAG_MS,
    MAX_BYTES,
    Brokers,
    Replica,
    batch,
    follower_fetch,
    produce,
    replicate,
    settle,
    state,
)
from wire.errors import ErrorCode


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=1_000_000)


@pytest.fixture
async def brokers(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Brokers]:
    opened = Brokers(tmp_path, clock)
    yield opened
    await opened.close()


def pending(replica: Replica) -> bool:
    return replica.actor.pending_isr_change is not None


def hw(replica: Replica) -> int:
    return replica.actor.view.high_watermark.message_offset


async def leader_of_three(brokers: Brokers, isr: tuple[int, ...] = (1, 2, 3)) -> Replica:
    leader = await brokers.open(1)
    await leader.actor.ask(BecomeLeader(state(1, 0, isr)))
    return leader


# -- high watermark -----------------------------------------------------------------------------


async def test_hw_is_min_leo_over_isr_and_never_moves_back(brokers: Brokers) -> None:
    leader = await leader_of_three(brokers)
    for tag in range(5):
        await produce(leader, 2, tag=tag)  # offsets 0..9, batches at even offsets
    assert hw(leader) == 0, "followers' positions are unknown to a new leader"

    await follower_fetch(leader, 2, 10)
    assert hw(leader) == 0
    await follower_fetch(leader, 3, 4)
    assert hw(leader) == 4
    await follower_fetch(leader, 3, 8)
    assert hw(leader) == 8
    # A follower fetching from a lower offset (it truncated) does not pull the HW back.
    await follower_fetch(leader, 3, 6)
    assert hw(leader) == 8
    assert leader.log.high_watermark == 8
    await follower_fetch(leader, 3, 10)
    assert hw(leader) == 10
    assert leader.listener.events.count("hw") == 3


async def test_caught_up_replica_outside_isr_holds_hw_until_it_lags(
    brokers: Brokers, clock: ManualClock
) -> None:
    leader = await leader_of_three(brokers, isr=(1,))
    await produce(leader, 2)
    # Replica 2 reaches the LEO: an expansion is proposed and stays pending.
    await follower_fetch(leader, 2, 2)
    assert leader.sink.last.new_isr == (1, 2)
    assert leader.actor.view.maximal_isr == (1, 2)
    assert leader.actor.view.isr == (1,)
    # Replica 3 also caught up, but only one change may be in flight: no second proposal.
    await follower_fetch(leader, 3, 2)
    assert len(leader.sink.submitted) == 1

    await produce(leader, 3, tag=1)  # LEO 5
    await follower_fetch(leader, 2, 5)
    # 2 is in the maximal ISR; 3 is outside any ISR but caught up within the lag: both count.
    assert hw(leader) == 2
    clock.advance(LAG_MS + 1)
    await follower_fetch(leader, 2, 5)
    assert hw(leader) == 5, "a lagging replica outside the ISR no longer holds the HW"


async def test_single_replica_isr_advances_hw_at_once_despite_followers(
    brokers: Brokers,
) -> None:
    leader = await leader_of_three(brokers, isr=(1,))
    await produce(leader, 4)
    assert hw(leader) == 4


async def test_pending_expansion_counts_the_joiner_for_the_hw(
    brokers: Brokers, clock: ManualClock
) -> None:
    leader = await leader_of_three(brokers, isr=(1,))
    await produce(leader, 2)
    await follower_fetch(leader, 2, 2)  # proposes ISR (1, 2)
    assert leader.actor.view.maximal_isr == (1, 2)
    await produce(leader, 3, tag=1)
    clock.advance(10 * LAG_MS)  # replica 2 is no longer "caught up" by time ...
    await produce(leader, 1, tag=2)
    assert hw(leader) == 2, "... but as a member of the maximal ISR it still holds the HW"
    await follower_fetch(leader, 2, 6)
    assert hw(leader) == 6


async def test_acks_all_append_counts_the_committed_isr_while_an_expansion_is_pending(
    brokers: Brokers,
) -> None:
    """min.insync.replicas before an append counts the committed ISR, as Kafka's
    appendRecordsToLeader does: the controller may still refuse the joiner, and the write would
    then have been admitted on too few replicas. (The maximal ISR still counts for the HW.)"""
    leader = await leader_of_three(brokers, isr=(1,))
    await produce(leader, 2)
    await follower_fetch(leader, 2, 2)  # proposes ISR (1, 2)
    assert (leader.actor.view.isr, leader.actor.view.maximal_isr) == ((1,), (1, 2))
    refused = await leader.actor.ask(AppendAsLeader(batch(3, tag=1), -1, min_insync_replicas=2))
    assert refused.error is ErrorCode.NOT_ENOUGH_REPLICAS
    assert leader.actor.view.log_end_offset.message_offset == 2, "nothing was appended"
    leader.sink.accept(partition_epoch=1)
    await settle(lambda: leader.actor.view.isr == (1, 2))
    accepted = await leader.actor.ask(AppendAsLeader(batch(3, tag=1), -1, min_insync_replicas=2))
    assert accepted.error is ErrorCode.NONE


# -- ISR shrink ---------------------------------------------------------------------------------


async def test_isr_shrinks_after_replica_lag_time_max_ms(
    brokers: Brokers, clock: ManualClock
) -> None:
    leader = await leader_of_three(brokers)
    await produce(leader, 2)
    await follower_fetch(leader, 2, 2)
    await follower_fetch(leader, 3, 2)
    assert hw(leader) == 2
    await produce(leader, 2, tag=1)  # LEO 4; only replica 2 keeps fetching

    clock.advance(LAG_MS)
    await follower_fetch(leader, 2, 4)
    assert not await leader.actor.ask(MaybeShrinkIsr()), "exactly the lag is still in sync"
    clock.advance(1)
    assert await leader.actor.ask(MaybeShrinkIsr())
    proposal = leader.sink.last
    assert proposal.new_isr == (1, 2)
    assert (proposal.leader_epoch, proposal.partition_epoch) == (0, 0)
    # Until the controller commits, the HW is computed over the old ISR.
    view = leader.actor.view
    assert (view.isr, view.maximal_isr) == ((1, 2, 3), (1, 2, 3))
    assert hw(leader) == 2
    assert not await leader.actor.ask(MaybeShrinkIsr()), "one change in flight"

    leader.sink.accept(partition_epoch=1)
    await settle(lambda: leader.actor.view.isr == (1, 2))
    assert leader.actor.view.partition_epoch == 1
    assert hw(leader) == 4, "the shrink lets the HW advance"
    assert leader.listener.events[-1] == "hw"


async def test_idle_partition_does_not_shrink_and_leader_never_leaves(
    brokers: Brokers, clock: ManualClock
) -> None:
    leader = await leader_of_three(brokers, isr=(1, 2))
    await produce(leader, 2)
    await follower_fetch(leader, 2, 2)
    clock.advance(10 * LAG_MS)
    # Replica 2 holds the leader's LEO: caught up however long ago it fetched.
    assert not await leader.actor.ask(MaybeShrinkIsr())
    await produce(leader, 1, tag=1)
    assert await leader.actor.ask(MaybeShrinkIsr())
    assert leader.sink.last.new_isr == (1,)


async def test_follower_replica_does_not_shrink(brokers: Brokers, clock: ManualClock) -> None:
    follower = await brokers.open(2)
    await follower.actor.ask(BecomeFollower(state(1, 0, (1, 2, 3))))
    clock.advance(10 * LAG_MS)
    assert not await follower.actor.ask(MaybeShrinkIsr())
    assert follower.sink.submitted == []


# -- ISR expand ---------------------------------------------------------------------------------


async def test_expand_needs_hw_and_leader_epoch_start_offset(brokers: Brokers) -> None:
    """KAFKA-7128: the HW alone may lie below the start of the leader's epoch."""
    leader = await brokers.open(1)
    await leader.actor.ask(BecomeLeader(state(1, 0, (1,))))
    for tag in range(5):
        await produce(leader, 2, tag=tag)  # LEO 10, HW 10 (single-replica ISR)
    await leader.actor.ask(BecomeLeader(state(1, 1, (1, 2), 1)))
    assert leader.actor.view.leader_epoch_start_offset == 10
    assert hw(leader) == 10
    await leader.actor.ask(BecomeFollower(state(2, 2, (2,), 2)))
    leader = await brokers.restart(leader)
    # Lower the HW as a restart from an older checkpoint would leave it.
    leader.log.update_high_watermark(6)
    await leader.actor.ask(BecomeLeader(state(1, 3, (1, 2), 3)))
    await produce(leader, 2, tag=9)  # LEO 12, epoch 3 starts at 10
    assert leader.actor.view.leader_epoch_start_offset == 10
    assert hw(leader) == 6

    await follower_fetch(leader, 3, 4)
    assert leader.sink.submitted == [], "below the HW"
    await follower_fetch(leader, 3, 8)
    assert leader.sink.submitted == [], "at the HW but below the epoch start offset"
    await follower_fetch(leader, 3, 10)
    assert leader.sink.last.new_isr == (1, 2, 3)
    assert leader.sink.last.partition_epoch == 3


async def test_ineligible_broker_never_joins_the_isr(brokers: Brokers) -> None:
    dead = {3}
    leader = await brokers.open(1, eligible=lambda broker_id: broker_id not in dead)
    await leader.actor.ask(BecomeLeader(state(1, 0, (1,))))
    await produce(leader, 2)
    await follower_fetch(leader, 3, 2)
    assert leader.sink.submitted == []
    dead.clear()
    await follower_fetch(leader, 3, 2)
    assert leader.sink.last.new_isr == (1, 3)


async def test_expansion_commits_and_counts_the_new_member(brokers: Brokers) -> None:
    leader = await leader_of_three(brokers, isr=(1,))
    await produce(leader, 2)
    await follower_fetch(leader, 2, 2)
    leader.sink.accept(partition_epoch=1)
    await settle(lambda: leader.actor.view.isr == (1, 2))
    assert leader.actor.view.maximal_isr == (1, 2)
    assert not pending(leader)
    await produce(leader, 1, tag=1)
    assert hw(leader) == 2, "replica 2 is in the ISR now and holds the HW"
    # acks=all counts the committed ISR of two.
    result = await leader.actor.ask(AppendAsLeader(batch(tag=2), -1, min_insync_replicas=2))
    assert result.error is ErrorCode.NONE


# -- AlterPartition results ---------------------------------------------------------------------


async def test_rejected_proposal_reverts_to_committed_isr_and_is_proposed_again(
    brokers: Brokers,
) -> None:
    leader = await leader_of_three(brokers, isr=(1,))
    await produce(leader, 2)
    await follower_fetch(leader, 2, 2)
    for error in (ErrorCode.INELIGIBLE_REPLICA, ErrorCode.OPERATION_NOT_ATTEMPTED):
        leader.sink.fail(error)
        await settle(lambda: not pending(leader))
        assert leader.actor.view.maximal_isr == (1,)
        submitted = len(leader.sink.submitted)
        await follower_fetch(leader, 2, 2)
        assert len(leader.sink.submitted) == submitted + 1, error


async def test_refused_proposal_gives_way_to_the_committed_state_the_controller_pushes(
    brokers: Brokers,
) -> None:
    """The controller refuses a proposal built on an outdated partition epoch and pushes its
    committed state (same leader epoch, newer partition epoch) in a LeaderAndIsr: the leader
    drops the proposal, takes the committed ISR and is free to propose again; it is not frozen
    until some unrelated LeaderAndIsr comes."""
    leader = await leader_of_three(brokers, isr=(1, 3))
    await produce(leader, 2)
    await follower_fetch(leader, 3, 2)
    await follower_fetch(leader, 2, 2)  # proposes (1, 3, 2) at partition epoch 0 ...
    first = leader.sink.last
    assert (first.new_isr, first.partition_epoch) == ((1, 3, 2), 0)
    # ... but the controller had meanwhile removed replica 3 (partition epoch 1).
    leader.sink.fail(ErrorCode.INVALID_UPDATE_VERSION)
    await leader.actor.ask(GetView())  # the answer was queued before this: it has been handled
    # Kafka's rule: this leader's view is outdated, so it proposes nothing more until newer
    # state arrives (the maximal ISR still counts replica 2).
    assert pending(leader)
    await follower_fetch(leader, 2, 2)
    assert len(leader.sink.submitted) == 1
    pushed = await leader.actor.ask(BecomeLeader(state(1, 0, (1,), 1)))
    assert (pushed.error, pushed.changed) == (ErrorCode.NONE, False), "still the same leadership"
    view = leader.actor.view
    assert not pending(leader)
    assert (view.isr, view.maximal_isr, view.partition_epoch) == ((1,), (1,), 1)
    await follower_fetch(leader, 2, 2)
    again = leader.sink.last
    assert (again.new_isr, again.leader_epoch, again.partition_epoch) == ((1, 2), 0, 1)


async def test_repeat_answered_with_the_current_state_commits_the_proposal(
    brokers: Brokers,
) -> None:
    """The first copy of a proposal was applied but its answer was lost; the resent copy is
    answered NONE with the partition's current state (same leader epoch, a newer partition
    epoch): the leader commits it and goes on changing its ISR."""
    leader = await leader_of_three(brokers, isr=(1,))
    await produce(leader, 2)
    await follower_fetch(leader, 2, 2)
    leader.sink.fail(ErrorCode.REQUEST_TIMED_OUT)  # the sink gave up on the first attempt
    await settle(lambda: len(leader.sink.submitted) == 2)
    leader.sink.accept(partition_epoch=1)  # the controller: already applied, here is the state
    await settle(lambda: not pending(leader))
    view = leader.actor.view
    assert (view.isr, view.partition_epoch) == ((1, 2), 1)
    await follower_fetch(leader, 3, 2)
    assert leader.sink.last.new_isr == (1, 2, 3)
    assert leader.sink.last.partition_epoch == 1


async def test_failed_attempt_is_resubmitted_and_stale_answers_are_ignored(
    brokers: Brokers,
) -> None:
    leader = await leader_of_three(brokers, isr=(1,))
    await produce(leader, 2)
    await follower_fetch(leader, 2, 2)
    first = leader.sink.last
    leader.sink.fail(ErrorCode.REQUEST_TIMED_OUT)
    await settle(lambda: len(leader.sink.submitted) == 2)
    assert leader.sink.last is first, "the same proposal goes again"

    # A newer LeaderAndIsr supersedes the proposal; its late answer must not apply.
    await leader.actor.ask(BecomeLeader(state(1, 1, (1, 3), 5)))
    leader.sink.accept(partition_epoch=1)
    await leader.actor.ask(GetView())  # the late answer was queued before this
    view = leader.actor.view
    assert (view.isr, view.partition_epoch) == ((1, 3), 5)


async def test_answer_for_another_leader_epoch_is_ignored(brokers: Brokers) -> None:
    leader = await leader_of_three(brokers, isr=(1,))
    await produce(leader, 2)
    await follower_fetch(leader, 2, 2)
    proposal = leader.sink.last
    leader.sink.submitted[-1].on_result(
        IsrProposalResult(ErrorCode.NONE, 1, proposal.leader_epoch + 1, (1, 2), 1)
    )
    await leader.actor.ask(GetView())
    assert leader.actor.view.isr == (1,)
    assert pending(leader)


# -- follower side ------------------------------------------------------------------------------


async def test_follower_append_takes_leader_hw_and_log_start(brokers: Brokers) -> None:
    leader = await brokers.open(1)
    follower = await brokers.open(2)
    await leader.actor.ask(BecomeLeader(state(1, 0, (1, 2), replicas=(1, 2))))
    await follower.actor.ask(BecomeFollower(state(1, 0, (1, 2), replicas=(1, 2))))
    await produce(leader, 3)
    first = await replicate(leader, follower)
    assert (first.log_end_offset, first.high_watermark) == (3, 0)
    second = await replicate(leader, follower)  # the leader learned LEO 3: HW 3
    assert (second.log_end_offset, second.high_watermark) == (3, 3)
    assert follower.actor.view.high_watermark.message_offset == 3
    assert follower.listener.events[-1] == "hw"
    assert follower.log.epoch_cache.entries == leader.log.epoch_cache.entries

    stale = await follower.actor.ask(AppendAsFollower(b"", 3, 0, fetch_leader_epoch=7))
    assert stale.error is ErrorCode.FENCED_LEADER_EPOCH
    on_leader = await leader.actor.ask(AppendAsFollower(b"", 3, 0))
    assert on_leader.error is ErrorCode.NOT_LEADER_OR_FOLLOWER


async def test_a_former_leader_keeps_its_high_watermark_as_a_follower(brokers: Brokers) -> None:
    """The new leader's HW lags the old one's after an election; the old leader, now a follower,
    keeps the HW it committed instead of stepping back to the lagging one."""
    leader = await brokers.open(1)
    follower = await brokers.open(2)
    await leader.actor.ask(BecomeLeader(state(1, 0, (1, 2), replicas=(1, 2))))
    await follower.actor.ask(BecomeFollower(state(1, 0, (1, 2), replicas=(1, 2))))
    await produce(leader, 3)
    await replicate(leader, follower)  # the follower has 3 records, its HW is still 0
    await replicate(leader, follower)  # the leader's HW reached 3, not yet the follower's
    assert leader.actor.view.high_watermark.message_offset == 3
    assert follower.actor.view.high_watermark.message_offset == 3
    await follower.actor.ask(BecomeLeader(state(2, 1, (2, 1), replicas=(1, 2))))
    await leader.actor.ask(BecomeFollower(state(2, 1, (2, 1), replicas=(1, 2))))
    lagging = await leader.actor.ask(AppendAsFollower(b"", 1, 0, fetch_leader_epoch=1))
    assert lagging.error is ErrorCode.NONE, lagging
    assert lagging.high_watermark == 3
    assert leader.actor.view.high_watermark.message_offset == 3


# -- KIP-101 ------------------------------------------------------------------------------------


def _all_bytes(replica: Replica) -> bytes:
    return bytes(replica.log.read(replica.log.log_start_offset, MAX_BYTES).records)


async def _truncate_by_epoch(follower: Replica, leader: Replica) -> int:
    """The fetcher's KIP-279 step, by hand: ask the leader where the follower's latest epoch
    ends, and cut the follower's log there (never above its own end of that epoch)."""
    latest = follower.log.epoch_cache.latest_epoch
    assert latest is not None
    answer = await leader.actor.ask(
        LastOffsetForEpoch(
            latest,
            current_leader_epoch=follower.actor.view.leader_epoch,
            fetch_only_from_leader=True,
        )
    )
    assert answer.error is ErrorCode.NONE, answer
    own = await follower.actor.ask(LastOffsetForEpoch(answer.leader_epoch))
    target = min(answer.end_offset, own.end_offset)
    assert await follower.actor.ask(TruncateTo(target)) is ErrorCode.NONE
    return target


async def test_kip101_epoch_truncation_keeps_committed_data(brokers: Brokers) -> None:
    """Scenario 1 of KIP-101: a follower that restarts knowing an old HW would truncate
    committed records away if it truncated to its HW, and then lose them for good when it is
    elected leader."""
    a = await brokers.open(1)
    b = await brokers.open(2)
    await a.actor.ask(BecomeLeader(state(1, 0, (1, 2), replicas=(1, 2))))
    await b.actor.ask(BecomeFollower(state(1, 0, (1, 2), replicas=(1, 2))))
    await produce(a, 1, tag=1)
    await produce(a, 1, tag=2)
    await replicate(a, b)  # B holds offsets 0-1, knows HW 0
    # B's next fetch tells A it holds both: A commits them (acks=all answered) ...
    await follower_fetch(a, 2, 2)
    assert hw(a) == 2
    # ... but B restarts before the response reaches it, so it only knows HW 0.
    b = await brokers.restart(b)
    assert (b.log.high_watermark, b.log.log_end_offset) == (0, 2)
    await b.actor.ask(BecomeFollower(state(1, 0, (1, 2), replicas=(1, 2))))
    assert b.log.log_end_offset == 2, "becoming follower does not truncate to the HW"
    assert await _truncate_by_epoch(b, a) == 2
    assert b.log.log_end_offset == 2, "epoch truncation keeps the committed records"

    # A dies; the controller elects B from the ISR.
    await b.actor.ask(BecomeLeader(state(2, 1, (2,), 1, replicas=(1, 2))))
    assert hw(b) == 2
    consumed = await b.actor.ask(ReadRecords(0, MAX_BYTES))
    assert consumed.records == _all_bytes(a), "every acknowledged record is still there"


async def test_kip101_epoch_truncation_removes_divergent_suffix(brokers: Brokers) -> None:
    """Scenario 2 of KIP-101: after both replicas crash, the one that comes back first is
    elected and writes at an offset the other also used. Truncating the other to its HW would
    keep its own record there, and the two logs would diverge for ever."""
    a = await brokers.open(1)
    b = await brokers.open(2)
    await a.actor.ask(BecomeLeader(state(1, 0, (1, 2), replicas=(1, 2))))
    await b.actor.ask(BecomeFollower(state(1, 0, (1, 2), replicas=(1, 2))))
    await produce(a, 1, tag=1)
    await replicate(a, b)
    await replicate(a, b)  # both hold offset 0, both know HW 1
    await produce(a, 1, tag=2)  # offset 1 only on A
    # B stops fetching; after the lag the ISR shrinks to A alone, which commits offset 1 by itself.
    brokers.clock.advance(LAG_MS + 1)
    await a.actor.ask(BecomeLeader(state(1, 0, (1,), 1, replicas=(1, 2))))
    assert hw(a) == 2
    assert b.log.log_end_offset == 1

    # Both crash; B returns first and is elected (unclean), then takes a new write at offset 1.
    await a.actor.ask(BecomeFollower(state(2, 1, (2,), 2, replicas=(1, 2))))
    await b.actor.ask(BecomeLeader(state(2, 1, (2,), 2, replicas=(1, 2))))
    await produce(b, 1, tag=3)
    assert hw(b) == 2
    assert a.log.high_watermark == 2, "truncating to its HW would keep A's offset 1"

    assert await _truncate_by_epoch(a, b) == 1
    await replicate(b, a)
    assert a.log.log_end_offset == 2
    assert _all_bytes(a) == _all_bytes(b), "the logs are identical again"
    assert a.log.epoch_cache.entries == b.log.epoch_cache.entries


async def test_follower_truncation_and_full_reset(brokers: Brokers) -> None:
    leader = await brokers.open(1)
    follower = await brokers.open(2)
    await leader.actor.ask(BecomeLeader(state(1, 0, (1, 2), replicas=(1, 2))))
    await follower.actor.ask(BecomeFollower(state(1, 0, (1, 2), replicas=(1, 2))))
    await produce(leader, 2, tag=1)
    await produce(leader, 2, tag=2)
    await replicate(leader, follower)
    assert await follower.actor.ask(TruncateTo(2)) is ErrorCode.NONE
    assert follower.actor.view.log_end_offset.message_offset == 2
    assert await follower.actor.ask(TruncateFullyAndStartAt(4)) is ErrorCode.NONE
    view = follower.actor.view
    assert (view.log_start_offset, view.log_end_offset.message_offset) == (4, 4)
    assert view.role is Role.FOLLOWER
