"""Replicas in a failed log dir (issue 18, finding 3): a heartbeat reporting an offline dir makes
the controller ask the broker about every partition it hosts; the partitions it answers with
KAFKA_STORAGE_ERROR lose that replica from their ISR and, where it led, get a leader from the
ISR; the replica is not elected again until its broker registers again."""

from __future__ import annotations

from typing import Final

from actors.controller.messages import DescribeCluster
from actors.controller.states import ReplicaKey, ReplicaState
from tests.unit.actors.controller.harness import BROKERS, ControllerHarness, Sent, of_type
from wire.errors import ErrorCode
from wire.messages import (
    LeaderAndIsrPartitionError,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    UpdateMetadataRequest,
)
from wire.topic import TopicPartition

DIRS: Final = {b: [bytes([b + 1]) * 16, bytes([b + 11]) * 16] for b in BROKERS}
FAILED = 0  # the broker whose dir fails


def answer_leader_and_isr(sent: list[Sent], broker_id: int, failed: set[TopicPartition]) -> int:
    """Answer the LeaderAndIsr requests sent to `broker_id`, KAFKA_STORAGE_ERROR for `failed`."""
    count = 0
    for s in sent:
        if s.broker_id != broker_id or not isinstance(s.request, LeaderAndIsrRequest):
            continue
        assert s.callback is not None
        s.callback(
            LeaderAndIsrResponse(
                partition_errors=[
                    LeaderAndIsrPartitionError(
                        topic_name=state.topic_name,
                        partition_index=state.partition_index,
                        error_code=(
                            ErrorCode.KAFKA_STORAGE_ERROR
                            if TopicPartition(state.topic_name, state.partition_index) in failed
                            else ErrorCode.NONE
                        ),
                    )
                    for state in s.request.partition_states
                ]
            ),
            1,
        )
        count += 1
    return count


async def test_an_offline_log_dir_moves_leadership_to_the_isr_and_the_replica_out_of_it(
    harness: ControllerHarness,
) -> None:
    for broker_id in BROKERS:
        assert await harness.register(broker_id, log_dirs=DIRS[broker_id]) is ErrorCode.NONE
    # Broker 0 is the preferred leader of t-0 and a follower of t-1.
    await harness.create_topic("t", assignments=[(0, 1, 2), (1, 0, 2)])
    harness.channels.take()
    before = [harness.partition("t", i) for i in range(2)]
    assert before[0].leader == FAILED
    assert FAILED in before[1].isr

    await harness.heartbeat(FAILED, offline_log_dirs=DIRS[FAILED][:1])
    sent = harness.channels.take()
    asked = of_type(sent, LeaderAndIsrRequest, FAILED)
    assert [sorted(s.partition_index for s in r.partition_states) for r in asked] == [[0, 1]]

    # Both of its partitions were in the failed dir.
    failed = {TopicPartition("t", 0), TopicPartition("t", 1)}
    assert answer_leader_and_isr(sent, FAILED, failed) == 1
    await harness.settle()
    led, followed = harness.partition("t", 0), harness.partition("t", 1)
    assert led.leader == 1, led
    assert led.leader_epoch == before[0].leader_epoch + 1
    assert FAILED not in led.isr
    assert FAILED not in followed.isr
    assert followed.leader == 1
    assert followed.leader_epoch == before[1].leader_epoch
    states = harness.controller.replica_states
    assert states.state(ReplicaKey(TopicPartition("t", 0), FAILED)) is ReplicaState.OFFLINE
    sent = harness.channels.take()
    # The failed broker is not told again (it would only answer KAFKA_STORAGE_ERROR); every
    # broker's metadata shows the replica offline.
    assert of_type(sent, LeaderAndIsrRequest, FAILED) == []
    metadata = of_type(sent, UpdateMetadataRequest, 1)
    assert metadata
    offline = {s.partition_index: s.offline_replicas for s in metadata[-1].partition_states}
    assert offline == {0: [FAILED], 1: [FAILED]}
    status = await harness.controller.ask(DescribeCluster())
    assert status.brokers[FAILED].offline_log_dirs == (DIRS[FAILED][0],)

    # A repeated heartbeat with the same dir asks nothing.
    await harness.heartbeat(FAILED, offline_log_dirs=DIRS[FAILED][:1])
    assert harness.channels.take() == []


async def test_a_storage_error_in_any_leader_and_isr_answer_takes_the_replica_offline(
    harness: ControllerHarness,
) -> None:
    for broker_id in BROKERS:
        assert await harness.register(broker_id, log_dirs=DIRS[broker_id]) is ErrorCode.NONE
    harness.channels.take()
    # Creating the log failed on broker 0 (the topic's new leader there).
    await harness.create_topic("t", assignments=[(0, 1, 2)])
    sent = harness.channels.take()
    assert answer_leader_and_isr(sent, FAILED, {TopicPartition("t", 0)}) == 1
    await harness.settle()
    p = harness.partition("t", 0)
    assert p.leader == 1, p
    assert FAILED not in p.isr, p
    # Only a new registration brings the replica back into service.
    assert await harness.register(FAILED, log_dirs=DIRS[FAILED]) is ErrorCode.NONE
    states = harness.controller.replica_states
    assert states.state(ReplicaKey(TopicPartition("t", 0), FAILED)) is ReplicaState.ONLINE
