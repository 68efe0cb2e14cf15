"""The controller actor's configuration and messages.

Every controller event is one message, processed one at a time by the actor (what Kafka's
controllerLock / event queue guarded): requests from brokers (registration, heartbeats,
AlterPartition, controlled shutdown, producer-id blocks), topic requests brokers forward from
clients, the timers' ticks, and answers to the requests the controller sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from runtime.actor import Ask
from runtime.properties import config_from_properties, property_metadata
from wire.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    Response,
)
from wire.topic import TopicPartition

DEFAULT_CONTROLLER_ID: Final = 3_000
# leader.imbalance.election.delay.ms that leaves preferred leaders to the periodic check.
ELECTION_DELAY_DISABLED: Final = -1


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """The controller's settings under Kafka's property names, with Kafka's defaults."""

    controller_id: int = field(default=DEFAULT_CONTROLLER_ID, metadata=property_metadata("node.id"))
    # cluster.id: the id the first start writes to the metadata log (None: a new random one);
    # a log holding another id is refused. Registrations must match the log's id.
    cluster_id: str | None = None
    broker_session_timeout_ms: int = 9_000
    broker_heartbeat_interval_ms: int = 2_000
    unclean_leader_election_enable: bool = False
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    leader_imbalance_per_broker_percentage: int = 10
    # Not Kafka's: how soon a partition's preferred replica leads again once it is back in the
    # ISR (actors/controller/preferred_leaders.py), rather than at the next check above; -1
    # leaves that to the check alone, as Kafka does. Only with auto.leader.rebalance.enable.
    leader_imbalance_election_delay_ms: int = 1_000
    num_partitions: int = 1
    default_replication_factor: int = 1
    # A snapshot after this many records (KRaft counts bytes; records are small and alike here).
    metadata_snapshot_records: int = 10_000

    def __post_init__(self) -> None:
        for name, value, low in (
            ("broker.session.timeout.ms", self.broker_session_timeout_ms, 1),
            ("broker.heartbeat.interval.ms", self.broker_heartbeat_interval_ms, 1),
            (
                "leader.imbalance.check.interval.seconds",
                self.leader_imbalance_check_interval_seconds,
                1,
            ),
            (
                "leader.imbalance.per.broker.percentage",
                self.leader_imbalance_per_broker_percentage,
                0,
            ),
            ("num.partitions", self.num_partitions, 1),
            ("default.replication.factor", self.default_replication_factor, 1),
            ("metadata.snapshot.records", self.metadata_snapshot_records, 1),
        ):
            if value < low:
                raise ValueError(f"{name} must be >= {low}: {value}")
        delay_ms = self.leader_imbalance_election_delay_ms
        if delay_ms < 1 and delay_ms != ELECTION_DELAY_DISABLED:
            raise ValueError(
                "leader.imbalance.election.delay.ms must be >= 1, or -1 to wait for "
                f"leader.imbalance.check.interval.seconds: {delay_ms}"
            )

    @property
    def session_check_interval_ms(self) -> int:
        """How often expired sessions are looked for: a fraction of the session timeout, so a
        dead broker is fenced within about 1.25 session timeouts."""
        return max(1, min(self.broker_heartbeat_interval_ms, self.broker_session_timeout_ms // 4))

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> ControllerConfig:
        """Read Kafka's property names; other keys belong to other parts of the node."""
        return config_from_properties(cls, properties)


# -- requests from brokers (asked by the controller node's request handlers) ----------------------


@dataclass(frozen=True, slots=True)
class RegisterBroker(Ask[BrokerRegistrationResponse]):
    request: BrokerRegistrationRequest


@dataclass(frozen=True, slots=True)
class Heartbeat(Ask[BrokerHeartbeatResponse]):
    request: BrokerHeartbeatRequest


@dataclass(frozen=True, slots=True)
class AlterPartition(Ask[AlterPartitionResponse]):
    request: AlterPartitionRequest


@dataclass(frozen=True, slots=True)
class ControlledShutdown(Ask[ControlledShutdownResponse]):
    request: ControlledShutdownRequest


@dataclass(frozen=True, slots=True)
class AllocateProducerIds(Ask[AllocateProducerIdsResponse]):
    request: AllocateProducerIdsRequest


@dataclass(frozen=True, slots=True)
class CreateTopics(Ask[CreateTopicsResponse]):
    request: CreateTopicsRequest


@dataclass(frozen=True, slots=True)
class DeleteTopics(Ask[DeleteTopicsResponse]):
    request: DeleteTopicsRequest


@dataclass(frozen=True, slots=True)
class CreatePartitions(Ask[CreatePartitionsResponse]):
    request: CreatePartitionsRequest


@dataclass(frozen=True, slots=True)
class IncrementalAlterConfigs(Ask[IncrementalAlterConfigsResponse]):
    request: IncrementalAlterConfigsRequest


# -- status ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    broker_id: int
    broker_epoch: int
    host: str
    port: int
    state: str  # "running", "shutting_down", "fenced"
    offline_log_dirs: tuple[bytes, ...] = ()  # directory ids its heartbeats reported failed


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    cluster_id: str
    controller_id: int
    controller_epoch: int
    brokers: tuple[BrokerStatus, ...]
    offline_partitions: int
    topics_being_deleted: tuple[str, ...]
    unclean_elections: int


@dataclass(frozen=True, slots=True)
class DescribeCluster(Ask[ClusterStatus]):
    pass


# -- the controller's own events -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionTick:
    """Time to fence brokers whose heartbeats stopped."""


@dataclass(frozen=True, slots=True)
class RebalanceTick:
    """Time for the preferred-leader check (auto.leader.rebalance.enable)."""


@dataclass(frozen=True, slots=True)
class ElectPreferredLeaders:
    """Time to give the partitions whose preferred replicas rejoined their ISRs their preferred
    leaders back (actors/controller/preferred_leaders.py)."""


@dataclass(frozen=True, slots=True)
class StopReplicaDone:
    """A broker answered a StopReplica(delete) the controller sent (or gave up on it).
    `partitions`: those the request deleted, so an answer refused whole (an error response
    lists no partitions) still reaches each of them."""

    broker_id: int
    broker_epoch: int
    response: Response | None
    attempts: int
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class LeaderAndIsrDone:
    """A broker answered a LeaderAndIsr with KAFKA_STORAGE_ERROR for some partitions (only such
    answers come back: the others need nothing from the controller). Handled by
    actors/controller/replica_failure.py."""

    broker_id: int
    broker_epoch: int
    response: Response


@dataclass(frozen=True, slots=True)
class RetryReplicaDeletion:
    """Time to send a live broker the StopReplica(delete) it failed again
    (actors/controller/deletion_retries.py)."""

    broker_id: int
    broker_epoch: int
