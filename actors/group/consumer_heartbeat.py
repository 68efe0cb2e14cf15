"""ConsumerGroupHeartbeat (KIP-848): the rules of the new consumer group protocol in a `GroupShard`.

The shard's handlers call these functions with its `ShardState`; the groups live in
`state.consumer` (consumer_group.py's `ConsumerGroups`), beside the classic groups of
membership.py, and only the shard's task touches them. One heartbeat, as Kafka's
GroupMetadataManager.consumerGroupHeartbeat does it:

1. **Validate** the request (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR) and find the group: a member
   epoch of 0 creates it; a classic group with members answers GROUP_ID_NOT_FOUND (ketch does
   not convert a classic group online as Kafka 4 does; an empty classic group, which only holds
   offsets, is replaced). An unknown group with another epoch answers UNKNOWN_MEMBER_ID, which
   makes the client join again (Kafka answers GROUP_ID_NOT_FOUND, to the same effect).
2. **The member**: epoch 0 joins (a new member, or a known member id joining again after it
   gave up its partitions, which starts it over from nothing; a static member whose previous
   instance left with epoch -2 takes its place and assignment, else UNRELEASED_INSTANCE_ID);
   -1 leaves; -2 is a static member leaving for a while (it keeps its assignment until its
   session expires or its instance rejoins). Another epoch must be the member's, or its
   previous one while it owns only assigned partitions (the answer that bumped it was lost);
   else FENCED_MEMBER_EPOCH. An unknown member id answers UNKNOWN_MEMBER_ID.
3. **The group epoch** is bumped when a member joins, leaves, changes its subscription or
   assignor, or the subscribed topics' metadata (ids, partition counts) changed.
4. **The target assignment** is recomputed by the group's assignor (consumer_assignors.py: the
   members' most requested one, else the first of group.consumer.assignors) when the group
   epoch is ahead of the assignment epoch.
5. **Reconciliation** (consumer_group.reconcile): the member moves one step toward its target;
   a partition another member still holds is given only once that member has acknowledged its
   revocation in a heartbeat.

Every change becomes records (consumer_group.py's builders, Kafka's record types) written to the
shard's offsets partition; the answer waits for the write, so a member never uses an assignment
a new coordinator would not load. The writes, the members' session and rebalance timers, and
removals are consumer_lifecycle.py's.

Regular expression subscriptions (`subscribed_topic_regex`, RE2/J in Kafka) are matched with
Python's `re.fullmatch` against the broker's topic names, internal topics (`__` prefix)
excluded; RE2 and `re` agree on the common subset (classes, alternation, repetition, anchors),
while `re` also has backreferences and lookaround (which RE2 refuses) and RE2's `\\C`, `\\pN`
and POSIX classes `[[:alpha:]]` are not `re`'s. An invalid pattern answers INVALID_REQUEST
(Kafka 4 answers INVALID_REGULAR_EXPRESSION, 128, which ketch's error table lacks).
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from actors.group import consumer_lifecycle as lifecycle
from actors.group.consumer_assignors import ASSIGNORS, MemberSpec
from actors.group.consumer_group import (
    EMPTY,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    Record,
    current_assignment_record,
    epoch_record,
    is_subset,
    member_records,
    reconcile,
    removal_records,
    subscription_metadata_record,
    target_records,
    topic_matches,
)
from actors.group.state import ShardState
from runtime.actor import Ask
from wire.consumer_group_records import Assignment, TopicMetadataValue
from wire.errors import ErrorCode
from wire.messages import (
    ConsumerGroupHeartbeatAssignment,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupTopicPartitions,
)

LEAVE_GROUP_MEMBER_EPOCH: Final = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH: Final = -2

TopicsView = Mapping[str, tuple[bytes, int]]
"""The broker's topics when the heartbeat arrived: name -> (topic id, partition count)."""


# -- messages --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class ConsumerHeartbeat(Ask[asyncio.Future[ConsumerGroupHeartbeatResponse]]):
    request: ConsumerGroupHeartbeatRequest
    client_id: str
    client_host: str
    topics: TopicsView


# -- the heartbeat ---------------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def heartbeat(
    state: ShardState, message: ConsumerHeartbeat
) -> asyncio.Future[ConsumerGroupHeartbeatResponse]:
    answer: asyncio.Future[ConsumerGroupHeartbeatResponse] = (
        asyncio.get_running_loop().create_future()
    )
    request = message.request
    try:
        _validate(state, request)
        group, before = _group_for(state, request)
    except _Refused as refused:
        answer.set_result(_refusal(request, refused))
        return answer
    try:
        if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            response, records = _leave(state, group, request)
        else:
            response, records = _beat(state, group, message)
    except _Refused as refused:
        # A refusal changes nothing (the checks come before the changes; this is a guard).
        lifecycle.put_back(state, group.group_id, before)
        answer.set_result(_refusal(request, refused))
        return answer
    lifecycle.store(state, group.group_id, records, before, answer, response)
    return answer


def _refusal(
    request: ConsumerGroupHeartbeatRequest, refused: _Refused
) -> ConsumerGroupHeartbeatResponse:
    return ConsumerGroupHeartbeatResponse(
        error_code=refused.code, error_message=str(refused), member_id=request.member_id
    )


def _validate(state: ShardState, request: ConsumerGroupHeartbeatRequest) -> None:
    invalid = ErrorCode.INVALID_REQUEST
    if not request.group_id:
        raise _Refused(invalid, "GroupId can't be empty.")
    if request.instance_id == "" or request.rack_id == "":
        raise _Refused(invalid, "InstanceId and RackId can't be empty.")
    epoch = request.member_epoch
    if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
        if not request.member_id:
            raise _Refused(invalid, "MemberId can't be empty.")
    elif epoch == 0:
        if request.rebalance_timeout_ms == -1:
            raise _Refused(invalid, "RebalanceTimeoutMs must be provided in first request.")
        if request.topic_partitions is None or request.topic_partitions:
            raise _Refused(invalid, "TopicPartitions must be empty when (re-)joining.")
        if not request.subscribed_topic_names and request.subscribed_topic_regex is None:
            raise _Refused(invalid, "SubscribedTopicNames or SubscribedTopicRegex must be set.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if not request.member_id or request.instance_id is None:
            raise _Refused(invalid, "MemberId and InstanceId are needed to leave temporarily.")
    else:
        raise _Refused(invalid, "MemberEpoch is invalid.")
    if request.subscribed_topic_regex is not None:
        try:
            re.compile(request.subscribed_topic_regex)
        except re.error as exc:
            raise _Refused(invalid, f"SubscribedTopicRegex is invalid: {exc}") from None
    assignor = request.server_assignor
    if assignor is not None and assignor not in state.config.consumer_assignors:
        supported = ", ".join(state.config.consumer_assignors)
        raise _Refused(
            ErrorCode.UNSUPPORTED_ASSIGNOR,
            f"ServerAssignor {assignor} is not supported. Supported assignors: {supported}.",
        )


def _group_for(
    state: ShardState, request: ConsumerGroupHeartbeatRequest
) -> tuple[ConsumerGroup, lifecycle.Snapshot]:
    groups = state.consumer.groups
    group = groups.get(request.group_id)
    if group is not None:
        return group, lifecycle.Snapshot(lifecycle.copy_group(group))
    classic = state.groups.get(request.group_id)
    if classic is not None and classic.members:
        raise _Refused(
            ErrorCode.GROUP_ID_NOT_FOUND, f"Group {request.group_id} is not a consumer group."
        )
    if request.member_epoch != 0:
        raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Consumer group {request.group_id} not found.")
    # An empty classic group only holds offsets (kept in state.offsets, which stay the group's).
    state.groups.pop(request.group_id, None)
    group = ConsumerGroup(request.group_id)
    groups[request.group_id] = group
    return group, lifecycle.Snapshot(None)


def _leave(
    state: ShardState, group: ConsumerGroup, request: ConsumerGroupHeartbeatRequest
) -> tuple[ConsumerGroupHeartbeatResponse, list[Record]]:
    member = group.members.get(request.member_id)
    if request.instance_id is not None:
        static = group.static_member(request.instance_id)
        if static is None:
            raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, "Unknown static member.")
        if static.member_id != request.member_id:
            raise _Refused(ErrorCode.FENCED_INSTANCE_ID, "Another member has this instance id.")
        member = static
    if member is None:
        raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Unknown member {request.member_id}.")
    response = ConsumerGroupHeartbeatResponse(
        member_id=member.member_id,
        member_epoch=request.member_epoch,
        heartbeat_interval_ms=0,
    )
    if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        # It keeps its assignment for the instance that comes back (or its session expires).
        left = replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        group.members[member.member_id] = left
        state.consumer.cancel_alarms(group.group_id, member.member_id)
        lifecycle.arm(
            state, group.group_id, member.member_id, lifecycle.SESSION, lifecycle.session_ms(state)
        )
        return response, [current_assignment_record(group.group_id, left)]
    return response, lifecycle.remove_member(state, group, member.member_id)


def _beat(
    state: ShardState, group: ConsumerGroup, message: ConsumerHeartbeat
) -> tuple[ConsumerGroupHeartbeatResponse, list[Record]]:
    request = message.request
    records: list[Record] = []
    member, is_new = _member_for(state, group, request, records)
    owned = _owned(request)
    if member.state == MemberState.UNKNOWN and owned != {}:
        raise _Refused(ErrorCode.FENCED_MEMBER_EPOCH, "The member's state is unknown: rejoin.")
    updated = replace(
        member,
        instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
        rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=(
            request.rebalance_timeout_ms
            if request.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms
        ),
        server_assignor=(
            request.server_assignor
            if request.server_assignor is not None
            else member.server_assignor
        ),
        subscribed_topic_names=(
            tuple(request.subscribed_topic_names)
            if request.subscribed_topic_names is not None
            else member.subscribed_topic_names
        ),
        subscribed_topic_regex=(
            request.subscribed_topic_regex
            if request.subscribed_topic_regex is not None
            else member.subscribed_topic_regex
        ),
        client_id=message.client_id,
        client_host=message.client_host,
    )
    if is_new or updated.metadata_value() != member.metadata_value():
        records.extend(member_records(group.group_id, updated))
    bump = is_new or not updated.subscription_equals(member)
    group.members[updated.member_id] = updated
    metadata = _subscription_metadata(state, group, message.topics)
    if metadata != group.subscription_metadata:
        group.subscription_metadata = metadata
        records.append(subscription_metadata_record(group.group_id, metadata))
        bump = True
    if bump:
        group.group_epoch += 1
        records.append(epoch_record(group.group_id, group.group_epoch))
    if group.group_epoch > group.assignment_epoch:
        records.extend(_assign(state, group))
    reconciled = reconcile(
        updated,
        group.assignment_epoch,
        group.target.get(updated.member_id, EMPTY),
        _epochs_without(group, updated.member_id),
        owned,
    )
    if reconciled != updated:
        group.members[updated.member_id] = reconciled
        records.append(current_assignment_record(group.group_id, reconciled))
        if reconciled.state == MemberState.UNREVOKED_PARTITIONS:
            lifecycle.arm(
                state,
                group.group_id,
                reconciled.member_id,
                lifecycle.REBALANCE,
                reconciled.rebalance_timeout_ms,
            )
        else:
            lifecycle.cancel(state, group.group_id, reconciled.member_id, lifecycle.REBALANCE)
    lifecycle.arm(
        state, group.group_id, reconciled.member_id, lifecycle.SESSION, lifecycle.session_ms(state)
    )
    full = request.member_epoch == 0 or (
        request.rebalance_timeout_ms != -1
        and request.subscribed_topic_names is not None
        and request.topic_partitions is not None
    )
    assignment = None
    if full or reconciled.assigned != member.assigned:
        assignment = ConsumerGroupHeartbeatAssignment(
            topic_partitions=[
                ConsumerGroupTopicPartitions(topic_id=t, partitions=sorted(ps))
                for t, ps in sorted(reconciled.assigned.items())
            ]
        )
    response = ConsumerGroupHeartbeatResponse(
        member_id=reconciled.member_id,
        member_epoch=reconciled.member_epoch,
        heartbeat_interval_ms=state.config.group_consumer_heartbeat_interval_ms,
        assignment=assignment,
    )
    return response, records


def _member_for(
    state: ShardState,
    group: ConsumerGroup,
    request: ConsumerGroupHeartbeatRequest,
    records: list[Record],
) -> tuple[ConsumerGroupMember, bool]:
    """The member the heartbeat is from, and whether it is new (step 2 of the module doc)."""
    # Version 0 let the coordinator name a new member; from v1 the client does (KIP-1082).
    member_id = request.member_id or str(uuid.uuid4())
    epoch = request.member_epoch
    if request.instance_id is not None:
        static = group.static_member(request.instance_id)
        if epoch == 0 and static is not None and static.member_id != member_id:
            if static.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise _Refused(
                    ErrorCode.UNRELEASED_INSTANCE_ID,
                    f"Static member {static.member_id} with instance id "
                    f"{request.instance_id} has not left the group.",
                )
            # The instance comes back under a new member id: it takes the old one's place.
            records.extend(removal_records(group.group_id, static.member_id))
            state.consumer.cancel_alarms(group.group_id, static.member_id)
            del group.members[static.member_id]
            target = group.target.pop(static.member_id, EMPTY)
            group.target[member_id] = target
            records.extend(
                target_records(group.group_id, group.assignment_epoch, {member_id: target})
            )
            # Not new to the group: its subscription is the old one's, so no rebalance.
            replacing = replace(
                static, member_id=member_id, member_epoch=0, previous_member_epoch=0
            )
            records.extend(member_records(group.group_id, replacing))
            return replacing, False
        if epoch != 0:
            if static is None:
                raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, "Unknown static member.")
            if static.member_id != member_id:
                raise _Refused(ErrorCode.FENCED_INSTANCE_ID, "Another member has this instance id.")
    member = group.members.get(member_id)
    if epoch == 0:
        if member is None:
            if len(group.members) >= state.config.group_consumer_max_size:
                raise _Refused(ErrorCode.GROUP_MAX_SIZE_REACHED, "The group is full.")
            return ConsumerGroupMember(member_id=member_id), True
        # A known member joining again has given up its partitions: it starts over.
        return replace(
            member,
            member_epoch=0,
            previous_member_epoch=0,
            state=MemberState.STABLE,
            assigned=EMPTY,
            pending_revocation=EMPTY,
        ), False
    if member is None:
        raise _Refused(ErrorCode.UNKNOWN_MEMBER_ID, f"Unknown member {member_id}.")
    if epoch > member.member_epoch or (
        epoch < member.member_epoch
        and (
            epoch != member.previous_member_epoch
            or not is_subset(_owned_pairs(request), member.assigned)
        )
    ):
        raise _Refused(
            ErrorCode.FENCED_MEMBER_EPOCH,
            f"The member's epoch {epoch} is not the coordinator's ({member.member_epoch}): "
            "the member must abandon its partitions and rejoin.",
        )
    return member, False


def _owned(request: ConsumerGroupHeartbeatRequest) -> dict[bytes, frozenset[int]] | None:
    if request.topic_partitions is None:
        return None
    owned: dict[bytes, frozenset[int]] = {}
    for tp in request.topic_partitions:
        owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return {t: ps for t, ps in owned.items() if ps}


def _owned_pairs(request: ConsumerGroupHeartbeatRequest) -> list[tuple[bytes, list[int]]] | None:
    if request.topic_partitions is None:
        return None
    return [(tp.topic_id, list(tp.partitions)) for tp in request.topic_partitions]


def _subscription_metadata(
    state: ShardState, group: ConsumerGroup, topics: TopicsView
) -> dict[str, TopicMetadataValue]:
    """The subscribed topics that exist: the names, and each regex's matches (resolved once
    per pattern and topics view: heartbeats come far more often than topics change)."""
    names = set(group.subscribed_topic_names())
    consumer = state.consumer
    if consumer.resolved_for is not topics:
        consumer.resolved_for, consumer.resolved = topics, {}
    for member in group.members.values():
        pattern = member.subscribed_topic_regex
        if pattern is not None:
            if pattern not in consumer.resolved:
                consumer.resolved[pattern] = frozenset(
                    n for n in topics if topic_matches(pattern, n)
                )
            names |= consumer.resolved[pattern]
    return {
        name: TopicMetadataValue(topics[name][0], name, topics[name][1])
        for name in sorted(names)
        if name in topics
    }


def _epochs_without(group: ConsumerGroup, member_id: str) -> dict[tuple[bytes, int], int]:
    """Who holds each partition, the reconciling member aside (its own are not in the way)."""
    others = ConsumerGroup(
        group.group_id, members={m: member for m, member in group.members.items() if m != member_id}
    )
    return others.partition_epochs()


def _assign(state: ShardState, group: ConsumerGroup) -> list[Record]:
    """Run the group's assignor for its epoch; the records of the members whose target changed
    and of the new assignment epoch."""
    names = {t.topic_id: n for n, t in group.subscription_metadata.items()}
    partitions = {n: t.num_partitions for n, t in group.subscription_metadata.items()}
    specs = {}
    for member_id, member in group.members.items():
        topics = frozenset(
            n
            for n in partitions
            if n in member.subscribed_topic_names
            or (
                member.subscribed_topic_regex is not None
                and topic_matches(member.subscribed_topic_regex, n)
            )
        )
        current = frozenset(
            (names[t], p)
            for t, ps in group.target.get(member_id, EMPTY).items()
            if t in names
            for p in ps
        )
        specs[member_id] = MemberSpec(topics, current)
    assignor = ASSIGNORS[assignor_name(state, group)]
    result = assignor.assign(specs, partitions)
    changed: dict[str, Assignment] = {}
    for member_id, tps in result.items():
        by_topic: dict[bytes, set[int]] = {}
        for name, p in tps:
            by_topic.setdefault(group.subscription_metadata[name].topic_id, set()).add(p)
        target = {t: frozenset(ps) for t, ps in by_topic.items()}
        if target != group.target.get(member_id):
            changed[member_id] = target
        group.target[member_id] = target
    group.assignment_epoch = group.group_epoch
    return target_records(group.group_id, group.assignment_epoch, changed)


def assignor_name(state: ShardState, group: ConsumerGroup) -> str:
    """The members' most requested assignor (ties to the first name), else the default."""
    votes = Counter(m.server_assignor for m in group.members.values() if m.server_assignor)
    if votes:
        top = max(votes.values())
        return min(name for name, count in votes.items() if count == top)
    return state.config.consumer_assignors[0]
