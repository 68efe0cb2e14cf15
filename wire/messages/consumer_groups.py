"""Consumer groups of the new protocol (KIP-848), version 0 of ketch's native protocol:
ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

Field names are those of Kafka's JSON specs in snake_case as of their newest versions (so the
Kafka listener converts field by field; durations are `*_ms` integers). Topics are named by
topic id (`Uuid`), as in Kafka: the coordinator resolves names through the broker's metadata.
A heartbeat's nullable fields mean "unchanged since the last heartbeat" (Kafka's rule), which is
why they are Optional here and not defaulted to empty.
"""

# No `from __future__ import annotations`: the codec reads each field's type at class creation.

from dataclasses import dataclass, field

from wire.messages.base import ApiKey, Request, Response
from wire.messages.fields import Int8, Int16, Int32, Uuid

# -- ConsumerGroupHeartbeat (68) ------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupTopicPartitions:
    topic_id: Uuid
    partitions: list[Int32] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupHeartbeatAssignment:
    topic_partitions: list[ConsumerGroupTopicPartitions] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupHeartbeatResponse(Response):
    API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT
    API_VERSION = 0
    error_code: Int16 = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: Int32 = -1
    heartbeat_interval_ms: Int32 = 0
    assignment: ConsumerGroupHeartbeatAssignment | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupHeartbeatRequest(Request):
    """member_epoch: 0 to join, -1 to leave, -2 for a static member leaving for a while.
    rebalance_timeout_ms -1 and the None fields: unchanged since the last heartbeat."""

    API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT
    API_VERSION = 0
    RESPONSE = ConsumerGroupHeartbeatResponse
    group_id: str
    member_id: str = ""
    member_epoch: Int32 = 0
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: Int32 = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: list[ConsumerGroupTopicPartitions] | None = None


# -- ConsumerGroupDescribe (69) -------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedTopicPartitions:
    topic_id: Uuid
    topic_name: str
    partitions: list[Int32] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedConsumerAssignment:
    topic_partitions: list[DescribedTopicPartitions] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedConsumerGroupMember:
    """member_type (v1): 0 classic, 1 consumer."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    member_epoch: Int32
    client_id: str
    client_host: str
    subscribed_topic_names: list[str] = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    assignment: DescribedConsumerAssignment
    target_assignment: DescribedConsumerAssignment
    member_type: Int8 = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedConsumerGroup:
    error_code: Int16 = 0
    error_message: str | None = None
    group_id: str
    group_state: str = ""
    group_epoch: Int32 = -1
    assignment_epoch: Int32 = -1
    assignor_name: str = ""
    members: list[DescribedConsumerGroupMember] = field(default_factory=list)
    authorized_operations: Int32 = -2147483648


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupDescribeResponse(Response):
    API_KEY = ApiKey.CONSUMER_GROUP_DESCRIBE
    API_VERSION = 0
    groups: list[DescribedConsumerGroup] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerGroupDescribeRequest(Request):
    API_KEY = ApiKey.CONSUMER_GROUP_DESCRIBE
    API_VERSION = 0
    RESPONSE = ConsumerGroupDescribeResponse
    group_ids: list[str] = field(default_factory=list)
    include_authorized_operations: bool = False
