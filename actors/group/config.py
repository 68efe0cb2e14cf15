"""The group coordinator's settings, under Kafka's property names and with Kafka's defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Final, Self

from runtime.properties import config_from_properties

_MINUTE_MS: Final = 60_000


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    """Each field is the snake_case form of the property named beside it."""

    # offsets.topic.num.partitions: partitions of __consumer_offsets when it is created.
    offsets_topic_num_partitions: int = 50
    # offsets.topic.replication.factor: its replication factor (created only once that many
    # brokers are alive, as in Kafka).
    offsets_topic_replication_factor: int = 3
    # group.initial.rebalance.delay.ms: how long the first rebalance of an empty group waits
    # for more members (extended per joining member, up to the rebalance timeout).
    group_initial_rebalance_delay_ms: int = 3_000
    # group.min.session.timeout.ms / group.max.session.timeout.ms: the session timeouts a
    # member may ask for (INVALID_SESSION_TIMEOUT outside).
    group_min_session_timeout_ms: int = 6_000
    group_max_session_timeout_ms: int = 1_800_000
    # group.max.size: members per group (GROUP_MAX_SIZE_REACHED beyond).
    group_max_size: int = 2_147_483_647
    # offsets.retention.minutes: how long committed offsets of an empty group (or of a simple
    # consumer, since its last commit) are kept.
    offsets_retention_minutes: int = 10_080
    # offsets.retention.check.interval.ms: how often expired offsets are looked for.
    offsets_retention_check_interval_ms: int = 600_000
    # offsets.commit.timeout.ms: how long a commit waits for every in-sync replica.
    offsets_commit_timeout_ms: int = 5_000
    # offsets.load.buffer.size: bytes read per step while loading an offsets partition.
    offsets_load_buffer_size: int = 5_242_880
    # Consumer groups of the new protocol (KIP-848, ConsumerGroupHeartbeat):
    # group.consumer.heartbeat.interval.ms: how often members are told to heartbeat.
    group_consumer_heartbeat_interval_ms: int = 5_000
    # group.consumer.session.timeout.ms: a member not heard from for this long is removed.
    group_consumer_session_timeout_ms: int = 45_000
    # group.consumer.max.size: members per consumer group (GROUP_MAX_SIZE_REACHED beyond).
    group_consumer_max_size: int = 2_147_483_647
    # group.consumer.assignors: the server-side assignors by name, comma-separated; the first
    # is the default (Kafka lists class names; ketch takes the names, `uniform` and `range`).
    group_consumer_assignors: str = "uniform,range"

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            if isinstance(value, str):
                continue
            low = 0 if spec.name == "group_initial_rebalance_delay_ms" else 1
            if value < low:
                key = spec.name.replace("_", ".")
                raise ValueError(f"{key} must be >= {low}, got {value}")
        known = ("uniform", "range")  # actors/group/consumer_assignors.py
        if not self.consumer_assignors or not set(self.consumer_assignors) <= set(known):
            raise ValueError(
                f"group.consumer.assignors must name some of {', '.join(known)}, "
                f"got {self.group_consumer_assignors!r}"
            )
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError(
                "group.min.session.timeout.ms must not exceed group.max.session.timeout.ms"
            )

    @property
    def consumer_assignors(self) -> tuple[str, ...]:
        """group.consumer.assignors as names, the default first."""
        return tuple(n.strip() for n in self.group_consumer_assignors.split(",") if n.strip())

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * _MINUTE_MS

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> Self:
        """The coordinator's keys of a node's property map (other keys are not its own)."""
        return config_from_properties(cls, props)
