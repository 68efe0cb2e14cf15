"""The Kafka APIs ketch serves, their versions, and how each maps onto a native message.

Each served API is one `KafkaApi`: its version range (what ApiVersions advertises; only versions
the tests drive through real clients or the codec tests encode), the native request it becomes,
and the few places where Kafka's semantics need more than the field-by-field conversion of
`wire.kafka.convert`:

- Metadata v0 asks for every topic with an empty list (v1+ with null).
- Fetch v13+ names topics by topic id (the native Fetch by name): ids are resolved through the
  broker's metadata (`TopicIds`) on the way in and back on the way out; an id the broker does not
  know is left out of the native fetch and answered UNKNOWN_TOPIC_ID for its partitions, as
  Kafka does. v15+ moves the replica id
  into a tagged `replica_state`.
- Fetch and ListOffsets from a Kafka client must be a consumer's: a `replica_id` of a broker would
  move a follower's state, which only the native listener's cluster members may do. Such
  requests are refused per partition (Kafka answers them the same way to an unauthorised
  principal).
- FindCoordinator v0-3 ask for one key and answer at the top level (the native message is v4's
  batched form); LeaveGroup v0-2 name one member. OffsetFetch v1 has no top-level error, so an
  error is answered on each requested partition; v2-v7 carry it at the top level *and* on each
  requested partition, because aiokafka and kafka-python read only the partitions' errors (a
  top-level COORDINATOR_LOAD_IN_PROGRESS alone reads to them as "nothing committed", and a
  consumer would restart from its reset policy). Kafka's own client checks the top level first,
  so the copy changes nothing for it.

A handler that fails is answered the way Kafka answers an unexpected exception: the request's
own topics and partitions, each with the error code (`wire.error_responses`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from wire.errors import ErrorCode
from wire.kafka.convert import element_class, to_kio, to_native
from wire.messages import (
    ApiKey,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    FetchTopic,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    InitProducerIdRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListOffsetsRequest,
    MemberIdentity,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
    Request,
    Response,
    SyncGroupRequest,
)

CONSUMER_REPLICA_ID: Final = -1


class TopicIds(Protocol):
    """The broker's topic names and ids (its metadata), for the APIs that name topics by id."""

    def name_of(self, topic_id: bytes) -> str | None: ...

    def id_of(self, name: str) -> bytes: ...


RequestHook = Callable[[Any, int, TopicIds], tuple[Request, object]]
"""(kio body, version, topics) -> (native request, what the response hook needs to know)."""

ResponseHook = Callable[[Response, type[Any], object, TopicIds], Any]
"""(native response, kio response class, the request hook's note, topics) -> kio response."""


@dataclass(frozen=True, slots=True)
class KafkaApi:
    """One served API. `native` is None only for ApiVersions (the dialect answers it)."""

    key: ApiKey
    low: int
    high: int
    native: type[Request] | None = None
    # Conversions with more to them than field by field (Metadata v0, Fetch by topic id).
    request_hook: RequestHook | None = None
    response_hook: ResponseHook | None = None
    # An error to answer instead of serving the request (a replica id on a consumer API).
    refuse: Callable[[Request], ErrorCode | None] | None = None

    def serves(self, version: int) -> bool:
        return self.low <= version <= self.high

    def native_request(self, body: Any, version: int, topics: TopicIds) -> tuple[Request, object]:
        if self.request_hook is not None:
            return self.request_hook(body, version, topics)
        assert self.native is not None
        return to_native(body, self.native), None

    def kio_response(
        self, response: Response, response_cls: type[Any], note: object, topics: TopicIds
    ) -> Any:
        """A native response as kio's response entity of the request's version."""
        if self.response_hook is not None:
            return self.response_hook(response, response_cls, note, topics)
        return to_kio(response, response_cls)


# -- per-API meaning -------------------------------------------------------------------------------


def _metadata_request(body: Any, version: int, topics: TopicIds) -> tuple[Request, object]:
    request = to_native(body, MetadataRequest)
    if version == 0 and not request.topics:
        return MetadataRequest(topics=None), None
    return request, None


FETCH_BY_TOPIC_ID: Final = 13
FETCH_REPLICA_STATE: Final = 15


@dataclass(frozen=True, slots=True)
class FetchByIds:
    """What a Fetch v13+ answer needs: the id of each topic fetched by name, and the topic ids
    the broker does not know (left out of the native fetch, answered UNKNOWN_TOPIC_ID)."""

    ids: dict[str, bytes]
    unknown: list[tuple[bytes, list[int]]]


def _fetch_request(body: Any, version: int, topics: TopicIds) -> tuple[Request, object]:
    if version < FETCH_BY_TOPIC_ID:
        return to_native(body, FetchRequest), None
    note = FetchByIds({}, [])
    native_topics = []
    for topic in body.topics:
        topic_id = topic.topic_id.bytes
        name = topics.name_of(topic_id)
        if name is None:
            note.unknown.append((topic_id, [p.partition for p in topic.partitions]))
            continue
        note.ids[name] = topic_id
        partitions = [to_native(p, FetchPartition) for p in topic.partitions]
        native_topics.append(FetchTopic(topic=name, partitions=partitions))
    given: dict[str, Any] = {"topics": native_topics}
    if version >= FETCH_REPLICA_STATE:
        given["replica_id"] = body.replica_state.replica_id
    return to_native(body, FetchRequest, **given), note


def _fetch_response(
    response: Response, response_cls: type[Any], note: object, topics: TopicIds
) -> Any:
    if note is None:
        return to_kio(response, response_cls)
    assert isinstance(response, FetchResponse)
    assert isinstance(note, FetchByIds)
    topic_cls = element_class(response_cls, "responses")
    partition_cls = element_class(topic_cls, "partitions")
    answers = [
        topic_cls(
            topic_id=uuid.UUID(bytes=note.ids.get(topic.topic) or topics.id_of(topic.topic)),
            partitions=tuple(to_kio(p, partition_cls) for p in topic.partitions),
        )
        for topic in response.responses
    ]
    for topic_id, partitions in note.unknown:
        unknown = [
            FetchResponsePartition(partition_index=p, error_code=ErrorCode.UNKNOWN_TOPIC_ID)
            for p in partitions
        ]
        answers.append(
            topic_cls(
                topic_id=uuid.UUID(bytes=topic_id),
                partitions=tuple(to_kio(p, partition_cls) for p in unknown),
            )
        )
    return to_kio(response, response_cls, responses=tuple(answers))


def _consumers_only(request: Request) -> ErrorCode | None:
    replica_id = getattr(request, "replica_id", CONSUMER_REPLICA_ID)
    return None if replica_id < 0 else ErrorCode.CLUSTER_AUTHORIZATION_FAILED


FIND_COORDINATOR_BATCHED: Final = 4
LEAVE_GROUP_BATCHED: Final = 3
OFFSET_FETCH_TOP_LEVEL_ERROR: Final = 2


@dataclass(frozen=True, slots=True)
class _SingleCoordinator:
    """FindCoordinator v0-3's answer: one coordinator, at the top level."""

    error_code: int
    error_message: str | None
    node_id: int
    host: str
    port: int


def _find_coordinator_request(body: Any, version: int, topics: TopicIds) -> tuple[Request, object]:
    if version >= FIND_COORDINATOR_BATCHED:
        return to_native(body, FindCoordinatorRequest), None
    # v0 has no key type (it asks for a group coordinator); v0-3 ask for one key.
    key_type = getattr(body, "key_type", 0)
    return FindCoordinatorRequest(key_type=key_type, coordinator_keys=[body.key]), None


def _find_coordinator_response(
    response: Response, response_cls: type[Any], note: object, topics: TopicIds
) -> Any:
    assert isinstance(response, FindCoordinatorResponse)
    if "coordinators" in response_cls.__dataclass_fields__:
        return to_kio(response, response_cls)
    first = response.coordinators[0] if response.coordinators else None
    if first is None:  # an error answer without the key
        single = _SingleCoordinator(response.error_code, None, -1, "", -1)
    else:
        single = _SingleCoordinator(
            first.error_code, first.error_message, first.node_id, first.host, first.port
        )
    return to_kio(single, response_cls)


def _leave_group_request(body: Any, version: int, topics: TopicIds) -> tuple[Request, object]:
    if version >= LEAVE_GROUP_BATCHED:
        return to_native(body, LeaveGroupRequest), None
    # v0-2: one member, by id.
    member = MemberIdentity(member_id=body.member_id)
    return LeaveGroupRequest(group_id=body.group_id, members=[member]), None


def _leave_group_response(
    response: Response, response_cls: type[Any], note: object, topics: TopicIds
) -> Any:
    assert isinstance(response, LeaveGroupResponse)
    if response.error_code == ErrorCode.NONE and "members" not in response_cls.__dataclass_fields__:
        # v0-2 carry only the top-level code: the one member's outcome.
        codes = [m.error_code for m in response.members if m.error_code != ErrorCode.NONE]
        if codes:
            response = LeaveGroupResponse(error_code=codes[0])
    return to_kio(response, response_cls)


def _offset_fetch_request(body: Any, version: int, topics: TopicIds) -> tuple[Request, object]:
    request = to_native(body, OffsetFetchRequest)
    return request, request


def _offset_fetch_response(
    response: Response, response_cls: type[Any], note: object, topics: TopicIds
) -> Any:
    assert isinstance(response, OffsetFetchResponse)
    assert isinstance(note, OffsetFetchRequest)
    if response.error_code != ErrorCode.NONE and note.topics is not None:
        # Each requested partition carries the error too (see the module's note); v1 has only
        # those, so the top-level field is left out there by to_kio.
        response = OffsetFetchResponse(
            error_code=response.error_code,
            topics=[
                OffsetFetchResponseTopic(
                    name=topic.name,
                    partitions=[
                        OffsetFetchResponsePartition(
                            partition_index=p, metadata="", error_code=response.error_code
                        )
                        for p in topic.partition_indexes
                    ],
                )
                for topic in note.topics
            ],
        )
    return to_kio(response, response_cls)


API_VERSIONS_RANGE: Final = (0, 3)

APIS: Final[dict[int, KafkaApi]] = {
    api.key: api
    for api in (
        KafkaApi(ApiKey.API_VERSIONS, *API_VERSIONS_RANGE),
        KafkaApi(ApiKey.METADATA, 0, 12, MetadataRequest, request_hook=_metadata_request),
        KafkaApi(ApiKey.PRODUCE, 3, 9, ProduceRequest),
        KafkaApi(
            ApiKey.FETCH,
            4,
            16,
            FetchRequest,
            request_hook=_fetch_request,
            response_hook=_fetch_response,
            refuse=_consumers_only,
        ),
        KafkaApi(ApiKey.LIST_OFFSETS, 1, 7, ListOffsetsRequest, refuse=_consumers_only),
        KafkaApi(ApiKey.OFFSET_FOR_LEADER_EPOCH, 2, 4, OffsetForLeaderEpochRequest),
        KafkaApi(ApiKey.CREATE_TOPICS, 2, 5, CreateTopicsRequest),
        KafkaApi(ApiKey.DELETE_TOPICS, 1, 4, DeleteTopicsRequest),
        KafkaApi(ApiKey.INIT_PRODUCER_ID, 0, 4, InitProducerIdRequest),
        KafkaApi(ApiKey.DESCRIBE_CONFIGS, 1, 4, DescribeConfigsRequest),
        KafkaApi(
            ApiKey.FIND_COORDINATOR,
            0,
            4,
            FindCoordinatorRequest,
            request_hook=_find_coordinator_request,
            response_hook=_find_coordinator_response,
        ),
        KafkaApi(ApiKey.JOIN_GROUP, 0, 7, JoinGroupRequest),
        KafkaApi(ApiKey.SYNC_GROUP, 0, 5, SyncGroupRequest),
        KafkaApi(ApiKey.HEARTBEAT, 0, 4, HeartbeatRequest),
        KafkaApi(
            ApiKey.LEAVE_GROUP,
            0,
            5,
            LeaveGroupRequest,
            request_hook=_leave_group_request,
            response_hook=_leave_group_response,
        ),
        KafkaApi(ApiKey.OFFSET_COMMIT, 2, 8, OffsetCommitRequest),
        KafkaApi(
            ApiKey.OFFSET_FETCH,
            1,
            7,
            OffsetFetchRequest,
            request_hook=_offset_fetch_request,
            response_hook=_offset_fetch_response,
        ),
        KafkaApi(ApiKey.DESCRIBE_GROUPS, 0, 5, DescribeGroupsRequest),
        KafkaApi(ApiKey.LIST_GROUPS, 0, 4, ListGroupsRequest),
    )
}
