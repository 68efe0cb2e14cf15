"""What the controller's UpdateMetadata requests tell a broker about the cluster.

`MetadataCache.update(request)` applies one UpdateMetadataRequest as Kafka's `updateCache`
does (seed 000, "updateCache"):

* a request from an older controller (lower controller epoch than the last one applied) is
  refused with `StaleControllerEpochError`, which the ReplicaManager answers
  STALE_CONTROLLER_EPOCH, and changes nothing;
* the alive brokers, their endpoints and whether each is in controlled shutdown are replaced
  whole by the request's list;
* each partition state is stored, replacing the previous one, except that leader -2 (Kafka's
  LeaderDuringDelete) removes the partition (and its topic once it has none left); the removed
  partitions are returned, so the owner can drop what it keeps for them.

It answers what Metadata requests, replica fetchers (the leader's endpoint) and a leader's ISR
rules (KIP-841: only alive brokers not in controlled shutdown may join an ISR or hold back the high
watermark from outside it) need to know.

Ownership and why no lock: the ReplicaManager actor owns the cache and calls `update` only from
its handlers, so one task mutates it. Every update builds a new `MetadataSnapshot` and publishes
it by replacing one reference; a snapshot is never changed after it is built (its mappings are
read-only proxies over dicts nothing else holds), so any actor may keep and read one without a
lock: it can be stale, never torn. Unchanged topics are shared between consecutive snapshots, so
an update costs its own size plus one dict copy per changed topic, not the whole cluster's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from actors.views import NO_LEADER
from wire.errors import ErrorCode
from wire.messages import (
    ZERO_UUID,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)

# INTERNAL_TOPICS: Kafka's internal topics; Metadata answers flag them so clients keep off.
from wire.topic import INTERNAL_TOPICS, TopicPartition

LEADER_DURING_DELETE = -2
NO_CONTROLLER = -1
DEFAULT_LISTENER = "native"


class StaleControllerEpochError(Exception):
    """An UpdateMetadata from a controller older than one already heard from."""

    error_code = ErrorCode.STALE_CONTROLLER_EPOCH

    def __init__(self, controller_id: int, controller_epoch: int, known_epoch: int) -> None:
        super().__init__(
            f"UpdateMetadata from controller {controller_id} with epoch {controller_epoch}; "
            f"the latest known controller epoch is {known_epoch}"
        )
        self.controller_id = controller_id
        self.controller_epoch = controller_epoch
        self.known_epoch = known_epoch


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    listener: str
    host: str
    port: int
    security_protocol: int = 0


@dataclass(frozen=True, slots=True)
class AliveBroker:
    broker_id: int
    endpoints: tuple[BrokerEndpoint, ...]
    rack: str | None = None
    # Moving its leadership away before it stops (KIP-841): alive, but no ISR candidate.
    in_controlled_shutdown: bool = False

    def endpoint(self, listener: str) -> BrokerEndpoint | None:
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return endpoint
        return None


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition as the controller last described it to this broker."""

    topic_partition: TopicPartition
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()

    @classmethod
    def from_request(cls, state: UpdateMetadataPartitionState) -> PartitionState:
        return cls(
            topic_partition=TopicPartition(state.topic_name, state.partition_index),
            controller_epoch=state.controller_epoch,
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            isr=tuple(state.isr),
            partition_epoch=state.partition_epoch,
            replicas=tuple(state.replicas),
            offline_replicas=tuple(state.offline_replicas),
        )


@dataclass(frozen=True, slots=True)
class TopicState:
    name: str
    topic_id: bytes  # ZERO_UUID while unknown
    partitions: Mapping[int, PartitionState]  # read-only, by partition index


_EMPTY_BROKERS: Mapping[int, AliveBroker] = MappingProxyType({})
_EMPTY_TOPICS: Mapping[str, TopicState] = MappingProxyType({})
_EMPTY_NAMES: Mapping[bytes, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class MetadataSnapshot:
    """One immutable view of the cluster, as of one UpdateMetadata."""

    controller_id: int = NO_CONTROLLER
    controller_epoch: int = -1
    brokers: Mapping[int, AliveBroker] = field(default_factory=lambda: _EMPTY_BROKERS)
    topics: Mapping[str, TopicState] = field(default_factory=lambda: _EMPTY_TOPICS)
    # Topic id -> name for the topics whose id is known (Kafka APIs that name topics by id).
    names_by_id: Mapping[bytes, str] = field(default_factory=lambda: _EMPTY_NAMES)

    # -- brokers -----------------------------------------------------------------------------

    def alive_broker_ids(self) -> frozenset[int]:
        return frozenset(self.brokers)

    def is_broker_alive(self, broker_id: int) -> bool:
        """Whether the controller lists the broker as alive."""
        return broker_id in self.brokers

    def is_replica_eligible(self, broker_id: int) -> bool:
        """KIP-841: whether a replica on this broker may join an ISR (or, caught up outside it,
        hold back the high watermark): alive and not in controlled shutdown. The controller
        refuses an expansion to any other (INELIGIBLE_REPLICA), so a leader that proposed one
        would only be refused again on every fetch."""
        broker = self.brokers.get(broker_id)
        return broker is not None and not broker.in_controlled_shutdown

    def endpoint(self, broker_id: int, listener: str = DEFAULT_LISTENER) -> BrokerEndpoint | None:
        """Where to reach an alive broker on `listener`; None if dead or not listening there."""
        broker = self.brokers.get(broker_id)
        return None if broker is None else broker.endpoint(listener)

    # -- partitions --------------------------------------------------------------------------

    def partition_state(self, tp: TopicPartition) -> PartitionState | None:
        topic = self.topics.get(tp.topic)
        return None if topic is None else topic.partitions.get(tp.partition)

    def contains(self, tp: TopicPartition) -> bool:
        return self.partition_state(tp) is not None

    def has_topic(self, name: str) -> bool:
        return name in self.topics

    def topic_id(self, name: str) -> bytes:
        topic = self.topics.get(name)
        return ZERO_UUID if topic is None else topic.topic_id

    def topic_name(self, topic_id: bytes) -> str | None:
        """The name of the topic with this id; None when no topic has it."""
        return self.names_by_id.get(topic_id)

    def leader_endpoint(
        self, tp: TopicPartition, listener: str = DEFAULT_LISTENER
    ) -> BrokerEndpoint | None:
        """The endpoint of the partition's leader, if it has one and it is alive (fetchers)."""
        state = self.partition_state(tp)
        if state is None or state.leader < 0:
            return None
        return self.endpoint(state.leader, listener)

    # -- Metadata responses ------------------------------------------------------------------

    def response_brokers(self, listener: str = DEFAULT_LISTENER) -> list[MetadataResponseBroker]:
        """Alive brokers listening on `listener`, by id (Kafka lists only those)."""
        answers = []
        for broker_id in sorted(self.brokers):
            broker = self.brokers[broker_id]
            endpoint = broker.endpoint(listener)
            if endpoint is not None:
                answers.append(
                    MetadataResponseBroker(
                        node_id=broker_id, host=endpoint.host, port=endpoint.port, rack=broker.rack
                    )
                )
        return answers

    def topic_metadata(
        self, names: Iterable[str] | None = None, listener: str = DEFAULT_LISTENER
    ) -> list[MetadataResponseTopic]:
        """Metadata of the named topics (every topic, by name, for None); an unknown one is
        answered UNKNOWN_TOPIC_OR_PARTITION with no partitions."""
        wanted = sorted(self.topics) if names is None else list(dict.fromkeys(names))
        answers = []
        for name in wanted:
            topic = self.topics.get(name)
            if topic is None:
                answers.append(
                    MetadataResponseTopic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                        name=name,
                        is_internal=name in INTERNAL_TOPICS,
                    )
                )
            else:
                answers.append(self._topic_answer(topic, listener))
        return answers

    def metadata_response(
        self,
        request: MetadataRequest,
        *,
        listener: str = DEFAULT_LISTENER,
        cluster_id: str | None = None,
    ) -> MetadataResponse:
        """The whole answer to a Metadata request (topics asked by name or by id; None asks for
        all, an empty list for none). Auto-creation is not the cache's business: a caller that
        honours allow_auto_topic_creation creates the topics and asks again."""
        topics: list[MetadataResponseTopic]
        if request.topics is None:
            topics = self.topic_metadata(None, listener)
        else:
            topics = []
            for wanted in request.topics:
                if wanted.name is not None:
                    topics.extend(self.topic_metadata([wanted.name], listener))
                else:
                    topics.append(self._topic_by_id(wanted.topic_id, listener))
        return MetadataResponse(
            brokers=self.response_brokers(listener),
            cluster_id=cluster_id,
            controller_id=self.controller_id,
            topics=topics,
        )

    def _topic_by_id(self, topic_id: bytes, listener: str) -> MetadataResponseTopic:
        name = self.names_by_id.get(topic_id)
        if name is not None:
            return self._topic_answer(self.topics[name], listener)
        return MetadataResponseTopic(
            error_code=ErrorCode.UNKNOWN_TOPIC_ID, name="", topic_id=topic_id
        )

    def _topic_answer(self, topic: TopicState, listener: str) -> MetadataResponseTopic:
        return MetadataResponseTopic(
            name=topic.name,
            topic_id=topic.topic_id,
            is_internal=topic.name in INTERNAL_TOPICS,
            partitions=[
                self._partition_answer(topic.partitions[index], listener)
                for index in sorted(topic.partitions)
            ],
        )

    def _partition_answer(self, state: PartitionState, listener: str) -> MetadataResponsePartition:
        # A leader that is unset, dead, or not reachable on the client's listener is no leader to
        # the client: LEADER_NOT_AVAILABLE with leader -1 but the epoch kept, as Kafka answers.
        # Replicas and ISR are listed unfiltered (Kafka's answer to current clients); the
        # offline replicas say which of them cannot serve.
        leader_reachable = state.leader >= 0 and self.endpoint(state.leader, listener) is not None
        return MetadataResponsePartition(
            error_code=ErrorCode.NONE if leader_reachable else ErrorCode.LEADER_NOT_AVAILABLE,
            partition_index=state.topic_partition.partition,
            leader_id=state.leader if leader_reachable else NO_LEADER,
            leader_epoch=state.leader_epoch,
            replica_nodes=list(state.replicas),
            isr_nodes=list(state.isr),
            offline_replicas=list(state.offline_replicas),
        )


class MetadataCache:
    """The ReplicaManager's metadata cache; publishes a new `MetadataSnapshot` per update."""

    def __init__(self) -> None:
        self._snapshot = MetadataSnapshot()

    @property
    def snapshot(self) -> MetadataSnapshot:
        """The latest snapshot; immutable, so readers may keep it."""
        return self._snapshot

    def update(self, request: UpdateMetadataRequest) -> list[TopicPartition]:
        """Apply an UpdateMetadata; returns the partitions it deleted (leader -2), in request
        order. Raises StaleControllerEpochError, changing nothing, for an older controller."""
        old = self._snapshot
        if request.controller_epoch < old.controller_epoch:
            raise StaleControllerEpochError(
                request.controller_id, request.controller_epoch, old.controller_epoch
            )
        brokers = {
            broker.id: AliveBroker(
                broker_id=broker.id,
                endpoints=tuple(
                    BrokerEndpoint(ep.listener, ep.host, ep.port, ep.security_protocol)
                    for ep in broker.endpoints
                ),
                rack=broker.rack,
                in_controlled_shutdown=broker.in_controlled_shutdown,
            )
            for broker in request.live_brokers
        }
        topics, deleted = _apply_partition_states(old.topics, request.partition_states)
        names_by_id = old.names_by_id
        if topics is not old.topics:
            names_by_id = MappingProxyType(
                {t.topic_id: t.name for t in topics.values() if t.topic_id != ZERO_UUID}
            )
        self._snapshot = MetadataSnapshot(
            controller_id=request.controller_id if request.controller_id >= 0 else NO_CONTROLLER,
            controller_epoch=request.controller_epoch,
            brokers=MappingProxyType(brokers),
            topics=topics,
            names_by_id=names_by_id,
        )
        return deleted


def _apply_partition_states(
    old_topics: Mapping[str, TopicState], states: Iterable[UpdateMetadataPartitionState]
) -> tuple[Mapping[str, TopicState], list[TopicPartition]]:
    """The topics after `states`, sharing every untouched topic with `old_topics`."""
    # Per changed topic: its partitions (a private copy) and its id.
    changed: dict[str, tuple[dict[int, PartitionState], bytes]] = {}
    deleted: list[TopicPartition] = []
    for state in states:
        entry = changed.get(state.topic_name)
        if entry is None:
            previous = old_topics.get(state.topic_name)
            entry = (
                ({}, ZERO_UUID)
                if previous is None
                else (dict(previous.partitions), previous.topic_id)
            )
        partitions, topic_id = entry
        if state.leader == LEADER_DURING_DELETE:
            partitions.pop(state.partition_index, None)
            deleted.append(TopicPartition(state.topic_name, state.partition_index))
        else:
            partitions[state.partition_index] = PartitionState.from_request(state)
            if state.topic_id != ZERO_UUID:
                topic_id = state.topic_id
        changed[state.topic_name] = (partitions, topic_id)
    if not changed:
        return old_topics, deleted
    topics = dict(old_topics)
    for name, (partitions, topic_id) in changed.items():
        if partitions:
            topics[name] = TopicState(name, topic_id, MappingProxyType(partitions))
        else:
            topics.pop(name, None)
    return MappingProxyType(topics), deleted
