"""The Kafka APIs ketch serves, their versions, and how each maps onto a native message.

Each served API is one `KafkaApi`: its version range (what ApiVersions advertises; only versions
the tests drive through real clients or the codec tests encode), the native request it becomes,
and the few places where Kafka's semantics need more than the field-by-field conversion of
`wire.kafka.convert`:

- Metadata v0 asks for every topic with an empty list (v1+ with null); v0-3 allow auto topic
  creation (the field comes with v4, and Kafka reads its absence as true).
- DescribeCluster maps onto the native message: on the Kafka listener the broker answers it from
  its own metadata, as Kafka's brokers do (node/broker/apis.py), listing the live brokers only
  (v2's fenced brokers are not in a broker's metadata).
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
- AddPartitionsToTxn v0-3 (a client's) name one transaction in fields of their own and answer
  per partition only (`results_by_topic_v3_and_below`); the native message is v4's batched form
  (KIP-890), which Kafka's brokers send each other to verify a transactional produce. v4 is mapped
  too; Kafka accepts it only from a principal with ClusterAction, which the handler can decide
  from `RequestContext.api_version` and `cluster_member` (the native request looks the same).
- The Kafka responses of AddPartitionsToTxn v0-3, TxnOffsetCommit, DescribeProducers,
  DescribeTransactions, DeleteGroups, CreatePartitions and IncrementalAlterConfigs have no
  top-level error code: a native answer with one is answered on each requested partition
  (transactional id, group, topic, config resource) instead, as Kafka's `getErrorResponse`
  does, or it would read as a success.
- Error codes older clients do not know are answered as Kafka answers them: PRODUCER_FENCED as
  INVALID_PRODUCER_EPOCH before InitProducerId v4 and AddPartitionsToTxn, AddOffsetsToTxn and
  EndTxn v2; COORDINATOR_LOAD_IN_PROGRESS as COORDINATOR_NOT_AVAILABLE before TxnOffsetCommit v2.

What is advertised: the Kafka listener serves, and lists in ApiVersions, only the APIs of this
table that the broker has a handler for (`KafkaProtocol` in runtime/net/kafka_dialect.py), so an
API mapped here stays unadvertised until node/broker/apis.py serves it.

A handler that fails is answered the way Kafka answers an unexpected exception: the request's
own topics and partitions, each with the error code (`wire.error_responses`).

The module is one role, the table and its hooks, kept together (a little over 550 lines) so each
API's version quirks sit beside its entry.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from wire.error_responses import error_response
from wire.errors import ErrorCode
from wire.kafka.convert import element_class, to_kio, to_native
from wire.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
    AlterClientQuotasRequest,
    AlterUserScramCredentialsRequest,
    ApiKey,
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteGroupsRequest,
    DeleteTopicsRequest,
    DescribeAclsRequest,
    DescribeClientQuotasRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
    DescribeGroupsRequest,
    DescribeProducersRequest,
    DescribeTransactionsRequest,
    DescribeUserScramCredentialsRequest,
    EndTxnRequest,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    FetchTopic,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    IncrementalAlterConfigsRequest,
    InitProducerIdRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListOffsetsRequest,
    ListTransactionsRequest,
    MemberIdentity,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
    Request,
    Response,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
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


METADATA_AUTO_CREATION_FLAG: Final = 4


def _metadata_request(body: Any, version: int, topics: TopicIds) -> tuple[Request, object]:
    # Before v4 there is no allow_auto_topic_creation field, and Kafka reads them as allowing it.
    implied = {"allow_auto_topic_creation": True} if version < METADATA_AUTO_CREATION_FLAG else {}
    request = to_native(body, MetadataRequest, **implied)
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


# The native request a Kafka Fetch becomes is sessionless: the Kafka listener serves the
# session fields itself (runtime/net/kafka_dialect.py), as wire/kafka/fetch_codec.py's decoder
# leaves them out of it.
_SESSIONLESS_FIELDS: Final[dict[str, Any]] = {
    "session_id": 0,
    "session_epoch": -1,
    "forgotten_topics_data": [],
}


def _fetch_request(body: Any, version: int, topics: TopicIds) -> tuple[Request, object]:
    if version < FETCH_BY_TOPIC_ID:
        return to_native(body, FetchRequest, **_SESSIONLESS_FIELDS), None
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
    given: dict[str, Any] = {"topics": native_topics, **_SESSIONLESS_FIELDS}
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


# -- transactions ----------------------------------------------------------------------------------

ADD_PARTITIONS_TO_TXN_BATCHED: Final = 4

# Codes that clients before a version do not know, and what Kafka answers them instead.
_FENCED_AS_INVALID_EPOCH: Final[Mapping[int, int]] = {
    ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH
}
_LOADING_AS_NOT_AVAILABLE: Final[Mapping[int, int]] = {
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: ErrorCode.COORDINATOR_NOT_AVAILABLE
}
_CODE_FIELDS: Final = frozenset({"error_code", "partition_error_code"})


def _recoded(value: Any, codes: Mapping[int, int]) -> Any:
    """A native message or struct with the error codes in `codes` replaced, at every depth."""
    changes: dict[str, Any] = {}
    for field in dataclasses.fields(value):
        item = getattr(value, field.name)
        if field.name in _CODE_FIELDS and item in codes:
            changes[field.name] = codes[item]
        elif isinstance(item, list) and item and dataclasses.is_dataclass(item[0]):
            changes[field.name] = [_recoded(element, codes) for element in item]
    return dataclasses.replace(value, **changes) if changes else value


def _error_per_item(response: Response, response_cls: type[Any], note: object) -> Response:
    """A top-level error moved onto each item the request named (`error_response`), when the
    Kafka response has no top-level error code to carry it."""
    if response.error_code == ErrorCode.NONE or "error_code" in response_cls.__dataclass_fields__:
        return response
    assert isinstance(note, Request)
    return error_response(note, response.error)


def _recoded_before(since: int, codes: Mapping[int, int]) -> ResponseHook:
    """Codes in `codes` replaced for versions before `since`; a top-level error moved onto the
    items where the version has no top-level code."""

    def hook(response: Response, response_cls: type[Any], note: object, topics: TopicIds) -> Any:
        response = _error_per_item(response, response_cls, note)
        if response_cls.__version__ < since:
            response = _recoded(response, codes)
        return to_kio(response, response_cls)

    return hook


_errors_per_item: Final = _recoded_before(0, {})


def _kept_as_note(native: type[Request]) -> RequestHook:
    """Field-by-field conversion, the request kept for the response hook (to name its items)."""

    def hook(body: Any, version: int, topics: TopicIds) -> tuple[Request, object]:
        request = to_native(body, native)
        return request, request

    return hook


def _add_partitions_to_txn_request(
    body: Any, version: int, topics: TopicIds
) -> tuple[Request, object]:
    if version >= ADD_PARTITIONS_TO_TXN_BATCHED:
        request = to_native(body, AddPartitionsToTxnRequest)
        return request, request
    # v0-3: one transaction, never verify-only, its fields prefixed in Kafka's schema.
    transaction = AddPartitionsToTxnTransaction(
        transactional_id=body.v3_and_below_transactional_id,
        producer_id=body.v3_and_below_producer_id,
        producer_epoch=body.v3_and_below_producer_epoch,
        topics=[to_native(t, AddPartitionsToTxnTopic) for t in body.v3_and_below_topics],
    )
    request = AddPartitionsToTxnRequest(transactions=[transaction])
    return request, request


def _add_partitions_to_txn_response(
    response: Response, response_cls: type[Any], note: object, topics: TopicIds
) -> Any:
    version = response_cls.__version__
    if version >= ADD_PARTITIONS_TO_TXN_BATCHED:
        return to_kio(response, response_cls)
    response = _error_per_item(response, response_cls, note)
    if version < 2:  # PRODUCER_FENCED from v2, as for AddOffsetsToTxn and EndTxn
        response = _recoded(response, _FENCED_AS_INVALID_EPOCH)
    assert isinstance(response, AddPartitionsToTxnResponse)
    assert isinstance(note, AddPartitionsToTxnRequest)
    # v0-3: the one transaction's results, per partition.
    (asked,) = note.transactions
    topic_cls = element_class(response_cls, "results_by_topic_v3_and_below")
    results = tuple(
        to_kio(topic, topic_cls)
        for result in response.results_by_transaction
        if result.transactional_id == asked.transactional_id
        for topic in result.topic_results
    )
    return to_kio(response, response_cls, results_by_topic_v3_and_below=results)


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
        KafkaApi(
            ApiKey.CREATE_PARTITIONS,
            0,
            3,
            CreatePartitionsRequest,
            request_hook=_kept_as_note(CreatePartitionsRequest),
            response_hook=_errors_per_item,
        ),
        KafkaApi(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            0,
            1,
            IncrementalAlterConfigsRequest,
            request_hook=_kept_as_note(IncrementalAlterConfigsRequest),
            response_hook=_errors_per_item,
        ),
        KafkaApi(
            ApiKey.INIT_PRODUCER_ID,
            0,
            4,
            InitProducerIdRequest,
            response_hook=_recoded_before(4, _FENCED_AS_INVALID_EPOCH),
        ),
        KafkaApi(ApiKey.DESCRIBE_CONFIGS, 1, 4, DescribeConfigsRequest),
        KafkaApi(ApiKey.DESCRIBE_CLUSTER, 0, 2, DescribeClusterRequest),
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
        # v9 (KIP-848): a consumer group member commits with its member epoch.
        KafkaApi(ApiKey.OFFSET_COMMIT, 2, 9, OffsetCommitRequest),
        KafkaApi(
            ApiKey.OFFSET_FETCH,
            1,
            7,
            OffsetFetchRequest,
            request_hook=_offset_fetch_request,
            response_hook=_offset_fetch_response,
        ),
        KafkaApi(ApiKey.DESCRIBE_GROUPS, 0, 5, DescribeGroupsRequest),
        # v5 (KIP-848): a types filter, and each group's type (classic or consumer).
        KafkaApi(ApiKey.LIST_GROUPS, 0, 5, ListGroupsRequest),
        KafkaApi(
            ApiKey.DELETE_GROUPS,
            0,
            2,
            DeleteGroupsRequest,
            request_hook=_kept_as_note(DeleteGroupsRequest),
            response_hook=_errors_per_item,
        ),
        KafkaApi(ApiKey.OFFSET_DELETE, 0, 0, OffsetDeleteRequest),
        KafkaApi(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            0,
            4,
            AddPartitionsToTxnRequest,
            request_hook=_add_partitions_to_txn_request,
            response_hook=_add_partitions_to_txn_response,
        ),
        KafkaApi(
            ApiKey.ADD_OFFSETS_TO_TXN,
            0,
            3,
            AddOffsetsToTxnRequest,
            response_hook=_recoded_before(2, _FENCED_AS_INVALID_EPOCH),
        ),
        KafkaApi(
            ApiKey.END_TXN,
            0,
            3,
            EndTxnRequest,
            response_hook=_recoded_before(2, _FENCED_AS_INVALID_EPOCH),
        ),
        KafkaApi(
            ApiKey.TXN_OFFSET_COMMIT,
            0,
            3,
            TxnOffsetCommitRequest,
            request_hook=_kept_as_note(TxnOffsetCommitRequest),
            # Clients before Kafka 2.0 could crash on the loading error (KAFKA-7296).
            response_hook=_recoded_before(2, _LOADING_AS_NOT_AVAILABLE),
        ),
        KafkaApi(
            ApiKey.DESCRIBE_PRODUCERS,
            0,
            0,
            DescribeProducersRequest,
            request_hook=_kept_as_note(DescribeProducersRequest),
            response_hook=_errors_per_item,
        ),
        KafkaApi(
            ApiKey.DESCRIBE_TRANSACTIONS,
            0,
            0,
            DescribeTransactionsRequest,
            request_hook=_kept_as_note(DescribeTransactionsRequest),
            response_hook=_errors_per_item,
        ),
        KafkaApi(ApiKey.LIST_TRANSACTIONS, 0, 1, ListTransactionsRequest),
        # Consumer groups of the new protocol (KIP-848, actors/group/consumer_heartbeat.py):
        # v1 adds the regex subscription and has the client name its member id (KIP-1082).
        KafkaApi(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1, ConsumerGroupHeartbeatRequest),
        KafkaApi(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1, ConsumerGroupDescribeRequest),
        # ACLs (actors/acl): v0 has no pattern type (v1's, KIP-290, is what clients send).
        KafkaApi(ApiKey.DESCRIBE_ACLS, 1, 3, DescribeAclsRequest),
        KafkaApi(ApiKey.CREATE_ACLS, 1, 3, CreateAclsRequest),
        KafkaApi(ApiKey.DELETE_ACLS, 1, 3, DeleteAclsRequest),
        # SCRAM credentials (node/broker/scram_credentials.py); Alter answers per user.
        KafkaApi(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, DescribeUserScramCredentialsRequest),
        KafkaApi(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
            0,
            0,
            AlterUserScramCredentialsRequest,
            request_hook=_kept_as_note(AlterUserScramCredentialsRequest),
            response_hook=_errors_per_item,
        ),
        # Client quotas (node/broker/quotas.py); Alter answers per entity.
        KafkaApi(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1, DescribeClientQuotasRequest),
        KafkaApi(
            ApiKey.ALTER_CLIENT_QUOTAS,
            0,
            1,
            AlterClientQuotasRequest,
            request_hook=_kept_as_note(AlterClientQuotasRequest),
            response_hook=_errors_per_item,
        ),
    )
}
