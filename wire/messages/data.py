"""Data-plane messages, version 0 of ketch's native protocol: ApiVersions (18), Metadata (3),
Produce (0), Fetch (1), ListOffsets (2), OffsetForLeaderEpoch (23).

Field names are those of Kafka's JSON message specs in snake_case; fields Kafka has for
features ketch lacks (rack-aware fetching, tagged fields) are left out. Record batches travel
as opaque bytes (msgpack bin): one or more Kafka RecordBatch v2, exactly as stored in the log.
Topics are named by name, as in Kafka's pre-topic-id versions; where a topic id appears it is
`Uuid` (16 raw bytes, ZERO_UUID when unknown).

Kafka's sentinels keep their meaning: -1 for "no leader", "unknown epoch", "no offset" and "not a
replica" (a consumer's replica_id), -2 for a debugging consumer's replica_id.
"""

# No `from __future__ import annotations`: the codec reads each field's type at class creation.

from dataclasses import dataclass, field
from typing import Final

from wire.messages.base import ApiKey, Request, Response
from wire.messages.fields import ZERO_UUID, Int8, Int16, Int32, RecordSet, Uuid

# -- ApiVersions (18) ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsResponseKey:
    api_key: Int16
    min_version: Int16
    max_version: Int16


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsResponse(Response):
    API_KEY = ApiKey.API_VERSIONS
    API_VERSION = 0
    api_keys: list[ApiVersionsResponseKey] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class ApiVersionsRequest(Request):
    API_KEY = ApiKey.API_VERSIONS
    API_VERSION = 0
    RESPONSE = ApiVersionsResponse
    client_software_name: str = ""
    client_software_version: str = ""


# -- Metadata (3) ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRequestTopic:
    topic_id: Uuid = ZERO_UUID
    name: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResponseBroker:
    node_id: Int32
    host: str
    port: Int32
    rack: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResponsePartition:
    error_code: Int16 = 0
    partition_index: Int32
    leader_id: Int32
    leader_epoch: Int32 = -1
    replica_nodes: list[Int32] = field(default_factory=list)
    isr_nodes: list[Int32] = field(default_factory=list)
    offline_replicas: list[Int32] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResponseTopic:
    error_code: Int16 = 0
    name: str
    topic_id: Uuid = ZERO_UUID
    is_internal: bool = False
    partitions: list[MetadataResponsePartition] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataResponse(Response):
    API_KEY = ApiKey.METADATA
    API_VERSION = 0
    brokers: list[MetadataResponseBroker] = field(default_factory=list)
    cluster_id: str | None = None
    controller_id: Int32 = -1
    topics: list[MetadataResponseTopic] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetadataRequest(Request):
    """`topics` None asks for every topic; an empty list asks for none (brokers only)."""

    API_KEY = ApiKey.METADATA
    API_VERSION = 0
    RESPONSE = MetadataResponse
    topics: list[MetadataRequestTopic] | None = None
    allow_auto_topic_creation: bool = False


# -- Produce (0) -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProduceData:
    index: Int32
    records: RecordSet


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicProduceData:
    name: str
    partition_data: list[PartitionProduceData]


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchIndexAndErrorMessage:
    batch_index: Int32
    batch_index_error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class PartitionProduceResponse:
    index: Int32
    error_code: Int16 = 0
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    record_errors: list[BatchIndexAndErrorMessage] = field(default_factory=list)
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicProduceResponse:
    name: str
    partition_responses: list[PartitionProduceResponse]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceResponse(Response):
    API_KEY = ApiKey.PRODUCE
    API_VERSION = 0
    responses: list[TopicProduceResponse] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProduceRequest(Request):
    """acks: 0 (no response is sent), 1 (leader), -1 (all in-sync replicas)."""

    API_KEY = ApiKey.PRODUCE
    API_VERSION = 0
    RESPONSE = ProduceResponse
    transactional_id: str | None = None
    acks: Int16
    timeout_ms: Int32
    topic_data: list[TopicProduceData]


# -- Fetch (1) -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchPartition:
    partition: Int32
    current_leader_epoch: Int32 = -1
    fetch_offset: int
    log_start_offset: int = -1
    partition_max_bytes: Int32


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchTopic:
    topic: str
    partitions: list[FetchPartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchAbortedTransaction:
    """An aborted transaction a read_committed fetch's data may hold: the consumer drops the
    producer's records from `first_offset` up to its ABORT marker."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResponsePartition:
    """Kafka's FetchResponse PartitionData. `records` is empty when there is nothing to send;
    `aborted_transactions` is None for a read_uncommitted fetch (Kafka's null)."""

    partition_index: Int32
    error_code: Int16 = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[FetchAbortedTransaction] | None = None
    records: RecordSet = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchableTopicResponse:
    topic: str
    partitions: list[FetchResponsePartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchResponse(Response):
    """session_id: the fetch session this answer belongs to (KIP-227), 0 when none."""

    API_KEY = ApiKey.FETCH
    API_VERSION = 0
    session_id: Int32 = 0
    responses: list[FetchableTopicResponse] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class ForgottenTopic:
    """Partitions an incremental fetch drops from its session (KIP-227)."""

    topic: str
    partitions: list[Int32]


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchRequest(Request):
    """replica_id: the follower's broker id, or -1 for a consumer. isolation_level: 0
    READ_UNCOMMITTED, 1 READ_COMMITTED (up to the last stable offset).

    Fetch sessions (KIP-227, runtime/net/fetch_session.py has the table): session_id 0 with
    session_epoch -1 (the defaults) is a sessionless fetch; epoch 0 asks for a new session;
    a session's later fetches list only changed partitions and drop the others in
    `forgotten_topics_data`. The native listener serves sessions to followers only."""

    API_KEY = ApiKey.FETCH
    API_VERSION = 0
    RESPONSE = FetchResponse
    replica_id: Int32 = -1
    max_wait_ms: Int32
    min_bytes: Int32
    max_bytes: Int32 = 0x7FFFFFFF
    isolation_level: Int8 = 0
    session_id: Int32 = 0
    session_epoch: Int32 = -1
    topics: list[FetchTopic]
    forgotten_topics_data: list[ForgottenTopic] = field(default_factory=list)


# -- ListOffsets (2) -------------------------------------------------------------------------------


# ListOffsets' timestamp sentinels (Kafka's ListOffsetsRequest constants).
LATEST_TIMESTAMP: Final = -1  # the end: the high watermark for a consumer, the LEO for a replica
EARLIEST_TIMESTAMP: Final = -2  # the log start offset
MAX_TIMESTAMP: Final = -3  # the offset of the record with the largest timestamp (KIP-734, v7)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartition:
    """timestamp: a time in ms, or one of the sentinels above."""

    partition_index: Int32
    current_leader_epoch: Int32 = -1
    timestamp: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopic:
    name: str
    partitions: list[ListOffsetsPartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsPartitionResponse:
    partition_index: Int32
    error_code: Int16 = 0
    timestamp: int = -1
    offset: int = -1
    leader_epoch: Int32 = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsTopicResponse:
    name: str
    partitions: list[ListOffsetsPartitionResponse]


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsResponse(Response):
    API_KEY = ApiKey.LIST_OFFSETS
    API_VERSION = 0
    topics: list[ListOffsetsTopicResponse] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListOffsetsRequest(Request):
    API_KEY = ApiKey.LIST_OFFSETS
    API_VERSION = 0
    RESPONSE = ListOffsetsResponse
    replica_id: Int32 = -1
    isolation_level: Int8 = 0
    topics: list[ListOffsetsTopic]


# -- OffsetForLeaderEpoch (23) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetForLeaderPartition:
    partition: Int32
    current_leader_epoch: Int32 = -1
    leader_epoch: Int32


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetForLeaderTopic:
    topic: str
    partitions: list[OffsetForLeaderPartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class EpochEndOffset:
    error_code: Int16 = 0
    partition: Int32
    leader_epoch: Int32 = -1
    end_offset: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetForLeaderTopicResult:
    topic: str
    partitions: list[EpochEndOffset]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetForLeaderEpochResponse(Response):
    API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
    API_VERSION = 0
    topics: list[OffsetForLeaderTopicResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetForLeaderEpochRequest(Request):
    """replica_id: the follower's broker id; -2 for a consumer (Kafka's debugging default)."""

    API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
    API_VERSION = 0
    RESPONSE = OffsetForLeaderEpochResponse
    replica_id: Int32 = -2
    topics: list[OffsetForLeaderTopic]
