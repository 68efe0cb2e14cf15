"""Replication's settings, under Kafka's property names and with Kafka's defaults: the
ReplicaManager's (`ReplicaManagerConfig`), each partition actor's (`PartitionConfig`, derived
from the ReplicaManager's), and the replica fetchers' (`ReplicaFetcherConfig`).

Each is a frozen dataclass whose `__post_init__` checks its ranges, so a config built by hand in a
test is checked like one read from properties; `from_properties` reads Kafka's names (the field's
name with dots, see runtime/properties.py) and ignores keys that belong to other parts of the
node. Plain values: no owner, no lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from actors.metadata_cache import DEFAULT_LISTENER
from runtime.properties import NOT_A_PROPERTY, config_from_properties, property_metadata


@dataclass(frozen=True, slots=True)
class PartitionConfig:
    """replica.lag.time.max.ms and min.insync.replicas, with Kafka's defaults."""

    replica_lag_time_max_ms: int = 30_000
    min_insync_replicas: int = 1

    def __post_init__(self) -> None:
        if self.replica_lag_time_max_ms < 1:
            raise ValueError(
                f"replica.lag.time.max.ms must be >= 1: {self.replica_lag_time_max_ms}"
            )
        if self.min_insync_replicas < 1:
            raise ValueError(f"min.insync.replicas must be >= 1: {self.min_insync_replicas}")

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> PartitionConfig:
        """Read Kafka's property names; other keys are ignored (they belong to other parts)."""
        return config_from_properties(cls, properties)


@dataclass(frozen=True, slots=True)
class ReplicaManagerConfig:
    """Kafka's broker properties the ReplicaManager reads, with Kafka's defaults."""

    broker_id: int
    replica_lag_time_max_ms: int = 30_000
    high_watermark_checkpoint_interval_ms: int = field(
        default=5_000, metadata=property_metadata("replica.high.watermark.checkpoint.interval.ms")
    )
    min_insync_replicas: int = 1
    # Set by the node, not read from a property.
    inter_broker_listener: str = field(default=DEFAULT_LISTENER, metadata=NOT_A_PROPERTY)

    def __post_init__(self) -> None:
        if self.broker_id < 0:
            raise ValueError(f"broker.id must be >= 0: {self.broker_id}")
        if self.replica_lag_time_max_ms < 2:
            raise ValueError(
                f"replica.lag.time.max.ms must be >= 2: {self.replica_lag_time_max_ms}"
            )
        if self.high_watermark_checkpoint_interval_ms < 1:
            raise ValueError(
                "replica.high.watermark.checkpoint.interval.ms must be >= 1: "
                f"{self.high_watermark_checkpoint_interval_ms}"
            )

    @classmethod
    def from_properties(
        cls, broker_id: int, properties: Mapping[str, object]
    ) -> ReplicaManagerConfig:
        """Read Kafka's property names; other keys belong to other parts and are ignored."""
        return config_from_properties(cls, properties, broker_id=broker_id)

    @property
    def partition_config(self) -> PartitionConfig:
        return PartitionConfig(self.replica_lag_time_max_ms, self.min_insync_replicas)


@dataclass(frozen=True, slots=True)
class ReplicaFetcherConfig:
    """The replica.fetch.* settings and num.replica.fetchers, with Kafka's defaults."""

    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_response_max_bytes: int = 10_485_760
    replica_fetch_backoff_ms: int = 1_000
    num_replica_fetchers: int = 1

    def __post_init__(self) -> None:
        for name in ("replica_fetch_wait_max_ms", "replica_fetch_backoff_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative: {getattr(self, name)}")
        for name in (
            "replica_fetch_min_bytes",
            "replica_fetch_max_bytes",
            "replica_fetch_response_max_bytes",
            "num_replica_fetchers",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1: {getattr(self, name)}")

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> ReplicaFetcherConfig:
        """Read Kafka's property names; other keys belong to other parts of the node."""
        return config_from_properties(cls, properties)
