"""The native group messages meet kio's Kafka entities field by field, at every version the
Kafka listener will serve (FindCoordinator v0-3 and LeaveGroup v0-2 have single-key shapes that
need their own mapping and are left out here)."""

from __future__ import annotations

from typing import Any

import pytest
from kio.static.constants import EntityType

from wire.kafka.codec import decode_request, encode_response, read_prefix, schema
from wire.kafka.convert import to_kio, to_native
from wire.messages import (
    ApiKey,
    Coordinator,
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    MemberIdentity,
    MemberResponse,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
    Request,
    Response,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)

from .test_codec import request_frame, response_body

CASES: list[tuple[int, range, Request, Response]] = [
    (
        ApiKey.FIND_COORDINATOR,
        range(4, 5),
        FindCoordinatorRequest(key_type=0, coordinator_keys=["g1", "g2"]),
        FindCoordinatorResponse(
            coordinators=[Coordinator(key="g1", node_id=2, host="h", port=19094)]
        ),
    ),
    (
        ApiKey.JOIN_GROUP,
        range(8),
        JoinGroupRequest(
            group_id="g",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=30_000,
            member_id="m-1",
            protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")],
        ),
        JoinGroupResponse(
            generation_id=3,
            protocol_type="consumer",
            protocol_name="range",
            leader="m-1",
            member_id="m-1",
            members=[JoinGroupResponseMember(member_id="m-1", metadata=b"\x00\x01")],
        ),
    ),
    (
        ApiKey.SYNC_GROUP,
        range(6),
        SyncGroupRequest(
            group_id="g",
            generation_id=3,
            member_id="m-1",
            assignments=[SyncGroupRequestAssignment(member_id="m-1", assignment=b"a")],
        ),
        SyncGroupResponse(protocol_type="consumer", protocol_name="range", assignment=b"a"),
    ),
    (
        ApiKey.HEARTBEAT,
        range(5),
        HeartbeatRequest(group_id="g", generation_id=3, member_id="m-1"),
        HeartbeatResponse(error_code=27),
    ),
    (
        ApiKey.LEAVE_GROUP,
        range(3, 6),
        LeaveGroupRequest(group_id="g", members=[MemberIdentity(member_id="m-1")]),
        LeaveGroupResponse(members=[MemberResponse(member_id="m-1", error_code=0)]),
    ),
    (
        ApiKey.OFFSET_COMMIT,
        range(2, 9),
        OffsetCommitRequest(
            group_id="g",
            generation_id_or_member_epoch=3,
            member_id="m-1",
            topics=[
                OffsetCommitRequestTopic(
                    name="orders",
                    partitions=[
                        OffsetCommitRequestPartition(
                            partition_index=0, committed_offset=41, committed_metadata="x"
                        )
                    ],
                )
            ],
        ),
        OffsetCommitResponse(
            topics=[
                OffsetCommitResponseTopic(
                    name="orders",
                    partitions=[OffsetCommitResponsePartition(partition_index=0)],
                )
            ]
        ),
    ),
    (
        ApiKey.OFFSET_FETCH,
        range(1, 8),
        OffsetFetchRequest(
            group_id="g",
            topics=[OffsetFetchRequestTopic(name="orders", partition_indexes=[0, 1])],
        ),
        OffsetFetchResponse(
            topics=[
                OffsetFetchResponseTopic(
                    name="orders",
                    partitions=[
                        OffsetFetchResponsePartition(
                            partition_index=0, committed_offset=41, metadata="x"
                        ),
                        OffsetFetchResponsePartition(partition_index=1, metadata=""),
                    ],
                )
            ]
        ),
    ),
    (
        ApiKey.DESCRIBE_GROUPS,
        range(6),
        DescribeGroupsRequest(groups=["g"]),
        DescribeGroupsResponse(
            groups=[
                DescribedGroup(
                    group_id="g",
                    group_state="Stable",
                    protocol_type="consumer",
                    protocol_data="range",
                    members=[
                        DescribedGroupMember(
                            member_id="m-1", client_id="c", client_host="/127.0.0.1"
                        )
                    ],
                )
            ]
        ),
    ),
    (
        ApiKey.LIST_GROUPS,
        range(5),
        ListGroupsRequest(),
        ListGroupsResponse(
            groups=[ListedGroup(group_id="g", protocol_type="consumer", group_state="Empty")]
        ),
    ),
]


@pytest.mark.parametrize(
    ("api_key", "version", "request_", "response"),
    [(key, v, req, resp) for key, versions, req, resp in CASES for v in versions],
)
def test_group_messages_convert_at_every_served_version(
    api_key: int, version: int, request_: Request, response: Response
) -> None:
    request_cls = schema(api_key, version, EntityType.request)
    frame = request_frame(api_key, version, to_kio(request_, request_cls))
    body = decode_request(frame, read_prefix(frame)).body
    back: Any = to_native(body, type(request_))
    assert type(back) is type(request_)
    response_cls = schema(api_key, version, EntityType.response)
    _, decoded = response_body(encode_response(5, to_kio(response, response_cls)), response_cls)
    again: Any = to_native(decoded, type(response))
    assert type(again) is type(response)


@pytest.mark.parametrize(("api_key", "versions", "request_", "response"), CASES)
def test_the_newest_served_version_carries_every_field(
    api_key: int, versions: range, request_: Request, response: Response
) -> None:
    version = versions[-1]
    request_cls = schema(api_key, version, EntityType.request)
    frame = request_frame(api_key, version, to_kio(request_, request_cls))
    assert to_native(decode_request(frame, read_prefix(frame)).body, type(request_)) == request_
    response_cls = schema(api_key, version, EntityType.response)
    _, decoded = response_body(encode_response(5, to_kio(response, response_cls)), response_cls)
    assert to_native(decoded, type(response)) == response
