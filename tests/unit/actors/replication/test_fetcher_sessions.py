"""The replica fetcher in a fetch session (actors/replication/fetcher.py with
actors/replication/fetch_session_handler.py): a scripted leader (a fake client answering each
Fetch in turn) and fake follower replicas whose appends the test decides, on a ManualClock. What
is checked is what each request asks: an answer the follower could not apply makes the next
fetch a full one, and a lost request does too."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

from actors.replication.config import ReplicaFetcherConfig
from actors.replication.fetch_state import BrokerEndpoint, InitialFetchState
from actors.replication.fetcher import ReplicaFetcher
from actors.replication.partition import PartitionActor
from actors.replication.partition_messages import (
    AppendAsFollower,
    FollowerAppendResult,
    TruncateTo,
)
from actors.replication.truncation import UNDEFINED_EPOCH
from client.errors import ClientError
from runtime.clock import ManualClock
from runtime.log.offsets import LogAppendInfo
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    Request,
    Response,
)
from wire.topic import TopicPartition

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)
SESSION = 99
CONFIG = ReplicaFetcherConfig(replica_fetch_backoff_ms=1_000)


@dataclass
class Offset:
    message_offset: int


@dataclass
class View:
    latest_epoch: int = UNDEFINED_EPOCH
    log_end_offset: Offset = field(default_factory=lambda: Offset(0))
    log_start_offset: int = 0


class Replica:
    """A follower replica: truncation always succeeds; each append answers the next of
    `failures` while there are any (NONE: taken), then is taken."""

    def __init__(self) -> None:
        self.view = View()
        self.failures: list[ErrorCode] = []
        self.appended: list[int] = []  # the high watermarks it was given

    async def ask(self, message: object) -> Any:
        if isinstance(message, TruncateTo):
            return ErrorCode.NONE
        assert isinstance(message, AppendAsFollower), message
        error = self.failures.pop(0) if self.failures else ErrorCode.NONE
        if error is not ErrorCode.NONE:
            return FollowerAppendResult(error)
        self.appended.append(message.leader_high_watermark)
        return FollowerAppendResult(ErrorCode.NONE, LogAppendInfo(0, -1, -1, -1, 0, 0, 0))


class Leader:
    """Answers each Fetch with the next scripted answer (an exception is raised instead); with
    none left, it waits until the test stops the fetcher."""

    def __init__(self, answers: list[FetchResponse | Exception]) -> None:
        self.answers = answers
        self.requests: list[FetchRequest] = []
        self._never = asyncio.Event()

    async def send(
        self, target: Address, request: Request, *, timeout_ms: float | None = None
    ) -> Response:
        assert isinstance(request, FetchRequest), request
        self.requests.append(request)
        if not self.answers:
            await self._never.wait()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def close(self) -> None:
        pass


def answer(session_id: int, *tps: TopicPartition) -> FetchResponse:
    parts = [FetchResponsePartition(partition_index=tp.partition, high_watermark=3) for tp in tps]
    topics = [FetchableTopicResponse(topic="t", partitions=parts)] if parts else []
    return FetchResponse(session_id=session_id, responses=topics)


def listed(request: FetchRequest) -> list[int]:
    return [p.partition for t in request.topics for p in t.partitions]


async def run(leader: Leader, replicas: dict[TopicPartition, Replica]) -> ReplicaFetcher:
    fetcher = ReplicaFetcher(
        local_broker_id=2,
        source=BrokerEndpoint(1, "leader", 9092),
        fetcher_id=0,
        client=leader,
        partitions=lambda tp: cast(PartitionActor, replicas.get(tp)),
        clock=ManualClock(),
        config=CONFIG,
    )
    fetcher.add_partitions({tp: InitialFetchState(0, 5) for tp in replicas})
    fetcher.start()
    for _ in range(200):
        await asyncio.sleep(0)
    await fetcher.stop()
    return fetcher


async def test_an_answer_the_follower_could_not_apply_makes_the_next_fetch_full() -> None:
    replicas = {A: Replica(), B: Replica()}
    replicas[A].failures = [ErrorCode.NONE, ErrorCode.CORRUPT_MESSAGE]  # round 2's is not taken
    leader = Leader([answer(SESSION, A, B), answer(SESSION, A)])
    await run(leader, replicas)
    first, second, third = leader.requests
    assert (first.session_id, first.session_epoch, listed(first)) == (0, 0, [0, 1])
    assert (second.session_id, second.session_epoch, listed(second)) == (SESSION, 1, [])
    # A backs off; B alone is fetched, in full (the old session named, to be closed).
    assert (third.session_id, third.session_epoch, listed(third)) == (SESSION, 0, [1])
    assert replicas[B].appended == [3]


async def test_answers_applied_keep_the_session_incremental() -> None:
    replicas = {A: Replica(), B: Replica()}
    leader = Leader([answer(SESSION, A, B), answer(SESSION, A), answer(SESSION)])
    await run(leader, replicas)
    epochs = [(r.session_id, r.session_epoch) for r in leader.requests]
    assert epochs == [(0, 0), (SESSION, 1), (SESSION, 2), (SESSION, 3)]
    assert replicas[A].appended == [3, 3]


async def test_a_session_error_is_fetched_again_at_once_in_full() -> None:
    replicas = {A: Replica()}
    lost = FetchResponse(error_code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    leader = Leader([answer(SESSION, A), lost])
    await run(leader, replicas)
    epochs = [(r.session_id, r.session_epoch, listed(r)) for r in leader.requests]
    # No back-off: the third request follows at once, sessionless id and all.
    assert epochs == [(0, 0, [0]), (SESSION, 1, []), (0, 0, [0])]


async def test_a_lost_request_falls_back_to_a_full_fetch_after_the_back_off() -> None:
    replicas = {A: Replica()}
    leader = Leader([answer(SESSION, A), ClientError("connection lost")])
    fetcher = await run(leader, replicas)
    assert [(r.session_id, r.session_epoch) for r in leader.requests] == [(0, 0), (SESSION, 1)]
    assert fetcher.session.epoch == 0  # the next fetch, once A's back-off ends, is full
