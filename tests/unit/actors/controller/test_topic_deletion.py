"""Topic deletion at the controller (Kafka's TopicDeletionManager) on a ManualClock: a replica on
a dead broker waits for it to return, a stale answer to a resent StopReplica counts as applied,
and a live broker that fails a deletion gets it again after a growing backoff until it succeeds
or dies (issue 18, finding 7)."""

from __future__ import annotations

from actors.controller.states import ReplicaKey, ReplicaState
from tests.unit.actors.controller.harness import (
    BROKERS,
    ControllerHarness,
    cluster,
    kill,
    of_type,
)
from wire.errors import ErrorCode
from wire.messages import (
    LeaderAndIsrRequest,
    StopReplicaRequest,
    StopReplicaResponse,
    UpdateMetadataRequest,
)
from wire.topic import TopicPartition

# The first retry comes after 1 s, the second after 2 s, each +-20 % of jitter
# (actors/controller/deletion_retries.py, DELETION_RETRY_BACKOFF).
BEFORE_FIRST_RETRY_MS = 750
UNTIL_FIRST_RETRY_MS = 500
BEFORE_SECOND_RETRY_MS = 1_550
UNTIL_SECOND_RETRY_MS = 1_000


async def test_delete_topic_waits_for_a_dead_replica_and_resumes_when_it_returns(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("gone", 1, 3, assignments=[[0, 1, 2]])
    await kill(harness, 2, alive=(0, 1))
    harness.channels.take()
    response = await harness.delete_topics("gone", "never-was")
    assert [r.error_code for r in response.responses] == [0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    sent = harness.channels.take()
    # Brokers stop serving it at once (leader -2), then delete their replicas.
    for broker_id in (0, 1):
        (metadata,) = of_type(sent, UpdateMetadataRequest, broker_id)
        assert [s.leader for s in metadata.partition_states] == [-2]
        (stop,) = of_type(sent, StopReplicaRequest, broker_id)
        assert stop.partition_states[0].delete_partition
    assert harness.answer_stop_replicas(sent) == 2
    await harness.settle()
    tp = TopicPartition("gone", 0)
    states = harness.controller.replica_states
    assert states.state(ReplicaKey(tp, 0)) is ReplicaState.REPLICA_DELETION_SUCCESSFUL
    assert states.state(ReplicaKey(tp, 2)) is ReplicaState.REPLICA_DELETION_INELIGIBLE
    assert harness.controller.model.topic_by_name("gone") is not None  # still waiting
    # Broker 2 returns: its replica is deleted too, and the topic is gone.
    assert await harness.register(2) is ErrorCode.NONE
    sent = harness.channels.take()
    (stop,) = of_type(sent, StopReplicaRequest, 2)
    (full,) = of_type(sent, LeaderAndIsrRequest, 2)
    assert full.partition_states == []  # the deleting topic is not hosted any more
    assert harness.answer_stop_replicas(sent) == 1
    await harness.settle()
    assert harness.controller.model.topic_by_name("gone") is None
    assert tp not in harness.controller.partition_states
    assert await harness.create_topic("gone", 1, 1) is not None


async def test_a_stale_answer_to_a_resent_stop_replica_counts_as_deleted(
    harness: ControllerHarness,
) -> None:
    await cluster(harness, (0,))
    await harness.create_topic("a", 1, 1)
    await harness.create_topic("b", 1, 1)
    harness.channels.take()
    await harness.delete_topics("a")
    # First copy: a stale-epoch answer means the broker refused it; the replica is not deleted.
    assert harness.answer_stop_replicas(
        harness.channels.take(), error=ErrorCode.STALE_CONTROLLER_EPOCH
    )
    await harness.settle()
    assert harness.controller.model.topic_by_name("a") is not None
    await harness.delete_topics("b")
    # A resent copy answered stale: its earlier copy was applied.
    assert harness.answer_stop_replicas(
        harness.channels.take(), error=ErrorCode.STALE_CONTROLLER_EPOCH, attempts=2
    )
    await harness.settle()
    assert harness.controller.model.topic_by_name("b") is None


async def delete_with_broker_2_failing(harness: ControllerHarness) -> ReplicaKey:
    """Topic "gone" on brokers 0-2, deleted; brokers 0 and 1 delete their replicas, broker 2
    answers with an error (a log directory it could not remove). Returns broker 2's replica."""
    await cluster(harness)
    await harness.create_topic("gone", 1, 3, assignments=[[0, 1, 2]])
    harness.channels.take()
    await harness.delete_topics("gone")
    sent = harness.channels.take()
    assert harness.answer_stop_replicas([s for s in sent if s.broker_id != 2]) == 2
    failing = [s for s in sent if s.broker_id == 2]
    assert harness.answer_stop_replicas(failing, error=ErrorCode.KAFKA_STORAGE_ERROR) == 1
    await harness.settle()
    key = ReplicaKey(TopicPartition("gone", 0), 2)
    assert harness.controller.replica_states.state(key) is ReplicaState.REPLICA_DELETION_INELIGIBLE
    return key


async def test_a_failed_replica_deletion_on_a_live_broker_is_retried_with_backoff(
    harness: ControllerHarness,
) -> None:
    key = await delete_with_broker_2_failing(harness)
    states = harness.controller.replica_states
    # Broker 2 stays up: it gets the deletion again after the backoff, not before.
    await harness.pass_time(BEFORE_FIRST_RETRY_MS, alive=BROKERS)
    assert not of_type(harness.channels.take(), StopReplicaRequest)
    await harness.pass_time(UNTIL_FIRST_RETRY_MS, alive=BROKERS)
    sent = harness.channels.take()
    (retry,) = of_type(sent, StopReplicaRequest, 2)
    assert [(s.topic_name, s.delete_partition) for s in retry.partition_states] == [("gone", True)]
    assert [s.broker_id for s in sent] == [2]  # only the failed replica's broker
    assert states.state(key) is ReplicaState.REPLICA_DELETION_STARTED
    # It fails again: the next wait is longer.
    assert harness.answer_stop_replicas(sent, error=ErrorCode.KAFKA_STORAGE_ERROR) == 1
    await harness.settle()
    await harness.pass_time(BEFORE_SECOND_RETRY_MS, alive=BROKERS)
    assert not of_type(harness.channels.take(), StopReplicaRequest)
    await harness.pass_time(UNTIL_SECOND_RETRY_MS, alive=BROKERS)
    sent = harness.channels.take()
    assert len(of_type(sent, StopReplicaRequest, 2)) == 1
    # This time it succeeds: the topic is gone, and nothing is retried any more.
    assert harness.answer_stop_replicas(sent) == 1
    await harness.settle()
    assert harness.controller.model.topic_by_name("gone") is None
    assert key not in states
    await harness.pass_time(2 * (BEFORE_SECOND_RETRY_MS + UNTIL_SECOND_RETRY_MS), alive=BROKERS)
    assert not of_type(harness.channels.take(), StopReplicaRequest)


async def test_a_failed_deletion_on_a_broker_that_dies_waits_for_its_registration(
    harness: ControllerHarness,
) -> None:
    key = await delete_with_broker_2_failing(harness)
    await kill(harness, 2, alive=(0, 1))
    # Dead, it is sent nothing (its channel is gone); its retry is forgotten.
    await harness.pass_time(2 * (BEFORE_FIRST_RETRY_MS + UNTIL_FIRST_RETRY_MS), alive=(0, 1))
    assert not of_type(harness.channels.take(), StopReplicaRequest)
    assert harness.controller.replica_states.state(key) is (
        ReplicaState.REPLICA_DELETION_INELIGIBLE
    )
    # Registered again, it gets the deletion at once, as any deletion waiting on it.
    assert await harness.register(2) is ErrorCode.NONE
    sent = harness.channels.take()
    assert len(of_type(sent, StopReplicaRequest, 2)) == 1
    assert harness.answer_stop_replicas(sent) == 1
    await harness.settle()
    assert harness.controller.model.topic_by_name("gone") is None


async def test_a_deletion_refused_whole_is_retried(harness: ControllerHarness) -> None:
    await cluster(harness, (0,))
    await harness.create_topic("a", 1, 1)
    harness.channels.take()
    await harness.delete_topics("a")
    (stop,) = [s for s in harness.channels.take() if isinstance(s.request, StopReplicaRequest)]
    # An error response lists no partitions (here: the request was not authorized).
    assert stop.callback is not None
    stop.callback(StopReplicaResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED), 1)
    await harness.settle()
    key = ReplicaKey(TopicPartition("a", 0), 0)
    assert harness.controller.replica_states.state(key) is (
        ReplicaState.REPLICA_DELETION_INELIGIBLE
    )
    await harness.pass_time(BEFORE_FIRST_RETRY_MS + UNTIL_FIRST_RETRY_MS, alive=(0,))
    sent = harness.channels.take()
    assert len(of_type(sent, StopReplicaRequest, 0)) == 1
    assert harness.answer_stop_replicas(sent) == 1
    await harness.settle()
    assert harness.controller.model.topic_by_name("a") is None
