"""The native group messages meet kio's Kafka entities field by field, at every version the
Kafka listener will serve, KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe included
(FindCoordinator v0-3 and LeaveGroup v0-2 have single-key shapes that need their own mapping and
are left out here)."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.static.constants import EntityType

from wire.kafka.apis import APIS
from wire.kafka.codec import decode_request, encode_response, read_prefix, schema
from wire.kafka.convert import to_kio, to_native
from wire.messages import (
    ApiKey,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatAssignment,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    ConsumerGroupTopicPartitions,
    Coordinator,
    DescribedConsumerAssignment,
    DescribedConsumerGroup,
    DescribedConsumerGroupMember,
    DescribedGroup,
    DescribedGroupMember,
    DescribedTopicPartitions,
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

from .helpers import NoTopicIds, request_frame, response_body
from .samples import TOPIC_ID

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
        range(2, 10),
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
        range(6),
        ListGroupsRequest(states_filter=["Stable"], types_filter=["consumer"]),
        ListGroupsResponse(
            groups=[
                ListedGroup(
                    group_id="g",
                    protocol_type="consumer",
                    group_state="Stable",
                    group_type="consumer",
                )
            ]
        ),
    ),
    (
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        range(2),
        ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id="m-1",
            member_epoch=3,
            instance_id="i",
            rack_id="r",
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=["orders"],
            subscribed_topic_regex="ord.*",
            server_assignor="range",
            topic_partitions=[ConsumerGroupTopicPartitions(topic_id=TOPIC_ID, partitions=[1])],
        ),
        ConsumerGroupHeartbeatResponse(
            member_id="m-1",
            member_epoch=4,
            heartbeat_interval_ms=5_000,
            assignment=ConsumerGroupHeartbeatAssignment(
                topic_partitions=[ConsumerGroupTopicPartitions(topic_id=TOPIC_ID, partitions=[0])]
            ),
        ),
    ),
    (
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        range(2),
        ConsumerGroupDescribeRequest(group_ids=["g"], include_authorized_operations=True),
        ConsumerGroupDescribeResponse(
            groups=[
                DescribedConsumerGroup(
                    group_id="g",
                    group_state="Stable",
                    group_epoch=4,
                    assignment_epoch=4,
                    assignor_name="uniform",
                    members=[
                        DescribedConsumerGroupMember(
                            member_id="m-1",
                            member_epoch=4,
                            client_id="c",
                            client_host="/h",
                            subscribed_topic_names=["orders"],
                            assignment=DescribedConsumerAssignment(
                                topic_partitions=[
                                    DescribedTopicPartitions(
                                        topic_id=TOPIC_ID, topic_name="orders", partitions=[0]
                                    )
                                ]
                            ),
                            target_assignment=DescribedConsumerAssignment(),
                        )
                    ],
                )
            ]
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


TOPICS = NoTopicIds()


@pytest.mark.parametrize("version", range(4))
def test_find_coordinator_v0_to_v3_ask_for_one_key_and_answer_at_the_top(version: int) -> None:
    api = APIS[ApiKey.FIND_COORDINATOR]
    request_cls = schema(ApiKey.FIND_COORDINATOR, version, EntityType.request)
    fields = request_cls.__dataclass_fields__
    body = request_cls(key="g", **({"key_type": 0} if "key_type" in fields else {}))
    native, note = api.native_request(body, version, TOPICS)
    assert native == FindCoordinatorRequest(key_type=0, coordinator_keys=["g"])
    response_cls = schema(ApiKey.FIND_COORDINATOR, version, EntityType.response)
    found = FindCoordinatorResponse(
        coordinators=[Coordinator(key="g", node_id=2, host="h", port=19094)]
    )
    _, decoded = response_body(
        encode_response(1, api.kio_response(found, response_cls, note, TOPICS)), response_cls
    )
    assert (decoded.node_id, decoded.host, decoded.port) == (2, "h", 19094)
    missing = FindCoordinatorResponse(
        coordinators=[Coordinator(key="g", error_code=15, error_message="creating")]
    )
    _, decoded = response_body(
        encode_response(1, api.kio_response(missing, response_cls, note, TOPICS)), response_cls
    )
    assert decoded.error_code == KioErrorCode.coordinator_not_available


@pytest.mark.parametrize("version", range(3))
def test_leave_group_v0_to_v2_name_one_member(version: int) -> None:
    api = APIS[ApiKey.LEAVE_GROUP]
    request_cls = schema(ApiKey.LEAVE_GROUP, version, EntityType.request)
    native, note = api.native_request(request_cls(group_id="g", member_id="m"), version, TOPICS)
    assert native == LeaveGroupRequest(group_id="g", members=[MemberIdentity(member_id="m")])
    response_cls = schema(ApiKey.LEAVE_GROUP, version, EntityType.response)
    unknown = LeaveGroupResponse(members=[MemberResponse(member_id="m", error_code=25)])
    kio_answer = api.kio_response(unknown, response_cls, note, TOPICS)
    assert kio_answer.error_code == KioErrorCode.unknown_member_id


@pytest.mark.parametrize("version", range(1, 8))
def test_offset_fetch_reports_errors_on_each_requested_partition(version: int) -> None:
    """aiokafka and kafka-python read only partition errors; v2+ also keep the top level."""
    api = APIS[ApiKey.OFFSET_FETCH]
    request = OffsetFetchRequest(
        group_id="g", topics=[OffsetFetchRequestTopic(name="orders", partition_indexes=[0, 2])]
    )
    request_cls = schema(ApiKey.OFFSET_FETCH, version, EntityType.request)
    native, note = api.native_request(to_kio(request, request_cls), version, TOPICS)
    assert isinstance(native, OffsetFetchRequest)
    assert native.topics == request.topics
    response_cls = schema(ApiKey.OFFSET_FETCH, version, EntityType.response)
    answer = api.kio_response(OffsetFetchResponse(error_code=14), response_cls, note, TOPICS)
    _, decoded = response_body(encode_response(1, answer), response_cls)
    assert [(p.partition_index, p.error_code) for p in decoded.topics[0].partitions] == [
        (0, KioErrorCode.coordinator_load_in_progress),
        (2, KioErrorCode.coordinator_load_in_progress),
    ]
    if version >= 2:
        assert decoded.error_code == KioErrorCode.coordinator_load_in_progress


@pytest.mark.parametrize("version", range(8))
def test_a_join_error_encodes_at_every_version(version: int) -> None:
    """MEMBER_ID_REQUIRED carries no protocol: null where v7 allows it, "" before."""
    response_cls = schema(ApiKey.JOIN_GROUP, version, EntityType.response)
    answer = JoinGroupResponse(error_code=79, member_id="c-1")
    _, decoded = response_body(encode_response(1, to_kio(answer, response_cls)), response_cls)
    assert decoded.member_id == "c-1"
    assert decoded.protocol_name in ("", None)
