"""Controller state machines: Kafka's edges exactly, every illegal move refused and logged,
NON_EXISTENT forgets a key, and the indexes agree with the states under random operations."""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.controller.states import (
    PARTITION_TRANSITIONS,
    REPLICA_TRANSITIONS,
    PartitionState,
    PartitionStates,
    ReplicaKey,
    ReplicaState,
    ReplicaStates,
)
from wire.topic import TopicPartition

P = PartitionState
R = ReplicaState
T0 = TopicPartition("orders", 0)
T1 = TopicPartition("orders", 1)
A0 = TopicPartition("audit", 0)

# Kafka's PartitionStateMachine / ReplicaStateMachine edges, written out as (from, to) pairs so
# that a change to the tables in the module has to be a deliberate change here too.
KAFKA_PARTITION_EDGES = {
    (P.NON_EXISTENT, P.NEW),
    *((s, P.ONLINE) for s in (P.NEW, P.ONLINE, P.OFFLINE)),
    *((s, P.OFFLINE) for s in (P.NEW, P.ONLINE, P.OFFLINE)),
    (P.OFFLINE, P.NON_EXISTENT),
}
KAFKA_REPLICA_EDGES = {
    (R.NON_EXISTENT, R.NEW),
    *((s, R.ONLINE) for s in (R.NEW, R.ONLINE, R.OFFLINE, R.REPLICA_DELETION_INELIGIBLE)),
    *((s, R.OFFLINE) for s in (R.NEW, R.ONLINE, R.OFFLINE, R.REPLICA_DELETION_INELIGIBLE)),
    (R.OFFLINE, R.REPLICA_DELETION_STARTED),
    (R.REPLICA_DELETION_STARTED, R.REPLICA_DELETION_SUCCESSFUL),
    (R.OFFLINE, R.REPLICA_DELETION_INELIGIBLE),
    (R.REPLICA_DELETION_STARTED, R.REPLICA_DELETION_INELIGIBLE),
    (R.REPLICA_DELETION_SUCCESSFUL, R.NON_EXISTENT),
}


def test_tables_are_kafkas_edges() -> None:
    partition_edges = {(s, t) for t, sources in PARTITION_TRANSITIONS.items() for s in sources}
    replica_edges = {(s, t) for t, sources in REPLICA_TRANSITIONS.items() for s in sources}
    assert partition_edges == KAFKA_PARTITION_EDGES
    assert replica_edges == KAFKA_REPLICA_EDGES
    assert set(PARTITION_TRANSITIONS) == set(PartitionState)
    assert set(REPLICA_TRANSITIONS) == set(ReplicaState)


@pytest.mark.parametrize(
    ("table", "start"),
    [(PARTITION_TRANSITIONS, P.NON_EXISTENT), (REPLICA_TRANSITIONS, R.NON_EXISTENT)],
)
def test_every_state_is_reachable_and_can_return_to_non_existent(
    table: Mapping[Any, frozenset[Any]], start: Any
) -> None:
    edges = {(s, t) for t, sources in table.items() for s in sources}
    states = set(table)

    def reachable(origin: Any, forward: bool) -> set[Any]:
        seen, queue = {origin}, deque([origin])
        while queue:
            here = queue.popleft()
            for a, b in edges:
                nxt = b if forward and a == here else a if not forward and b == here else None
                if nxt is not None and nxt not in seen:
                    seen.add(nxt)
                    queue.append(nxt)
        return seen

    assert reachable(start, forward=True) == states
    # Every state can end in NON_EXISTENT, so no key is ever stuck in the controller for good.
    assert reachable(start, forward=False) == states


def test_every_partition_move_is_applied_exactly_when_the_table_allows_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for current, target in itertools.product(PartitionState, repeat=2):
        states = PartitionStates()
        if current is not P.NON_EXISTENT:
            states.initialize({T0: current})
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="ketch.controller"):
            moved = states.transition([T0], target)
        legal = (current, target) in KAFKA_PARTITION_EDGES
        assert moved == ([T0] if legal else []), (current, target)
        assert states.state(T0) is (target if legal else current), (current, target)
        assert states.illegal_transition_count == (0 if legal else 1)
        assert (T0 in states) == (states.state(T0) is not P.NON_EXISTENT)
        messages = [r.getMessage() for r in caplog.records if r.name == "ketch.controller"]
        if legal:
            assert messages == [], (current, target)
        else:
            assert len(messages) == 1, (current, target)
            assert f"{current.value} -> {target.value}" in messages[0]
            assert "orders-0" in messages[0]


def test_every_replica_move_is_applied_exactly_when_the_table_allows_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = ReplicaKey(T0, 3)
    for current, target in itertools.product(ReplicaState, repeat=2):
        states = ReplicaStates()
        if current is not R.NON_EXISTENT:
            states.initialize({key: current})
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="ketch.controller"):
            moved = states.transition([key], target)
        legal = (current, target) in KAFKA_REPLICA_EDGES
        assert moved == ([key] if legal else []), (current, target)
        assert states.state(key) is (target if legal else current), (current, target)
        assert states.illegal_transition_count == (0 if legal else 1)
        assert states.replicas_on_broker(3) == (
            [] if states.state(key) is R.NON_EXISTENT else [key]
        )
        assert len([r for r in caplog.records if r.name == "ketch.controller"]) == (not legal)


def test_a_batch_moves_the_legal_keys_and_keeps_the_others() -> None:
    states = PartitionStates()
    states.transition([T0, T1], P.NEW)
    states.transition([T0], P.ONLINE)
    # T0 is ONLINE (may not be forgotten), T1 is NEW (neither), A0 is unknown.
    assert states.transition([T0, T1, A0], P.NON_EXISTENT) == []
    assert states.illegal_transition_count == 3
    assert states.transition([A0, T1, T0], P.OFFLINE) == [T1, T0]
    assert states.state(A0) is P.NON_EXISTENT
    assert states.in_state(P.OFFLINE) == [T0, T1]


def test_online_partition_may_be_re_elected() -> None:
    states = PartitionStates()
    states.transition([T0], P.NEW)
    states.transition([T0], P.ONLINE)
    assert states.transition([T0], P.ONLINE) == [T0]


def test_partition_lifecycle_and_queries() -> None:
    states = PartitionStates()
    assert states.transition([T0, T1, A0], P.NEW) == [T0, T1, A0]
    assert states.transition([T0, A0], P.ONLINE) == [T0, A0]
    assert states.transition([T1], P.OFFLINE) == [T1]
    assert states.partitions_in("orders") == [T0, T1]
    assert states.partitions_in("orders", P.ONLINE) == [T0]
    assert states.partitions_in("orders", P.OFFLINE, P.NEW) == [T1]
    assert states.in_state(P.ONLINE) == [A0, T0]
    assert states.offline_partition_count() == 1
    assert states.offline_partition_count(excluding_topics=["orders"]) == 0
    assert states.transition([T0], P.OFFLINE) == [T0]
    assert states.transition([T0, T1], P.NON_EXISTENT) == [T0, T1]
    assert states.partitions_in("orders") == []
    assert len(states) == 1
    assert states.items() == [(A0, P.ONLINE)]


def test_replica_deletion_lifecycle() -> None:
    keys = [ReplicaKey(T0, b) for b in (0, 1, 2)]
    states = ReplicaStates()
    assert states.transition(keys, R.NEW) == keys
    assert states.transition(keys, R.ONLINE) == keys
    # Deletion starts only once a replica is offline.
    assert states.transition(keys, R.REPLICA_DELETION_STARTED) == []
    states.transition(keys, R.OFFLINE)
    assert states.transition(keys, R.REPLICA_DELETION_STARTED) == keys
    states.transition(keys[:2], R.REPLICA_DELETION_SUCCESSFUL)
    states.transition(keys[2:], R.REPLICA_DELETION_INELIGIBLE)  # broker 2 died meanwhile
    assert not states.all_replicas_in_state("orders", R.REPLICA_DELETION_SUCCESSFUL)
    assert states.any_replica_in_state("orders", R.REPLICA_DELETION_INELIGIBLE)
    assert states.replicas_of_topic("orders", R.REPLICA_DELETION_INELIGIBLE) == keys[2:]
    # Broker 2 returns: its replica comes back online, then the deletion is retried.
    assert states.transition(keys[2:], R.ONLINE) == keys[2:]
    states.transition(keys[2:], R.OFFLINE)
    states.transition(keys[2:], R.REPLICA_DELETION_STARTED)
    states.transition(keys[2:], R.REPLICA_DELETION_SUCCESSFUL)
    assert states.all_replicas_in_state("orders", R.REPLICA_DELETION_SUCCESSFUL)
    assert states.transition(keys, R.NON_EXISTENT) == keys
    assert len(states) == 0
    assert states.replicas_of_topic("orders") == []
    assert all(states.replicas_on_broker(b) == [] for b in (0, 1, 2))
    assert not states.all_replicas_in_state("orders", R.REPLICA_DELETION_SUCCESSFUL)


def test_replica_queries_and_plain_tuple_keys() -> None:
    states = ReplicaStates()
    states.transition([(T0, 1), (T1, 1), (T0, 2), (A0, 2)], R.NEW)  # type: ignore[list-item]
    states.transition([ReplicaKey(T0, 1)], R.ONLINE)
    assert states.replicas_on_broker(1) == [ReplicaKey(T0, 1), ReplicaKey(T1, 1)]
    assert states.replicas_on_broker(1, R.ONLINE) == [ReplicaKey(T0, 1)]
    assert states.replicas_on_broker(2)[0].broker_id == 2
    assert states.replicas_of_partition(T0) == [ReplicaKey(T0, 1), ReplicaKey(T0, 2)]
    assert states.state((T0, 1)) is R.ONLINE  # type: ignore[arg-type]
    assert states.in_state(R.NEW) == [ReplicaKey(A0, 2), ReplicaKey(T0, 2), ReplicaKey(T1, 1)]


def test_initialize_installs_rebuilt_states_once() -> None:
    states = PartitionStates()
    states.initialize({T0: P.ONLINE, T1: P.OFFLINE})
    assert states.partitions_in("orders", P.OFFLINE) == [T1]
    with pytest.raises(AssertionError):
        states.initialize({T0: P.OFFLINE})
    with pytest.raises(AssertionError):
        states.initialize({A0: P.NON_EXISTENT})


TOPICS = ["a", "b.c"]
PARTITIONS = [TopicPartition(t, p) for t in TOPICS for p in range(2)]
REPLICAS = [ReplicaKey(tp, b) for tp in PARTITIONS for b in range(3)]


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(st.lists(st.sampled_from(REPLICAS), max_size=4), st.sampled_from(ReplicaState)),
        max_size=60,
    )
)
def test_replica_states_follow_the_table_and_keep_their_indexes(
    ops: list[tuple[list[ReplicaKey], ReplicaState]],
) -> None:
    states = ReplicaStates()
    expected: dict[ReplicaKey, ReplicaState] = {}
    illegal = 0
    for keys, target in ops:
        want_moved = []
        for key in keys:
            current = expected.get(key, R.NON_EXISTENT)
            if (current, target) in KAFKA_REPLICA_EDGES:
                want_moved.append(key)
                if target is R.NON_EXISTENT:
                    del expected[key]
                else:
                    expected[key] = target
            else:
                illegal += 1
        assert states.transition(keys, target) == want_moved
        assert dict(states.items()) == expected
        assert states.illegal_transition_count == illegal
        for broker in range(3):
            assert states.replicas_on_broker(broker) == sorted(
                k for k in expected if k.broker_id == broker
            )
        for topic in TOPICS:
            assert states.replicas_of_topic(topic) == sorted(
                k for k in expected if k.partition.topic == topic
            )


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(PARTITIONS), max_size=3), st.sampled_from(PartitionState)
        ),
        max_size=60,
    )
)
def test_partition_states_follow_the_table_and_keep_their_indexes(
    ops: list[tuple[list[TopicPartition], PartitionState]],
) -> None:
    states = PartitionStates()
    expected: dict[TopicPartition, PartitionState] = {}
    for keys, target in ops:
        for key in keys:
            current = expected.get(key, P.NON_EXISTENT)
            if (current, target) in KAFKA_PARTITION_EDGES:
                if target is P.NON_EXISTENT:
                    del expected[key]
                else:
                    expected[key] = target
        states.transition(keys, target)
        assert dict(states.items()) == expected
        for topic in TOPICS:
            assert states.partitions_in(topic) == sorted(k for k in expected if k.topic == topic)
        assert states.offline_partition_count() == sum(
            1 for s in expected.values() if s is P.OFFLINE
        )
