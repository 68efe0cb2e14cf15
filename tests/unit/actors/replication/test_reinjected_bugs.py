"""The replication layer's re-injectable bugs (runtime/reinjected.py) do what their names say
when switched on, and nothing while off: the simulator's tests (tests/sim/test_reinjected_bugs.py)
rely on them to prove its checkers catch these mistakes."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from actors.replication.alter_partition import IsrProposal, IsrProposalResult
from actors.replication.alter_partition_manager import AlterPartitionManager
from actors.replication.delayed_produce import acks_outcome
from actors.replication.isr import enough_replicas_for_append
from actors.replication.partition_messages import ACKS_ALL
from runtime.clock import ManualClock
from runtime.net.backoff import ExponentialBackoff
from runtime.reinjected import (
    ISR_SHRINK_IGNORES_MIN_INSYNC_REPLICAS,
    LOST_ALTER_PARTITION_ANSWER,
    reinjected,
)
from tests.unit.actors.replication.delayed_harness import appended, leader_view
from wire.errors import ErrorCode
from wire.messages import (
    AlterPartitionPartitionResult,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionTopicResult,
)
from wire.topic import TopicPartition

TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
BACKOFF_MAX_MS = 400
BACKOFF = ExponentialBackoff(initial_ms=100, max_ms=BACKOFF_MAX_MS, jitter=0)


def test_a_shrunk_isr_refuses_acks_all_unless_the_bug_is_on() -> None:
    assert not enough_replicas_for_append(ACKS_ALL, (0,), 2)
    status = appended(TP0, 0, 4, min_isr=2)
    alone = replace(leader_view(TP0, hw=4, isr=(0,)), maximal_isr=(0,))
    assert acks_outcome(status, alone) is ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    with reinjected(ISR_SHRINK_IGNORES_MIN_INSYNC_REPLICAS):
        assert enough_replicas_for_append(ACKS_ALL, (0,), 2)
        assert acks_outcome(status, alone) is ErrorCode.NONE
    assert not enough_replicas_for_append(ACKS_ALL, (0,), 2)


class _Controller:
    """Fails the first request in transport, accepts every later one."""

    def __init__(self) -> None:
        self.requests: list[AlterPartitionRequest] = []

    async def send(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        self.requests.append(request)
        if len(self.requests) == 1:
            raise ConnectionError("the answer was lost with the connection")
        return AlterPartitionResponse(
            topics=[
                AlterPartitionTopicResult(
                    topic_name=topic.topic_name,
                    partitions=[
                        AlterPartitionPartitionResult(
                            partition_index=data.partition_index,
                            leader_id=0,
                            leader_epoch=data.leader_epoch,
                            isr=list(data.new_isr),
                            partition_epoch=data.partition_epoch + 1,
                        )
                        for data in topic.partitions
                    ],
                )
                for topic in request.topics
            ]
        )


async def _lost_answer() -> tuple[list[TopicPartition], dict[TopicPartition, ErrorCode]]:
    """One proposal whose answer is lost, then (after the backoff) another partition's: which
    partitions were sent, in order, and what each proposal was answered."""
    clock = ManualClock()
    controller = _Controller()
    manager = AlterPartitionManager(0, controller.send, clock, backoff=BACKOFF)
    answers: dict[TopicPartition, ErrorCode] = {}

    def submit(tp: TopicPartition) -> None:
        def on_result(result: IsrProposalResult) -> None:
            answers[tp] = result.error

        manager.submit(IsrProposal(tp, 0, 3, 7, (0, 1)), on_result)

    async def settle() -> None:
        for _ in range(20):
            await asyncio.sleep(0)

    await manager.start()
    try:
        submit(TP0)
        await settle()
        clock.advance(BACKOFF_MAX_MS)
        await settle()
        submit(TP1)
        await settle()
        clock.advance(BACKOFF_MAX_MS)
        await settle()
    finally:
        await manager.stop()
    sent = [
        TopicPartition(topic.topic_name, data.partition_index)
        for request in controller.requests
        for topic in request.topics
        for data in topic.partitions
    ]
    return sent, answers


async def test_a_batch_whose_answer_was_lost_is_resent_unless_the_bug_is_on() -> None:
    sent, answers = await _lost_answer()
    assert sent == [TP0, TP0, TP1]
    assert answers == {TP0: ErrorCode.NONE, TP1: ErrorCode.NONE}
    with reinjected(LOST_ALTER_PARTITION_ANSWER):
        sent, answers = await _lost_answer()
    # Never resent, never answered (not even when the manager stops): its leader waits for
    # good. Other partitions' proposals still go.
    assert sent == [TP0, TP1]
    assert answers == {TP1: ErrorCode.NONE}
