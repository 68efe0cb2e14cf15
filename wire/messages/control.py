"""Control-plane messages, version 0 of ketch's native protocol. Only cluster members holding
the cluster credential may send them (`CONTROL_PLANE_API_KEYS`).

Controller -> broker: LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6). Each carries the
sender's `controller_id` and `controller_epoch` (a request from an older controller is answered
STALE_CONTROLLER_EPOCH) and the addressee's `broker_epoch` as the controller knows it (a request
meant for an earlier incarnation of the broker is answered STALE_BROKER_EPOCH).

Broker -> controller: ControlledShutdown (7), AlterPartition (56), BrokerRegistration (62),
BrokerHeartbeat (63). Each carries the sender's `broker_id` and `broker_epoch` (the epoch its
registration returned; -1 before it has one).

Field names are Kafka's in snake_case. Two ketch choices differ in shape from Kafka's latest
versions: LeaderAndIsr, StopReplica and UpdateMetadata carry a flat list of partition states,
each naming its topic (Kafka's version-0 layout, which the brokers route partition by partition
anyway), and each LeaderAndIsr/UpdateMetadata partition state also carries the topic's id (Kafka
groups states under a topic entry holding the id). UpdateMetadata's partition states carry
`partition_epoch` where Kafka's ZooKeeper-era version named the same counter `zk_version`.
"""

# No `from __future__ import annotations`: the codec reads each field's type at class creation.

from dataclasses import dataclass, field

from wire.messages.acls import UpdateMetadataAcl
from wire.messages.base import ApiKey, Request, Response
from wire.messages.fields import ZERO_UUID, Int8, Int16, Int32, Uuid
from wire.messages.quotas import UpdateMetadataClientQuota
from wire.messages.scram import UpdateMetadataScramCredential

# -- topic configs (LeaderAndIsr and UpdateMetadata) -----------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicConfigEntry:
    name: str
    value: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicConfigs:
    """A topic's config overrides by Kafka property name (the whole set: it replaces what
    the broker held for the topic). Kafka's brokers read these from ZooKeeper or the metadata
    log; ketch's controller sends them with the requests that make a broker host or learn a
    topic, so a log is created with its topic's settings (segment.bytes, cleanup.policy, ...)
    and the produce path knows the topic's min.insync.replicas."""

    topic_name: str
    configs: list[TopicConfigEntry] = field(default_factory=list)


# -- LeaderAndIsr (4) ------------------------------------------------------------------------------

LEADER_AND_ISR_INCREMENTAL = 0
LEADER_AND_ISR_FULL = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrPartitionState:
    topic_name: str
    topic_id: Uuid = ZERO_UUID
    partition_index: Int32
    controller_epoch: Int32
    leader: Int32
    leader_epoch: Int32
    isr: list[Int32]
    partition_epoch: Int32
    replicas: list[Int32]
    adding_replicas: list[Int32] = field(default_factory=list)
    removing_replicas: list[Int32] = field(default_factory=list)
    is_new: bool = False
    leader_recovery_state: Int8 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrLiveLeader:
    broker_id: Int32
    host_name: str
    port: Int32


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrPartitionError:
    topic_name: str
    partition_index: Int32
    error_code: Int16 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrResponse(Response):
    API_KEY = ApiKey.LEADER_AND_ISR
    API_VERSION = 0
    partition_errors: list[LeaderAndIsrPartitionError] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaderAndIsrRequest(Request):
    """type: LEADER_AND_ISR_INCREMENTAL, or LEADER_AND_ISR_FULL when the request lists every
    partition the broker should host (so it may drop the others)."""

    API_KEY = ApiKey.LEADER_AND_ISR
    API_VERSION = 0
    RESPONSE = LeaderAndIsrResponse
    controller_id: Int32
    controller_epoch: Int32
    broker_epoch: int = -1
    type: Int8 = LEADER_AND_ISR_INCREMENTAL
    partition_states: list[LeaderAndIsrPartitionState]
    live_leaders: list[LeaderAndIsrLiveLeader] = field(default_factory=list)
    topic_configs: list[TopicConfigs] = field(default_factory=list)


# -- StopReplica (5) -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaPartitionState:
    """leader_epoch -1 stops the replica whatever its epoch; -2 marks a topic being deleted."""

    topic_name: str
    partition_index: Int32
    leader_epoch: Int32 = -1
    delete_partition: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaPartitionError:
    topic_name: str
    partition_index: Int32
    error_code: Int16 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaResponse(Response):
    API_KEY = ApiKey.STOP_REPLICA
    API_VERSION = 0
    partition_errors: list[StopReplicaPartitionError] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class StopReplicaRequest(Request):
    API_KEY = ApiKey.STOP_REPLICA
    API_VERSION = 0
    RESPONSE = StopReplicaResponse
    controller_id: Int32
    controller_epoch: Int32
    broker_epoch: int = -1
    partition_states: list[StopReplicaPartitionState]


# -- UpdateMetadata (6) ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataPartitionState:
    """leader -2 (Kafka's LeaderDuringDelete) marks a partition of a topic being deleted."""

    topic_name: str
    topic_id: Uuid = ZERO_UUID
    partition_index: Int32
    controller_epoch: Int32
    leader: Int32
    leader_epoch: Int32
    isr: list[Int32]
    partition_epoch: Int32
    replicas: list[Int32]
    offline_replicas: list[Int32] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataEndpoint:
    """listener: "native" or "kafka"; security_protocol: Kafka's ids (0 PLAINTEXT, 1 SSL)."""

    port: Int32
    host: str
    listener: str
    security_protocol: Int16 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataBroker:
    """A live broker. `in_controlled_shutdown`: it is moving its leadership away, so leaders must
    not add it to an ISR (KIP-841; KRaft's BrokerRegistration.inControlledShutdown)."""

    id: Int32
    endpoints: list[UpdateMetadataEndpoint]
    rack: str | None = None
    in_controlled_shutdown: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataResponse(Response):
    API_KEY = ApiKey.UPDATE_METADATA
    API_VERSION = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateMetadataRequest(Request):
    API_KEY = ApiKey.UPDATE_METADATA
    API_VERSION = 0
    RESPONSE = UpdateMetadataResponse
    controller_id: Int32
    controller_epoch: Int32
    broker_epoch: int = -1
    partition_states: list[UpdateMetadataPartitionState]
    live_brokers: list[UpdateMetadataBroker]
    topic_configs: list[TopicConfigs] = field(default_factory=list)
    # Every ACL, when the ACLs changed or the broker (re-)registered; None: unchanged.
    acls: list[UpdateMetadataAcl] | None = None
    # Every client quota, when the quotas changed or the broker (re-)registered; None: unchanged.
    client_quotas: list[UpdateMetadataClientQuota] | None = None
    # Every SCRAM credential (no passwords: salt, StoredKey, ServerKey, iterations), when they
    # changed or the broker (re-)registered; None: unchanged.
    scram_credentials: list[UpdateMetadataScramCredential] | None = None


# -- ControlledShutdown (7) ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RemainingPartition:
    topic_name: str
    partition_index: Int32


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownResponse(Response):
    """remaining_partitions: those still led by the broker; it retries while any remain."""

    API_KEY = ApiKey.CONTROLLED_SHUTDOWN
    API_VERSION = 0
    remaining_partitions: list[RemainingPartition] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlledShutdownRequest(Request):
    API_KEY = ApiKey.CONTROLLED_SHUTDOWN
    API_VERSION = 0
    RESPONSE = ControlledShutdownResponse
    broker_id: Int32
    broker_epoch: int = -1


# -- AlterPartition (56) ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionPartitionData:
    """The leader's proposal: `new_isr`, based on the state at (leader_epoch, partition_epoch)."""

    partition_index: Int32
    leader_epoch: Int32
    new_isr: list[Int32]
    leader_recovery_state: Int8 = 0
    partition_epoch: Int32


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionTopicData:
    topic_name: str
    topic_id: Uuid = ZERO_UUID
    partitions: list[AlterPartitionPartitionData]


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionPartitionResult:
    """The partition's state after the controller's decision (valid when error_code is 0)."""

    partition_index: Int32
    error_code: Int16 = 0
    leader_id: Int32 = -1
    leader_epoch: Int32 = -1
    isr: list[Int32] = field(default_factory=list)
    leader_recovery_state: Int8 = 0
    partition_epoch: Int32 = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionTopicResult:
    topic_name: str
    topic_id: Uuid = ZERO_UUID
    partitions: list[AlterPartitionPartitionResult]


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionResponse(Response):
    API_KEY = ApiKey.ALTER_PARTITION
    API_VERSION = 0
    topics: list[AlterPartitionTopicResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class AlterPartitionRequest(Request):
    API_KEY = ApiKey.ALTER_PARTITION
    API_VERSION = 0
    RESPONSE = AlterPartitionResponse
    broker_id: Int32
    broker_epoch: int = -1
    topics: list[AlterPartitionTopicData]


# -- BrokerRegistration (62) -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationListener:
    """name: "native" or "kafka"; security_protocol: Kafka's ids (0 PLAINTEXT, 1 SSL)."""

    name: str
    host: str
    port: Int32
    security_protocol: Int16 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationResponse(Response):
    """cluster_id: the controller's cluster id (not in Kafka's response, whose brokers are
    formatted with it beforehand): a broker that registered without one stores it in its log
    dirs' meta.properties; with INCONSISTENT_CLUSTER_ID it says which cluster refused it."""

    API_KEY = ApiKey.BROKER_REGISTRATION
    API_VERSION = 0
    broker_epoch: int = -1
    cluster_id: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerRegistrationRequest(Request):
    """incarnation_id: random per broker process start, so the controller tells a restarted
    broker from a retried registration of the same process. cluster_id: the cluster the broker
    belongs to; "" for a broker that knows none yet (it learns it from the answer)."""

    API_KEY = ApiKey.BROKER_REGISTRATION
    API_VERSION = 0
    RESPONSE = BrokerRegistrationResponse
    broker_id: Int32
    cluster_id: str
    incarnation_id: Uuid
    listeners: list[BrokerRegistrationListener]
    rack: str | None = None
    previous_broker_epoch: int = -1
    # The ids of the broker's log directories (their meta.properties), as KRaft's LogDirs: a
    # restart on the same directories keeps them, a wiped or replaced directory has a new one.
    log_dirs: list[Uuid] = field(default_factory=list)


# -- BrokerHeartbeat (63) --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerHeartbeatResponse(Response):
    API_KEY = ApiKey.BROKER_HEARTBEAT
    API_VERSION = 0
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerHeartbeatRequest(Request):
    API_KEY = ApiKey.BROKER_HEARTBEAT
    API_VERSION = 0
    RESPONSE = BrokerHeartbeatResponse
    broker_id: Int32
    broker_epoch: int
    current_metadata_offset: int = -1
    want_fence: bool = False
    want_shut_down: bool = False
    # The ids of the broker's log directories that failed (KRaft's OfflineLogDirs): the
    # controller moves leadership off the replicas in them.
    offline_log_dirs: list[Uuid] = field(default_factory=list)
