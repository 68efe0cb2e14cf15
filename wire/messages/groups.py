"""Consumer-group messages, version 0 of ketch's native protocol: OffsetCommit (8), OffsetFetch
(9), FindCoordinator (10), JoinGroup (11), Heartbeat (12), LeaveGroup (13), SyncGroup (14),
DescribeGroups (15), ListGroups (16), DeleteGroups (42), OffsetDelete (47).

Field names are those of Kafka's JSON specs in snake_case, as of their newest versions (so the
Kafka listener converts field by field; durations are `*_ms` integers). FindCoordinator has the
batched shape of Kafka's v4 (several keys, one answer each); LeaveGroup the v3 shape (several
members). Static membership fields (`group_instance_id`, KIP-345) are carried where
Kafka's newest versions have them. Member metadata and assignments are opaque bytes (the consumer
protocol's subscription and assignment, which only clients interpret).
"""

# No `from __future__ import annotations`: the codec reads each field's type at class creation.

from dataclasses import dataclass, field

from wire.messages.base import ApiKey, Request, Response
from wire.messages.fields import Int8, Int16, Int32

# -- FindCoordinator (10) --------------------------------------------------------------------------

COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Coordinator:
    key: str
    node_id: Int32 = -1
    host: str = ""
    port: Int32 = -1
    error_code: Int16 = 0
    error_message: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FindCoordinatorResponse(Response):
    API_KEY = ApiKey.FIND_COORDINATOR
    API_VERSION = 0
    coordinators: list[Coordinator] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class FindCoordinatorRequest(Request):
    """key_type: 0 group, 1 transaction."""

    API_KEY = ApiKey.FIND_COORDINATOR
    API_VERSION = 0
    RESPONSE = FindCoordinatorResponse
    key_type: Int8 = COORDINATOR_GROUP
    coordinator_keys: list[str]


# -- JoinGroup (11) --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupRequestProtocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupResponseMember:
    member_id: str
    group_instance_id: str | None = None
    metadata: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupResponse(Response):
    API_KEY = ApiKey.JOIN_GROUP
    API_VERSION = 0
    generation_id: Int32 = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: list[JoinGroupResponseMember] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinGroupRequest(Request):
    """rebalance_timeout_ms -1: the session timeout (Kafka's v0). member_id "": a new member."""

    API_KEY = ApiKey.JOIN_GROUP
    API_VERSION = 0
    RESPONSE = JoinGroupResponse
    group_id: str
    session_timeout_ms: Int32
    rebalance_timeout_ms: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    protocol_type: str
    protocols: list[JoinGroupRequestProtocol]
    reason: str | None = None


# -- Heartbeat (12) --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatResponse(Response):
    API_KEY = ApiKey.HEARTBEAT
    API_VERSION = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatRequest(Request):
    API_KEY = ApiKey.HEARTBEAT
    API_VERSION = 0
    RESPONSE = HeartbeatResponse
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None


# -- LeaveGroup (13) -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberIdentity:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberResponse:
    member_id: str
    group_instance_id: str | None = None
    error_code: Int16 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroupResponse(Response):
    API_KEY = ApiKey.LEAVE_GROUP
    API_VERSION = 0
    members: list[MemberResponse] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveGroupRequest(Request):
    API_KEY = ApiKey.LEAVE_GROUP
    API_VERSION = 0
    RESPONSE = LeaveGroupResponse
    group_id: str
    members: list[MemberIdentity]


# -- SyncGroup (14) --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncGroupRequestAssignment:
    member_id: str
    assignment: bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncGroupResponse(Response):
    API_KEY = ApiKey.SYNC_GROUP
    API_VERSION = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncGroupRequest(Request):
    """`assignments` is the leader's (empty from the other members)."""

    API_KEY = ApiKey.SYNC_GROUP
    API_VERSION = 0
    RESPONSE = SyncGroupResponse
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: list[SyncGroupRequestAssignment] = field(default_factory=list)


# -- OffsetCommit (8) ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestPartition:
    partition_index: Int32
    committed_offset: int
    committed_leader_epoch: Int32 = -1
    committed_metadata: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequestTopic:
    name: str
    partitions: list[OffsetCommitRequestPartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitResponsePartition:
    partition_index: Int32
    error_code: Int16 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitResponseTopic:
    name: str
    partitions: list[OffsetCommitResponsePartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitResponse(Response):
    API_KEY = ApiKey.OFFSET_COMMIT
    API_VERSION = 0
    topics: list[OffsetCommitResponseTopic] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitRequest(Request):
    """A simple consumer (no group membership) commits with generation -1 and member "".
    retention_time_ms -1: the broker's offsets.retention.minutes (Kafka's v2-v4 field)."""

    API_KEY = ApiKey.OFFSET_COMMIT
    API_VERSION = 0
    RESPONSE = OffsetCommitResponse
    group_id: str
    generation_id_or_member_epoch: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    retention_time_ms: int = -1
    topics: list[OffsetCommitRequestTopic]


# -- OffsetFetch (9) -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchRequestTopic:
    name: str
    partition_indexes: list[Int32]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchResponsePartition:
    """committed_offset -1: nothing committed for the partition."""

    partition_index: Int32
    committed_offset: int = -1
    committed_leader_epoch: Int32 = -1
    metadata: str | None = None
    error_code: Int16 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchResponseTopic:
    name: str
    partitions: list[OffsetFetchResponsePartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchResponse(Response):
    API_KEY = ApiKey.OFFSET_FETCH
    API_VERSION = 0
    topics: list[OffsetFetchResponseTopic] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetFetchRequest(Request):
    """`topics` None: every partition the group has committed."""

    API_KEY = ApiKey.OFFSET_FETCH
    API_VERSION = 0
    RESPONSE = OffsetFetchResponse
    group_id: str
    topics: list[OffsetFetchRequestTopic] | None = None
    require_stable: bool = False


# -- DescribeGroups (15) ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedGroupMember:
    member_id: str
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    member_metadata: bytes = b""
    member_assignment: bytes = b""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedGroup:
    """group_state: Kafka's names (Empty, PreparingRebalance, CompletingRebalance, Stable,
    Dead); protocol_data: the chosen protocol (the assignor of a consumer group)."""

    error_code: Int16 = 0
    group_id: str
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[DescribedGroupMember] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroupsResponse(Response):
    API_KEY = ApiKey.DESCRIBE_GROUPS
    API_VERSION = 0
    groups: list[DescribedGroup] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeGroupsRequest(Request):
    API_KEY = ApiKey.DESCRIBE_GROUPS
    API_VERSION = 0
    RESPONSE = DescribeGroupsResponse
    groups: list[str]


# -- ListGroups (16) -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedGroup:
    """group_type (v5, KIP-848): "classic" or "consumer"."""

    group_id: str
    protocol_type: str = ""
    group_state: str = ""
    group_type: str = "classic"


@dataclass(frozen=True, slots=True, kw_only=True)
class ListGroupsResponse(Response):
    API_KEY = ApiKey.LIST_GROUPS
    API_VERSION = 0
    groups: list[ListedGroup] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListGroupsRequest(Request):
    """states_filter empty: groups in every state; types_filter (v5) empty: of every type."""

    API_KEY = ApiKey.LIST_GROUPS
    API_VERSION = 0
    RESPONSE = ListGroupsResponse
    states_filter: list[str] = field(default_factory=list)
    types_filter: list[str] = field(default_factory=list)


# -- DeleteGroups (42) -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DeletableGroupResult:
    group_id: str
    error_code: Int16 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroupsResponse(Response):
    """One result per group named (Kafka's response has no top-level error: the Kafka listener
    answers a request-level one on each group)."""

    API_KEY = ApiKey.DELETE_GROUPS
    API_VERSION = 0
    results: list[DeletableGroupResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteGroupsRequest(Request):
    """Only empty groups are deleted, with their committed offsets (Kafka's semantics)."""

    API_KEY = ApiKey.DELETE_GROUPS
    API_VERSION = 0
    RESPONSE = DeleteGroupsResponse
    groups_names: list[str]


# -- OffsetDelete (47) -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetDeleteRequestPartition:
    partition_index: Int32


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetDeleteRequestTopic:
    name: str
    partitions: list[OffsetDeleteRequestPartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetDeleteResponsePartition:
    partition_index: Int32
    error_code: Int16 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetDeleteResponseTopic:
    name: str
    partitions: list[OffsetDeleteResponsePartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetDeleteResponse(Response):
    """error_code: the group's (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, NOT_COORDINATOR, ...);
    each partition's: GROUP_SUBSCRIBED_TO_TOPIC when a member consumes its topic."""

    API_KEY = ApiKey.OFFSET_DELETE
    API_VERSION = 0
    topics: list[OffsetDeleteResponseTopic] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetDeleteRequest(Request):
    """The group's committed offsets of these partitions are deleted, unless one of its
    members subscribes to the partition's topic."""

    API_KEY = ApiKey.OFFSET_DELETE
    API_VERSION = 0
    RESPONSE = OffsetDeleteResponse
    group_id: str
    topics: list[OffsetDeleteRequestTopic]
