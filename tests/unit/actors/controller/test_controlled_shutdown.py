"""Controlled shutdown at the controller (seed 004, KIP-841) on a ManualClock: leadership moves
first, followers are stopped and leave the ISR under the same leader epoch, and every
UpdateMetadata flags the broker as in controlled shutdown (issue 18, findings 2 and 6)."""

from __future__ import annotations

from actors.controller.messages import ControlledShutdown, DescribeCluster
from actors.controller.states import ReplicaKey, ReplicaState
from tests.unit.actors.controller.harness import ControllerHarness, cluster, kill, of_type
from wire.errors import ErrorCode
from wire.messages import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    LeaderAndIsrRequest,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from wire.topic import TopicPartition


async def shut_down(harness: ControllerHarness, broker_id: int) -> ControlledShutdownResponse:
    return await harness.controller.ask(
        ControlledShutdown(
            ControlledShutdownRequest(broker_id=broker_id, broker_epoch=harness.epochs[broker_id])
        )
    )


async def test_controlled_shutdown_moves_leadership_first(harness: ControllerHarness) -> None:
    await cluster(harness)
    await harness.create_topic("led", 1, 3, assignments=[[0, 1, 2]])
    await harness.create_topic("followed", 1, 3, assignments=[[1, 0, 2]])
    await harness.create_topic("single", 1, 1, assignments=[[0]])
    harness.channels.take()
    response = await harness.controller.ask(
        ControlledShutdown(ControlledShutdownRequest(broker_id=0, broker_epoch=harness.epochs[0]))
    )
    assert response.error is ErrorCode.NONE
    assert response.remaining_partitions == []  # RF=1 partitions do not count
    led = harness.partition("led")
    assert (led.leader, led.isr) == (1, (1, 2))
    followed = harness.partition("followed")
    assert (followed.leader, followed.isr) == (1, (1, 2))
    assert harness.partition("single").leader == 0
    sent = harness.channels.take()
    (stop,) = of_type(sent, StopReplicaRequest, 0)
    assert [(s.topic_name, s.delete_partition) for s in stop.partition_states] == [
        ("followed", False)
    ]
    assert (
        harness.controller.replica_states.state(ReplicaKey(TopicPartition("followed", 0), 0))
        is ReplicaState.OFFLINE
    )
    # A shutting-down broker is not elected anywhere, and it cannot rejoin an ISR.
    rejoin = await harness.alter_isr("led", [1, 2, 0])
    assert rejoin.topics[0].partitions[0].error_code == ErrorCode.INELIGIBLE_REPLICA
    # Its last heartbeat asks to shut down: fenced at once, no session timeout to wait for.
    answer = await harness.heartbeat(0, want_shut_down=True)
    assert answer.should_shut_down
    status = await harness.controller.ask(DescribeCluster())
    assert status.brokers[0].state == "fenced"
    # It comes back as a new process right away.
    assert await harness.register(0) is ErrorCode.NONE


async def test_controlled_shutdown_with_no_other_isr_member_reports_the_partition(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("t", 1, 2, assignments=[[0, 1]])
    await harness.alter_isr("t", [0])
    response = await harness.controller.ask(
        ControlledShutdown(ControlledShutdownRequest(broker_id=0, broker_epoch=harness.epochs[0]))
    )
    assert [(r.topic_name, r.partition_index) for r in response.remaining_partitions] == [("t", 0)]
    stale = await harness.controller.ask(
        ControlledShutdown(ControlledShutdownRequest(broker_id=1, broker_epoch=-5))
    )
    assert stale.error is ErrorCode.STALE_BROKER_EPOCH
    # Once broker 1 is gone too, nothing could take the partition over: not reported, so the
    # last broker of a cluster does not retry in vain.
    await kill(harness, 1, alive=(0, 2))
    last = await harness.controller.ask(
        ControlledShutdown(ControlledShutdownRequest(broker_id=0, broker_epoch=harness.epochs[0]))
    )
    assert last.remaining_partitions == []


async def test_a_follower_shut_down_leaves_the_isr_under_the_same_leader_epoch(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("followed", 1, 3, assignments=[[1, 0, 2]])
    await harness.create_topic("led", 1, 3, assignments=[[0, 1, 2]])
    followed, led = harness.partition("followed"), harness.partition("led")
    harness.channels.take()
    assert (await shut_down(harness, 0)).error is ErrorCode.NONE
    # Broker 1 goes on leading "followed": only the ISR changed, so only the partition epoch
    # moves (KAFKA-15021), and its writes waiting for acks=all are not failed for nothing.
    after = harness.partition("followed")
    assert (after.leader, after.isr) == (1, (1, 2))
    assert after.leader_epoch == followed.leader_epoch
    assert after.partition_epoch == followed.partition_epoch + 1
    sent = harness.channels.take()
    for broker_id in (1, 2):
        states = [
            s
            for r in of_type(sent, LeaderAndIsrRequest, broker_id)
            for s in r.partition_states
            if s.topic_name == "followed"
        ]
        assert [(s.leader_epoch, s.partition_epoch) for s in states] == [
            (followed.leader_epoch, after.partition_epoch)
        ]
    # "led" got a new leader: that is a new leader epoch.
    moved = harness.partition("led")
    assert (moved.leader, moved.leader_epoch) == (1, led.leader_epoch + 1)


async def test_update_metadata_flags_a_broker_in_controlled_shutdown(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("t", 1, 3, assignments=[[1, 0, 2]])
    harness.channels.take()
    assert (await shut_down(harness, 0)).error is ErrorCode.NONE
    # Every live broker hears at once that broker 0 is shutting down, so a leader stops
    # proposing it for its ISR (KIP-841) instead of having each proposal refused.
    sent = harness.channels.take()
    for broker_id in (0, 1, 2):
        (metadata,) = of_type(sent, UpdateMetadataRequest, broker_id)
        assert [(b.id, b.in_controlled_shutdown) for b in metadata.live_brokers] == [
            (0, True),
            (1, False),
            (2, False),
        ]
    # Every later UpdateMetadata says it too, as long as the broker is live.
    await harness.alter_isr("t", [1])
    later = of_type(harness.channels.take(), UpdateMetadataRequest)
    assert [[b.id for b in m.live_brokers if b.in_controlled_shutdown] for m in later] == [[0]] * 3
    # Fenced, it is no longer listed; registered again, it is an ordinary live broker.
    assert (await harness.heartbeat(0, want_shut_down=True)).should_shut_down
    fenced = of_type(harness.channels.take(), UpdateMetadataRequest)
    assert [[b.id for b in m.live_brokers] for m in fenced] == [[1, 2]] * 2
    assert await harness.register(0) is ErrorCode.NONE
    back = of_type(harness.channels.take(), UpdateMetadataRequest)
    assert [[(b.id, b.in_controlled_shutdown) for b in m.live_brokers] for m in back] == [
        [(0, False), (1, False), (2, False)]
    ] * 3
