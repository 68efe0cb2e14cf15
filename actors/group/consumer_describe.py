"""ConsumerGroupDescribe (KIP-848) in a `GroupShard`: the consumer groups of the new protocol as
Kafka describes them (group and assignment epochs, the assignor, each member's current and
target assignment with topic names), from the shard's `ShardState.consumer`.

A group id that is not a consumer group here (unknown, or a classic group) is answered
GROUP_ID_NOT_FOUND, as Kafka does. Topic names come from the group's subscription metadata
(the topics it was last assigned from); a topic no longer subscribed is named "".
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.group.consumer_group import EMPTY, ConsumerGroup
from actors.group.consumer_heartbeat import assignor_name
from actors.group.state import ShardState
from runtime.actor import Ask
from wire.consumer_group_records import Assignment
from wire.errors import ErrorCode
from wire.messages import (
    DescribedConsumerAssignment,
    DescribedConsumerGroup,
    DescribedConsumerGroupMember,
    DescribedTopicPartitions,
)


@dataclass(frozen=True, slots=True)
class ConsumerDescribe(Ask[list[DescribedConsumerGroup]]):
    group_ids: tuple[str, ...]


def describe(state: ShardState, group_ids: tuple[str, ...]) -> list[DescribedConsumerGroup]:
    described = []
    for group_id in group_ids:
        group = state.consumer.groups.get(group_id)
        if group is None:
            described.append(
                DescribedConsumerGroup(
                    group_id=group_id,
                    error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                    error_message=f"Group {group_id} not found or not a consumer group.",
                )
            )
            continue
        described.append(_described(state, group))
    return described


def _described(state: ShardState, group: ConsumerGroup) -> DescribedConsumerGroup:
    names = {t.topic_id: n for n, t in group.subscription_metadata.items()}

    def assignment(partitions: Assignment) -> DescribedConsumerAssignment:
        return DescribedConsumerAssignment(
            topic_partitions=[
                DescribedTopicPartitions(
                    topic_id=topic_id, topic_name=names.get(topic_id, ""), partitions=sorted(ps)
                )
                for topic_id, ps in sorted(partitions.items())
            ]
        )

    return DescribedConsumerGroup(
        group_id=group.group_id,
        group_state=group.state.value,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=assignor_name(state, group),
        members=[
            DescribedConsumerGroupMember(
                member_id=member.member_id,
                instance_id=member.instance_id,
                rack_id=member.rack_id,
                member_epoch=member.member_epoch,
                client_id=member.client_id,
                client_host=member.client_host,
                subscribed_topic_names=list(member.subscribed_topic_names),
                subscribed_topic_regex=member.subscribed_topic_regex,
                assignment=assignment(member.assigned),
                target_assignment=assignment(group.target.get(member.member_id, EMPTY)),
            )
            for member in group.members.values()
        ],
    )
