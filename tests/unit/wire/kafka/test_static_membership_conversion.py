"""Static membership on the Kafka listener: `group_instance_id` crosses between kio's entities and
the native group messages at every served version that has it (JoinGroup v5+, SyncGroup v3+,
Heartbeat v3+, LeaveGroup v3+, OffsetCommit v7+, TxnOffsetCommit v3, DescribeGroups v4+), so the
coordinator sees what a Kafka client with `group.instance.id` sends and the client sees what it
answers."""

from __future__ import annotations

from typing import Any

import pytest
from kio.static.constants import EntityType

from wire.kafka.codec import decode_request, encode_response, read_prefix, schema
from wire.kafka.convert import to_kio, to_native
from wire.messages import (
    ApiKey,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    MemberResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    Request,
    Response,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)

from .helpers import request_frame, response_body

INSTANCE = "billing-0"

REQUESTS: list[tuple[int, range, Request]] = [
    (
        ApiKey.JOIN_GROUP,
        range(5, 8),
        JoinGroupRequest(
            group_id="g",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=30_000,
            member_id="",
            group_instance_id=INSTANCE,
            protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")],
        ),
    ),
    (
        ApiKey.SYNC_GROUP,
        range(3, 6),
        SyncGroupRequest(
            group_id="g", generation_id=3, member_id="m-1", group_instance_id=INSTANCE
        ),
    ),
    (
        ApiKey.HEARTBEAT,
        range(3, 5),
        HeartbeatRequest(
            group_id="g", generation_id=3, member_id="m-1", group_instance_id=INSTANCE
        ),
    ),
    (
        ApiKey.LEAVE_GROUP,
        range(3, 6),
        LeaveGroupRequest(
            group_id="g", members=[MemberIdentity(member_id="", group_instance_id=INSTANCE)]
        ),
    ),
    (
        ApiKey.OFFSET_COMMIT,
        range(7, 9),
        OffsetCommitRequest(
            group_id="g",
            generation_id_or_member_epoch=3,
            member_id="m-1",
            group_instance_id=INSTANCE,
            topics=[
                OffsetCommitRequestTopic(
                    name="orders",
                    partitions=[
                        OffsetCommitRequestPartition(partition_index=0, committed_offset=1)
                    ],
                )
            ],
        ),
    ),
    (
        ApiKey.TXN_OFFSET_COMMIT,
        range(3, 4),
        TxnOffsetCommitRequest(
            transactional_id="t",
            group_id="g",
            producer_id=1,
            producer_epoch=0,
            generation_id=3,
            member_id="m-1",
            group_instance_id=INSTANCE,
            topics=[],
        ),
    ),
]

RESPONSES: list[tuple[int, range, Response]] = [
    (
        ApiKey.JOIN_GROUP,
        range(5, 8),
        JoinGroupResponse(
            generation_id=3,
            protocol_type="consumer",
            protocol_name="range",
            leader="m-1",
            member_id="m-1",
            members=[
                JoinGroupResponseMember(
                    member_id="m-1", group_instance_id=INSTANCE, metadata=b"\x00\x01"
                )
            ],
        ),
    ),
    (
        ApiKey.LEAVE_GROUP,
        range(3, 6),
        LeaveGroupResponse(
            members=[MemberResponse(member_id="", group_instance_id=INSTANCE, error_code=0)]
        ),
    ),
    (
        ApiKey.DESCRIBE_GROUPS,
        range(4, 6),
        DescribeGroupsResponse(
            groups=[
                DescribedGroup(
                    group_id="g",
                    group_state="Stable",
                    protocol_type="consumer",
                    protocol_data="range",
                    members=[
                        DescribedGroupMember(
                            member_id="m-1",
                            group_instance_id=INSTANCE,
                            client_id="c",
                            client_host="/127.0.0.1",
                        )
                    ],
                )
            ]
        ),
    ),
]


def _versions(cases: list[tuple[int, range, Any]]) -> list[tuple[int, int, Any]]:
    return [(key, version, message) for key, versions, message in cases for version in versions]


@pytest.mark.parametrize(("api_key", "version", "request_"), _versions(REQUESTS))
def test_requests_carry_the_instance_id(api_key: int, version: int, request_: Request) -> None:
    request_cls = schema(api_key, version, EntityType.request)
    frame = request_frame(api_key, version, to_kio(request_, request_cls))
    back: Any = to_native(decode_request(frame, read_prefix(frame)).body, type(request_))
    if api_key == ApiKey.LEAVE_GROUP:
        assert back.members[0].group_instance_id == INSTANCE
    else:
        assert back.group_instance_id == INSTANCE


@pytest.mark.parametrize(("api_key", "version", "response"), _versions(RESPONSES))
def test_answers_carry_the_instance_id(api_key: int, version: int, response: Response) -> None:
    response_cls = schema(api_key, version, EntityType.response)
    _, decoded = response_body(encode_response(5, to_kio(response, response_cls)), response_cls)
    again: Any = to_native(decoded, type(response))
    members = again.groups[0].members if api_key == ApiKey.DESCRIBE_GROUPS else again.members
    assert members[0].group_instance_id == INSTANCE
