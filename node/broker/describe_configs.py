"""DescribeConfigs on a broker: a topic's effective settings, each with where it came from.

A broker knows a topic's configs from the controller (the overrides made at CreateTopics travel
in LeaderAndIsr / UpdateMetadata, actors/replication/replica_manager.py) and its own defaults (the
log manager's default LogConfig, the replica manager's min.insync.replicas), so it answers for
topics itself, as a Kafka broker does from its metadata. Each config is listed under its
topic-level name with source DYNAMIC_TOPIC_CONFIG when the topic overrides it, else
DEFAULT_CONFIG (ketch does not tell a broker-file setting from a built-in default here).

A broker resource (resource name: this broker's id, as Kafka's AdminClient sends it, or empty)
lists every property the broker reads with the value it runs with (`BrokerConfigSource`, from
node/broker/config.py's `property_values`): STATIC_BROKER_CONFIG for a property its config file
or flags set (BrokerConfig.originals, or a synonym that set it, such as log.retention.hours
for log.retention.ms), DEFAULT_CONFIG otherwise, all read-only, since ketch has no dynamic
broker configs. This is what `ketch config show` prints for a running cluster.
Another broker's id is INVALID_REQUEST, as Kafka answers: each broker describes itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from node.broker.config import BrokerConfig, property_values
from runtime.log.config import LogConfig, LogManagerConfig, topic_config_values
from runtime.properties import property_synonyms
from wire.errors import ErrorCode
from wire.messages import (
    DescribeConfigsRequest,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from wire.messages.admin import (
    CONFIG_SOURCE_DEFAULT,
    CONFIG_SOURCE_DYNAMIC_TOPIC,
    CONFIG_SOURCE_STATIC_BROKER,
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
)

MIN_INSYNC_REPLICAS = "min.insync.replicas"
# The other names of the log settings (log.retention.hours sets log.retention.ms, log.dir sets
# log.dirs): given one of them, the listed property's value is the configured one.
_SYNONYMS: Final = {**property_synonyms(LogConfig), **property_synonyms(LogManagerConfig)}


@dataclass(frozen=True, slots=True)
class BrokerConfigSource:
    """What DescribeConfigs lists for this broker: its id and every property it reads."""

    broker_id: int
    configs: tuple[DescribeConfigsResourceResult, ...]

    @classmethod
    def of(cls, config: BrokerConfig) -> BrokerConfigSource:
        given = config.originals
        configs = tuple(
            DescribeConfigsResourceResult(
                name=name,
                value=_text(value),
                read_only=True,
                config_source=(
                    CONFIG_SOURCE_STATIC_BROKER
                    if name in given or given.intersection(_SYNONYMS.get(name, ()))
                    else CONFIG_SOURCE_DEFAULT
                ),
            )
            for name, value in property_values(config).items()
        )
        return cls(config.broker_id, configs)


def _text(value: bool | int | float | str) -> str:
    # Kafka's spelling of a boolean property.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


@dataclass(frozen=True, slots=True)
class TopicConfigSource:
    """What the broker knows of a topic's configs (the node binds these to its parts)."""

    exists: Callable[[str], bool]
    overrides: Callable[[str], Mapping[str, object]]
    effective: Callable[[str], LogConfig]
    min_insync_replicas: Callable[[str], int]


def describe_configs(
    request: DescribeConfigsRequest,
    topics: TopicConfigSource,
    broker: BrokerConfigSource | None = None,
) -> DescribeConfigsResponse:
    results = []
    for resource in request.resources:
        name, kind = resource.resource_name, resource.resource_type
        if kind == RESOURCE_BROKER and broker is not None:
            results.append(_broker_result(name, resource.configuration_keys, broker))
        elif kind == RESOURCE_TOPIC:
            if not topics.exists(name):
                results.append(
                    DescribeConfigsResult(
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        error_message=f"unknown topic {name!r}",
                        resource_type=kind,
                        resource_name=name,
                    )
                )
                continue
            wanted = set(resource.configuration_keys or ())
            results.append(
                DescribeConfigsResult(
                    resource_type=kind,
                    resource_name=name,
                    configs=[
                        c for c in _topic_configs(name, topics) if not wanted or c.name in wanted
                    ],
                )
            )
        else:
            what = "broker" if kind == RESOURCE_BROKER else f"resource type {kind}"
            results.append(
                DescribeConfigsResult(
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message=f"ketch describes topic configs only, not {what} configs",
                    resource_type=kind,
                    resource_name=name,
                )
            )
    return DescribeConfigsResponse(results=results)


def _broker_result(
    name: str, keys: list[str] | None, broker: BrokerConfigSource
) -> DescribeConfigsResult:
    if name not in ("", str(broker.broker_id)):
        return DescribeConfigsResult(
            error_code=ErrorCode.INVALID_REQUEST,
            error_message=(
                f"this is broker {broker.broker_id}: ask broker {name} for its own configs"
            ),
            resource_type=RESOURCE_BROKER,
            resource_name=name,
        )
    wanted = set(keys or ())
    return DescribeConfigsResult(
        resource_type=RESOURCE_BROKER,
        resource_name=name,
        configs=[c for c in broker.configs if not wanted or c.name in wanted],
    )


def _topic_configs(topic: str, topics: TopicConfigSource) -> list[DescribeConfigsResourceResult]:
    overrides = topics.overrides(topic)
    values = topic_config_values(topics.effective(topic))
    values[MIN_INSYNC_REPLICAS] = str(topics.min_insync_replicas(topic))
    return [
        DescribeConfigsResourceResult(
            name=name,
            value=value,
            config_source=(
                CONFIG_SOURCE_DYNAMIC_TOPIC if name in overrides else CONFIG_SOURCE_DEFAULT
            ),
        )
        for name, value in sorted(values.items())
    ]
