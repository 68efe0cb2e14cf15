"""Altering existing topics, version 0 of ketch's native protocol: CreatePartitions (37) and
IncrementalAlterConfigs (44).

Clients send both to any broker, which forwards them to the controller (KIP-590, as
CreateTopics); the controller plans the change, writes it to its metadata log and tells the
brokers. Field names are Kafka's JSON message specs (CreatePartitionsRequest.json,
IncrementalAlterConfigsRequest.json and their responses) in snake_case.

CreatePartitions: `count` is the topic's new total partition count, not the number to add;
`assignments` None lets the controller place the new partitions, else it gives one replica list
per new partition, in partition order.

IncrementalAlterConfigs: each config names an operation (`config_operation`, Kafka's
AlterConfigOp.OpType ids below); SET needs a value, DELETE ignores it, APPEND and SUBTRACT add to
or take from a list-valued config (cleanup.policy), comma-separated. `resource_type` is Kafka's
ConfigResource.Type id (2 topic, 4 broker; admin.py's RESOURCE_TOPIC / RESOURCE_BROKER).
"""

# No `from __future__ import annotations`: the codec reads each field's type at class creation.

from dataclasses import dataclass, field
from typing import Final

from wire.messages.base import ApiKey, Request, Response
from wire.messages.fields import Int8, Int16, Int32

# Kafka's AlterConfigOp.OpType ids.
CONFIG_OPERATION_SET: Final = 0
CONFIG_OPERATION_DELETE: Final = 1
CONFIG_OPERATION_APPEND: Final = 2
CONFIG_OPERATION_SUBTRACT: Final = 3
CONFIG_OPERATION_NAMES: Final = {
    CONFIG_OPERATION_SET: "SET",
    CONFIG_OPERATION_DELETE: "DELETE",
    CONFIG_OPERATION_APPEND: "APPEND",
    CONFIG_OPERATION_SUBTRACT: "SUBTRACT",
}

# -- CreatePartitions (37) -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitionsAssignment:
    """The replicas of one new partition; the first is its preferred leader."""

    broker_ids: list[Int32]


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitionsTopic:
    name: str
    count: Int32
    assignments: list[CreatePartitionsAssignment] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitionsTopicResult:
    name: str
    error_code: Int16 = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitionsResponse(Response):
    API_KEY = ApiKey.CREATE_PARTITIONS
    API_VERSION = 0
    results: list[CreatePartitionsTopicResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatePartitionsRequest(Request):
    API_KEY = ApiKey.CREATE_PARTITIONS
    API_VERSION = 0
    RESPONSE = CreatePartitionsResponse
    topics: list[CreatePartitionsTopic]
    timeout_ms: Int32 = 60000
    validate_only: bool = False


# -- IncrementalAlterConfigs (44) ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterableConfig:
    name: str
    config_operation: Int8
    value: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterConfigsResource:
    resource_type: Int8
    resource_name: str
    configs: list[AlterableConfig] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterConfigsResourceResponse:
    error_code: Int16 = 0
    error_message: str | None = None
    resource_type: Int8
    resource_name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class IncrementalAlterConfigsResponse(Response):
    API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
    API_VERSION = 0
    responses: list[AlterConfigsResourceResponse] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class IncrementalAlterConfigsRequest(Request):
    API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
    API_VERSION = 0
    RESPONSE = IncrementalAlterConfigsResponse
    resources: list[AlterConfigsResource]
    validate_only: bool = False
