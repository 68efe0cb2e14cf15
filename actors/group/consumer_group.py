"""A consumer group of the new protocol (KIP-848): its model and the reconciliation of a member.

The group's state, as Kafka's ConsumerGroup keeps it and as its records store it
(wire/consumer_group_records.py):

* the **group epoch**, bumped whenever the membership, a subscription or the subscribed topics'
  metadata (`subscription_metadata`: name -> id and partition count) changes;
* the **target assignment** and its **assignment epoch**: what the assignor computed for the
  group epoch it last ran at (one `Assignment`, topic id -> partitions, per member);
* each member's **current assignment**: its member epoch (and the previous one), the partitions
  it may use (`assigned`) and those it must give up first (`pending_revocation`), and its
  `MemberState`.

A member moves toward its target in steps (`reconcile`, Kafka's CurrentAssignmentBuilder), so
that no partition is ever owned by two members at once:

    STABLE                 at the target's epoch; a newer target starts a step
    UNREVOKED_PARTITIONS   it keeps its old epoch and must revoke `pending_revocation`; the step
                           ends once a heartbeat's owned partitions no longer hold any of them
    UNRELEASED_PARTITIONS  at the target's epoch, but some of its target partitions are still
                           held (assigned or pending revocation) by another member: they are
                           given to it in a later heartbeat, once released

Group states (for DescribeGroups, ListGroups, ConsumerGroupDescribe): Empty (no members),
Assigning (the group epoch is ahead of the assignment epoch), Reconciling (a member is not yet
at the assignment epoch or not Stable), Stable.

This module is the model only: no IO, no clock, no actor. The shard's rules
(consumer_heartbeat.py) own the groups through `ShardState.consumer` and call these functions
from its handlers.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final, TypeVar

from runtime.clock import Alarm
from wire.consumer_group_records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    Assignment,
    ConsumerGroupKey,
    ConsumerGroupValue,
    CurrentAssignmentValue,
    GroupEpochValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    TargetAssignmentEpochValue,
    TargetAssignmentMemberValue,
    TopicMetadataValue,
)

T = TypeVar("T")

CONSUMER_PROTOCOL_TYPE: Final = "consumer"
NO_EPOCH: Final = -1
EMPTY: Final[Assignment] = {}


class MemberState(enum.IntEnum):
    """Kafka's MemberState, with its stored values."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """One member; replaced whole on every change (so a change is a comparison away)."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    member_epoch: int = 0
    previous_member_epoch: int = NO_EPOCH
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    def metadata_value(self) -> MemberMetadataValue:
        return MemberMetadataValue(
            instance_id=self.instance_id,
            rack_id=self.rack_id,
            client_id=self.client_id,
            client_host=self.client_host,
            subscribed_topic_names=self.subscribed_topic_names,
            subscribed_topic_regex=self.subscribed_topic_regex,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            server_assignor=self.server_assignor,
        )

    def assignment_value(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(
            member_epoch=self.member_epoch,
            previous_member_epoch=self.previous_member_epoch,
            state=int(self.state),
            assigned=self.assigned,
            pending_revocation=self.pending_revocation,
        )

    def subscription_equals(self, other: ConsumerGroupMember) -> bool:
        return (
            self.subscribed_topic_names == other.subscribed_topic_names
            and self.subscribed_topic_regex == other.subscribed_topic_regex
            and self.server_assignor == other.server_assignor
        )


@dataclass(slots=True, eq=False)
class ConsumerGroup:
    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    subscription_metadata: dict[str, TopicMetadataValue] = field(default_factory=dict)

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        for member in self.members.values():
            if member.member_epoch != self.assignment_epoch or member.state != MemberState.STABLE:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None

    def partition_epochs(self) -> dict[tuple[bytes, int], int]:
        """Each partition held by a member (assigned or pending revocation) -> its epoch."""
        epochs: dict[tuple[bytes, int], int] = {}
        for member in self.members.values():
            for assignment in (member.assigned, member.pending_revocation):
                for topic_id, partitions in assignment.items():
                    for partition in partitions:
                        epochs[(topic_id, partition)] = member.member_epoch
        return epochs

    def subscribed_topic_names(self) -> frozenset[str]:
        return frozenset(n for m in self.members.values() for n in m.subscribed_topic_names)


def wants_topic(group: ConsumerGroup, name: str, subscribed: frozenset[str]) -> bool:
    """Whether a topic is in the group's subscription: named (`subscribed`, the members'
    names) or matching a member's regular expression."""
    return name in subscribed or any(
        m.subscribed_topic_regex is not None and topic_matches(m.subscribed_topic_regex, name)
        for m in group.members.values()
    )


def topic_matches(pattern: str, name: str) -> bool:
    """A regex subscription (consumer_heartbeat.py says how RE2/J and `re` differ) never takes
    an internal topic (Kafka's rule)."""
    return not name.startswith("__") and re.fullmatch(pattern, name) is not None


def is_subset(owned: Iterable[tuple[bytes, Iterable[int]]] | None, target: Assignment) -> bool:
    """Whether every owned partition is in `target` (None: not reported, so no)."""
    if owned is None:
        return False
    return all(p in target.get(topic_id, frozenset()) for topic_id, parts in owned for p in parts)


def _owns_any(owned: Mapping[bytes, frozenset[int]] | None, revoking: Assignment) -> bool:
    if owned is None:
        return True  # not reported: it may still own them
    return any(owned.get(t, frozenset()) & parts for t, parts in revoking.items())


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Assignment,
    partition_epochs: Mapping[tuple[bytes, int], int],
    owned: Mapping[bytes, frozenset[int]] | None,
) -> ConsumerGroupMember:
    """The member's next current assignment toward `target` (Kafka's CurrentAssignmentBuilder).
    `owned`: the partitions its heartbeat reported (None when it did not say)."""
    if member.state == MemberState.STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epochs, owned)
    if member.state == MemberState.UNREVOKED_PARTITIONS:
        if _owns_any(owned, member.pending_revocation):
            return member
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epochs, owned)
    return _next(member, member.member_epoch, target_epoch, target, partition_epochs, owned)


def _next(
    member: ConsumerGroupMember,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    partition_epochs: Mapping[tuple[bytes, int], int],
    owned: Mapping[bytes, frozenset[int]] | None,
) -> ConsumerGroupMember:
    assigned: dict[bytes, frozenset[int]] = {}
    revoking: dict[bytes, frozenset[int]] = {}
    pending: dict[bytes, frozenset[int]] = {}
    unreleased = False
    for topic_id in sorted(set(target) | set(member.assigned)):
        wanted = target.get(topic_id, frozenset())
        current = member.assigned.get(topic_id, frozenset())
        kept = current & wanted
        to_revoke = current - kept
        # Another member's partition (assigned or still being revoked) is not given yet.
        to_assign = frozenset(
            p for p in wanted - kept if partition_epochs.get((topic_id, p), NO_EPOCH) == NO_EPOCH
        )
        unreleased = unreleased or to_assign != wanted - kept
        if kept:
            assigned[topic_id] = kept
        if to_revoke:
            revoking[topic_id] = to_revoke
        if to_assign:
            pending[topic_id] = to_assign
    if revoking and _owns_any(owned, revoking):
        return _with(member, MemberState.UNREVOKED_PARTITIONS, epoch, assigned, revoking)
    for topic_id, partitions in pending.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return _with(member, state, target_epoch, assigned, {})


def _with(
    member: ConsumerGroupMember,
    state: MemberState,
    epoch: int,
    assigned: Assignment,
    revoking: Assignment,
) -> ConsumerGroupMember:
    previous = member.member_epoch if epoch != member.member_epoch else member.previous_member_epoch
    return replace(
        member,
        state=state,
        member_epoch=epoch,
        previous_member_epoch=previous,
        assigned=assigned,
        pending_revocation=revoking,
    )


# -- records ---------------------------------------------------------------------------------------


Record = tuple[ConsumerGroupKey, ConsumerGroupValue | None]


def member_records(group_id: str, member: ConsumerGroupMember) -> list[Record]:
    """What a new or changed member's metadata is stored as."""
    return [
        (
            ConsumerGroupKey(CONSUMER_GROUP_MEMBER_METADATA, group_id, member.member_id),
            member.metadata_value(),
        )
    ]


def current_assignment_record(group_id: str, member: ConsumerGroupMember) -> Record:
    key = ConsumerGroupKey(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, group_id, member.member_id)
    return key, member.assignment_value()


def removal_records(group_id: str, member_id: str) -> list[Record]:
    """Tombstones of a member, in Kafka's order (its assignments before its metadata)."""
    return [
        (ConsumerGroupKey(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, group_id, member_id), None),
        (ConsumerGroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, group_id, member_id), None),
        (ConsumerGroupKey(CONSUMER_GROUP_MEMBER_METADATA, group_id, member_id), None),
    ]


def group_tombstones(group: ConsumerGroup) -> list[Record]:
    """Every record of a group, deleted (DeleteGroups, or an empty group's offsets expired)."""
    records = [r for m in group.members for r in removal_records(group.group_id, m)]
    records += [
        (ConsumerGroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, group.group_id), None),
        (ConsumerGroupKey(CONSUMER_GROUP_PARTITION_METADATA, group.group_id), None),
        (ConsumerGroupKey(CONSUMER_GROUP_METADATA, group.group_id), None),
    ]
    return records


def epoch_record(group_id: str, epoch: int) -> Record:
    return ConsumerGroupKey(CONSUMER_GROUP_METADATA, group_id), GroupEpochValue(epoch)


def subscription_metadata_record(
    group_id: str, metadata: Mapping[str, TopicMetadataValue]
) -> Record:
    topics = tuple(metadata[name] for name in sorted(metadata))
    key = ConsumerGroupKey(CONSUMER_GROUP_PARTITION_METADATA, group_id)
    return key, PartitionMetadataValue(topics)


def target_records(group_id: str, epoch: int, changed: Mapping[str, Assignment]) -> list[Record]:
    """The target assignment's delta (the members whose target changed), then its epoch."""
    records: list[Record] = [
        (
            ConsumerGroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER, group_id, member_id),
            TargetAssignmentMemberValue(assignment),
        )
        for member_id, assignment in changed.items()
    ]
    key = ConsumerGroupKey(CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA, group_id)
    records.append((key, TargetAssignmentEpochValue(epoch)))
    return records


# -- loading ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Loading:
    """What the records of one group say so far, while a shard loads."""

    epoch: int | None = None
    metadata: PartitionMetadataValue | None = None
    assignment_epoch: int = 0
    members: dict[str, MemberMetadataValue] = field(default_factory=dict)
    targets: dict[str, Assignment] = field(default_factory=dict)
    current: dict[str, CurrentAssignmentValue] = field(default_factory=dict)


@dataclass(slots=True)
class ConsumerGroupLoader:
    """Builds the consumer groups from the records of an offsets partition, in log order
    (a later record replaces an earlier one of its key, a tombstone removes it)."""

    groups: dict[str, _Loading] = field(default_factory=dict)

    def load(self, key: ConsumerGroupKey, value: ConsumerGroupValue | None) -> None:
        loading = self.groups.setdefault(key.group, _Loading())
        member_id = key.member_id or ""
        match key.record_type:
            case 3:
                assert value is None or isinstance(value, GroupEpochValue)
                loading.epoch = None if value is None else value.epoch
            case 4:
                assert value is None or isinstance(value, PartitionMetadataValue)
                loading.metadata = value
            case 5:
                _put(loading.members, member_id, value, MemberMetadataValue)
            case 6:
                assert value is None or isinstance(value, TargetAssignmentEpochValue)
                loading.assignment_epoch = 0 if value is None else value.assignment_epoch
            case 7:
                if value is None:
                    loading.targets.pop(member_id, None)
                else:
                    assert isinstance(value, TargetAssignmentMemberValue)
                    loading.targets[member_id] = value.partitions
            case _:
                _put(loading.current, member_id, value, CurrentAssignmentValue)

    def build(self) -> dict[str, ConsumerGroup]:
        """The groups whose epoch record stands (a deleted group's tombstones removed it)."""
        groups = {}
        for group_id, loading in self.groups.items():
            if loading.epoch is None:
                continue
            group = ConsumerGroup(group_id, loading.epoch, loading.assignment_epoch)
            if loading.metadata is not None:
                group.subscription_metadata = {t.topic_name: t for t in loading.metadata.topics}
            for member_id, meta in loading.members.items():
                current = loading.current.get(member_id)
                member = ConsumerGroupMember(
                    member_id=member_id,
                    instance_id=meta.instance_id,
                    rack_id=meta.rack_id,
                    client_id=meta.client_id,
                    client_host=meta.client_host,
                    subscribed_topic_names=meta.subscribed_topic_names,
                    subscribed_topic_regex=meta.subscribed_topic_regex,
                    rebalance_timeout_ms=meta.rebalance_timeout_ms,
                    server_assignor=meta.server_assignor,
                )
                if current is not None:
                    member = replace(
                        member,
                        member_epoch=current.member_epoch,
                        previous_member_epoch=current.previous_member_epoch,
                        state=_member_state(current.state),
                        assigned=current.assigned,
                        pending_revocation=current.pending_revocation,
                    )
                group.members[member_id] = member
                group.target[member_id] = loading.targets.get(member_id, EMPTY)
            groups[group_id] = group
        return groups


def _member_state(value: int) -> MemberState:
    try:
        return MemberState(value)
    except ValueError:
        return MemberState.UNKNOWN  # a future state: the member is fenced on its next heartbeat


def _put(table: dict[str, T], member_id: str, value: object, cls: type[T]) -> None:
    if value is None:
        table.pop(member_id, None)
    else:
        assert isinstance(value, cls)
        table[member_id] = value


# -- what a shard keeps ----------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class ConsumerGroups:
    """A shard's consumer groups (stored: rebuilt from the log by `loader` on a load) and their
    alarms and write counts (not stored). Owned by the shard's task, like all of `ShardState`."""

    groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    # ("session" | "rebalance", group, member) -> (token, alarm): the newest alarm of each.
    alarms: dict[tuple[str, str, str], tuple[int, Alarm]] = field(default_factory=dict)
    # Group -> how many writes of it were issued, and the last put-back after a failed write:
    # (the failed write's number, the number issued by then) (consumer_lifecycle.py).
    writes: dict[str, int] = field(default_factory=dict)
    put_back: dict[str, tuple[int, int]] = field(default_factory=dict)
    loader: ConsumerGroupLoader = field(default_factory=ConsumerGroupLoader)
    # Regex subscriptions resolved against one topics view (consumer_heartbeat.py), by pattern.
    resolved_for: object | None = None
    resolved: dict[str, frozenset[str]] = field(default_factory=dict)

    def cancel_alarms(self, group_id: str, member_id: str | None = None) -> None:
        for key in [k for k in self.alarms if k[1] == group_id and member_id in (None, k[2])]:
            self.alarms.pop(key)[1].cancel()

    def clear(self) -> None:
        for _, alarm in self.alarms.values():
            alarm.cancel()
        self.alarms.clear()
        self.groups.clear()
        self.writes.clear()
        self.put_back.clear()
        self.loader = ConsumerGroupLoader()
