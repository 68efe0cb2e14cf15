"""Storage configuration under Kafka's property names.

`LogConfig` is one partition's log settings (topic-level names such as ``segment.bytes``; the
broker-level defaults such as ``log.segment.bytes`` are accepted too and mean the same field).
`LogManagerConfig` holds the per-broker settings of the log manager's background tasks.
Defaults are Kafka's. ``flush.messages`` / ``flush.ms`` default to "never" (Kafka's Long.MAX_VALUE)
because durability comes from replication; ``flush.messages = 1`` fsyncs after every append.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from runtime.properties import (
    config_from_properties,
    property_metadata,
    property_names,
    property_values,
)

LONG_MAX: Final = 2**63 - 1
_HOUR_MS: Final = 3_600_000
_MINUTE_MS: Final = 60_000

_CLEANUP_POLICIES: Final = frozenset({"delete", "compact", "compact,delete", "delete,compact"})


def _policy_property(key: str, raw: object) -> str:
    return str(raw).strip()


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one partition's log. Build with `from_properties`, or `with_overrides`.

    Each field's metadata names the properties that set it, the topic-level name first (it wins
    when both are given). For `segment_ms` and `retention_ms` the broker also takes hours or
    minutes, consulted only when the millisecond property is absent (as Kafka does)."""

    segment_bytes: int = field(
        default=1024 * 1024 * 1024,
        metadata=property_metadata("segment.bytes", "log.segment.bytes"),
    )
    segment_ms: int = field(
        default=7 * 24 * _HOUR_MS,
        metadata=property_metadata(
            "segment.ms", "log.roll.ms", scaled={"log.roll.hours": _HOUR_MS}
        ),
    )
    segment_jitter_ms: int = field(
        default=0, metadata=property_metadata("segment.jitter.ms", "log.roll.jitter.ms")
    )
    segment_index_bytes: int = field(
        default=10 * 1024 * 1024,
        metadata=property_metadata("segment.index.bytes", "log.index.size.max.bytes"),
    )
    index_interval_bytes: int = field(
        default=4096, metadata=property_metadata("index.interval.bytes", "log.index.interval.bytes")
    )
    # -1: keep forever
    retention_ms: int = field(
        default=7 * 24 * _HOUR_MS,
        metadata=property_metadata(
            "retention.ms",
            "log.retention.ms",
            scaled={"log.retention.minutes": _MINUTE_MS, "log.retention.hours": _HOUR_MS},
        ),
    )
    # -1: no size limit
    retention_bytes: int = field(
        default=-1, metadata=property_metadata("retention.bytes", "log.retention.bytes")
    )
    flush_messages: int = field(
        default=LONG_MAX,
        metadata=property_metadata("flush.messages", "log.flush.interval.messages"),
    )
    flush_ms: int = field(
        default=LONG_MAX, metadata=property_metadata("flush.ms", "log.flush.interval.ms")
    )
    file_delete_delay_ms: int = field(
        default=60_000,
        metadata=property_metadata("file.delete.delay.ms", "log.segment.delete.delay.ms"),
    )
    # Kafka's 1048588
    max_message_bytes: int = field(
        default=1024 * 1024 + 12,
        metadata=property_metadata("max.message.bytes", "message.max.bytes"),
    )
    cleanup_policy: str = field(
        default="delete",
        metadata=property_metadata("cleanup.policy", "log.cleanup.policy", parse=_policy_property),
    )
    # Compaction (Kafka's names and defaults; the broker-level names are the log.cleaner.* ones).
    # The live cleaner (runtime/log/cleaner/) reads them per log; the offline job has its own.
    min_compaction_lag_ms: int = field(
        default=0,
        metadata=property_metadata("min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms"),
    )
    max_compaction_lag_ms: int = field(
        default=LONG_MAX,
        metadata=property_metadata("max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms"),
    )
    min_cleanable_dirty_ratio: float = field(
        default=0.5,
        metadata=property_metadata("min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio"),
    )
    delete_retention_ms: int = field(
        default=86_400_000,
        metadata=property_metadata("delete.retention.ms", "log.cleaner.delete.retention.ms"),
    )

    def __post_init__(self) -> None:
        # segment.bytes must hold at least a batch header; index files at least one entry.
        _check(self.segment_bytes >= 61, "segment.bytes", self.segment_bytes, ">= 61")
        _check(self.segment_ms >= 1, "segment.ms", self.segment_ms, ">= 1")
        _check(self.segment_jitter_ms >= 0, "segment.jitter.ms", self.segment_jitter_ms, ">= 0")
        _check(
            self.segment_index_bytes >= 12,
            "segment.index.bytes",
            self.segment_index_bytes,
            ">= 12",
        )
        _check(
            self.index_interval_bytes >= 0,
            "index.interval.bytes",
            self.index_interval_bytes,
            ">= 0",
        )
        _check(self.retention_ms >= -1, "retention.ms", self.retention_ms, ">= -1")
        _check(self.flush_messages >= 1, "flush.messages", self.flush_messages, ">= 1")
        _check(self.flush_ms >= 0, "flush.ms", self.flush_ms, ">= 0")
        _check(
            self.file_delete_delay_ms >= 0,
            "file.delete.delay.ms",
            self.file_delete_delay_ms,
            ">= 0",
        )
        _check(self.max_message_bytes >= 0, "max.message.bytes", self.max_message_bytes, ">= 0")
        _check(
            self.cleanup_policy in _CLEANUP_POLICIES,
            "cleanup.policy",
            self.cleanup_policy,
            f"one of {sorted(_CLEANUP_POLICIES)}",
        )
        _check(
            self.min_compaction_lag_ms >= 0,
            "min.compaction.lag.ms",
            self.min_compaction_lag_ms,
            ">= 0",
        )
        _check(
            self.max_compaction_lag_ms >= 1,
            "max.compaction.lag.ms",
            self.max_compaction_lag_ms,
            ">= 1",
        )
        _check(
            0.0 <= self.min_cleanable_dirty_ratio <= 1.0,
            "min.cleanable.dirty.ratio",
            self.min_cleanable_dirty_ratio,
            "in [0, 1]",
        )
        _check(
            self.delete_retention_ms >= 0, "delete.retention.ms", self.delete_retention_ms, ">= 0"
        )

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete_retention(self) -> bool:
        """Whether retention.ms / retention.bytes delete segments (cleanup.policy has delete)."""
        return "delete" in self.cleanup_policy

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> LogConfig:
        """Kafka properties (topic- or broker-level names) over Kafka's defaults."""
        return cls().with_overrides(props)

    def with_overrides(self, props: Mapping[str, object]) -> LogConfig:
        """This config with the log properties in `props` applied; other keys are ignored,
        since a topic's or broker's property map also holds non-log settings."""
        changes = property_values(LogConfig, props)
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


# Each field name -> the property names that set it, topic-level name first.
_LOG_KEYS: Final = property_names(LogConfig)
# The topic-level names (what CreateTopics may set); the broker-level names are for node configs.
TOPIC_LOG_CONFIG_NAMES: Final = frozenset(keys[0] for keys in _LOG_KEYS.values())


def topic_config_values(config: LogConfig) -> dict[str, str]:
    """The log settings of `config` under their topic-level names, as Kafka lists them."""
    return {keys[0]: str(getattr(config, name)) for name, keys in _LOG_KEYS.items()}


def _check(ok: bool, key: str, value: object, expected: str) -> None:
    if not ok:
        raise ValueError(f"{key} must be {expected}, got {value!r}")


def _dirs_property(key: str, raw: object) -> tuple[str, ...]:
    """A comma-separated string (blanks around names dropped), or a TOML list."""
    if isinstance(raw, str):
        return tuple(d.strip() for d in raw.split(",") if d.strip())
    if isinstance(raw, list | tuple):
        return tuple(str(d) for d in raw)
    raise ValueError(f"{key}: expected a comma-separated string, got {raw!r}")


@dataclass(frozen=True, slots=True)
class LogManagerConfig:
    """Per-broker settings of the log manager (Kafka's broker property names)."""

    # log.dirs, or the single log.dir when log.dirs is absent.
    log_dirs: tuple[str, ...] = field(
        default=("/tmp/ketch-logs",),
        metadata=property_metadata("log.dirs", "log.dir", parse=_dirs_property),
    )
    retention_check_interval_ms: int = field(
        default=300_000, metadata=property_metadata("log.retention.check.interval.ms")
    )
    flush_scheduler_interval_ms: int = field(
        default=LONG_MAX, metadata=property_metadata("log.flush.scheduler.interval.ms")
    )
    flush_offset_checkpoint_interval_ms: int = field(
        default=60_000, metadata=property_metadata("log.flush.offset.checkpoint.interval.ms")
    )
    flush_start_offset_checkpoint_interval_ms: int = field(
        default=60_000, metadata=property_metadata("log.flush.start.offset.checkpoint.interval.ms")
    )
    # Idempotent producers' state is forgotten after this long without a write (KIP-360).
    producer_id_expiration_ms: int = field(
        default=86_400_000, metadata=property_metadata("producer.id.expiration.ms")
    )
    producer_id_expiration_check_interval_ms: int = field(
        default=600_000, metadata=property_metadata("producer.id.expiration.check.interval.ms")
    )
    default: LogConfig = field(default_factory=LogConfig)

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> LogManagerConfig:
        return config_from_properties(cls, props, default=LogConfig.from_properties(props))
