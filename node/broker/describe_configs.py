"""DescribeConfigs on a broker: a topic's effective settings, each with where it came from.

A broker knows a topic's configs from the controller (the overrides made at CreateTopics travel
in LeaderAndIsr / UpdateMetadata, actors/replication/replica_manager.py) and its own defaults (the
log
manager's default LogConfig, the replica manager's min.insync.replicas), so it answers for
topics itself, as a Kafka broker does from its metadata. Each config is listed under its
topic-level name with source DYNAMIC_TOPIC_CONFIG when the topic overrides it, else
DEFAULT_CONFIG (ketch does not tell a broker-file setting from a built-in default here).

Broker resources are not described: a broker does not keep the property map it was started
with in a form it could list with sources; they get INVALID_REQUEST with a message saying so
(`ketch config show` lists a node's settings).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from runtime.log.config import LogConfig, topic_config_values
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
    RESOURCE_BROKER,
    RESOURCE_TOPIC,
)

MIN_INSYNC_REPLICAS = "min.insync.replicas"


@dataclass(frozen=True, slots=True)
class TopicConfigSource:
    """What the broker knows of a topic's configs (the node binds these to its parts)."""

    exists: Callable[[str], bool]
    overrides: Callable[[str], Mapping[str, object]]
    effective: Callable[[str], LogConfig]
    min_insync_replicas: Callable[[str], int]


def describe_configs(
    request: DescribeConfigsRequest, topics: TopicConfigSource
) -> DescribeConfigsResponse:
    results = []
    for resource in request.resources:
        name, kind = resource.resource_name, resource.resource_type
        if kind == RESOURCE_TOPIC:
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
