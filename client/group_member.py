"""Membership of a consumer group, Kafka's classic protocol with eager rebalancing: the member id
and generation, the assignment, heartbeats, and the group's committed offsets.

    member = GroupMember(client, GroupConfig("my-group"), topics=["orders"])
    await member.ensure_active_group()      # FindCoordinator, JoinGroup, SyncGroup
    member.assignment                       # frozenset of TopicPartition, this generation's
    await member.committed(member.assignment)   # OffsetFetch: {tp: next offset or None}
    await member.commit({tp: 42})           # OffsetCommit under the member id and generation
    await member.leave()                    # LeaveGroup; the member is done

client/group_consumer.py drives it for a `Consumer` (subscribe, poll, auto commit); the way to
the coordinator (lookup, retries, what its error codes mean) is client/coordinator_link.py's.

States (`MemberState`, transitions in `_TRANSITIONS`; an illegal one raises):

    UNJOINED --JoinGroup sent--> JOINING --joined--> SYNCING --SyncGroup answered--> STABLE
    JOINING | SYNCING --an error a new join may cure--> UNJOINED
    STABLE --told to rejoin (rejoin_reason set), at the next ensure_active_group--> UNJOINED
    any --leave()--> LEFT (final)

Joining. A new member sends JoinGroup with member id "" and learns its id from the
MEMBER_ID_REQUIRED answer (KIP-394), then joins again with it at once. The protocol type is
"consumer" with one protocol, "range", whose metadata is the subscription blob of Kafka's
ConsumerProtocol (`wire.kafka.consumer_protocol`), so Kafka consumers can share the group. The
leader (the join answer names it, and gives it every member's subscription) reads the partition
counts from metadata and assigns with client/range_assignor.py; every member then sends
SyncGroup (the leader's carries the assignments) and reads its own from the answer. JoinGroup
and SyncGroup wait at the coordinator for the other members, so each may take
max.poll.interval.ms (the rebalance timeout the member announces) plus request.timeout.ms. A
join is retried (after a backoff, or at once when it got a new member id or lost its
generation) until it succeeds or meets an error no retry cures, raised as `KafkaError`;
`last_error` says what the last attempt met, for a caller that gives up waiting.

Heartbeats. In STABLE a task sends Heartbeat every heartbeat.interval.ms (after a backoff when
one failed). REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID end it and set
`rejoin_reason` (ILLEGAL_GENERATION also drops the generation, UNKNOWN_MEMBER_ID the member id
too); the owner then commits what it can and calls `ensure_active_group()` again. Only a STABLE
member heartbeats: a JoinGroup or SyncGroup waiting at the coordinator keeps it alive there.

Commits (`commit`) and lookups (`committed`) retry the coordinator's transient errors within
their timeout (default.api.timeout.ms). A commit the group no longer takes (REBALANCE_IN_PROGRESS
once the rebalance is completing, ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) raises
`CommitFailedError`, as Kafka's CommitFailedException; a commit while the group only prepares a
rebalance is taken, which is what lets an eager member commit before it rejoins.

Not done, said plainly: cooperative (incremental) rebalancing, static membership
(group.instance.id), and Kafka's client-side max.poll.interval.ms check (a member that stops
polling leaves the group); the member announces max.poll.interval.ms only as its rebalance
timeout.

Time is the client's injected clock (`client.clock`). Owned by one caller on one event loop: the
caller's calls and the heartbeat task run between each other's awaits; the heartbeat task only
sets `rejoin_reason` and drops ids, the state moves in the caller's calls. No locks.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from client.client import Client
from client.connection import consume_outcome
from client.coordinator_link import CoordinatorLink, Drop, GroupRetry, check_code
from client.errors import ClientClosedError, ClientError
from client.range_assignor import RANGE, range_assign
from wire.errors import ErrorCode, KafkaError
from wire.kafka.consumer_protocol import (
    read_assignment,
    read_subscription,
    write_assignment,
    write_subscription,
)
from wire.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from wire.topic import TopicPartition

_log = logging.getLogger(__name__)

PROTOCOL_TYPE: Final = "consumer"


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """A member's settings, Kafka's consumer properties with Kafka's defaults: group.id,
    session.timeout.ms, heartbeat.interval.ms, max.poll.interval.ms, enable.auto.commit,
    auto.commit.interval.ms, retry.backoff.ms, retry.backoff.max.ms, request.timeout.ms,
    default.api.timeout.ms."""

    group_id: str
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    request_timeout_ms: int = 30_000
    default_api_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        if not self.group_id:
            raise ValueError("group.id must not be empty")
        if self.heartbeat_interval_ms <= 0 or self.session_timeout_ms <= 0:
            raise ValueError("heartbeat.interval.ms and session.timeout.ms must be positive")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            # Kafka's rule: a member heartbeats several times per session.
            raise ValueError("heartbeat.interval.ms must be lower than session.timeout.ms")
        if min(self.max_poll_interval_ms, self.auto_commit_interval_ms) <= 0:
            raise ValueError("max.poll.interval.ms and auto.commit.interval.ms must be positive")
        if min(self.request_timeout_ms, self.default_api_timeout_ms) <= 0:
            raise ValueError("request.timeout.ms and default.api.timeout.ms must be positive")


class CommitFailedError(ClientError):
    """The group no longer takes this member's commits (it rebalanced, or the member was removed):
    the offsets were not stored, and the partitions may be another member's by now."""


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"  # JoinGroup sent (Kafka's PREPARING_REBALANCE)
    SYNCING = "syncing"  # SyncGroup sent (Kafka's COMPLETING_REBALANCE)
    STABLE = "stable"
    LEFT = "left"


_S = MemberState
_TRANSITIONS: Final[Mapping[MemberState, frozenset[MemberState]]] = {
    _S.UNJOINED: frozenset({_S.JOINING, _S.LEFT}),
    _S.JOINING: frozenset({_S.SYNCING, _S.UNJOINED, _S.LEFT}),
    _S.SYNCING: frozenset({_S.STABLE, _S.UNJOINED, _S.LEFT}),
    _S.STABLE: frozenset({_S.UNJOINED, _S.LEFT}),
    _S.LEFT: frozenset(),
}


class GroupMember:
    def __init__(
        self, client: Client, config: GroupConfig, topics: Sequence[str], *, seed: int = 0
    ) -> None:
        if not topics:
            raise ValueError("a group member subscribes to at least one topic")
        self._client = client
        self._clock = client.clock
        self.config = config
        self.topics = tuple(dict.fromkeys(topics))
        self.state = MemberState.UNJOINED
        self.member_id = ""
        self.generation_id = -1
        self.leader_id = ""
        self.assignment: frozenset[TopicPartition] = frozenset()
        # Why the member must join (again); None while it is in a stable generation.
        self.rejoin_reason: str | None = "not joined yet"
        self.last_error: BaseException | None = None
        self._link = CoordinatorLink(
            client,
            config.group_id,
            request_timeout_ms=config.request_timeout_ms,
            retry_backoff_ms=config.retry_backoff_ms,
            retry_backoff_max_ms=config.retry_backoff_max_ms,
            seed=seed,
        )
        self._heartbeat: asyncio.Task[None] | None = None

    @property
    def rejoin_needed(self) -> bool:
        if self.state is MemberState.LEFT:
            return False
        return self.state is not MemberState.STABLE or self.rejoin_reason is not None

    def _transition(self, target: MemberState) -> None:
        if target not in _TRANSITIONS[self.state]:
            raise AssertionError(f"group member: illegal transition {self.state} -> {target}")
        if self.state is MemberState.STABLE and self._heartbeat is not None:
            self._heartbeat.cancel()  # the generation's heartbeats end with it
            self._heartbeat = None
        self.state = target

    def _check_open(self) -> None:
        if self.state is MemberState.LEFT:
            raise ClientClosedError(f"the member has left group {self.config.group_id!r}")

    def _failed(self, retry: GroupRetry) -> None:
        """Note a failed attempt, and forget what its answer says the coordinator forgot."""
        self.last_error = retry.cause
        if retry.drop is Drop.MEMBER:
            self.member_id = ""
        if retry.drop is not Drop.NOTHING:
            self.generation_id = -1

    # -- joining ------------------------------------------------------------------------------

    async def ensure_active_group(self) -> bool:
        """Join the group if the member is not in a stable generation or was told to rejoin.

        True when it joined (a new generation and `assignment`), False when nothing was due.
        Retries until joined; raises `KafkaError` for a refusal no retry cures.
        """
        self._check_open()
        if not self.rejoin_needed:
            return False
        if self.state is not MemberState.UNJOINED:
            self._transition(MemberState.UNJOINED)
        self.assignment = frozenset()
        failures = 0
        while True:
            try:
                await self._join_and_sync()
            except GroupRetry as retry:
                self._failed(retry)
                if self.state is not MemberState.UNJOINED:
                    self._transition(MemberState.UNJOINED)
                if not retry.rejoin:  # a new id or generation to join with: at once
                    await self._clock.sleep(self._link.backoff_ms(failures) / 1000)
                    failures += 1
                continue
            except BaseException:
                if self.state in (MemberState.JOINING, MemberState.SYNCING):
                    self._transition(MemberState.UNJOINED)
                raise
            self.rejoin_reason = None
            self.last_error = None
            return True

    async def _join_and_sync(self) -> None:
        request = JoinGroupRequest(
            group_id=self.config.group_id,
            session_timeout_ms=self.config.session_timeout_ms,
            rebalance_timeout_ms=self.config.max_poll_interval_ms,
            member_id=self.member_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=[
                JoinGroupRequestProtocol(name=RANGE, metadata=write_subscription(self.topics))
            ],
            reason=self.rejoin_reason,
        )
        self._transition(MemberState.JOINING)
        wait_ms = self.config.max_poll_interval_ms + self.config.request_timeout_ms
        joined = await self._link.ask(request, JoinGroupResponse, timeout_ms=wait_ms)
        if joined.error is ErrorCode.MEMBER_ID_REQUIRED:
            # KIP-394's first step, not a failure: join again at once with the id it names (a
            # caller that gives up meanwhile must not report MEMBER_ID_REQUIRED as the reason).
            self.member_id = joined.member_id
            request = dataclasses.replace(request, member_id=joined.member_id)
            joined = await self._link.ask(request, JoinGroupResponse, timeout_ms=wait_ms)
        check_code(joined.error, f"JoinGroup of group {self.config.group_id!r}")
        self.member_id, self.generation_id = joined.member_id, joined.generation_id
        self.leader_id = joined.leader
        assignments: list[SyncGroupRequestAssignment] = []
        if joined.leader == joined.member_id:
            assignments = await self._assign(joined)
        self._transition(MemberState.SYNCING)
        synced = await self._link.ask(
            SyncGroupRequest(
                group_id=self.config.group_id,
                generation_id=self.generation_id,
                member_id=self.member_id,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=joined.protocol_name or RANGE,
                assignments=assignments,
            ),
            SyncGroupResponse,
            timeout_ms=wait_ms,
        )
        check_code(synced.error, f"SyncGroup of group {self.config.group_id!r}")
        owned = read_assignment(synced.assignment) if synced.assignment else {}
        if owned is None:
            raise KafkaError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"the leader's assignment for {self.member_id!r} is no consumer assignment",
            )
        self.assignment = frozenset(TopicPartition(t, p) for t, ps in owned.items() for p in ps)
        self._transition(MemberState.STABLE)
        self._heartbeat = asyncio.create_task(
            self._heartbeat_loop(self.generation_id),
            name=f"heartbeat {self.config.group_id}/{self.member_id}",
        )
        self._heartbeat.add_done_callback(consume_outcome)

    async def _assign(self, joined: JoinGroupResponse) -> list[SyncGroupRequestAssignment]:
        """The leader's part: a range assignment of every member's subscription."""
        subscriptions = {m.member_id: read_subscription(m.metadata) or () for m in joined.members}
        topics = sorted({t for subscribed in subscriptions.values() for t in subscribed})
        try:
            view = await self._client.cluster(topics)
        except (ClientError, KafkaError) as exc:
            if isinstance(exc, ClientClosedError):
                raise
            raise GroupRetry(exc) from exc
        plan = range_assign(subscriptions, {t: view.partition_count(t) or 0 for t in topics})
        _log.info(
            "group %s generation %d: the leader assigns %s",
            self.config.group_id,
            joined.generation_id,
            plan,
        )
        return [
            SyncGroupRequestAssignment(
                member_id=member, assignment=write_assignment(_by_topic(partitions))
            )
            for member, partitions in plan.items()
        ]

    # -- heartbeats ---------------------------------------------------------------------------

    async def _heartbeat_loop(self, generation_id: int) -> None:
        failures = 0
        delay_ms: float = self.config.heartbeat_interval_ms
        while True:
            await self._clock.sleep(delay_ms / 1000)
            if self.state is not MemberState.STABLE or self.generation_id != generation_id:
                return
            request = HeartbeatRequest(
                group_id=self.config.group_id, generation_id=generation_id, member_id=self.member_id
            )
            try:
                answer = await self._link.ask(
                    request, HeartbeatResponse, timeout_ms=self.config.request_timeout_ms
                )
                check_code(answer.error, f"Heartbeat in group {self.config.group_id!r}")
            except GroupRetry as retry:
                self._failed(retry)
                if retry.rejoin:
                    self.rejoin_reason = f"the heartbeat was answered {retry}"
                    return
                delay_ms = self._link.backoff_ms(failures)
                failures += 1
                continue
            except KafkaError as exc:  # no retry cures it: the join will raise it
                self.last_error = exc
                self.rejoin_reason = f"the heartbeat was answered {exc}"
                return
            failures = 0
            delay_ms = self.config.heartbeat_interval_ms

    # -- offsets ------------------------------------------------------------------------------

    async def commit(
        self, offsets: Mapping[TopicPartition, int], *, timeout_ms: float | None = None
    ) -> None:
        """Store `offsets` (per partition, the next offset to read) as the group's, under the
        member's id and generation; see the module docstring for the errors."""
        self._check_open()
        if not offsets:
            return
        if self.generation_id < 0 or not self.member_id:
            raise CommitFailedError(
                f"not in a generation of group {self.config.group_id!r} "
                f"({self.rejoin_reason or 'not joined'}): the offsets were not committed"
            )
        pending = dict(offsets)

        async def attempt() -> None:
            request = OffsetCommitRequest(
                group_id=self.config.group_id,
                generation_id_or_member_epoch=self.generation_id,
                member_id=self.member_id,
                topics=[
                    OffsetCommitRequestTopic(
                        name=topic,
                        partitions=[
                            OffsetCommitRequestPartition(partition_index=p, committed_offset=o)
                            for p, o in sorted(parts.items())
                        ],
                    )
                    for topic, parts in sorted(_offsets_by_topic(pending).items())
                ],
            )
            answer = await self._link.ask(
                request, OffsetCommitResponse, timeout_ms=self.config.request_timeout_ms
            )
            check_code(answer.error, f"OffsetCommit in group {self.config.group_id!r}")
            first: GroupRetry | None = None
            for topic in answer.topics:
                for part in topic.partitions:
                    tp = TopicPartition(topic.name, part.partition_index)
                    try:
                        code = ErrorCode.from_code(part.error_code)
                        self._link.check_part(code, f"the commit of {tp}")
                    except GroupRetry as retry:
                        first = first or retry
                        continue
                    pending.pop(tp, None)
            if first is not None:
                raise first

        try:
            await self._link.retrying(
                attempt,
                timeout_ms=self._api_timeout(timeout_ms),
                what="OffsetCommit",
                on_retry=self._failed,
            )
        except GroupRetry as retry:  # the group has moved on
            self.rejoin_reason = self.rejoin_reason or f"a commit was answered {retry}"
            raise CommitFailedError(
                f"group {self.config.group_id!r} did not take the commit: {retry}"
            ) from retry.cause

    async def committed(
        self, partitions: Iterable[TopicPartition], *, timeout_ms: float | None = None
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (OffsetFetch with require_stable): per partition the
        next offset to read, None where nothing is committed."""
        self._check_open()
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        request = OffsetFetchRequest(
            group_id=self.config.group_id,
            topics=[
                OffsetFetchRequestTopic(name=topic, partition_indexes=sorted(parts))
                for topic, parts in sorted(_by_topic(wanted).items())
            ],
            require_stable=True,
        )

        async def attempt() -> dict[TopicPartition, int | None]:
            answer = await self._link.ask(
                request, OffsetFetchResponse, timeout_ms=self.config.request_timeout_ms
            )
            check_code(answer.error, f"OffsetFetch in group {self.config.group_id!r}")
            found: dict[TopicPartition, int | None] = {}
            for topic in answer.topics:
                for part in topic.partitions:
                    tp = TopicPartition(topic.name, part.partition_index)
                    code = ErrorCode.from_code(part.error_code)
                    self._link.check_part(code, f"the committed offset of {tp}")
                    found[tp] = part.committed_offset if part.committed_offset >= 0 else None
            return {tp: found.get(tp) for tp in wanted}

        try:
            return await self._link.retrying(
                attempt,
                timeout_ms=self._api_timeout(timeout_ms),
                what="OffsetFetch",
                on_retry=lambda retry: None,  # an OffsetFetch changes nothing of the member
            )
        except GroupRetry as retry:  # OffsetFetch carries no generation; not expected
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, str(retry)) from retry.cause

    def _api_timeout(self, timeout_ms: float | None) -> float:
        return self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms

    # -- leaving ------------------------------------------------------------------------------

    async def leave(self, reason: str = "the consumer is closing") -> None:
        """LeaveGroup, one attempt within request.timeout.ms (a failure is only logged: the
        session timeout removes the member anyway); the member is LEFT for good."""
        if self.state is MemberState.LEFT:
            return
        self._transition(MemberState.LEFT)
        self._link.close()
        if not self.member_id:
            return
        request = LeaveGroupRequest(
            group_id=self.config.group_id,
            members=[MemberIdentity(member_id=self.member_id, reason=reason)],
        )
        if not await self._link.send_once(request, timeout_ms=self.config.request_timeout_ms):
            _log.info("LeaveGroup of %s was not answered", self.config.group_id)


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for tp in partitions:
        grouped.setdefault(tp.topic, []).append(tp.partition)
    return grouped


def _offsets_by_topic(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[int, int]]:
    grouped: dict[str, dict[int, int]] = {}
    for tp, offset in offsets.items():
        grouped.setdefault(tp.topic, {})[tp.partition] = offset
    return grouped
