"""DescribeConfigs on a broker: effective topic and broker settings with their sources."""

from __future__ import annotations

from node.broker.config import BrokerConfig, property_defaults
from node.broker.describe_configs import BrokerConfigSource, TopicConfigSource, describe_configs
from runtime.log.config import TOPIC_LOG_CONFIG_NAMES, LogConfig
from wire.errors import ErrorCode
from wire.messages import DescribeConfigsRequest, DescribeConfigsResource
from wire.messages.admin import (
    CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_STATIC_BROKER,
    RESOURCE_BROKER,
)

OVERRIDES = {"orders": {"retention.ms": "1000", "min.insync.replicas": "2"}}


def source() -> TopicConfigSource:
    return TopicConfigSource(
        exists=lambda topic: topic in ("orders", "plain"),
        overrides=lambda topic: OVERRIDES.get(topic, {}),
        effective=lambda topic: LogConfig().with_overrides(OVERRIDES.get(topic, {})),
        min_insync_replicas=lambda topic: 2 if topic == "orders" else 1,
    )


def resource(name: str, kind: int = 2, keys: list[str] | None = None) -> DescribeConfigsResource:
    return DescribeConfigsResource(resource_type=kind, resource_name=name, configuration_keys=keys)


def test_a_topic_lists_every_setting_with_overrides_marked_dynamic() -> None:
    response = describe_configs(
        DescribeConfigsRequest(resources=[resource("orders"), resource("plain")]), source()
    )
    orders, plain = response.results
    assert orders.error_code == 0
    values = {c.name: (c.value, c.config_source) for c in orders.configs}
    assert set(values) == TOPIC_LOG_CONFIG_NAMES | {"min.insync.replicas"}
    assert values["retention.ms"] == ("1000", 1)
    assert values["min.insync.replicas"] == ("2", 1)
    assert values["segment.bytes"] == (str(LogConfig().segment_bytes), 5)
    assert values["cleanup.policy"] == ("delete", 5)
    assert {c.config_source for c in plain.configs} == {5}


def test_keys_filter_unknown_topics_and_broker_resources() -> None:
    response = describe_configs(
        DescribeConfigsRequest(
            resources=[
                resource("orders", keys=["cleanup.policy"]),
                resource("missing"),
                resource("0", kind=4),
            ]
        ),
        source(),
    )
    wanted, missing, broker = response.results
    assert [(c.name, c.value) for c in wanted.configs] == [("cleanup.policy", "delete")]
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert missing.configs == []
    assert broker.error_code == ErrorCode.INVALID_REQUEST
    assert broker.error_message is not None
    assert "topic configs only" in broker.error_message


def broker_source() -> BrokerConfigSource:
    config = BrokerConfig.from_properties(
        {"broker.id": 3, "min.insync.replicas": "2", "log.retention.hours": 1}
    )
    return BrokerConfigSource.of(config)


def test_a_broker_lists_every_property_it_reads_with_static_or_default_source() -> None:
    response = describe_configs(
        DescribeConfigsRequest(resources=[resource("3", kind=RESOURCE_BROKER)]),
        source(),
        broker_source(),
    )
    [result] = response.results
    assert result.error_code == 0
    values = {c.name: (c.value, c.config_source) for c in result.configs}
    assert set(values) == set(property_defaults()) | {"broker.id"}
    assert values["broker.id"] == ("3", CONFIG_SOURCE_STATIC_BROKER)
    assert values["min.insync.replicas"] == ("2", CONFIG_SOURCE_STATIC_BROKER)
    # Set through its synonym in hours: the value in ms is the configured one.
    assert values["log.retention.ms"] == ("3600000", CONFIG_SOURCE_STATIC_BROKER)
    assert values["log.segment.bytes"] == (
        str(LogConfig().segment_bytes),
        CONFIG_SOURCE_DEFAULT,
    )
    assert values["auto.create.topics.enable"][0] in ("true", "false")
    assert all(c.read_only for c in result.configs)
    assert [c.name for c in result.configs] == sorted(values)


def test_a_broker_describes_itself_only() -> None:
    request = DescribeConfigsRequest(
        resources=[
            resource("4", kind=RESOURCE_BROKER),
            resource("3", kind=RESOURCE_BROKER, keys=["min.insync.replicas"]),
        ]
    )
    other, filtered = describe_configs(request, source(), broker_source()).results
    assert other.error_code == ErrorCode.INVALID_REQUEST
    assert other.error_message == "this is broker 3: ask broker 4 for its own configs"
    assert [(c.name, c.value) for c in filtered.configs] == [("min.insync.replicas", "2")]
