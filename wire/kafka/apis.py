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
- FindCoordinator is answered here, without a handler, with COORDINATOR_NOT_AVAILABLE and a
  message saying why: ketch has no group or transaction coordinator yet, so a consumer that
  uses `assign()` works and one that joins a group is told what is missing.

A handler that fails is answered the way Kafka answers an unexpected exception: the request's
own topics and partitions, each with the error code (`error_response`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from wire.errors import ErrorCode
from wire.kafka.convert import element_class, to_kio, to_native
from wire.messages import (
    ApiKey,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    FetchTopic,
    InitProducerIdRequest,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseTopic,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TopicProduceResponse,
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
    """One served API. `native` is None for an API answered without a handler (`answer`)."""

    key: ApiKey
    low: int
    high: int
    native: type[Request] | None = None
    # Conversions with more to them than field by field (Metadata v0, Fetch by topic id).
    request_hook: RequestHook | None = None
    response_hook: ResponseHook | None = None
    # An error to answer instead of serving the request (a replica id on a consumer API).
    refuse: Callable[[Request], ErrorCode | None] | None = None
    # kio request body -> kio response body, for APIs without a handler.
    answer: Callable[[Any, type[Any]], Any] | None = None

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


_NO_GROUPS: Final = (
    "ketch has no group coordinator yet: consumer groups and committed offsets are not served; "
    "consume with assign() and explicit offsets"
)
_NO_TRANSACTIONS: Final = "ketch has no transaction coordinator: transactions are not supported"
_TRANSACTION_KEY_TYPE: Final = 1


@dataclass(frozen=True, slots=True)
class _Coordinator:
    key: str
    error_code: int
    error_message: str
    node_id: int = -1
    host: str = ""
    port: int = -1


@dataclass(frozen=True, slots=True)
class _FindCoordinatorAnswer:
    error_code: int
    error_message: str
    node_id: int = -1
    host: str = ""
    port: int = -1
    coordinators: list[_Coordinator] = field(default_factory=list)


def _find_coordinator(body: Any, response_cls: type[Any]) -> Any:
    # v0 has no key type: it asks for a group coordinator.
    key_type = getattr(body, "key_type", 0)
    message = _NO_TRANSACTIONS if key_type == _TRANSACTION_KEY_TYPE else _NO_GROUPS
    code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    # v0-3 ask for one key (`key`), v4+ for several (`coordinator_keys`), answered one by one.
    keys = getattr(body, "coordinator_keys", ())
    return to_kio(
        _FindCoordinatorAnswer(
            code, message, coordinators=[_Coordinator(key, code, message) for key in keys]
        ),
        response_cls,
    )


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
        KafkaApi(ApiKey.FIND_COORDINATOR, 0, 4, answer=_find_coordinator),
    )
}


# -- error answers ---------------------------------------------------------------------------------


def error_response(request: Request, code: ErrorCode) -> Response:
    """The native answer to `request` with `code` for each of its topics and partitions."""
    builder = _ERROR_BUILDERS.get(type(request))
    return (
        type(request).RESPONSE.error_response(code) if builder is None else builder(request, code)
    )


def _produce_error(request: Any, code: ErrorCode) -> Response:
    return ProduceResponse(
        responses=[
            TopicProduceResponse(
                name=topic.name,
                partition_responses=[
                    PartitionProduceResponse(index=p.index, error_code=code)
                    for p in topic.partition_data
                ],
            )
            for topic in request.topic_data
        ]
    )


def _fetch_error(request: Any, code: ErrorCode) -> Response:
    return FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic=topic.topic,
                partitions=[
                    FetchResponsePartition(partition_index=p.partition, error_code=code)
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def _list_offsets_error(request: Any, code: ErrorCode) -> Response:
    return ListOffsetsResponse(
        topics=[
            ListOffsetsTopicResponse(
                name=topic.name,
                partitions=[
                    ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=code)
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def _epoch_error(request: Any, code: ErrorCode) -> Response:
    return OffsetForLeaderEpochResponse(
        topics=[
            OffsetForLeaderTopicResult(
                topic=topic.topic,
                partitions=[
                    EpochEndOffset(partition=p.partition, error_code=code) for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def _metadata_error(request: Any, code: ErrorCode) -> Response:
    names = [t.name for t in request.topics or () if t.name is not None]
    return MetadataResponse(topics=[MetadataResponseTopic(name=n, error_code=code) for n in names])


def _create_topics_error(request: Any, code: ErrorCode) -> Response:
    return CreateTopicsResponse(
        topics=[CreatableTopicResult(name=t.name, error_code=code) for t in request.topics]
    )


def _delete_topics_error(request: Any, code: ErrorCode) -> Response:
    return DeleteTopicsResponse(
        responses=[DeletableTopicResult(name=n, error_code=code) for n in request.topic_names]
    )


def _describe_configs_error(request: Any, code: ErrorCode) -> Response:
    return DescribeConfigsResponse(
        results=[
            DescribeConfigsResult(
                error_code=code, resource_type=r.resource_type, resource_name=r.resource_name
            )
            for r in request.resources
        ]
    )


_ERROR_BUILDERS: Final[dict[type[Request], Callable[[Any, ErrorCode], Response]]] = {
    ProduceRequest: _produce_error,
    FetchRequest: _fetch_error,
    ListOffsetsRequest: _list_offsets_error,
    OffsetForLeaderEpochRequest: _epoch_error,
    MetadataRequest: _metadata_error,
    CreateTopicsRequest: _create_topics_error,
    DeleteTopicsRequest: _delete_topics_error,
    DescribeConfigsRequest: _describe_configs_error,
}
