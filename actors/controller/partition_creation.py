"""CreatePartitions at the controller (brokers forward it from clients, as KIP-590): more
partitions for an existing topic.

Each topic of the request is refused, with Kafka's code and, where Kafka has one, its wording,
when
- it is named twice in the request (INVALID_REQUEST), unknown (UNKNOWN_TOPIC_OR_PARTITION) or
  queued for deletion (INVALID_TOPIC_EXCEPTION, as Kafka's ZooKeeper-era KafkaApis);
- it is __consumer_offsets or __transaction_state (INVALID_PARTITIONS). Kafka allows this and
  warns (KAFKA-14418 proposed refusing it); ketch refuses, because its coordinators place a
  group or a transactional id on partition hash mod the *current* partition count
  (actors/group/coordinator.py, actors/transactions/coordinator.py): growing either topic would
  move most groups and transactions at once to partitions that hold none of their offsets or
  state;
- the count does not grow ("Topic currently has 3 partitions, which is higher than the requested
  2." / "Topic already has 3 partitions.", INVALID_PARTITIONS);
- explicit assignments do not give exactly one replica list per new partition, or a list is
  empty, names a broker twice or an unregistered broker, or has another length than the topic's
  replication factor (INVALID_REPLICA_ASSIGNMENT);
- without assignments, the topic's replication factor exceeds the eligible brokers
  (INVALID_REPLICATION_FACTOR).

The new partitions keep the topic's replication factor (its partition 0's, as Kafka reads it)
and, without explicit assignments, are placed as CreateTopics places a topic's
(actors/controller/election.py's `assign_replicas` over the eligible brokers). With
validate_only the answer is the same and nothing is written.

The new partitions' records are committed, then they start as a new topic's do
(actors/controller/topic_creation.py's `new_partition` / `start_partitions`): a leader among
their eligible replicas, LeaderAndIsr (is_new) to their live replicas, which create their logs,
and UpdateMetadata to every live broker. A restarted controller replays the records with the
topic's.

State: none of its own; it works on the controller actor's (actors/controller/context.py), from
the actor's CreatePartitions handler, one message at a time.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Final

from actors.controller.context import ControllerContext
from actors.controller.election import assign_replicas
from actors.controller.journal import Change
from actors.controller.outbox import Outbox
from actors.controller.topic_creation import new_partition, start_partitions
from actors.controller.topics import TopicRefusal
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC
from wire.messages import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
)
from wire.metadata_records import PartitionRecord, TopicRecord
from wire.transaction_log import TRANSACTION_STATE_TOPIC

log = logging.getLogger("ketch.controller")

# Topics whose partition count places their keys: see the module docstring.
FIXED_PARTITION_COUNT_TOPICS: Final = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


@dataclass(frozen=True, slots=True)
class _Growth:
    topic: TopicRecord
    partitions: list[PartitionRecord]  # the new ones, numbered on from the current count


async def create_partitions(
    ctx: ControllerContext, request: CreatePartitionsRequest
) -> CreatePartitionsResponse:
    eligible = ctx.sessions.eligible()
    named = [t.name for t in request.topics]
    results: list[CreatePartitionsTopicResult] = []
    grown: list[_Growth] = []
    for topic in request.topics:
        if named.count(topic.name) > 1:
            plan: _Growth | TopicRefusal = TopicRefusal(
                ErrorCode.INVALID_REQUEST, "Duplicate topic in request."
            )
        else:
            plan = _plan(ctx, topic, eligible)
        if isinstance(plan, TopicRefusal):
            results.append(
                CreatePartitionsTopicResult(
                    name=topic.name, error_code=plan.error, error_message=plan.message
                )
            )
            continue
        results.append(CreatePartitionsTopicResult(name=topic.name))
        grown.append(plan)
    if grown and not request.validate_only:
        await _commit_and_announce(ctx, grown)
    return CreatePartitionsResponse(results=results)


def _plan(
    ctx: ControllerContext, topic: CreatePartitionsTopic, eligible: set[int]
) -> _Growth | TopicRefusal:
    record = ctx.model.topic_by_name(topic.name)
    if record is None:
        return TopicRefusal(
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {topic.name!r} does not exist"
        )
    if ctx.model.is_queued_for_deletion(record.topic_id):
        return TopicRefusal(ErrorCode.INVALID_TOPIC_EXCEPTION, "The topic is queued for deletion.")
    if topic.name in FIXED_PARTITION_COUNT_TOPICS:
        return TopicRefusal(
            ErrorCode.INVALID_PARTITIONS,
            f"the partition count of internal topic {topic.name} cannot change: each group or "
            "transactional id lives on the partition its hash picks among the current ones, "
            "so more partitions would move them away from their offsets and state",
        )
    existing = ctx.model.partitions_of(record.topic_id)
    assert existing, f"topic {topic.name} has no partitions"
    assignment = plan_new_partitions(
        topic,
        current_count=len(existing),
        replication_factor=len(existing[0].replicas),
        registered_brokers=[b.broker_id for b in ctx.model.brokers()],
        eligible_brokers=sorted(eligible),
        rng=ctx.rng,
    )
    if isinstance(assignment, TopicRefusal):
        return assignment
    first = len(existing)
    return _Growth(
        record,
        [
            new_partition(record.topic_id, first + i, replicas, eligible)
            for i, replicas in enumerate(assignment)
        ],
    )


def plan_new_partitions(
    topic: CreatePartitionsTopic,
    *,
    current_count: int,
    replication_factor: int,
    registered_brokers: Collection[int],
    eligible_brokers: Collection[int],
    rng: random.Random,
) -> list[list[int]] | TopicRefusal:
    """The replicas of each new partition, in partition order, or Kafka's refusal. Pure."""
    if topic.count < current_count:
        return TopicRefusal(
            ErrorCode.INVALID_PARTITIONS,
            f"Topic currently has {current_count} partitions, which is higher than the "
            f"requested {topic.count}.",
        )
    if topic.count == current_count:
        return TopicRefusal(
            ErrorCode.INVALID_PARTITIONS, f"Topic already has {current_count} partitions."
        )
    additional = topic.count - current_count
    if topic.assignments is not None:
        given = [list(a.broker_ids) for a in topic.assignments]
        return _explicit(given, additional, replication_factor, registered_brokers)
    placed = assign_replicas(eligible_brokers, additional, replication_factor, rng=rng)
    if isinstance(placed, ErrorCode):
        return TopicRefusal(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"the topic's replication factor {replication_factor} needs that many live brokers; "
            f"{len(eligible_brokers)} are live",
        )
    return placed


def _explicit(
    given: Sequence[list[int]],
    additional: int,
    replication_factor: int,
    registered_brokers: Collection[int],
) -> list[list[int]] | TopicRefusal:
    if len(given) != additional:
        return TopicRefusal(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            f"Increasing the number of partitions by {additional} but {len(given)} assignments "
            "provided.",
        )
    for offset, replicas in enumerate(given):
        problem = _assignment_problem(replicas, replication_factor, registered_brokers)
        if problem is not None:
            return TopicRefusal(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"assignment {offset} ({replicas}) {problem}",
            )
    return [list(replicas) for replicas in given]


def _assignment_problem(
    replicas: Sequence[int], replication_factor: int, registered_brokers: Collection[int]
) -> str | None:
    if not replicas:
        return "names no broker"
    if len(set(replicas)) != len(replicas):
        return "names a broker twice"
    unknown = sorted(set(replicas) - set(registered_brokers))
    if unknown:
        return f"names unregistered brokers {unknown}"
    if len(replicas) != replication_factor:
        return f"has {len(replicas)} replicas; the topic's partitions have {replication_factor}"
    return None


async def _commit_and_announce(ctx: ControllerContext, grown: list[_Growth]) -> None:
    change = Change(ctx.model)
    for growth in grown:
        for p in growth.partitions:
            change.add(p)
    await ctx.journal.commit(change)
    outbox = Outbox()
    for growth in grown:
        count = len(ctx.model.partitions_of(growth.topic.topic_id))
        log.info(
            "%s: topic %s grew by %d partitions to %d",
            ctx.name,
            growth.topic.name,
            len(growth.partitions),
            count,
        )
        start_partitions(ctx, growth.topic.name, growth.partitions, outbox)
    ctx.sender.flush(outbox)
