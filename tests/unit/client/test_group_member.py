"""`GroupMember` (client/group_member.py) against a scripted group coordinator, on a manual clock:
the join (MEMBER_ID_REQUIRED, then as leader a range assignment in SyncGroup), heartbeats every
heartbeat.interval.ms, rejoins on REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID,
commits under the generation (and CommitFailedError once the group moved on), OffsetFetch,
LeaveGroup, and the coordinator looked up again after NOT_COORDINATOR or a lost connection.

The scripted brokers are tests/unit/client/scripted_cluster.py's with the group APIs added: each
API answers from a queue the test fills (a function of the request), else a default; every
group request is recorded with the broker that got it.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final, TypeVar

import pytest

from client.client import Client
from client.config import ClientConfig
from client.errors import ClientClosedError
from client.group_member import CommitFailedError, GroupConfig, GroupMember, MemberState
from runtime.clock import ManualClock
from runtime.net.dialect import Handler, RequestContext
from tests.unit.client.scripted_cluster import ScriptedCluster, advance_until, settle
from wire.errors import ErrorCode, KafkaError
from wire.kafka.consumer_protocol import (
    read_assignment,
    read_subscription,
    write_assignment,
    write_subscription,
)
from wire.messages import (
    ApiKey,
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
    SyncGroupRequest,
    SyncGroupResponse,
)
from wire.messages.base import Response
from wire.topic import TopicPartition

SEED = 9001
GROUP: Final = "g"
TP0, TP1 = TopicPartition("t", 0), TopicPartition("t", 1)
CONFIG: Final = GroupConfig(
    GROUP,
    session_timeout_ms=6_000,
    heartbeat_interval_ms=1_000,
    max_poll_interval_ms=5_000,
    retry_backoff_ms=50,
    retry_backoff_max_ms=50,
    request_timeout_ms=2_000,
    default_api_timeout_ms=5_000,
)
GROUP_APIS: Final = (
    ApiKey.FIND_COORDINATOR,
    ApiKey.JOIN_GROUP,
    ApiKey.SYNC_GROUP,
    ApiKey.HEARTBEAT,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.LEAVE_GROUP,
)
Answer = Callable[[Any], Response]
T = TypeVar("T")


class GroupCluster(ScriptedCluster):
    """Scripted brokers that also serve the group APIs (from `answers`, else `default`)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock, brokers=2, seed=SEED)
        self.coordinator = 1  # the broker FindCoordinator names
        self.answers: dict[int, list[Answer]] = defaultdict(list)
        self.group_requests: list[tuple[int, Any]] = []  # (broker, request)
        for api in GROUP_APIS:
            self.overrides[api] = self._group_api

    def handlers(self, broker: int) -> dict[int, Handler]:
        return {**super().handlers(broker), **{a: self._dispatcher(broker, a) for a in GROUP_APIS}}

    async def _group_api(self, broker: int, request: Any, ctx: RequestContext) -> Response:
        self.group_requests.append((broker, request))
        queue = self.answers[request.API_KEY]
        return queue.pop(0)(request) if queue else self.default(request)

    def default(self, request: Any) -> Response:
        if isinstance(request, FindCoordinatorRequest):
            address = self.addresses[self.coordinator]
            found = Coordinator(
                key=GROUP, node_id=self.coordinator, host=address.host, port=address.port
            )
            return FindCoordinatorResponse(coordinators=[found])
        if isinstance(request, HeartbeatRequest):
            return HeartbeatResponse()
        if isinstance(request, OffsetCommitRequest):
            return committed_with(request, ErrorCode.NONE)
        if isinstance(request, OffsetFetchRequest):
            return OffsetFetchResponse()
        if isinstance(request, LeaveGroupRequest):
            return LeaveGroupResponse(
                members=[MemberResponse(member_id=m.member_id) for m in request.members]
            )
        raise AssertionError(f"no scripted answer for {type(request).__name__}")

    def sent(self, kind: type[T]) -> list[tuple[int, T]]:
        return [(b, r) for b, r in self.group_requests if isinstance(r, kind)]


def committed_with(request: OffsetCommitRequest, code: ErrorCode) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


def joined(generation: int, member: str, *, others: tuple[str, ...] = ()) -> Answer:
    """A JoinGroup answer making `member` the leader of `generation`, with `others` in it."""
    subscription = write_subscription(["t"])
    members = [
        JoinGroupResponseMember(member_id=m, metadata=subscription) for m in (member, *others)
    ]
    return lambda request: JoinGroupResponse(
        generation_id=generation,
        protocol_type="consumer",
        protocol_name="range",
        leader=member,
        member_id=member,
        members=members,
    )


def synced(*partitions: int) -> Answer:
    return lambda request: SyncGroupResponse(
        protocol_type="consumer",
        protocol_name="range",
        assignment=write_assignment({"t": list(partitions)}),
    )


def error(kind: type[Response], code: ErrorCode, **fields: Any) -> Answer:
    return lambda request: kind(error_code=code, **fields)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def cluster(clock: ManualClock) -> AsyncIterator[GroupCluster]:
    cluster = GroupCluster(clock)
    cluster.create_topic("t", [0, 0])
    await cluster.start()
    yield cluster
    await cluster.stop()


@pytest.fixture
async def client(cluster: GroupCluster) -> AsyncIterator[Client]:
    client = cluster.client(
        config=ClientConfig(request_timeout_ms=2_000, retry_backoff_ms=50, reconnect_backoff_ms=20),
        seed=SEED,
    )
    yield client
    await client.close()


async def drive(clock: ManualClock, work: Awaitable[T], *, max_ms: int = 20_000) -> T:
    task = asyncio.ensure_future(work)
    await advance_until(clock, task.done, step_ms=1, max_steps=max_ms)
    return task.result()


async def stable_member(
    cluster: GroupCluster, clock: ManualClock, client: Client, *partitions: int
) -> GroupMember:
    cluster.answers[ApiKey.JOIN_GROUP] += [joined(1, "m-1")]
    cluster.answers[ApiKey.SYNC_GROUP] += [synced(*partitions)]
    member = GroupMember(client, CONFIG, ["t"], seed=SEED)
    assert await drive(clock, member.ensure_active_group())
    assert member.state is MemberState.STABLE
    cluster.group_requests.clear()
    return member


# -- joining --------------------------------------------------------------------------------------


async def test_a_new_member_learns_its_id_then_leads_with_a_range_assignment(
    cluster: GroupCluster, clock: ManualClock, client: Client
) -> None:
    cluster.answers[ApiKey.JOIN_GROUP] += [
        error(JoinGroupResponse, ErrorCode.MEMBER_ID_REQUIRED, member_id="m-1"),
        joined(1, "m-1", others=("m-2",)),
    ]
    cluster.answers[ApiKey.SYNC_GROUP] += [synced(0)]
    member = GroupMember(client, CONFIG, ["t"], seed=SEED)
    assert await drive(clock, member.ensure_active_group())

    joins = [r for _, r in cluster.sent(JoinGroupRequest)]
    assert [j.member_id for j in joins] == ["", "m-1"]  # KIP-394: the id from the first answer
    for join in joins:
        assert (join.protocol_type, join.session_timeout_ms) == ("consumer", 6_000)
        assert join.rebalance_timeout_ms == 5_000  # max.poll.interval.ms
        [protocol] = join.protocols
        assert protocol.name == "range"
        assert read_subscription(protocol.metadata) == ("t",)
    [(broker, sync)] = cluster.sent(SyncGroupRequest)
    assert broker == cluster.coordinator
    assert (sync.generation_id, sync.member_id, sync.protocol_name) == (1, "m-1", "range")
    plan = {a.member_id: read_assignment(a.assignment) for a in sync.assignments}
    assert plan == {"m-1": {"t": (0,)}, "m-2": {"t": (1,)}}
    assert (member.member_id, member.generation_id, member.leader_id) == ("m-1", 1, "m-1")
    assert member.assignment == {TP0}
    assert member.state is MemberState.STABLE
    assert not await member.ensure_active_group()  # nothing due: no request
    assert len(cluster.sent(JoinGroupRequest)) == 2
    await member.leave()


async def test_the_id_from_member_id_required_is_used_at_once_and_is_no_error(
    cluster: GroupCluster, clock: ManualClock, client: Client
) -> None:
    """KIP-394's first answer is a step of the join, not a failure to back off from: the second
    JoinGroup goes out at once, and no caller giving up meanwhile hears MEMBER_ID_REQUIRED as
    the reason (`ketch consume --group` once did)."""
    sent_at: list[int] = []
    reported: list[BaseException | None] = []  # what a caller giving up then would be told

    def at(answer: Answer) -> Answer:
        def timed(request: Any) -> Response:
            sent_at.append(clock.monotonic_ms())
            reported.append(member.last_error)
            return answer(request)

        return timed

    cluster.answers[ApiKey.JOIN_GROUP] += [
        at(error(JoinGroupResponse, ErrorCode.MEMBER_ID_REQUIRED, member_id="m-1")),
        at(joined(1, "m-1")),
    ]
    cluster.answers[ApiKey.SYNC_GROUP] += [synced(0)]
    member = GroupMember(client, CONFIG, ["t"], seed=SEED)
    assert await drive(clock, member.ensure_active_group())
    assert len(sent_at) == 2
    assert sent_at[1] == sent_at[0]
    assert reported == [None, None]
    await member.leave()


async def test_a_refusal_no_retry_cures_is_raised(
    cluster: GroupCluster, clock: ManualClock, client: Client
) -> None:
    cluster.answers[ApiKey.JOIN_GROUP] += [
        error(JoinGroupResponse, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
        error(JoinGroupResponse, ErrorCode.INVALID_SESSION_TIMEOUT),
    ]
    member = GroupMember(client, CONFIG, ["t"], seed=SEED)
    with pytest.raises(KafkaError) as raised:
        await drive(clock, member.ensure_active_group())
    assert raised.value.code is ErrorCode.INVALID_SESSION_TIMEOUT
    assert member.state is MemberState.UNJOINED
    assert len(cluster.sent(JoinGroupRequest)) == 2  # the loading coordinator was asked again


# -- heartbeats and rebalances --------------------------------------------------------------------


async def test_heartbeats_every_interval_until_told_to_rejoin(
    cluster: GroupCluster, clock: ManualClock, client: Client
) -> None:
    member = await stable_member(cluster, clock, client, 0, 1)
    clock.advance(999)
    await settle()
    assert cluster.sent(HeartbeatRequest) == []
    for beats in (1, 2, 3):
        clock.advance(1)
        await settle()
        assert len(cluster.sent(HeartbeatRequest)) == beats
        clock.advance(999)
        await settle()
    [(broker, beat), *_] = cluster.sent(HeartbeatRequest)
    assert (broker, beat.generation_id, beat.member_id) == (cluster.coordinator, 1, "m-1")

    cluster.answers[ApiKey.HEARTBEAT] += [error(HeartbeatResponse, ErrorCode.REBALANCE_IN_PROGRESS)]
    clock.advance(1)
    await settle()
    assert member.rejoin_needed
    assert member.rejoin_reason is not None
    assert member.generation_id == 1  # the generation goes on until the join: commits count
    clock.advance(5_000)
    await settle()
    assert len(cluster.sent(HeartbeatRequest)) == 4  # no more heartbeats for that generation

    cluster.answers[ApiKey.JOIN_GROUP] += [joined(2, "m-1")]
    cluster.answers[ApiKey.SYNC_GROUP] += [synced(1)]
    assert await drive(clock, member.ensure_active_group())
    [(_, join)] = cluster.sent(JoinGroupRequest)
    assert join.member_id == "m-1"  # the same member joins the next generation
    assert member.generation_id == 2
    assert member.assignment == {TP1}
    await member.leave()


@pytest.mark.parametrize(
    ("code", "member_id"),
    [(ErrorCode.ILLEGAL_GENERATION, "m-1"), (ErrorCode.UNKNOWN_MEMBER_ID, "")],
)
async def test_a_member_the_group_moved_on_from_cannot_commit_and_rejoins(
    cluster: GroupCluster, clock: ManualClock, client: Client, code: ErrorCode, member_id: str
) -> None:
    member = await stable_member(cluster, clock, client, 0)
    cluster.answers[ApiKey.HEARTBEAT] += [error(HeartbeatResponse, code)]
    clock.advance(1_000)
    await settle()
    assert member.rejoin_needed
    assert (member.member_id, member.generation_id) == (member_id, -1)
    with pytest.raises(CommitFailedError):
        await drive(clock, member.commit({TP0: 4}))
    assert cluster.sent(OffsetCommitRequest) == []  # known to fail: not even sent

    cluster.answers[ApiKey.JOIN_GROUP] += [joined(3, "m-9")]
    cluster.answers[ApiKey.SYNC_GROUP] += [synced(0)]
    assert await drive(clock, member.ensure_active_group())
    [(_, join)] = cluster.sent(JoinGroupRequest)
    assert join.member_id == member_id
    await member.leave()


# -- offsets --------------------------------------------------------------------------------------


async def test_commits_carry_the_generation_and_a_moved_coordinator_is_found_again(
    cluster: GroupCluster, clock: ManualClock, client: Client
) -> None:
    member = await stable_member(cluster, clock, client, 0, 1)
    cluster.answers[ApiKey.OFFSET_COMMIT] += [
        lambda request: committed_with(request, ErrorCode.NOT_COORDINATOR)
    ]
    cluster.coordinator = 0  # where FindCoordinator points from now on
    await drive(clock, member.commit({TP0: 7, TP1: 3}))
    commits = cluster.sent(OffsetCommitRequest)
    assert [b for b, _ in commits] == [1, 0]
    for _, commit in commits:
        assert (commit.generation_id_or_member_epoch, commit.member_id) == (1, "m-1")
        offsets = {
            (t.name, p.partition_index): p.committed_offset
            for t in commit.topics
            for p in t.partitions
        }
        assert offsets == {("t", 0): 7, ("t", 1): 3}
    assert len(cluster.sent(FindCoordinatorRequest)) == 1

    # A commit the group no longer takes: CommitFailedError, and a rejoin is due.
    cluster.answers[ApiKey.OFFSET_COMMIT] += [
        lambda request: committed_with(request, ErrorCode.REBALANCE_IN_PROGRESS)
    ]
    with pytest.raises(CommitFailedError, match="did not take the commit"):
        await drive(clock, member.commit({TP0: 8}))
    assert member.rejoin_needed
    await member.leave()


async def test_committed_offsets_and_leaving(
    cluster: GroupCluster, clock: ManualClock, client: Client
) -> None:
    member = await stable_member(cluster, clock, client, 0, 1)
    cluster.answers[ApiKey.OFFSET_FETCH] += [
        error(OffsetFetchResponse, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
        lambda request: OffsetFetchResponse(
            topics=[
                OffsetFetchResponseTopic(
                    name="t",
                    partitions=[
                        OffsetFetchResponsePartition(partition_index=0, committed_offset=5),
                        OffsetFetchResponsePartition(partition_index=1, committed_offset=-1),
                    ],
                )
            ]
        ),
    ]
    assert await drive(clock, member.committed([TP1, TP0])) == {TP0: 5, TP1: None}
    fetches = [r for _, r in cluster.sent(OffsetFetchRequest)]
    assert len(fetches) == 2
    assert all(f.require_stable for f in fetches)

    await drive(clock, member.leave())
    [(broker, leave)] = cluster.sent(LeaveGroupRequest)
    assert broker == cluster.coordinator
    assert [m.member_id for m in leave.members] == ["m-1"]
    assert member.state is MemberState.LEFT
    clock.advance(5_000)
    await settle()
    assert cluster.sent(HeartbeatRequest) == []  # the heartbeats ended with the membership
    with pytest.raises(ClientClosedError):
        await member.ensure_active_group()


async def test_heartbeats_go_on_at_the_new_coordinator_after_a_lost_connection(
    cluster: GroupCluster, clock: ManualClock, client: Client
) -> None:
    member = await stable_member(cluster, clock, client, 0, 1)
    await cluster.servers[1].stop()  # the coordinator's broker goes away
    cluster.coordinator = 0
    await advance_until(
        clock,
        lambda: any(b == 0 for b, _ in cluster.sent(HeartbeatRequest)),
        step_ms=10,
        max_steps=1_000,
    )
    assert len(cluster.sent(FindCoordinatorRequest)) >= 1
    assert member.state is MemberState.STABLE
    assert not member.rejoin_needed
    await member.leave()
