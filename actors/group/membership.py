"""Group membership for one shard: JoinGroup, SyncGroup, Heartbeat and LeaveGroup, the members'
session timers, the rebalance timers, and completing a rebalance.

Functions of the shard's `ShardState`, called only from the `GroupShard`'s handlers (so only
the shard's task changes the groups they touch; see state.py). The group model and its state
machine are metadata.py's; this module decides when a group moves, answers the members, and
keeps their parked answers and alarms in the group's `Waiting`.

A rebalance (Kafka's GroupCoordinator): a new member, a member that left or timed out, a changed
subscription, the Stable leader's rejoin or a failed write of the group's record puts the group
in PreparingRebalance and parks the members' JoinGroup answers. An empty group's first rebalance
waits `group.initial.rebalance.delay.ms`, pushed out by each member that joins meanwhile up to
the rebalance timeout (InitialDelayedJoin); after that, the join completes as soon as every
member has rejoined, or at the rebalance timeout without the members that did not. Completing it
starts the next generation (CompletingRebalance, or Empty when nobody is left) and answers every
parked join, the leader with the members' subscriptions; the leader's SyncGroup brings the
assignment, which is stored in the offsets partition before the group is Stable and the parked
syncs are answered.

Time: session and rebalance deadlines are alarms on the shard's clock whose callbacks only tell
the shard a message (`SessionExpired`, `JoinDeadline`) carrying a token; a message whose token
is no longer the current one (a heartbeat or a new rebalance re-armed it since) is ignored.
Writes of the group's record (after the leader's SyncGroup, and for an empty generation) go
through the shard with acks=all; their outcome comes back as `GroupStored`.

Static membership (KIP-345, Kafka's GroupCoordinator): a join naming a `group_instance_id` and no
member id is let in at once (never MEMBER_ID_REQUIRED). A new instance id joins as a dynamic
member does (a rebalance). A known one is a restarted instance: it takes the place of its old
member id (`_replace_static`), whose parked answers and later requests get FENCED_INSTANCE_ID.
In a Stable group with unchanged protocols that needs no rebalance: the group's record is stored
with the new id and the member is answered the current generation (as a follower: it then syncs
and gets its assignment back); if the store fails, the old id is put back. Otherwise (protocols
changed, or a rebalance under way) the member joins the rebalance under its new id. Requests
naming an instance id are checked against its holder (`member_error`). A static member's session
timeout removes it as any member's does; LeaveGroup may name members by instance id alone.

Pending members (v4+ dynamic joins answered MEMBER_ID_REQUIRED) are forgotten after their
session timeout, as in Kafka.

Over ~500 lines because static membership changes the same join, leave and validation paths as
dynamic membership does; split apart, each half would need the other's private steps.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from actors.group.messages import (
    GroupStored,
    Join,
    JoinDeadline,
    ReplacedSettings,
    SessionExpired,
    StaticMemberStored,
)
from actors.group.metadata import Group, GroupState, Member
from actors.group.metadata import Protocol as GroupProtocol
from actors.group.state import ShardState, Waiting, settle, store_error
from wire.errors import ErrorCode
from wire.group_records import GroupKey, build_group_batch
from wire.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

log = logging.getLogger(__name__)

# -- JoinGroup -------------------------------------------------------------------------------------


def join(state: ShardState, message: Join) -> asyncio.Future[JoinGroupResponse]:
    request = message.request
    answer: asyncio.Future[JoinGroupResponse] = asyncio.get_running_loop().create_future()
    error = _join_refusal(state, request)
    if error is not None:
        answer.set_result(_join_error(error, request.member_id))
        return answer
    group = state.groups.get(request.group_id)
    if group is None:
        group = state.groups[request.group_id] = Group(request.group_id)
    waits = state.waits(group.group_id)
    protocols = tuple(GroupProtocol(p.name, p.metadata) for p in request.protocols)
    instance_id = request.group_instance_id
    if group.is_in(GroupState.DEAD):
        answer.set_result(_join_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, request.member_id))
    elif instance_id is not None and request.member_id == "":
        existing = group.static_member(instance_id)
        if existing is None:
            _join_new(state, group, message, protocols, answer)
        else:
            _join_static_known(state, group, message, protocols, existing.member_id, answer)
    elif instance_id is not None and (
        error := member_error(state, group.group_id, request.member_id, None, instance_id)
    ):
        answer.set_result(_join_error(error, request.member_id))
    elif request.member_id == "" or request.member_id in waits.pending_members:
        _join_new(state, group, message, protocols, answer)
    elif request.member_id not in group.members:
        answer.set_result(_join_error(ErrorCode.UNKNOWN_MEMBER_ID, request.member_id))
    else:
        _join_known(state, group, message, protocols, answer)
    return answer


def _join_refusal(state: ShardState, request: JoinGroupRequest) -> ErrorCode | None:
    config = state.config
    if not request.group_id:
        return ErrorCode.INVALID_GROUP_ID
    if not (
        config.group_min_session_timeout_ms
        <= request.session_timeout_ms
        <= config.group_max_session_timeout_ms
    ):
        return ErrorCode.INVALID_SESSION_TIMEOUT
    return None


def _join_new(
    state: ShardState,
    group: Group,
    message: Join,
    protocols: tuple[GroupProtocol, ...],
    answer: asyncio.Future[JoinGroupResponse],
) -> None:
    request = message.request
    waits = state.waits(group.group_id)
    if not group.supports(request.protocol_type, protocols):
        answer.set_result(_join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, ""))
        return
    if len(group.members) >= state.config.group_max_size:
        answer.set_result(_join_error(ErrorCode.GROUP_MAX_SIZE_REACHED, request.member_id))
        return
    member_id = request.member_id
    if member_id == "":
        # Unique for good, as Kafka's client id + UUID: ids drawn from a generator seeded per
        # shard repeated after a restart or a coordinator move, and a joiner could be handed
        # the id of a member the loaded group still held (two clients as one member).
        member_id = f"{message.client_id or 'member'}-{uuid.uuid4()}"
        if message.require_known_member_id and request.group_instance_id is None:
            token = state.token()
            alarm = state.alarm(
                request.session_timeout_ms, SessionExpired(group.group_id, member_id, token)
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
            rebalance_timeout_ms=(request.session_timeout_ms if rebalance_ms < 0 else rebalance_ms),
            protocol_type=request.protocol_type,
            protocols=protocols,
            group_instance_id=request.group_instance_id,
        )
    )
    waits.joins[member_id] = answer
    arm_session(state, group, member_id)
    if group.is_in(GroupState.PREPARING_REBALANCE):
        _extend_initial_delay(state, group)
    else:
        _prepare_rebalance(state, group)
    _maybe_complete_join(state, group)  # without an initial delay, a lone joiner is done


def _join_known(
    state: ShardState,
    group: Group,
    message: Join,
    protocols: tuple[GroupProtocol, ...],
    answer: asyncio.Future[JoinGroupResponse],
) -> None:
    request = message.request
    member = group.members[request.member_id]
    waits = state.waits(group.group_id)
    if not group.supports(request.protocol_type, protocols):
        answer.set_result(_join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, member.member_id))
        return
    arm_session(state, group, member.member_id)
    unchanged = member.same_protocols(protocols)
    if group.is_in(GroupState.PREPARING_REBALANCE):
        member.protocols = protocols
        previous = waits.joins.pop(member.member_id, None)
        if previous is not None:
            settle(previous, _join_error(ErrorCode.UNKNOWN_MEMBER_ID, member.member_id))
        waits.joins[member.member_id] = answer
        _maybe_complete_join(state, group)
        return
    # Kafka: a member that rejoins unchanged (it missed its join answer) gets the current
    # generation again, unless it is the Stable group's leader, whose rejoin means it wants
    # a new assignment; any change of protocols starts a rebalance.
    leader_of_stable = group.is_in(GroupState.STABLE) and group.leader == member.member_id
    if unchanged and not leader_of_stable:
        answer.set_result(_join_answer(group, member.member_id))
    else:
        member.protocols = protocols
        waits.joins[member.member_id] = answer
        _prepare_rebalance(state, group)
        _maybe_complete_join(state, group)


def _join_static_known(
    state: ShardState,
    group: Group,
    message: Join,
    protocols: tuple[GroupProtocol, ...],
    old_member_id: str,
    answer: asyncio.Future[JoinGroupResponse],
) -> None:
    """A known instance id joins without a member id: the instance restarted (or lost its id)."""
    request = message.request
    if not group.supports(request.protocol_type, protocols):
        answer.set_result(_join_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, ""))
        return
    old = group.members[old_member_id]
    current = group.protocol
    # Its subscription for the generation's protocol is what its assignment was made from. Not
    # the whole protocol list: a loaded group knows only the chosen protocol's (the record's).
    same_subscription = current is not None and old.metadata_for(current) == next(
        (p.metadata for p in protocols if p.name == current), None
    )
    leader_before = group.leader
    previous = ReplacedSettings(
        old.client_id,
        old.client_host,
        old.session_timeout_ms,
        old.rebalance_timeout_ms,
        old.protocols,
    )
    new_member_id = f"{message.client_id or 'member'}-{uuid.uuid4()}"
    _replace_static(state, group, message, protocols, old_member_id, new_member_id)
    if (
        group.is_in(GroupState.STABLE)
        and same_subscription
        and group.select_protocol() == current  # Kafka's test: the generation's protocol stands
    ):
        # No rebalance: the assignment stands; only the record must learn the new id, so that a
        # coordinator loading it after a failover does not fence the restarted instance.
        batch = build_group_batch(
            [(GroupKey(group.group_id), group.to_record())], timestamp_ms=state.wall_ms()
        )
        group_id, generation = group.group_id, group.generation
        state.write(
            batch,
            lambda error: StaticMemberStored(
                group_id,
                generation,
                old_member_id,
                new_member_id,
                leader_before or "",
                previous,
                error,
                answer,
            ),
        )
        return
    waits = state.waits(group.group_id)
    waits.joins[new_member_id] = answer
    if not group.is_in(GroupState.PREPARING_REBALANCE):
        _prepare_rebalance(state, group)
    _maybe_complete_join(state, group)


def _replace_static(
    state: ShardState,
    group: Group,
    message: Join,
    protocols: tuple[GroupProtocol, ...],
    old_member_id: str,
    new_member_id: str,
) -> None:
    """The old member id is fenced: its alarms end, its parked answers say FENCED_INSTANCE_ID,
    and the member goes on under the new id with the join's settings."""
    request = message.request
    _fence(state, group, old_member_id)
    member = group.replace_member_id(old_member_id, new_member_id)
    rebalance_ms = request.rebalance_timeout_ms
    member.client_id = message.client_id
    member.client_host = message.client_host
    member.session_timeout_ms = request.session_timeout_ms
    member.rebalance_timeout_ms = request.session_timeout_ms if rebalance_ms < 0 else rebalance_ms
    member.protocols = protocols
    arm_session(state, group, new_member_id)


def _fence(state: ShardState, group: Group, member_id: str) -> None:
    _drop_waits(state, group, member_id, ErrorCode.FENCED_INSTANCE_ID)


def _drop_waits(state: ShardState, group: Group, member_id: str, code: ErrorCode) -> None:
    """Cancel the member's session alarm and answer its pending JoinGroup and SyncGroup with
    `code`: the member id is gone (removed, or replaced by its static instance's new id)."""
    waits = state.waits(group.group_id)
    session = waits.sessions.pop(member_id, None)
    if session is not None:
        session[1].cancel()
    join = waits.joins.pop(member_id, None)
    if join is not None:
        settle(join, _join_error(code, member_id))
    sync = waits.syncs.pop(member_id, None)
    if sync is not None:
        settle(sync, SyncGroupResponse(error_code=code))


def static_member_stored(state: ShardState, message: StaticMemberStored) -> None:
    """The record naming a replaced static member's new id is written (answer the member the
    current generation), or failed (put the old id back, as Kafka reverts it)."""
    group = state.groups.get(message.group_id)
    member = None if group is None else group.members.get(message.new_member_id)
    if group is None or member is None:
        # Replaced again, left or timed out meanwhile: its own answer said so, or this one does.
        settle(message.answer, _join_error(ErrorCode.UNKNOWN_MEMBER_ID, message.new_member_id))
        return
    if message.error is not ErrorCode.NONE:
        log.warning("%s: storing %s failed: %s", state.name, group.group_id, message.error)
        _fence(state, group, message.new_member_id)
        old = group.replace_member_id(message.new_member_id, message.old_member_id)
        previous = message.previous
        old.client_id, old.client_host = previous.client_id, previous.client_host
        old.session_timeout_ms = previous.session_timeout_ms
        old.rebalance_timeout_ms = previous.rebalance_timeout_ms
        old.protocols = previous.protocols
        arm_session(state, group, message.old_member_id)
        settle(message.answer, _join_error(store_error(message.error), ""))
        return
    # As Kafka, the member is answered as a follower under the leader the group had: a restarted
    # leader then syncs for its assignment instead of computing one the Stable group ignores.
    answer = _join_answer(group, message.new_member_id)
    settle(
        message.answer,
        JoinGroupResponse(
            generation_id=answer.generation_id,
            protocol_type=answer.protocol_type,
            protocol_name=answer.protocol_name,
            leader=message.leader,
            member_id=message.new_member_id,
            members=[],
        ),
    )


# -- rebalancing -----------------------------------------------------------------------------------


def _prepare_rebalance(state: ShardState, group: Group) -> None:
    waits = state.waits(group.group_id)
    if group.is_in(GroupState.COMPLETING_REBALANCE):
        for future in waits.syncs.values():
            settle(future, SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
        waits.syncs.clear()
        group.clear_assignments()
    was_empty = group.is_in(GroupState.EMPTY)
    group.transition(GroupState.PREPARING_REBALANCE, state.wall_ms())
    rebalance_ms = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
    delay = state.config.group_initial_rebalance_delay_ms
    if was_empty and delay > 0:
        now = state.now_ms()
        waits.initial_delay_until_ms = now + delay
        waits.initial_delay_limit_ms = now + max(rebalance_ms, delay)
        _arm_join_deadline(state, group, delay)
    else:
        waits.initial_delay_until_ms = None
        _arm_join_deadline(state, group, rebalance_ms)


def _extend_initial_delay(state: ShardState, group: Group) -> None:
    """A member joining during the initial delay pushes it out by another delay, up to the
    rebalance timeout (Kafka's InitialDelayedJoin)."""
    waits = state.waits(group.group_id)
    if waits.initial_delay_until_ms is None:
        return
    now = state.now_ms()
    until = min(now + state.config.group_initial_rebalance_delay_ms, waits.initial_delay_limit_ms)
    if until > waits.initial_delay_until_ms:
        waits.initial_delay_until_ms = until
        _arm_join_deadline(state, group, until - now)


def _arm_join_deadline(state: ShardState, group: Group, after_ms: int) -> None:
    waits = state.waits(group.group_id)
    if waits.join_alarm is not None:
        waits.join_alarm.cancel()
    waits.join_token = state.token()
    waits.join_alarm = state.alarm(after_ms, JoinDeadline(group.group_id, waits.join_token))


def _maybe_complete_join(state: ShardState, group: Group) -> None:
    waits = state.waits(group.group_id)
    if (
        group.is_in(GroupState.PREPARING_REBALANCE)
        and waits.initial_delay_until_ms is None
        and all(member_id in waits.joins for member_id in group.members)
    ):
        _complete_join(state, group)


def join_deadline(state: ShardState, message: JoinDeadline) -> None:
    """The initial delay or the rebalance timeout has passed."""
    group = state.groups.get(message.group_id)
    waits = state.waiting.get(message.group_id)
    if group is None or waits is None or waits.join_token != message.token:
        return  # re-armed or completed since
    waits.join_alarm = None
    if not group.is_in(GroupState.PREPARING_REBALANCE):
        return
    if waits.initial_delay_until_ms is not None:
        waits.initial_delay_until_ms = None
        if all(m in waits.joins for m in group.members):
            _complete_join(state, group)
        else:
            rebalance_ms = max(m.rebalance_timeout_ms for m in group.members.values())
            _arm_join_deadline(state, group, rebalance_ms)
        return
    # The rebalance timeout: members that did not rejoin are out.
    for member_id in [m for m in group.members if m not in waits.joins]:
        _remove_member(state, group, member_id)
    _complete_join(state, group)


def _complete_join(state: ShardState, group: Group) -> None:
    waits = state.waits(group.group_id)
    if waits.join_alarm is not None:
        waits.join_alarm.cancel()
        waits.join_alarm = None
    group.init_next_generation(state.wall_ms())
    if group.is_in(GroupState.EMPTY):
        _store_group(state, group)  # an empty generation is stored too (Kafka)
    joins, waits.joins = waits.joins, {}
    for member_id, future in joins.items():
        settle(future, _join_answer(group, member_id))
    for member_id in group.members:
        arm_session(state, group, member_id)


def _join_answer(group: Group, member_id: str) -> JoinGroupResponse:
    protocol = group.protocol
    members = []
    if member_id == group.leader and protocol is not None:
        members = [
            JoinGroupResponseMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                metadata=m.metadata_for(protocol),
            )
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


# -- members' sessions -----------------------------------------------------------------------------


def arm_session(state: ShardState, group: Group, member_id: str) -> None:
    """(Re)start the member's session timer: it is removed unless heard from before it fires."""
    waits = state.waits(group.group_id)
    member = group.members[member_id]
    previous = waits.sessions.pop(member_id, None)
    if previous is not None:
        previous[1].cancel()
    token = state.token()
    alarm = state.alarm(member.session_timeout_ms, SessionExpired(group.group_id, member_id, token))
    waits.sessions[member_id] = (token, alarm)


def session_expired(state: ShardState, message: SessionExpired) -> None:
    group = state.groups.get(message.group_id)
    waits = state.waiting.get(message.group_id)
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
        arm_session(state, group, message.member_id)
        return
    log.info("%s: member %s of %s timed out", state.name, message.member_id, group.group_id)
    _remove_member(state, group, message.member_id)
    _after_member_left(state, group)


def _remove_member(state: ShardState, group: Group, member_id: str) -> None:
    _drop_waits(state, group, member_id, ErrorCode.UNKNOWN_MEMBER_ID)
    group.remove(member_id)


def _after_member_left(state: ShardState, group: Group) -> None:
    if group.is_in(GroupState.PREPARING_REBALANCE):
        _maybe_complete_join(state, group)
    elif group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
        _prepare_rebalance(state, group)
        _maybe_complete_join(state, group)


# -- SyncGroup, Heartbeat, LeaveGroup --------------------------------------------------------------


def member_error(
    state: ShardState,
    group_id: str,
    member_id: str,
    generation: int | None,
    group_instance_id: str | None = None,
) -> ErrorCode | None:
    """Why a request from this member of this generation (None: any) is refused, or None. A
    request naming an instance id must come from the member id holding it: another one was
    replaced by a restart (FENCED_INSTANCE_ID); an instance id nobody holds is unknown."""
    group = state.groups.get(group_id)
    if group is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if group_instance_id is not None:
        holder = group.static_member(group_instance_id)
        if holder is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if holder.member_id != member_id:
            return ErrorCode.FENCED_INSTANCE_ID
    if member_id not in group.members:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if generation is not None and generation != group.generation:
        return ErrorCode.ILLEGAL_GENERATION
    return None


def sync(state: ShardState, request: SyncGroupRequest) -> asyncio.Future[SyncGroupResponse]:
    answer: asyncio.Future[SyncGroupResponse] = asyncio.get_running_loop().create_future()
    error = member_error(
        state, request.group_id, request.member_id, request.generation_id, request.group_instance_id
    )
    if error is not None:
        answer.set_result(SyncGroupResponse(error_code=error))
        return answer
    group = state.groups[request.group_id]
    waits = state.waits(group.group_id)
    arm_session(state, group, request.member_id)
    if group.is_in(GroupState.PREPARING_REBALANCE):
        answer.set_result(SyncGroupResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS))
    elif group.is_in(GroupState.STABLE):
        answer.set_result(_sync_answer(group, request.member_id))
    else:
        waits.syncs[request.member_id] = answer
        if request.member_id == group.leader:
            group.assign({a.member_id: a.assignment for a in request.assignments})
            _store_group(state, group)
    return answer


def _sync_answer(group: Group, member_id: str) -> SyncGroupResponse:
    return SyncGroupResponse(
        protocol_type=group.protocol_type,
        protocol_name=group.protocol,
        assignment=group.members[member_id].assignment,
    )


def _store_group(state: ShardState, group: Group) -> None:
    batch = build_group_batch(
        [(GroupKey(group.group_id), group.to_record())], timestamp_ms=state.wall_ms()
    )
    group_id, generation = group.group_id, group.generation
    state.write(batch, lambda error: GroupStored(group_id, generation, error))


def group_stored(state: ShardState, message: GroupStored) -> None:
    """The group's record is replicated (or failed): the parked syncs are answered."""
    group = state.groups.get(message.group_id)
    if (
        group is None
        or group.generation != message.generation
        or not group.is_in(GroupState.COMPLETING_REBALANCE)
    ):
        return
    waits = state.waits(group.group_id)
    syncs, waits.syncs = waits.syncs, {}
    if message.error is not ErrorCode.NONE:
        log.warning("%s: storing %s failed: %s", state.name, group.group_id, message.error)
        for future in syncs.values():
            settle(future, SyncGroupResponse(error_code=store_error(message.error)))
        _prepare_rebalance(state, group)
        return
    group.transition(GroupState.STABLE, state.wall_ms())
    for member_id, future in syncs.items():
        settle(future, _sync_answer(group, member_id))


def heartbeat(state: ShardState, request: HeartbeatRequest) -> HeartbeatResponse:
    error = member_error(
        state, request.group_id, request.member_id, request.generation_id, request.group_instance_id
    )
    if error is not None:
        return HeartbeatResponse(error_code=error)
    group = state.groups[request.group_id]
    arm_session(state, group, request.member_id)
    if group.is_in(GroupState.PREPARING_REBALANCE):
        return HeartbeatResponse(error_code=ErrorCode.REBALANCE_IN_PROGRESS)
    return HeartbeatResponse()


def leave(state: ShardState, request: LeaveGroupRequest) -> LeaveGroupResponse:
    group = state.groups.get(request.group_id)
    answers = []
    for identity in request.members:
        member_id, code = _leaving(group, identity.member_id, identity.group_instance_id)
        if group is not None and code is ErrorCode.NONE:
            _remove_member(state, group, member_id)
        answers.append(
            MemberResponse(
                member_id=identity.member_id,
                group_instance_id=identity.group_instance_id,
                error_code=code,
            )
        )
    if group is not None and any(a.error_code == ErrorCode.NONE for a in answers):
        _after_member_left(state, group)
    return LeaveGroupResponse(members=answers)


def _leaving(
    group: Group | None, member_id: str, group_instance_id: str | None
) -> tuple[str, ErrorCode]:
    """Which member a LeaveGroup identity names, and whether it may leave (Kafka's rules: an
    instance id alone names its holder; with a member id, they must agree)."""
    if group is None:
        return member_id, ErrorCode.UNKNOWN_MEMBER_ID
    if group_instance_id is not None:
        holder = group.static_member(group_instance_id)
        if holder is None:
            return member_id, ErrorCode.UNKNOWN_MEMBER_ID
        if member_id not in ("", holder.member_id):
            return member_id, ErrorCode.FENCED_INSTANCE_ID
        return holder.member_id, ErrorCode.NONE
    if member_id not in group.members:
        return member_id, ErrorCode.UNKNOWN_MEMBER_ID
    return member_id, ErrorCode.NONE


# -- unloading -------------------------------------------------------------------------------------


def unload(state: ShardState) -> None:
    """The shard stops coordinating: every waiting member is answered NOT_COORDINATOR, every
    alarm is cancelled, and every group with a `Waiting` goes Dead (the shard drops the whole
    state next)."""
    for group_id, waits in state.waiting.items():
        for member_id, joining in waits.joins.items():
            settle(joining, _join_error(ErrorCode.NOT_COORDINATOR, member_id))
        for syncing in waits.syncs.values():
            settle(syncing, SyncGroupResponse(error_code=ErrorCode.NOT_COORDINATOR))
        _cancel_alarms(waits)
        group = state.groups.get(group_id)
        if group is not None:
            group.transition(GroupState.DEAD, state.wall_ms())


def _cancel_alarms(waits: Waiting) -> None:
    for _, alarm in [*waits.sessions.values(), *waits.pending_members.values()]:
        alarm.cancel()
    if waits.join_alarm is not None:
        waits.join_alarm.cancel()


def _join_error(code: ErrorCode, member_id: str) -> JoinGroupResponse:
    return JoinGroupResponse(error_code=code, member_id=member_id)
