"""DeleteGroups (v0-2) and OffsetDelete (v0) through the Kafka listener's table: each served
version meets the native message field by field, and a request-level error reaches a Kafka
client where it can read it (on each group for DeleteGroups, whose response has no top-level
code; at the top for OffsetDelete)."""

from __future__ import annotations

from typing import Any

import pytest
from kio.static.constants import EntityType

from wire.error_responses import error_response
from wire.errors import ErrorCode
from wire.kafka.apis import APIS
from wire.kafka.codec import decode_request, encode_response, read_prefix, schema
from wire.kafka.convert import to_kio, to_native
from wire.messages import (
    ApiKey,
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
    Request,
    Response,
)

from .helpers import NoTopicIds, request_frame, response_body

DELETE_GROUPS = DeleteGroupsRequest(groups_names=["a", "b"])
DELETED = DeleteGroupsResponse(
    results=[
        DeletableGroupResult(group_id="a"),
        DeletableGroupResult(group_id="b", error_code=ErrorCode.NON_EMPTY_GROUP),
    ]
)
OFFSET_DELETE = OffsetDeleteRequest(
    group_id="g",
    topics=[
        OffsetDeleteRequestTopic(
            name="orders",
            partitions=[
                OffsetDeleteRequestPartition(partition_index=0),
                OffsetDeleteRequestPartition(partition_index=3),
            ],
        )
    ],
)
OFFSETS_DELETED = OffsetDeleteResponse(
    topics=[
        OffsetDeleteResponseTopic(
            name="orders",
            partitions=[
                OffsetDeleteResponsePartition(partition_index=0),
                OffsetDeleteResponsePartition(
                    partition_index=3, error_code=ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
                ),
            ],
        )
    ]
)
CASES: list[tuple[int, int, Request, Response]] = [
    *((ApiKey.DELETE_GROUPS, v, DELETE_GROUPS, DELETED) for v in range(3)),
    (ApiKey.OFFSET_DELETE, 0, OFFSET_DELETE, OFFSETS_DELETED),
]


def through_listener(api_key: int, version: int, request: Request, response: Response) -> Any:
    """`request` as a Kafka client sends it, read by the listener's table, then `response` as
    the client reads it back: (the native request, the client's response body)."""
    request_cls = schema(api_key, version, EntityType.request)
    frame = request_frame(api_key, version, to_kio(request, request_cls))
    api = APIS[api_key]
    native, note = api.native_request(
        decode_request(frame, read_prefix(frame)).body, version, NoTopicIds()
    )
    response_cls = schema(api_key, version, EntityType.response)
    answer = api.kio_response(response, response_cls, note, NoTopicIds())
    _, body = response_body(encode_response(5, answer), response_cls)
    return native, body


@pytest.mark.parametrize(("api_key", "version", "request_", "response"), CASES)
def test_each_served_version_carries_every_field(
    api_key: int, version: int, request_: Request, response: Response
) -> None:
    assert APIS[api_key].serves(version)
    native, body = through_listener(api_key, version, request_, response)
    assert native == request_
    assert to_native(body, type(response)) == response


@pytest.mark.parametrize("version", range(3))
def test_a_request_level_delete_groups_error_is_answered_on_each_group(version: int) -> None:
    refused = error_response(DELETE_GROUPS, ErrorCode.NOT_COORDINATOR)
    _, body = through_listener(ApiKey.DELETE_GROUPS, version, DELETE_GROUPS, refused)
    assert [(r.group_id, int(r.error_code)) for r in body.results] == [
        ("a", ErrorCode.NOT_COORDINATOR),
        ("b", ErrorCode.NOT_COORDINATOR),
    ]


def test_a_group_level_offset_delete_error_is_answered_at_the_top() -> None:
    refused = error_response(OFFSET_DELETE, ErrorCode.GROUP_ID_NOT_FOUND)
    _, body = through_listener(ApiKey.OFFSET_DELETE, 0, OFFSET_DELETE, refused)
    assert int(body.error_code) == ErrorCode.GROUP_ID_NOT_FOUND
    assert body.topics == ()
