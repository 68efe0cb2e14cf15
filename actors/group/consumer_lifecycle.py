"""The life of a consumer group (KIP-848) around its heartbeats, in a `GroupShard`: its writes, its
members' timers, the removal of a member, loading, deletion and expiry, and the answers of the
other group APIs (OffsetCommit, TxnOffsetCommit, the classic membership APIs) for it.

Functions of the shard's `ShardState` (its `consumer` part), called only from the shard's
handlers and from consumer_heartbeat.py, so only the shard's task touches the groups.

* **Writes** (`store`): a change's records go to the shard's offsets partition with acks=all;
  `stored` answers the member once they are written. A failed write answers the store error
  and puts the group back as it was before the change (`Snapshot`), with every change made
  after it (Kafka reverts its in-memory state to the last committed offset; ketch keeps one
  snapshot per write). A later write that succeeds nonetheless (its append got through where
  the earlier one failed) leaves records the state no longer has: its member is fenced or
  unknown at its next heartbeat and joins again, and a new coordinator loads the log.
* **Timers** on the shard's clock (`arm`): each heartbeat re-arms the member's session
  (group.consumer.session.timeout.ms); a member entering UNREVOKED_PARTITIONS gets its
  rebalance timeout to revoke. Either expiring removes the member (`remove_member`, Kafka's
  fencing) as a leave does: its records' tombstones and a bumped group epoch.
* **Loading** (`loaded`): the groups the loader built from the records, each member's session
  armed (a member must heartbeat the new coordinator within its session).
* **Deletion and expiry**: DeleteGroups of an empty consumer group writes its records'
  tombstones (`delete_group`); an empty group without offsets is forgotten after an expiry
  check (`forget_empty_groups`), as Kafka cleans up. Offsets of subscribed topics never expire
  (offsets.py).
* **Other APIs**: an OffsetCommit or TxnOffsetCommit is checked against the member epoch
  (`commit_refusal`); a classic JoinGroup is answered INCONSISTENT_GROUP_PROTOCOL while the
  group has members, and deletes it when empty (`classic_join_refusal`); the other classic
  membership requests are answered UNKNOWN_MEMBER_ID (`classic_refusal`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Final

from actors.group.consumer_group import (
    ConsumerGroup,
    MemberState,
    Record,
    epoch_record,
    group_tombstones,
    removal_records,
    subscription_metadata_record,
    wants_topic,
)
from actors.group.metadata import Group
from actors.group.state import ShardState, settle, store_error
from wire.errors import ErrorCode
from wire.group_records import build_group_batch
from wire.messages import ConsumerGroupHeartbeatResponse

log = logging.getLogger(__name__)

SESSION: Final = "session"
REBALANCE: Final = "rebalance"

# -- messages --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerMemberExpired:
    """A member's session or rebalance timeout fired (`kind`); ignored unless `token` is the
    newest alarm's."""

    group_id: str
    member_id: str
    kind: str
    token: int


@dataclass(frozen=True, slots=True, eq=False)
class Snapshot:
    """A group as it was before a change, to put back if the change's write fails."""

    group: ConsumerGroup | None  # None: the group did not exist


@dataclass(frozen=True, slots=True, eq=False)
class ConsumerGroupStored:
    group_id: str
    seq: int
    error: ErrorCode
    before: Snapshot
    answer: asyncio.Future[ConsumerGroupHeartbeatResponse] | None
    response: ConsumerGroupHeartbeatResponse | None


def copy_group(group: ConsumerGroup) -> ConsumerGroup:
    # Members and assignments are immutable: copying the tables is a full copy.
    return ConsumerGroup(
        group.group_id,
        group.group_epoch,
        group.assignment_epoch,
        dict(group.members),
        dict(group.target),
        dict(group.subscription_metadata),
    )


def remove_member(state: ShardState, group: ConsumerGroup, member_id: str) -> list[Record]:
    """Take a member out (a leave, an expired session or rebalance timeout): its records'
    tombstones and the group's bumped epoch."""
    state.consumer.cancel_alarms(group.group_id, member_id)
    del group.members[member_id]
    group.target.pop(member_id, None)
    records = removal_records(group.group_id, member_id)
    subscribed = group.subscribed_topic_names()
    metadata = {
        n: t for n, t in group.subscription_metadata.items() if wants_topic(group, n, subscribed)
    }
    if metadata != group.subscription_metadata:
        group.subscription_metadata = metadata
        records.append(subscription_metadata_record(group.group_id, metadata))
    group.group_epoch += 1
    records.append(epoch_record(group.group_id, group.group_epoch))
    return records


# -- the other APIs on a consumer group ----------------------------------------------------------


def commit_refusal(group: ConsumerGroup, member_id: str, member_epoch: int) -> ErrorCode | None:
    """Why an OffsetCommit to a consumer group is refused (Kafka's ConsumerGroup
    validateOffsetCommit): a commit from outside the group (epoch < 0) only while it has no
    members; a member's only at its current epoch (STALE_MEMBER_EPOCH: a member between two
    epochs retries after its next heartbeat)."""
    if member_epoch < 0 and not group.members:
        return None
    member = group.members.get(member_id)
    if member is None:
        return ErrorCode.UNKNOWN_MEMBER_ID
    if member_epoch != member.member_epoch:
        return ErrorCode.STALE_MEMBER_EPOCH
    return None


def delete_group(state: ShardState, group_id: str) -> ErrorCode | None:
    """DeleteGroups of a consumer group: refused with members (NON_EMPTY_GROUP) or with a
    transaction's offsets pending (UNSTABLE_OFFSET_COMMIT, deletion.py says why); else its
    records' tombstones are written and an empty classic group stands in for it, which the
    classic deletion (deletion.py) then deletes with the offsets. The tombstones go first in
    the log; a failed write of them puts the group back."""
    group = state.consumer.groups[group_id]
    if group.members:
        return ErrorCode.NON_EMPTY_GROUP
    if group_id in state.pending_txn:
        return ErrorCode.UNSTABLE_OFFSET_COMMIT
    forget_group(state, group)
    state.groups[group_id] = Group(group_id)
    return None


def forget_group(state: ShardState, group: ConsumerGroup) -> None:
    """Take an empty group out, with its records' tombstones."""
    del state.consumer.groups[group.group_id]
    state.consumer.cancel_alarms(group.group_id)
    store(state, group.group_id, group_tombstones(group), Snapshot(group), None, None)


def forget_empty_groups(state: ShardState) -> None:
    """Consumer groups with neither members nor offsets are deleted (Kafka's cleanup after
    expiring offsets)."""
    for group in list(state.consumer.groups.values()):
        gone = group.group_id not in state.offsets and group.group_id not in state.pending_txn
        if not group.members and gone:
            forget_group(state, group)


def classic_refusal(state: ShardState, group_id: str) -> ErrorCode | None:
    """The answer to a classic SyncGroup, Heartbeat or LeaveGroup for a consumer group:
    UNKNOWN_MEMBER_ID (no classic member is in it). Kafka 4 lets classic members into a
    consumer group (KIP-848's upgrade path); ketch does not."""
    if group_id in state.consumer.groups:
        return ErrorCode.UNKNOWN_MEMBER_ID
    return None


def classic_join_refusal(state: ShardState, group_id: str) -> ErrorCode | None:
    """A classic JoinGroup for a consumer group: INCONSISTENT_GROUP_PROTOCOL while it has
    members (its protocol is not the classic one); an empty one is deleted (its records'
    tombstones, written before the classic group's record) and the join goes on as a classic
    group's, as Kafka turns an empty consumer group back into a classic one."""
    group = state.consumer.groups.get(group_id)
    if group is None:
        return None
    if group.members:
        return ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    forget_group(state, group)
    return None


# -- writes, timers ------------------------------------------------------------------------------


def store(
    state: ShardState,
    group_id: str,
    records: list[Record],
    before: Snapshot,
    answer: asyncio.Future[ConsumerGroupHeartbeatResponse] | None,
    response: ConsumerGroupHeartbeatResponse | None,
) -> None:
    if not records:
        if answer is not None and response is not None:
            answer.set_result(response)
        return
    seq = state.consumer.writes.get(group_id, 0) + 1
    state.consumer.writes[group_id] = seq
    batch = build_group_batch(list(records), timestamp_ms=state.wall_ms())
    state.write(
        batch, lambda error: ConsumerGroupStored(group_id, seq, error, before, answer, response)
    )


def stored(state: ShardState, message: ConsumerGroupStored) -> None:
    """A change's records are written (or not): answer the member, or put the group back."""
    if message.error is ErrorCode.NONE:
        if message.answer is not None and message.response is not None:
            settle(message.answer, message.response)
        return
    code = store_error(message.error)
    log.warning("%s: consumer group %s not stored: %s", state.name, message.group_id, code.name)
    # Writes of one group are issued in order, each on the state the ones before it made. A
    # failed write puts the group back as it was before it, unless the group already went back
    # to before an earlier write (one issued before the last put-back, after its failed one).
    failed, issued = state.consumer.put_back.get(message.group_id, (0, 0))
    if not failed < message.seq <= issued:
        put_back(state, message.group_id, message.before)
        state.consumer.put_back[message.group_id] = (
            message.seq,
            state.consumer.writes.get(message.group_id, 0),
        )
    if message.answer is not None:
        settle(message.answer, ConsumerGroupHeartbeatResponse(error_code=code))


def put_back(state: ShardState, group_id: str, before: Snapshot) -> None:
    """The group as it was (a failed write of its change, or a refused heartbeat); a member
    back without a session timer (its removal cancelled it) gets one."""
    if before.group is None:
        state.consumer.groups.pop(group_id, None)
        state.consumer.cancel_alarms(group_id)
        return
    if group_id in state.groups:
        # A classic group took the id since (its JoinGroup came after the deletion): a group
        # id is of one type at a time, and the classic group's record follows in the log.
        log.warning(
            "%s: consumer group %s not put back: a classic group has it", state.name, group_id
        )
        return
    state.consumer.groups[group_id] = before.group
    for member_id in before.group.members:
        if (SESSION, group_id, member_id) not in state.consumer.alarms:
            arm(state, group_id, member_id, SESSION, session_ms(state))


def session_ms(state: ShardState) -> int:
    return state.config.group_consumer_session_timeout_ms


def arm(state: ShardState, group_id: str, member_id: str, kind: str, after_ms: int) -> None:
    cancel(state, group_id, member_id, kind)
    token = state.token()
    alarm = state.alarm(max(after_ms, 0), ConsumerMemberExpired(group_id, member_id, kind, token))
    state.consumer.alarms[(kind, group_id, member_id)] = (token, alarm)


def cancel(state: ShardState, group_id: str, member_id: str, kind: str) -> None:
    armed = state.consumer.alarms.pop((kind, group_id, member_id), None)
    if armed is not None:
        armed[1].cancel()


def member_expired(state: ShardState, message: ConsumerMemberExpired) -> None:
    key = (message.kind, message.group_id, message.member_id)
    armed = state.consumer.alarms.get(key)
    group = state.consumer.groups.get(message.group_id)
    if armed is None or armed[0] != message.token or group is None:
        return  # a newer alarm stands, or the member is gone
    del state.consumer.alarms[key]
    member = group.members.get(message.member_id)
    if member is None:
        return
    if message.kind == REBALANCE and member.state != MemberState.UNREVOKED_PARTITIONS:
        return
    log.info(
        "%s: consumer group %s: member %s removed (%s timeout)",
        state.name,
        message.group_id,
        message.member_id,
        message.kind,
    )
    before = Snapshot(copy_group(group))
    store(state, group.group_id, remove_member(state, group, member.member_id), before, None, None)


def loaded(state: ShardState) -> None:
    """After a load: the consumer groups the records built, each member's session armed (a
    member must heartbeat the new coordinator within its session), and a classic group that
    only stood for a consumer group's offsets dropped."""
    consumer = state.consumer
    consumer.groups = consumer.loader.build()
    consumer.loader.groups.clear()
    for group_id, group in consumer.groups.items():
        classic = state.groups.get(group_id)
        if classic is not None and not classic.members:
            del state.groups[group_id]
        for member_id in group.members:
            arm(state, group_id, member_id, SESSION, session_ms(state))
