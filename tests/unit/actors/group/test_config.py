"""The group coordinator's settings."""

from __future__ import annotations

import pytest

from actors.group.config import GroupCoordinatorConfig
from runtime.properties import property_names


def test_kafkas_defaults_and_names() -> None:
    config = GroupCoordinatorConfig.from_properties({"unrelated.key": 1})
    assert config == GroupCoordinatorConfig()
    assert config.offsets_topic_num_partitions == 50
    assert config.group_initial_rebalance_delay_ms == 3_000
    assert config.offsets_retention_ms == 7 * 24 * 3_600_000
    for name, keys in property_names(GroupCoordinatorConfig).items():
        assert keys == (name.replace("_", "."),), "every key is Kafka's, read as the field's name"


def test_values_from_properties_and_refusals() -> None:
    config = GroupCoordinatorConfig.from_properties(
        {"offsets.topic.num.partitions": "3", "group.initial.rebalance.delay.ms": 0}
    )
    assert (config.offsets_topic_num_partitions, config.group_initial_rebalance_delay_ms) == (3, 0)
    with pytest.raises(ValueError, match=r"offsets\.topic\.num\.partitions must be >= 1"):
        GroupCoordinatorConfig.from_properties({"offsets.topic.num.partitions": 0})
    with pytest.raises(ValueError, match="expected an integer"):
        GroupCoordinatorConfig.from_properties({"group.max.size": True})
    with pytest.raises(ValueError, match="must not exceed"):
        GroupCoordinatorConfig.from_properties(
            {"group.min.session.timeout.ms": 10, "group.max.session.timeout.ms": 5}
        )
