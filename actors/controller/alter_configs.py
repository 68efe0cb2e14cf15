"""IncrementalAlterConfigs at the controller (brokers forward it from clients, as KIP-590): a
topic's config overrides changed in place (Kafka's ConfigurationControlManager, for topics).

Per resource:
- a topic (resource type 2): its operations apply in request order to its current overrides —
  SET a value, DELETE an override (back to the broker default), APPEND items to or SUBTRACT
  items from a list-valued config (cleanup.policy; from the current value, or Kafka's default
  when the topic does not override it). The result is checked by the same rules as CreateTopics'
  configs (actors/controller/topics.py's `validate_topic_configs`: unknown keys and bad values
  INVALID_CONFIG, with the reason; an unknown key is refused for DELETE too). A key named
  twice in one resource is INVALID_REQUEST, a SET, APPEND or SUBTRACT without a value too
  (Kafka's answers); APPEND or SUBTRACT on a config that is not a list is INVALID_CONFIG. An
  unknown topic is UNKNOWN_TOPIC_OR_PARTITION, one queued for deletion INVALID_TOPIC_EXCEPTION
  (as CreatePartitions answers it);
- a broker (resource type 4): INVALID_REQUEST "dynamic broker configs are not supported" —
  ketch's brokers read their settings once, at start-up;
- any other type, or a resource named twice in the request: INVALID_REQUEST.
Each resource succeeds or fails whole. With validate_only the answers are the same and nothing
is written.

A topic whose overrides changed gets a TopicConfigsRecord (its whole new override map) in the
metadata log, committed before anything is sent; then every live broker gets UpdateMetadata with
the topic's partitions and its configs. A broker applies them to its live logs and its data path
at once (actors/replication/replica_manager.py's `_apply_topic_configs`: retention, segment and
message sizes, cleanup.policy, min.insync.replicas), as Kafka's dynamic topic configs take
effect without a restart; DescribeConfigs on any broker then lists them as
DYNAMIC_TOPIC_CONFIG. A broker that was down gets them with its full LeaderAndIsr when it
registers again. The controller reads unclean.leader.election.enable from its model, so that
change counts from the next election.

State: none of its own; it works on the controller actor's (actors/controller/context.py), from
the actor's IncrementalAlterConfigs handler, one message at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Final

from actors.controller.context import ControllerContext
from actors.controller.journal import Change
from actors.controller.outbox import Outbox
from actors.controller.topics import TOPIC_CONFIG_NAMES, TopicRefusal, validate_topic_configs
from runtime.log.config import LogConfig, topic_config_values
from wire.errors import ErrorCode
from wire.messages import (
    AlterableConfig,
    AlterConfigsResource,
    AlterConfigsResourceResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from wire.messages.admin import RESOURCE_BROKER, RESOURCE_TOPIC
from wire.messages.alter import (
    CONFIG_OPERATION_APPEND,
    CONFIG_OPERATION_DELETE,
    CONFIG_OPERATION_NAMES,
    CONFIG_OPERATION_SET,
    CONFIG_OPERATION_SUBTRACT,
)
from wire.metadata_records import TopicConfigsRecord, TopicRecord

log = logging.getLogger("ketch.controller")

BROKER_CONFIGS_UNSUPPORTED: Final = "dynamic broker configs are not supported"
# The topic configs whose value is a comma-separated list (Kafka's ConfigDef.Type.LIST).
LIST_CONFIGS: Final = frozenset({"cleanup.policy"})
# What APPEND / SUBTRACT start from when the topic does not override the config: Kafka's default
# (the controller does not know each broker's log.* settings; Kafka's controller reads its own).
_DEFAULTS: Final = topic_config_values(LogConfig())

_Changed = dict[bytes, tuple[TopicRecord, dict[str, str]]]


async def incremental_alter_configs(
    ctx: ControllerContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    named = [(r.resource_type, r.resource_name) for r in request.resources]
    responses: list[AlterConfigsResourceResponse] = []
    changed: _Changed = {}
    for resource in request.resources:
        if named.count((resource.resource_type, resource.resource_name)) > 1:
            outcome: TopicRefusal | None = TopicRefusal(
                ErrorCode.INVALID_REQUEST, "Duplicate resource in request."
            )
        else:
            outcome = _alter(ctx, resource, changed)
        responses.append(
            AlterConfigsResourceResponse(
                error_code=ErrorCode.NONE if outcome is None else outcome.error,
                error_message=None if outcome is None else outcome.message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    if changed and not request.validate_only:
        await _commit_and_announce(ctx, changed)
    return IncrementalAlterConfigsResponse(responses=responses)


def _alter(
    ctx: ControllerContext, resource: AlterConfigsResource, changed: _Changed
) -> TopicRefusal | None:
    """None when the resource's changes are valid (recorded in `changed` if they change
    anything), else the refusal."""
    if resource.resource_type == RESOURCE_BROKER:
        return TopicRefusal(ErrorCode.INVALID_REQUEST, BROKER_CONFIGS_UNSUPPORTED)
    if resource.resource_type != RESOURCE_TOPIC:
        return TopicRefusal(
            ErrorCode.INVALID_REQUEST,
            f"resource type {resource.resource_type} is not supported: only topic configs change",
        )
    topic = ctx.model.topic_by_name(resource.resource_name)
    if topic is None:
        return TopicRefusal(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
            f"topic {resource.resource_name!r} does not exist",
        )
    if ctx.model.is_queued_for_deletion(topic.topic_id):
        return TopicRefusal(ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is queued for deletion.")
    configs = altered_configs(topic.configs, resource.configs)
    if isinstance(configs, TopicRefusal):
        return configs
    if configs != dict(topic.configs):
        changed[topic.topic_id] = (topic, configs)
    return None


def altered_configs(
    current: Mapping[str, str], operations: Sequence[AlterableConfig]
) -> dict[str, str] | TopicRefusal:
    """`current` overrides after `operations`, checked as CreateTopics checks configs; or the
    refusal. Pure."""
    names = [op.name for op in operations]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        return TopicRefusal(
            ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {duplicates}"
        )
    configs = dict(current)
    for op in operations:
        refusal = _apply(configs, op)
        if refusal is not None:
            return refusal
    return validate_topic_configs(configs)


def _apply(configs: dict[str, str], op: AlterableConfig) -> TopicRefusal | None:
    kind = op.config_operation
    if op.name not in TOPIC_CONFIG_NAMES:
        # Checked for DELETE too, which the final check cannot see: a typo there would
        # otherwise succeed and change nothing.
        return TopicRefusal(ErrorCode.INVALID_CONFIG, f"unknown topic config {op.name!r}")
    if kind == CONFIG_OPERATION_DELETE:
        configs.pop(op.name, None)
        return None
    if kind not in CONFIG_OPERATION_NAMES:
        return TopicRefusal(ErrorCode.INVALID_REQUEST, f"unknown config operation {kind}")
    if op.value is None:
        return TopicRefusal(ErrorCode.INVALID_REQUEST, f"Null value not supported for: {op.name}")
    if kind == CONFIG_OPERATION_SET:
        configs[op.name] = op.value
        return None
    verb = "append" if kind == CONFIG_OPERATION_APPEND else "subtract"
    if op.name not in LIST_CONFIGS:
        return TopicRefusal(
            ErrorCode.INVALID_CONFIG,
            f"Config value {verb} is not allowed for config key: {op.name}",
        )
    items = _items(configs.get(op.name, _DEFAULTS.get(op.name, "")))
    given = _items(op.value)
    if kind == CONFIG_OPERATION_APPEND:
        items += [item for item in given if item not in items]
    else:
        assert kind == CONFIG_OPERATION_SUBTRACT, kind
        items = [item for item in items if item not in given]
    configs[op.name] = ",".join(items)
    return None


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


async def _commit_and_announce(ctx: ControllerContext, changed: _Changed) -> None:
    change = Change(ctx.model)
    for topic_id, (_, configs) in changed.items():
        change.add(TopicConfigsRecord(topic_id, configs))
    await ctx.journal.commit(change)
    outbox = Outbox()
    for topic_id, (topic, configs) in changed.items():
        log.info("%s: configs of topic %s are now %s", ctx.name, topic.name, configs)
        outbox.metadata.update(
            ctx.model.topic_partition(p) for p in ctx.model.partitions_of(topic_id)
        )
    ctx.sender.flush(outbox)
