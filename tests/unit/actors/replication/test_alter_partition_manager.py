"""AlterPartitionManager against a scripted controller on a ManualClock: batching, one request
in flight, replacement and refusal of proposals, retries with backoff, exactly-once answers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from actors.replication.alter_partition import IsrProposal, IsrProposalResult
from actors.replication.alter_partition_manager import (
    AlterPartitionClosedError,
    AlterPartitionManager,
)
from actors.replication.partition import PartitionActor
from actors.replication.partition_messages import (
    AppendAsLeader,
    BecomeLeader,
    PartitionState,
    ReadRecords,
)
from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.log import Log
from runtime.net.backoff import ExponentialBackoff
from wire.batch_builder import build_batch
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
TP2 = TopicPartition("audit", 0)
BACKOFF = ExponentialBackoff(initial_ms=100, max_ms=400, jitter=0)


def proposal(tp: TopicPartition, new_isr: tuple[int, ...] = (0, 1), epoch: int = 3) -> IsrProposal:
    return IsrProposal(tp, 0, epoch, 7, new_isr)


def accepted(request: AlterPartitionRequest, partition_epoch: int = 8) -> AlterPartitionResponse:
    """The controller commits every proposal of `request` as sent."""
    return AlterPartitionResponse(
        topics=[
            AlterPartitionTopicResult(
                topic_name=topic.topic_name,
                partitions=[
                    AlterPartitionPartitionResult(
                        partition_index=data.partition_index,
                        leader_id=request.broker_id,
                        leader_epoch=data.leader_epoch,
                        isr=list(data.new_isr),
                        partition_epoch=partition_epoch,
                    )
                    for data in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


@dataclass
class Controller:
    """Each request waits for the test to answer it (or fail it)."""

    requests: list[AlterPartitionRequest] = field(default_factory=list)
    replies: list[asyncio.Future[AlterPartitionResponse]] = field(default_factory=list)

    async def send(self, request: AlterPartitionRequest) -> AlterPartitionResponse:
        reply: asyncio.Future[AlterPartitionResponse] = asyncio.get_running_loop().create_future()
        self.requests.append(request)
        self.replies.append(reply)
        return await reply

    def answer(self, response: AlterPartitionResponse | None = None) -> None:
        index = next(i for i, reply in enumerate(self.replies) if not reply.done())
        reply = response if response is not None else accepted(self.requests[index])
        self.replies[index].set_result(reply)

    def fail(self, error: Exception) -> None:
        next(r for r in self.replies if not r.done()).set_exception(error)


@dataclass
class Answers:
    got: dict[TopicPartition, list[IsrProposalResult]] = field(default_factory=dict)

    def callback(self, tp: TopicPartition) -> Callable[[IsrProposalResult], None]:
        return lambda result: self.got.setdefault(tp, []).append(result)


@dataclass
class Setup:
    clock: ManualClock
    controller: Controller
    manager: AlterPartitionManager
    answers: Answers


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    clock = ManualClock()
    controller = Controller()
    manager = AlterPartitionManager(
        0, controller.send, clock, broker_epoch=lambda: 42, backoff=BACKOFF
    )
    await manager.start()
    yield Setup(clock, controller, manager, Answers())
    await manager.stop()


async def run_loop(turns: int = 20) -> None:
    for _ in range(turns):
        await asyncio.sleep(0)


def submit(s: Setup, p: IsrProposal) -> None:
    s.manager.submit(p, s.answers.callback(p.topic_partition))


async def test_proposals_waiting_together_go_in_one_request(setup: Setup) -> None:
    for tp in (TP0, TP1, TP2):
        submit(setup, proposal(tp))
    await run_loop()
    [request] = setup.controller.requests
    assert (request.broker_id, request.broker_epoch) == (0, 42)
    sent = {
        (t.topic_name, p.partition_index, tuple(p.new_isr))
        for t in request.topics
        for p in t.partitions
    }
    assert sent == {("orders", 0, (0, 1)), ("orders", 1, (0, 1)), ("audit", 0, (0, 1))}
    assert setup.answers.got == {}
    setup.controller.answer()
    await run_loop()
    for tp in (TP0, TP1, TP2):
        [result] = setup.answers.got[tp]
        assert (result.error, result.isr, result.partition_epoch) == (ErrorCode.NONE, (0, 1), 8)


async def test_one_request_in_flight_and_one_proposal_per_partition(setup: Setup) -> None:
    submit(setup, proposal(TP0))
    await run_loop()
    assert setup.manager.in_flight == 1
    # Same partition while in flight: refused now; another partition: queued for the next one.
    submit(setup, proposal(TP0, (0, 1, 2)))
    assert [r.error for r in setup.answers.got[TP0]] == [ErrorCode.OPERATION_NOT_ATTEMPTED]
    submit(setup, proposal(TP1))
    await run_loop()
    assert len(setup.controller.requests) == 1
    setup.controller.answer()
    await run_loop()
    assert len(setup.controller.requests) == 2
    assert [t.partitions[0].partition_index for t in setup.controller.requests[1].topics] == [1]
    setup.controller.answer()
    await run_loop()
    assert [r.error for r in setup.answers.got[TP0]] == [
        ErrorCode.OPERATION_NOT_ATTEMPTED,
        ErrorCode.NONE,
    ]
    assert [r.error for r in setup.answers.got[TP1]] == [ErrorCode.NONE]


async def test_a_queued_proposal_is_replaced(setup: Setup) -> None:
    submit(setup, proposal(TP0, (0, 1)))
    submit(setup, proposal(TP0, (0, 2)))  # before the sender ran
    assert [r.error for r in setup.answers.got[TP0]] == [ErrorCode.OPERATION_NOT_ATTEMPTED]
    await run_loop()
    [request] = setup.controller.requests
    assert request.topics[0].partitions[0].new_isr == [0, 2]


async def test_transport_failures_retry_with_backoff_on_the_clock(setup: Setup) -> None:
    submit(setup, proposal(TP0))
    await run_loop()
    setup.controller.fail(ConnectionError("controller down"))
    await run_loop()
    assert len(setup.controller.requests) == 1
    assert setup.answers.got == {}  # nobody is answered for a transport failure
    setup.clock.advance(99)
    await run_loop()
    assert len(setup.controller.requests) == 1
    setup.clock.advance(1)
    await run_loop()
    assert len(setup.controller.requests) == 2
    # The second failure waits twice as long.
    setup.controller.answer(AlterPartitionResponse.error_response(ErrorCode.NOT_CONTROLLER))
    await run_loop()
    setup.clock.advance(199)
    await run_loop()
    assert len(setup.controller.requests) == 2
    setup.clock.advance(1)
    await run_loop()
    assert len(setup.controller.requests) == 3
    setup.controller.answer()
    await run_loop()
    [result] = setup.answers.got[TP0]
    assert result.error is ErrorCode.NONE


async def test_partition_errors_are_handed_on_and_pace_the_next_request(setup: Setup) -> None:
    submit(setup, proposal(TP0))
    submit(setup, proposal(TP1))
    await run_loop()
    assert len(setup.controller.requests) == 1
    setup.controller.answer(
        AlterPartitionResponse(
            topics=[
                AlterPartitionTopicResult(
                    topic_name="orders",
                    partitions=[
                        AlterPartitionPartitionResult(
                            partition_index=0, error_code=ErrorCode.FENCED_LEADER_EPOCH
                        )
                    ],
                )
            ]
        )
    )
    await run_loop()
    assert [r.error for r in setup.answers.got[TP0]] == [ErrorCode.FENCED_LEADER_EPOCH]
    # No answer for partition 1 in the response.
    assert [r.error for r in setup.answers.got[TP1]] == [ErrorCode.UNKNOWN_SERVER_ERROR]
    submit(setup, proposal(TP1))
    await run_loop()
    assert len(setup.controller.requests) == 1
    setup.clock.advance(100)
    await run_loop()
    assert len(setup.controller.requests) == 2


async def test_stop_answers_what_is_left_once(setup: Setup) -> None:
    submit(setup, proposal(TP0))
    await run_loop()
    submit(setup, proposal(TP1))
    await setup.manager.stop()
    assert [r.error for r in setup.answers.got[TP0]] == [ErrorCode.OPERATION_NOT_ATTEMPTED]
    assert [r.error for r in setup.answers.got[TP1]] == [ErrorCode.OPERATION_NOT_ATTEMPTED]
    with pytest.raises(AlterPartitionClosedError):
        submit(setup, proposal(TP2))


async def test_a_partition_actor_expands_its_isr_through_the_manager(tmp_path: Path) -> None:
    clock = ManualClock()
    controller = Controller()
    manager = AlterPartitionManager(0, controller.send, clock, backoff=BACKOFF)
    await manager.start()
    partition_log = Log.open(tmp_path / TP0.dir_name, LogConfig(), clock)
    actor = PartitionActor(TP0, 0, partition_log, alter_partition_sink=manager, clock=clock)
    await actor.start()
    try:
        await actor.ask(BecomeLeader(PartitionState(0, 1, (0,), 0, (0, 1))))
        appended = await actor.ask(AppendAsLeader(build_batch([(b"k", b"v")]), 1))
        assert appended.error is ErrorCode.NONE
        # The follower fetches from offset 1: caught up, so the leader proposes (0, 1).
        await actor.ask(ReadRecords(1, 1 << 20, current_leader_epoch=1, replica_id=1))
        await run_loop()
        [request] = controller.requests
        [data] = request.topics[0].partitions
        assert (data.leader_epoch, data.partition_epoch, data.new_isr) == (1, 0, [0, 1])
        assert actor.view.maximal_isr == (0, 1)
        assert actor.view.isr == (0,)
        controller.answer(accepted(request, partition_epoch=1))
        await run_loop()
        committed = actor.view
        assert (committed.isr, committed.partition_epoch) == ((0, 1), 1)
        assert actor.pending_isr_change is None
    finally:
        await actor.stop()
        await manager.stop()
        partition_log.close()
