"""CreateTopics validation for the controller: from a client's `CreatableTopic` to a plan (the
replica assignment and the config overrides to store), or the error Kafka would answer.

Pure: the controller actor passes in what it knows (registered and live brokers, existing topic
names, its defaults and its seeded random source) and writes the plan to its metadata log.

Kafka's rules, in its order:
- the name must be legal (INVALID_TOPIC_EXCEPTION) and new (TOPIC_ALREADY_EXISTS);
- either a partition count and replication factor (-1 takes num.partitions /
  default.replication.factor) or explicit assignments, not both (INVALID_REQUEST); explicit
  assignments must number partitions 0..n-1, name each broker once, have one replication factor
  and name only registered brokers (INVALID_REPLICA_ASSIGNMENT);
- the replication factor may not exceed the live brokers (INVALID_REPLICATION_FACTOR) and the
  partition count must be positive (INVALID_PARTITIONS);
- every config must be a topic-level name ketch knows with a valid value (INVALID_CONFIG).
"""

from __future__ import annotations

import random
from collections.abc import Collection, Container, Mapping
from dataclasses import dataclass
from typing import Final

from actors.controller.election import assign_replicas
from runtime.log.config import TOPIC_LOG_CONFIG_NAMES, LogConfig
from runtime.properties import parse_int
from wire.errors import ErrorCode
from wire.messages import CreatableTopic
from wire.topic import quoted_topic_name, topic_name_problem

MIN_INSYNC_REPLICAS: Final = "min.insync.replicas"
UNCLEAN_LEADER_ELECTION: Final = "unclean.leader.election.enable"
# Read by the offline compaction job (offline/compact.py), kept with the topic like Kafka's.
_COMPACTION_CONFIG_NAMES: Final = frozenset({"min.compaction.lag.ms", "delete.retention.ms"})
TOPIC_CONFIG_NAMES: Final = (
    TOPIC_LOG_CONFIG_NAMES
    | _COMPACTION_CONFIG_NAMES
    | frozenset({MIN_INSYNC_REPLICAS, UNCLEAN_LEADER_ELECTION})
)


@dataclass(frozen=True, slots=True)
class TopicPlan:
    name: str
    assignment: list[list[int]]  # per partition, its replicas; the first is the preferred leader
    configs: dict[str, str]


@dataclass(frozen=True, slots=True)
class TopicRefusal:
    error: ErrorCode
    message: str


def plan_topic(
    topic: CreatableTopic,
    *,
    registered_brokers: Collection[int],
    live_brokers: Collection[int],
    existing_topics: Container[str],
    default_partitions: int,
    default_replication_factor: int,
    rng: random.Random,
) -> TopicPlan | TopicRefusal:
    name = topic.name
    problem = topic_name_problem(name)
    if problem is not None:  # the reason goes back to the client: Kafka's message says why too
        return TopicRefusal(
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            f"illegal topic name {quoted_topic_name(name)}: {problem}",
        )
    if name in existing_topics:
        return TopicRefusal(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
    configs = validate_topic_configs({c.name: c.value for c in topic.configs})
    if isinstance(configs, TopicRefusal):
        return configs
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            return TopicRefusal(
                ErrorCode.INVALID_REQUEST,
                "give either assignments or num_partitions/replication_factor (-1), not both",
            )
        assignment = _explicit_assignment(topic, registered_brokers)
    else:
        partitions = default_partitions if topic.num_partitions == -1 else topic.num_partitions
        factor = (
            default_replication_factor
            if topic.replication_factor == -1
            else topic.replication_factor
        )
        assignment = _spread(partitions, factor, live_brokers, rng)
    if isinstance(assignment, TopicRefusal):
        return assignment
    return TopicPlan(name, assignment, configs)


def _spread(
    partitions: int, factor: int, live_brokers: Collection[int], rng: random.Random
) -> list[list[int]] | TopicRefusal:
    assigned = assign_replicas(live_brokers, partitions, factor, rng=rng)
    if assigned is ErrorCode.INVALID_PARTITIONS:
        return TopicRefusal(assigned, f"partition count must be positive, got {partitions}")
    if assigned is ErrorCode.INVALID_REPLICATION_FACTOR:
        return TopicRefusal(
            assigned,
            f"replication factor {factor} needs that many live brokers; "
            f"{len(live_brokers)} are live",
        )
    assert isinstance(assigned, list), assigned
    return assigned


def _explicit_assignment(
    topic: CreatableTopic, registered_brokers: Collection[int]
) -> list[list[int]] | TopicRefusal:
    by_partition = {a.partition_index: list(a.broker_ids) for a in topic.assignments}
    if len(by_partition) != len(topic.assignments) or sorted(by_partition) != list(
        range(len(by_partition))
    ):
        return TopicRefusal(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT, "assignments must number partitions 0..n-1"
        )
    replication_factors = {len(replicas) for replicas in by_partition.values()}
    if len(replication_factors) != 1 or 0 in replication_factors:
        return TopicRefusal(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "every partition needs the same, non-zero number of replicas",
        )
    for partition, replicas in sorted(by_partition.items()):
        if len(set(replicas)) != len(replicas):
            return TopicRefusal(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"partition {partition} names a broker twice: {replicas}",
            )
        unknown = sorted(set(replicas) - set(registered_brokers))
        if unknown:
            return TopicRefusal(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"partition {partition} names unregistered brokers {unknown}",
            )
    return [by_partition[p] for p in range(len(by_partition))]


def validate_topic_configs(configs: Mapping[str, str | None]) -> dict[str, str] | TopicRefusal:
    """The overrides as strings, or INVALID_CONFIG naming the first bad one."""
    checked: dict[str, str] = {}
    for name, value in sorted(configs.items()):
        if name not in TOPIC_CONFIG_NAMES:
            return TopicRefusal(ErrorCode.INVALID_CONFIG, f"unknown topic config {name!r}")
        if value is None:
            return TopicRefusal(ErrorCode.INVALID_CONFIG, f"{name} needs a value")
        checked[name] = value.strip()
    try:
        LogConfig().with_overrides(checked)
        for name in (MIN_INSYNC_REPLICAS, *sorted(_COMPACTION_CONFIG_NAMES)):
            # parse_int: "not an integer" rather than Python's "invalid literal for int()".
            low = 1 if name == MIN_INSYNC_REPLICAS else 0
            if name in checked and parse_int(name, checked[name]) < low:
                raise ValueError(f"{name} is out of range: {checked[name]}")
    except ValueError as error:
        return TopicRefusal(ErrorCode.INVALID_CONFIG, str(error))
    unclean = checked.get(UNCLEAN_LEADER_ELECTION)
    if unclean is not None and unclean.lower() not in ("true", "false"):
        return TopicRefusal(
            ErrorCode.INVALID_CONFIG, f"{UNCLEAN_LEADER_ELECTION} must be true or false"
        )
    return checked


def unclean_election_enabled(configs: Mapping[str, str], broker_default: bool) -> bool:
    """The topic's unclean.leader.election.enable, else the controller's."""
    value = configs.get(UNCLEAN_LEADER_ELECTION)
    return broker_default if value is None else value.lower() == "true"
