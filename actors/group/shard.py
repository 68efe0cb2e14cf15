"""`GroupShard`: the group coordinator for one `__consumer_offsets` partition this broker leads.

One actor per led offsets partition (the router, issue 10's GroupCoordinator, starts one when
the broker becomes that partition's leader and stops it when it stops being leader). Why one per
partition: loading, unloading and every operation on the groups of one offsets partition form
one ordered stream with one owner, like a partition actor; different offsets partitions load and
serve independently (Kafka gets the same from per-group locks and a loading scheduler).

Lifecycle (seed 002, handleGroupImmigration / handleGroupEmigration):

* **Loading** (`on_start`): every record of the partition from the log start to the high
  watermark seen when loading began, later records overriding earlier ones and tombstones
  removing; groups with members come back Stable with fresh session timers, the others Empty.
  While `loading` is True the router answers COORDINATOR_LOAD_IN_PROGRESS without asking.
* **Serving**: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
  DescribeGroups and ListGroups (the `@handles` methods). A request that must wait (a join until
  the rebalance completes, a sync until the leader's assignment is stored, a commit until its
  records are replicated) gets back a future, which the handler completes later from another
  message: the mailbox never blocks on a member or on replication.
* **Deleted partitions** (`RemoveOffsets`): the committed offsets of partitions the cluster
  deleted are dropped with tombstones, and a group left Empty without offsets is forgotten.
* **Unloading** (`stop()` -> `on_stop`): every waiting member is answered NOT_COORDINATOR, every
  group goes Dead, and the state is dropped; the new leader loads it from the log.

Time: session and rebalance deadlines are alarms on the injected clock whose callbacks only
`try_tell` the actor a message, so every state change happens in a handler. Writes (group
metadata after the leader's SyncGroup, offset commits, expiry tombstones) go through the
injected `OffsetsLog.append` with acks=all; their outcome comes back as a message too.

Simplifications, said plainly: static membership (group.instance.id) is not implemented (a
join that names one is refused with UNSUPPORTED_VERSION), nor are transactional
offset commits; pending members (v4+ joins answered MEMBER_ID_REQUIRED) are forgotten after
their session timeout, as in Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar

from actors.group.config import GroupCoordinatorConfig
from actors.group.metadata import Group, GroupState, Member, states_named
from actors.group.metadata import Protocol as GroupProtocol
from runtime.actor import Actor, Ask, MailboxError, handles
from runtime.clock import NS_PER_MS, Alarm, Clock
from wire.errors import ErrorCode
from wire.group_records import (
    GroupKey,
    GroupValue,
    Key,
    OffsetKey,
    OffsetValue,
    Value,
    build_group_batch,
    iter_group_records,
)
from wire.messages import (
    DescribedGroup,
    DescribedGroupMember,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
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

log = logging.getLogger(__name__)

T = TypeVar("T")

OFFSET_METADATA_MAX_BYTES: Final = 4096  # Kafka's offset.metadata.max.bytes default
CONSUMER_GENERATION_NONE: Final = -1


@dataclass(frozen=True, slots=True)
class LogChunk:
    """What a read of the offsets partition returns: stored batches from an offset, the next
    offset to read, and the partition's high watermark and log start."""

    records: bytes
    next_offset: int
    high_watermark: int
    log_start_offset: int


class OffsetsLog(Protocol):
    """The offsets partitions as the coordinator uses them (the node implements it on the
    broker's request path)."""

    async def append(self, partition: int, records: bytes) -> ErrorCode:
        """Append as leader with acks=all; NONE once every in-sync replica has the records."""
        ...

    async def read(self, partition: int, offset: int, max_bytes: int) -> LogChunk | ErrorCode:
        """Committed records (below the high watermark) from `offset`, or from the log start
        when that is later."""
        ...

    async def wait_committed(self, partition: int) -> None:
        """Until the high watermark of a new leader covers its whole log as of its election
        (everything the previous leader acknowledged): a follower learns the HW one fetch
        late, so loading up to a fresh leader's HW at once could miss the last commits."""
        ...


# -- messages --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Join(Ask["asyncio.Future[JoinGroupResponse]"]):
    request: JoinGroupRequest
    client_id: str
    client_host: str
    # Kafka clients from JoinGroup v4 on take a member id from a MEMBER_ID_REQUIRED answer and
    # rejoin with it; older ones are given theirs in the join's own answer.
    require_known_member_id: bool = True


@dataclass(frozen=True, slots=True)
class Sync(Ask["asyncio.Future[SyncGroupResponse]"]):
    request: SyncGroupRequest


@dataclass(frozen=True, slots=True)
class Beat(Ask[HeartbeatResponse]):
    request: HeartbeatRequest


@dataclass(frozen=True, slots=True)
class Leave(Ask[LeaveGroupResponse]):
    request: LeaveGroupRequest


@dataclass(frozen=True, slots=True)
class Commit(Ask["asyncio.Future[OffsetCommitResponse]"]):
    request: OffsetCommitRequest


@dataclass(frozen=True, slots=True)
class FetchOffsets(Ask[OffsetFetchResponse]):
    request: OffsetFetchRequest


@dataclass(frozen=True, slots=True)
class Describe(Ask[list[DescribedGroup]]):
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ListAll(Ask[list[ListedGroup]]):
    states: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RemoveOffsets:
    """Partitions deleted from the cluster (an UpdateMetadata named them): every group's
    committed offsets of them go, with tombstones (Kafka's onPartitionsDeleted)."""

    partitions: frozenset[tuple[str, int]]


@dataclass(frozen=True, slots=True)
class _JoinDeadline:
    group_id: str
    token: int


@dataclass(frozen=True, slots=True)
class _SessionExpired:
    group_id: str
    member_id: str
    token: int


@dataclass(frozen=True, slots=True)
class _GroupStored:
    group_id: str
    generation: int
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class _OffsetsStored:
    group_id: str
    offsets: tuple[tuple[tuple[str, int], OffsetValue], ...]
    error: ErrorCode
    answer: asyncio.Future[OffsetCommitResponse]
    request: OffsetCommitRequest


@dataclass(frozen=True, slots=True)
class _ExpireOffsets:
    pass


# -- per-group bookkeeping beside the model --------------------------------------------------------


@dataclass(slots=True)
class _Waiting:
    """A group's waiting members and alarms (not part of the stored state)."""

    joins: dict[str, asyncio.Future[JoinGroupResponse]] = field(default_factory=dict)
    syncs: dict[str, asyncio.Future[SyncGroupResponse]] = field(default_factory=dict)
    sessions: dict[str, tuple[int, Alarm]] = field(default_factory=dict)
    pending_members: dict[str, tuple[int, Alarm]] = field(default_factory=dict)
    join_alarm: Alarm | None = None
    join_token: int = 0
    initial_delay_until_ms: int | None = None  # while the first rebalance waits for members
    initial_delay_limit_ms: int = 0


class GroupShard(Actor):
    def __init__(
        self,
        partition: int,
        log_: OffsetsLog,
        config: GroupCoordinatorConfig,
        *,
        clock: Clock,
        seed: int = 0,
    ) -> None:
        super().__init__(f"group-shard-{partition}", clock=clock)
        self.partition = partition
        self._log = log_
        self._config = config
        self._rng = random.Random(seed)
        self.loading = True
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[tuple[str, int], OffsetValue]] = {}
        self._waiting: dict[str, _Waiting] = {}
        self._tokens = 0
        self._writes: set[asyncio.Task[None]] = set()

    # -- time ------------------------------------------------------------------------------

    def _now_ms(self) -> int:
        """Monotonic ms, for deadlines. Group state times are wall-clock ms, as Kafka stores
        them in the group's record."""
        return self.clock.monotonic_ns() // NS_PER_MS

    def _alarm(self, after_ms: int, message: object) -> Alarm:
        def fire() -> None:
            # Stopped (unloaded: the state is gone) or overloaded (it times out again later).
            with contextlib.suppress(MailboxError):
                self.try_tell(message)

        return self.clock.call_at_ns(self.clock.monotonic_ns() + after_ms * NS_PER_MS, fire)

    def _token(self) -> int:
        self._tokens += 1
        return self._tokens

    def _waits(self, group_id: str) -> _Waiting:
        return self._waiting.setdefault(group_id, _Waiting())

    # -- loading and unloading -------------------------------------------------------------

    async def on_start(self) -> None:
        try:
            await self._load()
        finally:
            self.loading = False
        self.every(
            self._config.offsets_retention_check_interval_ms,
            lambda: self.try_tell(_ExpireOffsets()),
        )

    async def _load(self) -> None:
        await self._log.wait_committed(self.partition)
        group_values: dict[str, GroupValue | None] = {}
        offset = 0  # the log answers from its start when that is later
        end: int | None = None  # the high watermark when loading began
        while True:
            chunk = await self._log.read(
                self.partition, offset, self._config.offsets_load_buffer_size
            )
            if isinstance(chunk, ErrorCode):
                log.warning("%s: loading stopped at %d: %s", self.name, offset, chunk.name)
                break
            if end is None:
                end = chunk.high_watermark
            for record_offset, key, value in iter_group_records(chunk.records):
                if record_offset >= end:
                    break
                self._apply_loaded(key, value, group_values)
            if chunk.next_offset <= offset or chunk.next_offset >= end:
                break
            offset = chunk.next_offset
        for group_id, value in group_values.items():
            if value is not None:
                group = Group.from_record(group_id, value)
                self.groups[group_id] = group
                for member_id in group.members:
                    self._arm_session(group, member_id)
        for group_id in self.offsets:
            self.groups.setdefault(group_id, Group(group_id))
        log.info(
            "%s: loaded %d groups, offsets of %d", self.name, len(self.groups), len(self.offsets)
        )

    def _apply_loaded(
        self, key: Key, value: Value | None, group_values: dict[str, GroupValue | None]
    ) -> None:
        if isinstance(key, OffsetKey):
            offsets = self.offsets.setdefault(key.group, {})
            if value is None:
                offsets.pop((key.topic, key.partition), None)
                if not offsets:
                    del self.offsets[key.group]
            else:
                assert isinstance(value, OffsetValue)
                offsets[(key.topic, key.partition)] = value
        else:
            assert value is None or isinstance(value, GroupValue)
            group_values[key.group] = value

    async def on_stop(self) -> None:
        for group_id, waits in self._waiting.items():
            for member_id, join in waits.joins.items():
                _settle(join, _join_error(ErrorCode.NOT_COORDINATOR, member_id))
            for sync in waits.syncs.values():
                _settle(sync, SyncGroupResponse(error_code=ErrorCode.NOT_COORDINATOR))
            self._cancel_alarms(waits)
            group = self.groups.get(group_id)
            if group is not None:
                group.transition(GroupState.DEAD, self.clock.wall_ms())
        for task in list(self._writes):
            task.cancel()
        await asyncio.gather(*self._writes, return_exceptions=True)
        self._waiting.clear()
        self.groups.clear()
        self.offsets.clear()

    @staticmethod
    def _cancel_alarms(waits: _Waiting) -> None:
        for _, alarm in [*waits.sessions.values(), *waits.pending_members.values()]:
            alarm.cancel()
        if waits.join_alarm is not None:
            waits.join_alarm.cancel()

    # -- JoinGroup -------------------------------------------------------------------------

    @handles(Join)
    def _join(self, message: Join) -> asyncio.Future[JoinGroupResponse]:
        request = message.request
        answer: asyncio.Future[JoinGroupResponse] = asyncio.get_running_loop().create_future()
        error = self._join_refusal(request)
        if error is not None:
            answer.set_result(_join_error(error, request.member_id))
            return answer
        group = self.groups.get(request.group_id)
        if group is None:
            group = self.groups[request.group_id] = Group(request.group_id)
        waits = self._waits(group.group_id)
        protocols = tuple(GroupProtocol(p.name, p.metadata) for p in request.protocols)
        if group.is_in(GroupState.DEAD):
            answer.set_result(_join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, request.member_id))
        elif request.member_id == "" or request.member_id in waits.pending_members:
            self._join_new(group, message, protocols, answer)
        elif request.member_id not in group.members:
            answer.set_result(_join_error(ErrorCode.UNKNOWN_MEMBER_ID, request.member_id))
        else:
            self._join_known(group, message, protocols, answer)
        return answer

    def _join_refusal(self, request: JoinGroupRequest) -> ErrorCode | None:
        config = self._config
        if not request.group_id:
            return ErrorCode.INVALID_GROUP_ID
        if request.group_instance_id is not None:
            return ErrorCode.UNSUPPORTED_VERSION  # static membership is not implemented
        if not (
            config.group_min_session_timeout_ms
            <= request.session_timeout_ms
            <= config.group_max_session_timeout_ms
        ):
            return ErrorCode.INVALID_SESSION_TIMEOUT
        return None

    def _join_new(
        self,
        group: Group,
        message: Join,
        protocols: tuple[GroupProtocol, ...],
        answer: asyncio.Future[JoinGroupResponse],
    ) -> None:
        request = message.request
        waits = self._waits(group.group_id)
        if not group.supports(request.protocol_type, protocols):
            answer.set_result(_join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, ""))
            return
        if len(group.members) >= self._config.group_max_size:
            answer.set_result(_join_error(ErrorCode.GROUP_MAX_SIZE_REACHED, request.member_id))
            return
        member_id = request.member_id
        if member_id == "":
            member_id = f"{message.client_id or 'member'}-{self._rng.getrandbits(64):016x}"
            if message.require_known_member_id:
                token = self._token()
                alarm = self._alarm(
                    request.session_timeout_ms,
                    _SessionExpired(group.group_id, member_id, token),
                )
                waits.pending_members[member_id] = (token, alarm)
                answer.set_result(_join_error(ErrorCode.MEMBER_ID_REQUIRED, member_id))
                return
        else:
            _, alarm = waits.pending_members.pop(member_id)
            alarm.cancel()
        rebalance_ms = request.rebalance_timeout_ms
        group.add(
            Member(
                member_id=member_id,
                client_id=message.client_id,
                client_host=message.client_host,
                session_timeout_ms=request.session_timeout_ms,
                rebalance_timeout_ms=(
                    request.session_timeout_ms if rebalance_ms < 0 else rebalance_ms
                ),
                protocol_type=request.protocol_type,
                protocols=protocols,
            )
        )
        waits.joins[member_id] = answer
        self._arm_session(group, member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._extend_initial_delay(group)
        else:
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)  # without an initial delay, a lone joiner is done

    def _join_known(
        self,
        group: Group,
        message: Join,
        protocols: tuple[GroupProtocol, ...],
        answer: asyncio.Future[JoinGroupResponse],
    ) -> None:
        request = message.request
        member = group.members[request.member_id]
        waits = self._waits(group.group_id)
        if not group.supports(request.protocol_type, protocols):
            answer.set_result(_join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member.member_id))
            return
        self._arm_session(group, member.member_id)
        unchanged = member.same_protocols(protocols)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            member.protocols = protocols
            previous = waits.joins.pop(member.member_id, None)
            if previous is not None:
                _settle(previous, _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
            waits.joins[member.member_id] = answer
            self._maybe_complete_join(group)
            return
        # Kafka: a member that rejoins unchanged (it missed its join answer) gets the current
        # generation again, unless it is the Stable group's leader, whose rejoin means it wants
        # a new assignment; any change of protocols starts a rebalance.
        leader_of_stable = group.is_in(GroupState.STABLE) and group.leader == member.member_id
        if unchanged and not leader_of_stable:
            answer.set_result(self._join_answer(group, member.member_id))
        else:
            member.protocols = protocols
            waits.joins[member.member_id] = answer
            self._prepare_rebalance(group)
            self._maybe_complete_join(group)

    def _prepare_rebalance(self, group: Group) -> None:
        waits = self._waits(group.group_id)
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            for future in waits.syncs.values():
                _settle(future, SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
            waits.syncs.clear()
            group.clear_assignments()
        was_empty = group.is_in(GroupState.EMPTY)
        group.transition(GroupState.PREPARING_REBALANCE, self.clock.wall_ms())
        rebalance_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        delay = self._config.group_initial_rebalance_delay_ms
        if was_empty and delay > 0:
            now = self._now_ms()
            waits.initial_delay_until_ms = now + delay
            waits.initial_delay_limit_ms = now + max(rebalance_ms, delay)
            self._arm_join_deadline(group, delay)
        else:
            waits.initial_delay_until_ms = None
            self._arm_join_deadline(group, rebalance_ms)

    def _extend_initial_delay(self, group: Group) -> None:
        """A member joining during the initial delay pushes it out by another delay, up to the
        rebalance timeout (Kafka's InitialDelayedJoin)."""
        waits = self._waits(group.group_id)
        if waits.initial_delay_until_ms is None:
            return
        now = self._now_ms()
        until = min(
            now + self._config.group_initial_rebalance_delay_ms, waits.initial_delay_limit_ms
        )
        if until > waits.initial_delay_until_ms:
            waits.initial_delay_until_ms = until
            self._arm_join_deadline(group, until - now)

    def _arm_join_deadline(self, group: Group, after_ms: int) -> None:
        waits = self._waits(group.group_id)
        if waits.join_alarm is not None:
            waits.join_alarm.cancel()
        waits.join_token = self._token()
        waits.join_alarm = self._alarm(after_ms, _JoinDeadline(group.group_id, waits.join_token))

    def _maybe_complete_join(self, group: Group) -> None:
        waits = self._waits(group.group_id)
        if (
            group.is_in(GroupState.PREPARING_REBALANCE)
            and waits.initial_delay_until_ms is None
            and all(member_id in waits.joins for member_id in group.members)
        ):
            self._complete_join(group)

    @handles(_JoinDeadline)
    def _join_deadline(self, message: _JoinDeadline) -> None:
        group = self.groups.get(message.group_id)
        waits = self._waiting.get(message.group_id)
        if group is None or waits is None or waits.join_token != message.token:
            return  # re-armed or completed since
        waits.join_alarm = None
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if waits.initial_delay_until_ms is not None:
            waits.initial_delay_until_ms = None
            if all(m in waits.joins for m in group.members):
                self._complete_join(group)
            else:
                rebalance_ms = max(m.rebalance_timeout_ms for m in group.members.values())
                self._arm_join_deadline(group, rebalance_ms)
            return
        # The rebalance timeout: members that did not rejoin are out.
        for member_id in [m for m in group.members if m not in waits.joins]:
            self._remove_member(group, member_id)
        self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        waits = self._waits(group.group_id)
        if waits.join_alarm is not None:
            waits.join_alarm.cancel()
            waits.join_alarm = None
        group.init_next_generation(self.clock.wall_ms())
        if group.is_in(GroupState.EMPTY):
            self._store_group(group)  # an empty generation is stored too (Kafka)
        joins, waits.joins = waits.joins, {}
        for member_id, future in joins.items():
            _settle(future, self._join_answer(group, member_id))
        for member_id in group.members:
            self._arm_session(group, member_id)

    def _join_answer(self, group: Group, member_id: str) -> JoinGroupResponse:
        protocol = group.protocol
        members = []
        if member_id == group.leader and protocol is not None:
            members = [
                JoinGroupResponseMember(member_id=m.member_id, metadata=m.metadata_for(protocol))
                for m in group.members.values()
            ]
        return JoinGroupResponse(
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=protocol,
            leader=group.leader or "",
            member_id=member_id,
            members=members,
        )

    # -- members' sessions -----------------------------------------------------------------

    def _arm_session(self, group: Group, member_id: str) -> None:
        waits = self._waits(group.group_id)
        member = group.members[member_id]
        previous = waits.sessions.pop(member_id, None)
        if previous is not None:
            previous[1].cancel()
        token = self._token()
        alarm = self._alarm(
            member.session_timeout_ms, _SessionExpired(group.group_id, member_id, token)
        )
        waits.sessions[member_id] = (token, alarm)

    @handles(_SessionExpired)
    def _session_expired(self, message: _SessionExpired) -> None:
        group = self.groups.get(message.group_id)
        waits = self._waiting.get(message.group_id)
        if group is None or waits is None:
            return
        pending = waits.pending_members.get(message.member_id)
        if pending is not None and pending[0] == message.token:
            del waits.pending_members[message.member_id]
            return
        session = waits.sessions.get(message.member_id)
        if session is None or session[0] != message.token:
            return  # heartbeat since: a newer alarm stands
        if message.member_id in waits.joins or message.member_id in waits.syncs:
            # Waiting in JoinGroup or SyncGroup counts as alive (Kafka's hasSatisfiedHeartbeat):
            # the rebalance timeout bounds that wait, not the session timeout, which may be
            # much shorter. Completing the join or the sync re-arms the session anyway.
            self._arm_session(group, message.member_id)
            return
        log.info("%s: member %s of %s timed out", self.name, message.member_id, group.group_id)
        self._remove_member(group, message.member_id)
        self._after_member_left(group)

    def _remove_member(self, group: Group, member_id: str) -> None:
        waits = self._waits(group.group_id)
        session = waits.sessions.pop(member_id, None)
        if session is not None:
            session[1].cancel()
        join = waits.joins.pop(member_id, None)
        if join is not None:
            _settle(join, _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member_id))
        sync = waits.syncs.pop(member_id, None)
        if sync is not None:
            _settle(sync, SyncGroupResponse(error_code=ErrorCode.UNKNOWN_MEMBER_ID))
        group.remove(member_id)

    def _after_member_left(self, group: Group) -> None:
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)
        elif group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group)
            self._maybe_complete_join(group)

    # -- SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------

    def _member_error(self, group_id: str, member_id: str, generation: int) -> ErrorCode | None:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return None

    @handles(Sync)
    def _sync(self, message: Sync) -> asyncio.Future[SyncGroupResponse]:
        request = message.request
        answer: asyncio.Future[SyncGroupResponse] = asyncio.get_running_loop().create_future()
        error = self._member_error(request.group_id, request.member_id, request.generation_id)
        if error is not None:
            answer.set_result(SyncGroupResponse(error_code=error))
            return answer
        group = self.groups[request.group_id]
        waits = self._waits(group.group_id)
        self._arm_session(group, request.member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            answer.set_result(SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
        elif group.is_in(GroupState.STABLE):
            answer.set_result(self._sync_answer(group, request.member_id))
        else:
            waits.syncs[request.member_id] = answer
            if request.member_id == group.leader:
                group.assign({a.member_id: a.assignment for a in request.assignments})
                self._store_group(group)
        return answer

    def _sync_answer(self, group: Group, member_id: str) -> SyncGroupResponse:
        return SyncGroupResponse(
            protocol_type=group.protocol_type,
            protocol_name=group.protocol,
            assignment=group.members[member_id].assignment,
        )

    def _store_group(self, group: Group) -> None:
        batch = build_group_batch(
            [(GroupKey(group.group_id), group.to_record())], timestamp_ms=self.clock.wall_ms()
        )
        generation = group.generation

        async def write() -> None:
            error = await self._log.append(self.partition, batch)
            await self.tell(_GroupStored(group.group_id, generation, error))

        self._spawn(write())

    @handles(_GroupStored)
    def _group_stored(self, message: _GroupStored) -> None:
        group = self.groups.get(message.group_id)
        if (
            group is None
            or group.generation != message.generation
            or not group.is_in(GroupState.COMPLETING_REBALANCE)
        ):
            return
        waits = self._waits(group.group_id)
        syncs, waits.syncs = waits.syncs, {}
        if message.error is not ErrorCode.NONE:
            log.warning("%s: storing %s failed: %s", self.name, group.group_id, message.error)
            for future in syncs.values():
                _settle(future, SyncGroupResponse(error_code=_store_error(message.error)))
            self._prepare_rebalance(group)
            return
        group.transition(GroupState.STABLE, self.clock.wall_ms())
        for member_id, future in syncs.items():
            _settle(future, self._sync_answer(group, member_id))

    @handles(Beat)
    def _heartbeat(self, message: Beat) -> HeartbeatResponse:
        request = message.request
        error = self._member_error(request.group_id, request.member_id, request.generation_id)
        if error is not None:
            return HeartbeatResponse(error_code=error)
        group = self.groups[request.group_id]
        self._arm_session(group, request.member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
        return HeartbeatResponse()

    @handles(Leave)
    def _leave(self, message: Leave) -> LeaveGroupResponse:
        request = message.request
        group = self.groups.get(request.group_id)
        answers = []
        for identity in request.members:
            if group is None or identity.member_id not in group.members:
                code = ErrorCode.UNKNOWN_MEMBER_ID
            else:
                self._remove_member(group, identity.member_id)
                code = ErrorCode.NONE
            answers.append(MemberResponse(member_id=identity.member_id, error_code=code))
        if group is not None and any(a.error_code == ErrorCode.NONE for a in answers):
            self._after_member_left(group)
        return LeaveGroupResponse(members=answers)

    # -- offsets ---------------------------------------------------------------------------

    @handles(Commit)
    def _commit(self, message: Commit) -> asyncio.Future[OffsetCommitResponse]:
        request = message.request
        answer: asyncio.Future[OffsetCommitResponse] = asyncio.get_running_loop().create_future()
        error = self._commit_refusal(request)
        if error is not None:
            answer.set_result(_commit_answer(request, lambda _t, _p: error))
            return answer
        now = self.clock.wall_ms()
        entries: list[tuple[tuple[str, int], OffsetValue]] = []
        too_large: set[tuple[str, int]] = set()
        for topic in request.topics:
            for part in topic.partitions:
                tp = (topic.name, part.partition_index)
                metadata = part.committed_metadata or ""
                if len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                    too_large.add(tp)
                    continue
                entries.append(
                    (
                        tp,
                        OffsetValue(
                            part.committed_offset, metadata, now, part.committed_leader_epoch
                        ),
                    )
                )
        if not entries:
            answer.set_result(
                _commit_answer(request, lambda _t, _p: ErrorCode.OFFSET_METADATA_TOO_LARGE)
            )
            return answer
        self.groups.setdefault(request.group_id, Group(request.group_id))
        batch = build_group_batch(
            [(OffsetKey(request.group_id, t, p), value) for (t, p), value in entries],
            timestamp_ms=now,
        )

        async def write() -> None:
            error = await self._log.append(self.partition, batch)
            await self.tell(
                _OffsetsStored(request.group_id, tuple(entries), error, answer, request)
            )

        self._spawn(write())
        if too_large:
            log.info("%s: %d commits refused, metadata too large", self.name, len(too_large))
        return answer

    def _commit_refusal(self, request: OffsetCommitRequest) -> ErrorCode | None:
        if not request.group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self.groups.get(request.group_id)
        simple = request.generation_id_or_member_epoch < 0 and request.member_id == ""
        if simple:
            # A consumer outside any group commits only while the group has no members.
            if group is not None and group.members:
                return ErrorCode.UNKNOWN_MEMBER_ID
            return None
        error = self._member_error(
            request.group_id, request.member_id, request.generation_id_or_member_epoch
        )
        if error is not None:
            return error
        assert group is not None
        if group.is_in(GroupState.COMPLETING_REBALANCE, GroupState.PREPARING_REBALANCE):
            return ErrorCode.REBALANCE_IN_PROGRESS
        self._arm_session(group, request.member_id)
        return None

    @handles(_OffsetsStored)
    def _offsets_stored(self, message: _OffsetsStored) -> None:
        stored = {tp for tp, _ in message.offsets}
        if message.error is ErrorCode.NONE:
            offsets = self.offsets.setdefault(message.group_id, {})
            for tp, value in message.offsets:
                offsets[tp] = value
            code = ErrorCode.NONE
        else:
            code = _store_error(message.error)

        def outcome(topic: str, partition: int) -> ErrorCode:
            if (topic, partition) in stored:
                return code
            return ErrorCode.OFFSET_METADATA_TOO_LARGE

        _settle(message.answer, _commit_answer(message.request, outcome))

    @handles(FetchOffsets)
    def _fetch_offsets(self, message: FetchOffsets) -> OffsetFetchResponse:
        request = message.request
        offsets = self.offsets.get(request.group_id, {})
        wanted: dict[str, list[int]] = {}
        if request.topics is None:
            for name, partition in sorted(offsets):
                wanted.setdefault(name, []).append(partition)
        else:
            for topic in request.topics:
                wanted.setdefault(topic.name, []).extend(topic.partition_indexes)
        return OffsetFetchResponse(
            topics=[
                OffsetFetchResponseTopic(
                    name=topic,
                    partitions=[_fetched(offsets.get((topic, p)), p) for p in partitions],
                )
                for topic, partitions in wanted.items()
            ]
        )

    @handles(_ExpireOffsets)
    def _expire_offsets(self, message: _ExpireOffsets) -> None:
        """Offsets of a group Empty for longer than the retention (measured from when it became
        Empty), and a simple consumer's offsets by their commit time, are deleted (tombstones);
        a group left with neither members nor offsets is forgotten."""
        retention = self._config.offsets_retention_ms
        now_wall = self.clock.wall_ms()
        tombstones: list[tuple[Key, Value | None]] = []
        for group_id, offsets in list(self.offsets.items()):
            group = self.groups.get(group_id)
            if group is not None and not group.is_in(GroupState.EMPTY):
                continue
            group_empty_since = group.state_timestamp_ms if group is not None else -1
            simple = group is None or group.protocol_type is None
            if simple:
                # A consumer outside any group: each offset by its own commit time.
                expired = [
                    tp
                    for tp, value in offsets.items()
                    if value.commit_timestamp + retention <= now_wall
                ]
            else:
                # A group's offsets go together, once it has been Empty for the retention.
                expired = list(offsets) if group_empty_since + retention <= now_wall else []
            tombstones.extend(self._drop_offsets(group_id, expired))
        tombstones.extend(self._forget_empty_groups())
        self._write_tombstones(tombstones, "expired")

    @handles(RemoveOffsets)
    def _remove_offsets(self, message: RemoveOffsets) -> None:
        tombstones: list[tuple[Key, Value | None]] = []
        for group_id, offsets in list(self.offsets.items()):
            gone = [tp for tp in offsets if tp in message.partitions]
            tombstones.extend(self._drop_offsets(group_id, gone))
        tombstones.extend(self._forget_empty_groups())
        self._write_tombstones(tombstones, "of deleted partitions")

    def _drop_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> list[tuple[Key, Value | None]]:
        """Forget `partitions` of the group's offsets; their tombstones."""
        offsets = self.offsets[group_id]
        for tp in partitions:
            del offsets[tp]
        if not offsets:
            del self.offsets[group_id]
        return [(OffsetKey(group_id, *tp), None) for tp in partitions]

    def _forget_empty_groups(self) -> list[tuple[Key, Value | None]]:
        """An Empty group without offsets is forgotten; a stored one needs a tombstone."""
        tombstones: list[tuple[Key, Value | None]] = []
        for group_id, group in list(self.groups.items()):
            if group.is_in(GroupState.EMPTY) and group_id not in self.offsets:
                del self.groups[group_id]
                self._waiting.pop(group_id, None)
                if group.generation > 0:
                    tombstones.append((GroupKey(group_id), None))
        return tombstones

    def _write_tombstones(self, tombstones: list[tuple[Key, Value | None]], why: str) -> None:
        if not tombstones:
            return
        batch = build_group_batch(tombstones, timestamp_ms=self.clock.wall_ms())
        log.info("%s: deleting %d offsets-topic entries %s", self.name, len(tombstones), why)

        async def write() -> None:
            error = await self._log.append(self.partition, batch)
            if error is not ErrorCode.NONE:
                log.warning("%s: writing tombstones %s failed: %s", self.name, why, error)

        self._spawn(write())

    # -- describe and list -----------------------------------------------------------------

    @handles(Describe)
    def _describe(self, message: Describe) -> list[DescribedGroup]:
        described = []
        for group_id in message.group_ids:
            group = self.groups.get(group_id)
            if group is None:
                described.append(DescribedGroup(group_id=group_id, group_state="Dead"))
                continue
            protocol = group.protocol
            described.append(
                DescribedGroup(
                    group_id=group_id,
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=protocol or "",
                    members=[
                        DescribedGroupMember(
                            member_id=m.member_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata_for(protocol) if protocol else b"",
                            member_assignment=m.assignment,
                        )
                        for m in group.members.values()
                    ],
                )
            )
        return described

    @handles(ListAll)
    def _list(self, message: ListAll) -> list[ListedGroup]:
        states = states_named(message.states) if message.states else frozenset(GroupState)
        return [
            ListedGroup(
                group_id=g.group_id,
                protocol_type=g.protocol_type or "",
                group_state=g.state.value,
            )
            for g in self.groups.values()
            if g.state in states
        ]

    # -- helpers ---------------------------------------------------------------------------

    def _spawn(self, coroutine: object) -> None:
        assert asyncio.iscoroutine(coroutine)
        task = asyncio.get_running_loop().create_task(coroutine)
        self._writes.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            if not isinstance(error, MailboxError):  # the answer came after the unload
                log.error("%s: a write failed: %r", self.name, error)


def _settle(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)


def _join_error(code: ErrorCode, member_id: str) -> JoinGroupResponse:
    return JoinGroupResponse(error_code=code, member_id=member_id)


def _store_error(error: ErrorCode) -> ErrorCode:
    """What a failed offsets-topic append means to the member (Kafka's mapping)."""
    if error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return ErrorCode.UNKNOWN_SERVER_ERROR


def _commit_answer(
    request: OffsetCommitRequest, outcome: Callable[[str, int], ErrorCode]
) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            OffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    OffsetCommitResponsePartition(
                        partition_index=p.partition_index,
                        error_code=outcome(topic.name, p.partition_index),
                    )
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def _fetched(value: OffsetValue | None, partition: int) -> OffsetFetchResponsePartition:
    if value is None:
        return OffsetFetchResponsePartition(partition_index=partition, metadata="")
    return OffsetFetchResponsePartition(
        partition_index=partition,
        committed_offset=value.offset,
        committed_leader_epoch=value.leader_epoch,
        metadata=value.metadata,
    )
