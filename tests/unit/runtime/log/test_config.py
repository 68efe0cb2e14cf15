from __future__ import annotations

import pytest

from runtime.log.config import LONG_MAX, LogConfig, LogManagerConfig


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1 << 30
    assert config.segment_index_bytes == 10 << 20
    assert config.index_interval_bytes == 4096
    assert config.retention_ms == 7 * 24 * 3_600_000
    assert config.retention_bytes == -1
    assert config.flush_messages == LONG_MAX
    assert config.max_message_bytes == 1_048_588
    assert config.delete_retention
    assert not config.compact


def test_topic_and_broker_names_set_the_same_field() -> None:
    assert LogConfig.from_properties({"segment.bytes": 1000}).segment_bytes == 1000
    assert LogConfig.from_properties({"log.segment.bytes": "2000"}).segment_bytes == 2000
    # The topic-level name wins when both are given.
    both = LogConfig.from_properties({"retention.ms": 5, "log.retention.ms": 6})
    assert both.retention_ms == 5


def test_broker_hours_and_minutes_scale_when_ms_absent() -> None:
    assert LogConfig.from_properties({"log.retention.hours": 2}).retention_ms == 7_200_000
    assert LogConfig.from_properties({"log.retention.minutes": 3}).retention_ms == 180_000
    assert LogConfig.from_properties({"log.roll.hours": 1}).segment_ms == 3_600_000
    explicit = LogConfig.from_properties({"log.retention.ms": 9, "log.retention.hours": 2})
    assert explicit.retention_ms == 9


def test_overrides_keep_other_fields_and_ignore_unrelated_keys() -> None:
    base = LogConfig(segment_bytes=5000)
    merged = base.with_overrides({"flush.messages": 1, "min.insync.replicas": 2})
    assert merged.segment_bytes == 5000
    assert merged.flush_messages == 1


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"segment.bytes": 10}, "segment.bytes"),
        ({"flush.messages": 0}, "flush.messages"),
        ({"retention.ms": -2}, "retention.ms"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"segment.bytes": "lots"}, "segment.bytes"),
        ({"segment.bytes": True}, "segment.bytes"),
    ],
)
def test_invalid_values_are_rejected(props: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LogConfig.from_properties(props)


def test_compact_policy_disables_delete_retention() -> None:
    config = LogConfig.from_properties({"cleanup.policy": "compact"})
    assert config.compact
    assert not config.delete_retention


def test_manager_config_from_properties() -> None:
    config = LogManagerConfig.from_properties(
        {"log.dirs": "/a, /b", "log.retention.check.interval.ms": 10, "log.segment.bytes": 4096}
    )
    assert config.log_dirs == ("/a", "/b")
    assert config.retention_check_interval_ms == 10
    assert config.flush_scheduler_interval_ms == LONG_MAX
    assert config.default.segment_bytes == 4096
