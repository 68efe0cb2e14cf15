"""The controller's partition and replica state machines, as transition tables.

Kafka's controller tracks every partition (NonExistent, New, Online, Offline) and every replica
(New, Online, Offline, ReplicaDeletionStarted/Successful/Ineligible, NonExistent) and moves them
only along the edges its PartitionStateMachine and ReplicaStateMachine allow. The tables below are
those edges, written as "target state <- the states it may be entered from". A move the table does
not allow is a controller bug or a race the caller must not act on, so `transition` refuses it,
logs it on the "ketch.controller" logger and counts it, and the state stays as it was; only the
keys that moved are returned, so the caller sends requests for exactly those.

A key that is not held is NON_EXISTENT: entering NON_EXISTENT forgets the key (and its index
entries), so a deleted topic leaves nothing behind.

Owner: the controller actor. It alone creates and mutates these objects, from its own task, one
event at a time, which is why no lock guards them. Nothing here does I/O or awaits.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Mapping
from typing import Final, Generic, NamedTuple, TypeVar

from wire.topic import TopicPartition

log = logging.getLogger("ketch.controller")


class PartitionState(enum.Enum):
    NON_EXISTENT = "NonExistentPartition"
    NEW = "NewPartition"  # assigned replicas, no leader elected yet
    ONLINE = "OnlinePartition"  # a leader was elected
    OFFLINE = "OfflinePartition"  # its leader died; waiting for an election


class ReplicaState(enum.Enum):
    NEW = "NewReplica"  # created by topic creation; may only become a follower
    ONLINE = "OnlineReplica"  # its broker is live; it may lead or follow
    OFFLINE = "OfflineReplica"  # its broker is dead or shut down
    REPLICA_DELETION_STARTED = "ReplicaDeletionStarted"  # StopReplica(delete) sent
    REPLICA_DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"  # the broker confirmed deletion
    REPLICA_DELETION_INELIGIBLE = "ReplicaDeletionIneligible"  # deletion failed or broker down
    NON_EXISTENT = "NonExistentReplica"


# Target state -> the states it may be entered from (Kafka's validPreviousStates).
# ONLINE -> ONLINE is legal on purpose: it is how a live partition asks for a new election
# (controlled shutdown, preferred leader), as Kafka's OnlinePartition -> OnlinePartition.
PARTITION_TRANSITIONS: Final[Mapping[PartitionState, frozenset[PartitionState]]] = {
    PartitionState.NEW: frozenset({PartitionState.NON_EXISTENT}),
    PartitionState.ONLINE: frozenset(
        {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}
    ),
    PartitionState.OFFLINE: frozenset(
        {PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}
    ),
    # Only an offline partition may be forgotten: topic deletion takes it offline first, so no
    # broker is still told it leads when the controller drops it.
    PartitionState.NON_EXISTENT: frozenset({PartitionState.OFFLINE}),
}

_R = ReplicaState
REPLICA_TRANSITIONS: Final[Mapping[ReplicaState, frozenset[ReplicaState]]] = {
    _R.NEW: frozenset({_R.NON_EXISTENT}),
    # A replica whose deletion was refused comes back into service when its broker does (and the
    # deletion is retried from OFFLINE later).
    _R.ONLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.REPLICA_DELETION_INELIGIBLE}),
    _R.OFFLINE: frozenset({_R.NEW, _R.ONLINE, _R.OFFLINE, _R.REPLICA_DELETION_INELIGIBLE}),
    # Deletion starts only from OFFLINE: the replica must have stopped serving first.
    _R.REPLICA_DELETION_STARTED: frozenset({_R.OFFLINE}),
    _R.REPLICA_DELETION_SUCCESSFUL: frozenset({_R.REPLICA_DELETION_STARTED}),
    _R.REPLICA_DELETION_INELIGIBLE: frozenset({_R.OFFLINE, _R.REPLICA_DELETION_STARTED}),
    _R.NON_EXISTENT: frozenset({_R.REPLICA_DELETION_SUCCESSFUL}),
}
del _R


class ReplicaKey(NamedTuple):
    """One replica: a partition on a broker. A NamedTuple, so a plain `(tp, broker_id)` tuple is
    an equal key."""

    partition: TopicPartition
    broker_id: int


K = TypeVar("K", TopicPartition, ReplicaKey)
S = TypeVar("S", PartitionState, ReplicaState)


class _StateTable(Generic[K, S]):
    """Current state per key, moved only along `table`'s edges. Absent keys are `absent`."""

    _kind: str

    def __init__(self, table: Mapping[S, frozenset[S]], absent: S) -> None:
        self._table: Mapping[S, frozenset[S]] = table
        self._absent: S = absent
        self._states: dict[K, S] = {}
        self.illegal_transition_count = 0

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, key: object) -> bool:
        return key in self._states

    def state(self, key: K) -> S:
        return self._states.get(key, self._absent)

    def is_legal(self, key: K, target: S) -> bool:
        return self.state(key) in self._table[target]

    def transition(self, keys: Iterable[K], target: S) -> list[K]:
        """Move every key whose current state may enter `target`; refuse and log the others.
        Returns the keys that moved, in the order given; a key listed twice is handled twice,
        as two calls would handle it."""
        allowed = self._table[target]
        moved: list[K] = []
        for given in keys:
            key = self._normalize(given)
            current = self.state(key)
            if current not in allowed:
                self.illegal_transition_count += 1
                log.error(
                    "illegal %s state transition for %s: %s -> %s (allowed from %s)",
                    self._kind,
                    key,
                    current.value,
                    target.value,
                    sorted(s.value for s in allowed),
                )
                continue
            self._set(key, current, target)
            moved.append(key)
        return moved

    def initialize(self, states: Mapping[K, S]) -> None:
        """Install states rebuilt from durable metadata (controller failover, as Kafka's
        initializePartitionState / initializeReplicaState): no table applies, because the
        transitions that led there happened under a previous controller. Only unknown keys may
        be initialized; re-initializing a tracked key would hide a bug."""
        for given, target in states.items():
            key = self._normalize(given)
            assert key not in self._states, f"{self._kind} {key} is already tracked"
            assert target is not self._absent, f"cannot initialize {key} to {target}"
            self._set(key, self._absent, target)

    def in_state(self, *states: S) -> list[K]:
        """The keys currently in any of `states`, sorted."""
        wanted = set(states)
        assert self._absent not in wanted, "absent keys are not tracked"
        return sorted(key for key, state in self._states.items() if state in wanted)

    def items(self) -> list[tuple[K, S]]:
        return sorted(self._states.items())

    def _set(self, key: K, current: S, target: S) -> None:
        if target is self._absent:
            del self._states[key]
            self._unindex(key)
            return
        if current is self._absent:
            self._index(key)
        self._states[key] = target

    def _normalize(self, key: K) -> K:
        return key

    def _index(self, key: K) -> None:
        raise NotImplementedError

    def _unindex(self, key: K) -> None:
        raise NotImplementedError


class PartitionStates(_StateTable[TopicPartition, PartitionState]):
    """The partition state machine's current state per partition."""

    _kind = "partition"

    def __init__(self) -> None:
        super().__init__(PARTITION_TRANSITIONS, PartitionState.NON_EXISTENT)
        self._by_topic: dict[str, set[TopicPartition]] = {}

    def partitions_in(self, topic: str, *states: PartitionState) -> list[TopicPartition]:
        """The topic's tracked partitions, sorted; only those in `states` when any are given."""
        partitions = self._by_topic.get(topic, set())
        if states:
            partitions = {tp for tp in partitions if self._states[tp] in states}
        return sorted(partitions)

    def offline_partition_count(self, excluding_topics: Iterable[str] = ()) -> int:
        """Partitions in OFFLINE, not counting topics being deleted (Kafka's OfflinePartitionsCount
        leaves those out: they are offline on purpose)."""
        excluded = set(excluding_topics)
        return sum(
            1
            for tp, state in self._states.items()
            if state is PartitionState.OFFLINE and tp.topic not in excluded
        )

    def _index(self, key: TopicPartition) -> None:
        self._by_topic.setdefault(key.topic, set()).add(key)

    def _unindex(self, key: TopicPartition) -> None:
        _discard(self._by_topic, key.topic, key)


class ReplicaStates(_StateTable[ReplicaKey, ReplicaState]):
    """The replica state machine's current state per (partition, broker) replica."""

    _kind = "replica"

    def __init__(self) -> None:
        super().__init__(REPLICA_TRANSITIONS, ReplicaState.NON_EXISTENT)
        self._by_broker: dict[int, set[ReplicaKey]] = {}
        self._by_topic: dict[str, set[ReplicaKey]] = {}

    def replicas_on_broker(self, broker_id: int, *states: ReplicaState) -> list[ReplicaKey]:
        """The broker's tracked replicas, sorted; only those in `states` when any are given."""
        return self._filter(self._by_broker.get(broker_id, set()), states)

    def replicas_of_topic(self, topic: str, *states: ReplicaState) -> list[ReplicaKey]:
        return self._filter(self._by_topic.get(topic, set()), states)

    def replicas_of_partition(self, tp: TopicPartition) -> list[ReplicaKey]:
        return [key for key in self.replicas_of_topic(tp.topic) if key.partition == tp]

    def all_replicas_in_state(self, topic: str, state: ReplicaState) -> bool:
        """True when the topic has tracked replicas and every one is in `state` (Kafka's
        areAllReplicasForTopicDeleted asks this of REPLICA_DELETION_SUCCESSFUL)."""
        keys = self._by_topic.get(topic, set())
        return bool(keys) and all(self._states[key] is state for key in keys)

    def any_replica_in_state(self, topic: str, state: ReplicaState) -> bool:
        return any(self._states[key] is state for key in self._by_topic.get(topic, set()))

    def _filter(self, keys: set[ReplicaKey], states: tuple[ReplicaState, ...]) -> list[ReplicaKey]:
        if states:
            return sorted(key for key in keys if self._states[key] in states)
        return sorted(keys)

    def _normalize(self, key: ReplicaKey) -> ReplicaKey:
        # A plain (tp, broker_id) tuple is an equal key, but the indexes read its fields by name.
        return key if isinstance(key, ReplicaKey) else ReplicaKey(*key)

    def _index(self, key: ReplicaKey) -> None:
        self._by_broker.setdefault(key.broker_id, set()).add(key)
        self._by_topic.setdefault(key.partition.topic, set()).add(key)

    def _unindex(self, key: ReplicaKey) -> None:
        _discard(self._by_broker, key.broker_id, key)
        _discard(self._by_topic, key.partition.topic, key)


G = TypeVar("G")
V = TypeVar("V")


def _discard(index: dict[G, set[V]], group: G, key: V) -> None:
    members = index[group]
    members.discard(key)
    if not members:
        del index[group]
