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

LONG_MAX: Final = 2**63 - 1
_HOUR_MS: Final = 3_600_000
_MINUTE_MS: Final = 60_000

# Each field name -> the property names that set it; topic-level name first. For `segment_ms`
# and `retention_ms` the broker also takes hours/minutes, scaled below.
_LOG_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "segment_bytes": ("segment.bytes", "log.segment.bytes"),
    "segment_ms": ("segment.ms", "log.roll.ms"),
    "segment_jitter_ms": ("segment.jitter.ms", "log.roll.jitter.ms"),
    "segment_index_bytes": ("segment.index.bytes", "log.index.size.max.bytes"),
    "index_interval_bytes": ("index.interval.bytes", "log.index.interval.bytes"),
    "retention_ms": ("retention.ms", "log.retention.ms"),
    "retention_bytes": ("retention.bytes", "log.retention.bytes"),
    "flush_messages": ("flush.messages", "log.flush.interval.messages"),
    "flush_ms": ("flush.ms", "log.flush.interval.ms"),
    "file_delete_delay_ms": ("file.delete.delay.ms", "log.segment.delete.delay.ms"),
    "max_message_bytes": ("max.message.bytes", "message.max.bytes"),
    "cleanup_policy": ("cleanup.policy", "log.cleanup.policy"),
}
# Coarser broker units, consulted only when the millisecond property is absent (as Kafka does).
_SCALED_KEYS: Final[dict[str, tuple[tuple[str, int], ...]]] = {
    "segment_ms": (("log.roll.hours", _HOUR_MS),),
    "retention_ms": (("log.retention.minutes", _MINUTE_MS), ("log.retention.hours", _HOUR_MS)),
}
# The topic-level names (what CreateTopics may set); the broker-level names are for node configs.
TOPIC_LOG_CONFIG_NAMES: Final = frozenset(keys[0] for keys in _LOG_KEYS.values())
_CLEANUP_POLICIES: Final = frozenset({"delete", "compact", "compact,delete", "delete,compact"})


def _as_int(key: str, value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{key}: expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise ValueError(f"{key}: expected an integer, got {value!r}") from None
    raise ValueError(f"{key}: expected an integer, got {value!r}")


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Settings of one partition's log. Build with `from_properties`, or `with_overrides`."""

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * _HOUR_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * _HOUR_MS  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    file_delete_delay_ms: int = 60_000
    max_message_bytes: int = 1024 * 1024 + 12  # Kafka's 1048588
    cleanup_policy: str = "delete"

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
        changes: dict[str, object] = {}
        for name, keys in _LOG_KEYS.items():
            for key in keys:
                if key in props:
                    value = props[key]
                    changes[name] = (
                        str(value).strip() if name == "cleanup_policy" else _as_int(key, value)
                    )
                    break
            else:
                for key, scale in _SCALED_KEYS.get(name, ()):
                    if key in props:
                        changes[name] = _as_int(key, props[key]) * scale
                        break
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def topic_config_values(config: LogConfig) -> dict[str, str]:
    """The log settings of `config` under their topic-level names, as Kafka lists them."""
    return {keys[0]: str(getattr(config, name)) for name, keys in _LOG_KEYS.items()}


def _check(ok: bool, key: str, value: object, expected: str) -> None:
    if not ok:
        raise ValueError(f"{key} must be {expected}, got {value!r}")


@dataclass(frozen=True, slots=True)
class LogManagerConfig:
    """Per-broker settings of the log manager (Kafka's broker property names)."""

    log_dirs: tuple[str, ...] = ("/tmp/ketch-logs",)
    retention_check_interval_ms: int = 300_000
    flush_scheduler_interval_ms: int = LONG_MAX
    flush_offset_checkpoint_interval_ms: int = 60_000
    flush_start_offset_checkpoint_interval_ms: int = 60_000
    default: LogConfig = field(default_factory=LogConfig)

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> LogManagerConfig:
        dirs_value = props.get("log.dirs", props.get("log.dir", "/tmp/ketch-logs"))
        if isinstance(dirs_value, str):
            dirs = tuple(d.strip() for d in dirs_value.split(",") if d.strip())
        elif isinstance(dirs_value, list | tuple):
            dirs = tuple(str(d) for d in dirs_value)
        else:
            raise ValueError(f"log.dirs: expected a comma-separated string, got {dirs_value!r}")

        def get(key: str, default: int) -> int:
            return _as_int(key, props[key]) if key in props else default

        return cls(
            log_dirs=dirs,
            retention_check_interval_ms=get("log.retention.check.interval.ms", 300_000),
            flush_scheduler_interval_ms=get("log.flush.scheduler.interval.ms", LONG_MAX),
            flush_offset_checkpoint_interval_ms=get(
                "log.flush.offset.checkpoint.interval.ms", 60_000
            ),
            flush_start_offset_checkpoint_interval_ms=get(
                "log.flush.start.offset.checkpoint.interval.ms", 60_000
            ),
            default=LogConfig.from_properties(props),
        )
