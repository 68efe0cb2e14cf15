"""CreateTopics at the controller (brokers forward it from clients, as KIP-590).

Each topic is planned by the pure rules of actors/controller/topics.py (name, partitions,
replication factor or explicit assignment, configs) against the registered and eligible brokers;
a name that collides with an existing one once "." reads as "_" is refused too. A planned topic
gets a fresh topic id, and each partition an ISR of its eligible replicas and the first of them as
leader (none eligible: no leader yet, and the whole assignment as ISR). With validate_only
nothing is written and the answer carries no topic ids.

The topic and partition records are committed first; then the partitions go New -> Online (when
they have a leader), their replicas on live brokers New -> Online, and the live replicas are sent
LeaderAndIsr (is_new) and every live broker UpdateMetadata.

State: none of its own; it works on the controller actor's (actors/controller/context.py), from
the actor's CreateTopics handler. CreatePartitions (actors/controller/partition_creation.py)
starts its new partitions the same way (`new_partition`, `start_partitions`). Topic deletion is
in actors/controller/topic_deletion.py.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import replace

from actors.controller.context import ControllerContext
from actors.controller.journal import Change
from actors.controller.model import ControllerModel
from actors.controller.outbox import Outbox
from actors.controller.states import PartitionState, ReplicaKey, ReplicaState
from actors.controller.topics import TopicPlan, TopicRefusal, plan_topic
from actors.views import NO_LEADER
from wire.errors import ErrorCode
from wire.messages import (
    CreatableTopic,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from wire.metadata_records import PartitionRecord, TopicRecord
from wire.topic import TopicPartition

log = logging.getLogger("ketch.controller")

_Created = tuple[TopicRecord, list[PartitionRecord]]


async def create_topics(
    ctx: ControllerContext, request: CreateTopicsRequest
) -> CreateTopicsResponse:
    eligible = ctx.sessions.eligible()
    results: list[CreatableTopicResult] = []
    created: list[_Created] = []
    planned_names: set[str] = set()
    for topic in request.topics:
        plan = _plan(ctx, topic, eligible, planned_names)
        if isinstance(plan, TopicRefusal):
            results.append(
                CreatableTopicResult(
                    name=topic.name, error_code=plan.error, error_message=plan.message
                )
            )
            continue
        record, partitions = _records(ctx, plan, eligible)
        planned_names.add(plan.name)
        results.append(
            CreatableTopicResult(
                name=plan.name,
                topic_id=record.topic_id,
                num_partitions=len(plan.assignment),
                replication_factor=len(plan.assignment[0]),
            )
        )
        created.append((record, partitions))
    if request.validate_only:
        return CreateTopicsResponse(topics=[replace(r, topic_id=bytes(16)) for r in results])
    if created:
        await _commit_and_announce(ctx, created)
    return CreateTopicsResponse(topics=results)


def _plan(
    ctx: ControllerContext, topic: CreatableTopic, eligible: set[int], planned_names: set[str]
) -> TopicPlan | TopicRefusal:
    plan = plan_topic(
        topic,
        registered_brokers=[b.broker_id for b in ctx.model.brokers()],
        live_brokers=sorted(eligible),
        existing_topics=_Names(ctx.model, planned_names),
        default_partitions=ctx.config.num_partitions,
        default_replication_factor=ctx.config.default_replication_factor,
        rng=ctx.rng,
    )
    collides = ctx.model.colliding_topic(topic.name)
    if collides is not None and collides != topic.name:
        return TopicRefusal(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"{topic.name!r} collides with {collides!r} ('.' and '_' are alike in metrics)",
        )
    return plan


def _records(ctx: ControllerContext, plan: TopicPlan, eligible: set[int]) -> _Created:
    topic_id = ctx.model.new_topic_id(ctx.rng)
    partitions = [
        new_partition(topic_id, index, replicas, eligible)
        for index, replicas in enumerate(plan.assignment)
    ]
    return TopicRecord(plan.name, topic_id, plan.configs), partitions


def new_partition(
    topic_id: bytes, index: int, replicas: Sequence[int], eligible: Collection[int]
) -> PartitionRecord:
    """A new partition's first state (a new topic's, or one CreatePartitions adds): its eligible
    replicas as ISR and the first of them as leader; none eligible, no leader yet and the whole
    assignment as ISR, so the first replica to return can lead."""
    alive = [r for r in replicas if r in eligible]
    return PartitionRecord(
        topic_id,
        index,
        tuple(replicas),
        tuple(alive) if alive else tuple(replicas),
        alive[0] if alive else NO_LEADER,
        0,
        0,
    )


async def _commit_and_announce(ctx: ControllerContext, created: list[_Created]) -> None:
    change = Change(ctx.model)
    for record, partitions in created:
        change.add(record)
        for p in partitions:
            change.add(p)
    await ctx.journal.commit(change)
    outbox = Outbox(metadata_everything=True)
    for record, partitions in created:
        log.info("%s: created topic %s with %d partitions", ctx.name, record.name, len(partitions))
        start_partitions(ctx, record.name, partitions, outbox)
    ctx.sender.flush(outbox)


def start_partitions(
    ctx: ControllerContext, topic: str, partitions: Iterable[PartitionRecord], outbox: Outbox
) -> None:
    """Committed new partitions into the state machines (New, then Online when led; their
    replicas on live brokers Online) and into `outbox`: LeaderAndIsr (is_new) to their live
    replicas, and UpdateMetadata."""
    live = ctx.sessions.live()
    for p in partitions:
        tp = TopicPartition(topic, p.partition)
        keys = [ReplicaKey(tp, r) for r in p.replicas]
        ctx.partition_states.transition([tp], PartitionState.NEW)
        ctx.replica_states.transition(keys, ReplicaState.NEW)
        if p.leader != NO_LEADER:
            ctx.partition_states.transition([tp], PartitionState.ONLINE)
        ctx.replica_states.transition([k for k in keys if k.broker_id in live], ReplicaState.ONLINE)
        outbox.lead_or_follow([r for r in p.replicas if r in live], tp, is_new=True)


class _Names:
    """Existing topic names plus those planned earlier in the same request, for `plan_topic`."""

    def __init__(self, model: ControllerModel, planned: set[str]) -> None:
        self._model = model
        self._planned = planned

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (
            name in self._planned or self._model.topic_by_name(name) is not None
        )
