"""A group of the new consumer protocol (KIP-848) as `ketch group describe` shows it.

DescribeGroups answers such a group as Dead (Kafka does the same for v0-5): its members, epochs
and assignments are only in ConsumerGroupDescribe's answer. `ketch group describe` asks for that
when DescribeGroups says Dead, and shows the members, their subscriptions and their current
assignments (what each member owns now; the target assignment may be ahead of it during a
rebalance), the state, and the assignor as the group's protocol.

Pure conversion of one answer; no state.
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.errors import ErrorCode
from wire.messages import ConsumerGroupDescribeResponse

CONSUMER_GROUP_TYPE = "consumer"  # the protocol type shown: KIP-848's group type


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None
    client_id: str
    host: str
    subscription: tuple[str, ...]
    assignment: dict[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class ConsumerGroupView:
    state: str
    assignor: str
    epoch: int
    members: tuple[ConsumerMember, ...]


def consumer_group_view(response: ConsumerGroupDescribeResponse) -> ConsumerGroupView | None:
    """The one group of `response`, or None when the coordinator has no such consumer group
    (an error answer, or a group that is Dead)."""
    if response.error_code != ErrorCode.NONE or len(response.groups) != 1:
        return None
    (group,) = response.groups
    if group.error_code != ErrorCode.NONE or group.group_state in ("", "Dead", "dead"):
        return None
    members = tuple(
        ConsumerMember(
            member_id=member.member_id,
            instance_id=member.instance_id,
            client_id=member.client_id,
            host=member.client_host,
            subscription=tuple(member.subscribed_topic_names),
            assignment={
                assigned.topic_name: tuple(sorted(assigned.partitions))
                for assigned in member.assignment.topic_partitions
            },
        )
        for member in sorted(group.members, key=lambda m: m.member_id)
    )
    return ConsumerGroupView(group.group_state, group.assignor_name, group.group_epoch, members)
