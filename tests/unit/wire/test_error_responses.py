"""wire/error_responses.py: one error answer per request type, with the message where it fits
(the Kafka-side conversion of every answer is tested in tests/unit/wire/kafka/test_codec.py)."""

from __future__ import annotations

from wire.error_responses import error_response
from wire.errors import ErrorCode
from wire.messages import (
    CreatableTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    HeartbeatRequest,
    HeartbeatResponse,
)

TIMED_OUT = ErrorCode.REQUEST_TIMED_OUT


def test_each_topic_gets_the_code_and_the_message() -> None:
    request = CreateTopicsRequest(
        topics=[
            CreatableTopic(name="a", num_partitions=1, replication_factor=1),
            CreatableTopic(name="b", num_partitions=1, replication_factor=1),
        ]
    )
    answer = error_response(request, TIMED_OUT, "unreachable")
    assert isinstance(answer, CreateTopicsResponse)
    assert [(t.name, t.error_code, t.error_message) for t in answer.topics] == [
        ("a", TIMED_OUT, "unreachable"),
        ("b", TIMED_OUT, "unreachable"),
    ]
    deleted = error_response(DeleteTopicsRequest(topic_names=["a"]), TIMED_OUT)
    assert isinstance(deleted, DeleteTopicsResponse)
    assert [(r.name, r.error_code, r.error_message) for r in deleted.responses] == [
        ("a", TIMED_OUT, None)
    ]


def test_a_request_without_partitions_gets_the_top_level_code() -> None:
    described = error_response(DescribeClusterRequest(), TIMED_OUT, "unreachable")
    assert isinstance(described, DescribeClusterResponse)
    assert (described.error_code, described.error_message) == (TIMED_OUT, "unreachable")
    # No room for a message: the code alone.
    heartbeat = error_response(
        HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), TIMED_OUT, "dropped"
    )
    assert isinstance(heartbeat, HeartbeatResponse)
    assert heartbeat.error is TIMED_OUT
