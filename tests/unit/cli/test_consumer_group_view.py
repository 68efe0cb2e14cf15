"""`ketch group describe` of a KIP-848 group: the view built from ConsumerGroupDescribe."""

from __future__ import annotations

from cli.consumer_group_view import ConsumerMember, consumer_group_view
from wire.errors import ErrorCode
from wire.messages import ConsumerGroupDescribeResponse
from wire.messages.consumer_groups import (
    DescribedConsumerAssignment,
    DescribedConsumerGroup,
    DescribedConsumerGroupMember,
    DescribedTopicPartitions,
)


def member(member_id: str, partitions: list[int]) -> DescribedConsumerGroupMember:
    assigned = DescribedConsumerAssignment(
        topic_partitions=[
            DescribedTopicPartitions(topic_id=bytes(16), topic_name="orders", partitions=partitions)
        ]
    )
    return DescribedConsumerGroupMember(
        member_id=member_id,
        member_epoch=3,
        client_id=f"client-{member_id}",
        client_host="/127.0.0.1",
        subscribed_topic_names=["orders"],
        assignment=assigned,
        target_assignment=DescribedConsumerAssignment(),
    )


def answer(group: DescribedConsumerGroup) -> ConsumerGroupDescribeResponse:
    return ConsumerGroupDescribeResponse(groups=[group])


def test_members_and_their_current_assignments() -> None:
    group = DescribedConsumerGroup(
        group_id="g",
        group_state="Stable",
        group_epoch=3,
        assignor_name="uniform",
        members=[member("b", [3, 1]), member("a", [0, 2])],
    )
    view = consumer_group_view(answer(group))
    assert view is not None
    assert (view.state, view.assignor, view.epoch) == ("Stable", "uniform", 3)
    assert view.members[0] == ConsumerMember(
        "a", None, "client-a", "/127.0.0.1", ("orders",), {"orders": (0, 2)}
    )
    assert view.members[1].assignment == {"orders": (1, 3)}


def test_no_such_group_is_no_view() -> None:
    unknown = DescribedConsumerGroup(group_id="g", error_code=ErrorCode.GROUP_ID_NOT_FOUND)
    assert consumer_group_view(answer(unknown)) is None
    assert (
        consumer_group_view(answer(DescribedConsumerGroup(group_id="g", group_state="Dead")))
        is None
    )
    assert (
        consumer_group_view(ConsumerGroupDescribeResponse(error_code=ErrorCode.NOT_COORDINATOR))
        is None
    )
