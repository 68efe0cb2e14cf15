"""Cluster administration, version 0 of ketch's native protocol: CreateTopics (19),
DeleteTopics (20), DescribeConfigs (32) and DescribeCluster (60).

Clients send these to any broker, which forwards them to the controller (as Kafka does since
KIP-590 for the topic requests); the controller answers. DescribeCluster goes to the controller
too, because only it knows the fenced and shutting-down brokers and its own epoch (Kafka's
brokers answer it from their metadata; ketch's answer adds those, for `ketch cluster status`).
Field names follow Kafka's JSON specs in snake_case.
DeleteTopics names topics by name (Kafka's `TopicNames`, versions 0-5).
"""

# No `from __future__ import annotations`: the codec reads each field's type at class creation.

from dataclasses import dataclass, field
from typing import Final

from wire.messages.base import ApiKey, Request, Response
from wire.messages.fields import ZERO_UUID, Int8, Int16, Int32, Uuid

# -- CreateTopics (19) -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableReplicaAssignment:
    partition_index: Int32
    broker_ids: list[Int32]


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopicConfig:
    """A topic config override by Kafka's property name, e.g. ("cleanup.policy", "compact")."""

    name: str
    value: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopic:
    """num_partitions / replication_factor are -1 when `assignments` gives the replicas."""

    name: str
    num_partitions: Int32
    replication_factor: Int16
    assignments: list[CreatableReplicaAssignment] = field(default_factory=list)
    configs: list[CreatableTopicConfig] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatableTopicResult:
    name: str
    topic_id: Uuid = ZERO_UUID
    error_code: Int16 = 0
    error_message: str | None = None
    num_partitions: Int32 = -1
    replication_factor: Int16 = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicsResponse(Response):
    API_KEY = ApiKey.CREATE_TOPICS
    API_VERSION = 0
    topics: list[CreatableTopicResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateTopicsRequest(Request):
    API_KEY = ApiKey.CREATE_TOPICS
    API_VERSION = 0
    RESPONSE = CreateTopicsResponse
    topics: list[CreatableTopic]
    timeout_ms: Int32 = 60000
    validate_only: bool = False


# -- DeleteTopics (20) -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletableTopicResult:
    name: str
    topic_id: Uuid = ZERO_UUID
    error_code: Int16 = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopicsResponse(Response):
    API_KEY = ApiKey.DELETE_TOPICS
    API_VERSION = 0
    responses: list[DeletableTopicResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteTopicsRequest(Request):
    API_KEY = ApiKey.DELETE_TOPICS
    API_VERSION = 0
    RESPONSE = DeleteTopicsResponse
    topic_names: list[str]
    timeout_ms: Int32 = 60000


# -- DescribeConfigs (32) --------------------------------------------------------------------------
# Answered by the broker that receives it, from the topic configs the controller sent it.

RESOURCE_TOPIC: Final = 2
RESOURCE_BROKER: Final = 4
# Kafka's DescribeConfigsResponse.ConfigSource (the ids ketch answers with).
CONFIG_SOURCE_DYNAMIC_TOPIC: Final = 1
CONFIG_SOURCE_STATIC_BROKER: Final = 4
CONFIG_SOURCE_DEFAULT: Final = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResource:
    """resource_type: 2 topic, 4 broker. configuration_keys None or empty: every key."""

    resource_type: Int8
    resource_name: str
    configuration_keys: list[str] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsSynonym:
    name: str
    value: str | None
    source: Int8


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResourceResult:
    """config_source: Kafka's ConfigSource (1 dynamic topic config, 4 static broker config,
    5 default)."""

    name: str
    value: str | None
    read_only: bool = False
    config_source: Int8 = -1
    is_sensitive: bool = False
    synonyms: list[DescribeConfigsSynonym] = field(default_factory=list)
    config_type: Int8 = 0
    documentation: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResult:
    error_code: Int16 = 0
    error_message: str | None = None
    resource_type: Int8
    resource_name: str
    configs: list[DescribeConfigsResourceResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsResponse(Response):
    API_KEY = ApiKey.DESCRIBE_CONFIGS
    API_VERSION = 0
    results: list[DescribeConfigsResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeConfigsRequest(Request):
    API_KEY = ApiKey.DESCRIBE_CONFIGS
    API_VERSION = 0
    RESPONSE = DescribeConfigsResponse
    resources: list[DescribeConfigsResource]
    include_synonyms: bool = False
    include_documentation: bool = False


# -- DescribeCluster (60) --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterBroker:
    """state: "running", "shutting_down" or "fenced" (registered, but not live)."""

    broker_id: Int32
    host: str
    port: Int32
    rack: str | None = None
    broker_epoch: int = -1
    state: str = "running"
    # The ids of its log directories its heartbeats reported failed (KRaft's OfflineLogDirs).
    offline_log_dirs: list[Uuid] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterResponse(Response):
    API_KEY = ApiKey.DESCRIBE_CLUSTER
    API_VERSION = 0
    error_message: str | None = None
    cluster_id: str = ""
    controller_id: Int32 = -1
    controller_epoch: Int32 = -1
    brokers: list[DescribeClusterBroker] = field(default_factory=list)
    offline_partitions: Int32 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeClusterRequest(Request):
    """endpoint_type: Kafka's (KIP-919), 1 brokers, 2 controllers; a broker describes brokers."""

    API_KEY = ApiKey.DESCRIBE_CLUSTER
    API_VERSION = 0
    RESPONSE = DescribeClusterResponse
    endpoint_type: Int8 = 1
