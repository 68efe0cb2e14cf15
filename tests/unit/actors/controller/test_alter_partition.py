"""AlterPartition at the controller (KIP-497, KIP-841) on a ManualClock: the checks and what an
accepted change writes, a repeat of an already applied change answered with the current state
(a retried request must not freeze the partition), and a leader refused for an outdated view
sent the committed state at once (issue 18, finding 1)."""

from __future__ import annotations

from tests.unit.actors.controller.harness import ControllerHarness, cluster, kill, of_type
from wire.errors import ErrorCode
from wire.messages import (
    LEADER_AND_ISR_INCREMENTAL,
    AlterPartitionResponse,
    LeaderAndIsrRequest,
)
from wire.metadata_records import PartitionRecord


def code(response: AlterPartitionResponse) -> ErrorCode:
    (topic,) = response.topics
    (result,) = topic.partitions
    return ErrorCode.from_code(result.error_code)


async def test_alter_partition_validates_and_bumps_only_the_partition_epoch(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("t", 1, 3, assignments=[[0, 1, 2]])
    p = harness.partition("t")
    harness.channels.take()

    assert code(await harness.alter_isr("t", [0, 1], sender=1)) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert code(await harness.alter_isr("t", [0, 1], leader_epoch=p.leader_epoch + 1)) is (
        ErrorCode.FENCED_LEADER_EPOCH
    )
    assert code(await harness.alter_isr("t", [1, 2])) is ErrorCode.INVALID_REQUEST  # no leader
    stale = await harness.alter_isr("t", [0, 1], broker_epoch=harness.epochs[0] - 1)
    assert stale.error is ErrorCode.STALE_BROKER_EPOCH
    assert harness.partition("t") == p  # nothing changed
    assert not harness.channels.take()  # and no broker's view is behind: nothing to send
    # A stale partition epoch is refused too, but the leader's view is behind: it is sent the
    # committed state (below, test_a_leader_refused_for_a_stale_partition_epoch_...).
    assert code(await harness.alter_isr("t", [0, 1], partition_epoch=p.partition_epoch - 1)) is (
        ErrorCode.INVALID_UPDATE_VERSION
    )
    assert harness.partition("t") == p
    assert [s.broker_id for s in harness.channels.take()] == [0]

    accepted = await harness.alter_isr("t", [0, 1])
    result = accepted.topics[0].partitions[0]
    assert (result.error_code, result.isr) == (0, [0, 1])
    q = harness.partition("t")
    assert (q.isr, q.leader_epoch, q.partition_epoch) == (
        (0, 1),
        p.leader_epoch,
        p.partition_epoch + 1,
    )
    assert result.partition_epoch == q.partition_epoch
    # Only UpdateMetadata goes out: the leader learned the result from the answer.
    sent = harness.channels.take()
    assert not of_type(sent, LeaderAndIsrRequest)
    assert {s.broker_id for s in sent} == {0, 1, 2}


async def test_a_fenced_or_shutting_down_broker_may_not_join_the_isr(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("t", 1, 3, assignments=[[0, 1, 2]])
    await harness.alter_isr("t", [0, 1])
    await kill(harness, 2, alive=(0, 1))
    rejoin = await harness.alter_isr("t", [0, 1, 2])
    assert rejoin.topics[0].partitions[0].error_code == ErrorCode.INELIGIBLE_REPLICA


# -- a retried AlterPartition, a refused leader (issue 18, finding 1) ----------------------------


async def shrunk_to_0_1(harness: ControllerHarness) -> tuple[PartitionRecord, PartitionRecord]:
    """Topic "t" on brokers 0-2, led by 0, after its leader's shrink to [0, 1] was applied: the
    partition before and after."""
    await cluster(harness)
    await harness.create_topic("t", 1, 3, assignments=[[0, 1, 2]])
    before = harness.partition("t")
    assert code(await harness.alter_isr("t", [0, 1])) is ErrorCode.NONE
    return before, harness.partition("t")


async def test_a_retried_alter_partition_whose_first_copy_was_applied_gets_the_current_state(
    harness: ControllerHarness,
) -> None:
    before, applied = await shrunk_to_0_1(harness)
    harness.channels.take()
    written = harness.store.next_offset
    # The answer to the first copy was lost; the broker's AlterPartition manager resends the
    # same proposal, still based on the partition epoch before the change.
    retry = await harness.alter_isr(
        "t", [0, 1], leader_epoch=before.leader_epoch, partition_epoch=before.partition_epoch
    )
    (result,) = retry.topics[0].partitions
    assert (
        ErrorCode.from_code(result.error_code),
        result.leader_id,
        result.leader_epoch,
        result.isr,
        result.partition_epoch,
    ) == (ErrorCode.NONE, 0, applied.leader_epoch, [0, 1], applied.partition_epoch)
    # Answered from the current state: nothing written, nothing to tell anyone.
    assert harness.partition("t") == applied
    assert harness.store.next_offset == written
    assert not harness.channels.take()


async def test_only_a_repeat_of_the_applied_change_is_accepted_from_an_older_partition_epoch(
    harness: ControllerHarness,
) -> None:
    before, applied = await shrunk_to_0_1(harness)
    old = {"leader_epoch": before.leader_epoch, "partition_epoch": before.partition_epoch}
    # Another ISR than the current one (also the same members in another order, as Kafka
    # compares them): the proposal is based on a state that is gone.
    assert code(await harness.alter_isr("t", [0], **old)) is ErrorCode.INVALID_UPDATE_VERSION
    assert code(await harness.alter_isr("t", [1, 0], **old)) is ErrorCode.INVALID_UPDATE_VERSION
    # Another leader epoch, or not the leader: the checks before the partition epoch's hold.
    newer = {**old, "leader_epoch": before.leader_epoch + 1}
    assert code(await harness.alter_isr("t", [0, 1], **newer)) is ErrorCode.FENCED_LEADER_EPOCH
    assert code(await harness.alter_isr("t", [0, 1], sender=1, **old)) is (
        ErrorCode.NOT_LEADER_OR_FOLLOWER
    )
    assert harness.partition("t") == applied


async def test_a_leader_refused_for_a_stale_partition_epoch_is_sent_the_committed_state(
    harness: ControllerHarness,
) -> None:
    before, committed = await shrunk_to_0_1(harness)
    harness.channels.take()
    # A proposal from the state before the change (its answer never reached the partition, which
    # now wants another ISR): refused, and the leader would keep it pending until a LeaderAndIsr.
    refused = await harness.alter_isr("t", [0], partition_epoch=before.partition_epoch)
    assert code(refused) is ErrorCode.INVALID_UPDATE_VERSION
    sent = harness.channels.take()
    # That LeaderAndIsr comes at once, to the leader only, with the committed state.
    assert [(s.broker_id, type(s.request)) for s in sent] == [(0, LeaderAndIsrRequest)]
    (request,) = of_type(sent, LeaderAndIsrRequest, 0)
    assert (request.type, request.broker_epoch) == (LEADER_AND_ISR_INCREMENTAL, harness.epochs[0])
    (state,) = request.partition_states
    assert (state.leader, state.leader_epoch, state.isr, state.partition_epoch) == (
        0,
        committed.leader_epoch,
        [0, 1],
        committed.partition_epoch,
    )
    assert not state.is_new
    assert harness.partition("t") == committed


async def test_a_leader_refused_for_an_older_leader_epoch_is_sent_the_committed_state(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("t", 1, 3, assignments=[[0, 1, 2]])
    before = harness.partition("t")
    await kill(harness, 0, alive=(1, 2))
    current = harness.partition("t")
    assert (current.leader, current.leader_epoch) == (1, before.leader_epoch + 1)
    harness.channels.take()
    # Broker 1 leads, but proposes under the old leader epoch (its view is behind).
    refused = await harness.alter_isr("t", [1], leader_epoch=before.leader_epoch)
    assert code(refused) is ErrorCode.FENCED_LEADER_EPOCH
    sent = harness.channels.take()
    assert [(s.broker_id, type(s.request)) for s in sent] == [(1, LeaderAndIsrRequest)]
    (request,) = of_type(sent, LeaderAndIsrRequest, 1)
    (state,) = request.partition_states
    assert (state.leader, state.leader_epoch, state.partition_epoch) == (
        1,
        current.leader_epoch,
        current.partition_epoch,
    )
    # A leader epoch ahead of the controller's, or a sender that does not lead: no view to fix.
    newer = await harness.alter_isr("t", [1], leader_epoch=current.leader_epoch + 1)
    assert code(newer) is ErrorCode.FENCED_LEADER_EPOCH
    assert code(await harness.alter_isr("t", [1, 2], sender=2)) is (
        ErrorCode.NOT_LEADER_OR_FOLLOWER
    )
    assert not harness.channels.take()
    assert harness.partition("t") == current
