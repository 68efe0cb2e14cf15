"""Leader selectors (offline, controlled shutdown, preferred), ISR removal that never empties the
ISR, Kafka's rack-unaware replica assignment, and topic-name validation."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.controller.election import (
    ElectionResult,
    assign_replicas,
    controlled_shutdown_election,
    offline_election,
    preferred_election,
    remove_from_isr,
    topics_collide,
    validate_topic_name,
)
from actors.controller.model import ControllerModel
from wire.errors import ErrorCode
from wire.metadata_records import (
    PartitionRecord,
    TopicRecord,
)

BROKERS = range(6)


@st.composite
def partitions(draw: st.DrawFn) -> tuple[list[int], list[int]]:
    """An assignment (distinct brokers in some order) and a non-empty ISR within it."""
    assignment = draw(st.lists(st.sampled_from(BROKERS), min_size=1, max_size=5, unique=True))
    isr = draw(st.lists(st.sampled_from(assignment), min_size=1, unique=True))
    return assignment, isr


broker_sets = st.frozensets(st.sampled_from(BROKERS))


# -- offline election ------------------------------------------------------------------------


def test_offline_election_takes_the_first_live_isr_replica_in_assignment_order() -> None:
    # ISR order is [3, 2, 1] but assignment order decides: 2 comes before 3.
    result = offline_election([1, 2, 3], [3, 2, 1], live={2, 3}, unclean_enabled=False)
    assert result == ElectionResult(2, (3, 2), unclean=False)


def test_offline_election_without_live_isr_keeps_the_isr_and_elects_nobody() -> None:
    result = offline_election([1, 2, 3], [1], live={2, 3}, unclean_enabled=False)
    assert result == ElectionResult(None, (1,), unclean=False)


def test_an_empty_isr_allows_only_the_unclean_election() -> None:
    """The last ISR member came back without its data (finding 9): nobody is clean."""
    assert offline_election([1, 2, 3], [], {1, 2, 3}, False) == ElectionResult(None, ())
    assert offline_election([1, 2, 3], [], {2, 3}, True) == ElectionResult(2, (2,), unclean=True)


def test_unclean_election_takes_the_first_live_assigned_replica_alone() -> None:
    result = offline_election([1, 2, 3], [1], live={3, 2}, unclean_enabled=True)
    assert result == ElectionResult(2, (2,), unclean=True)


def test_unclean_election_is_not_used_while_an_isr_replica_lives() -> None:
    result = offline_election([1, 2, 3], [1, 3], live={2, 3}, unclean_enabled=True)
    assert result == ElectionResult(3, (3,), unclean=False)


def test_nothing_live_means_no_leader_even_when_unclean() -> None:
    result = offline_election([1, 2], [1, 2], live=set(), unclean_enabled=True)
    assert result == ElectionResult(None, (1, 2), unclean=False)


@settings(max_examples=300)
@given(partitions(), broker_sets, st.booleans())
def test_offline_election_properties(
    partition: tuple[list[int], list[int]], live: frozenset[int], unclean_enabled: bool
) -> None:
    assignment, isr = partition
    result = offline_election(assignment, isr, live, unclean_enabled)
    live_isr = [r for r in assignment if r in live and r in isr]
    assert result.isr, "ISR never empty"
    if live_isr:
        assert result == ElectionResult(live_isr[0], tuple(r for r in isr if r in live))
    elif unclean_enabled and any(r in live for r in assignment):
        first_live = next(r for r in assignment if r in live)
        assert result == ElectionResult(first_live, (first_live,), unclean=True)
    else:
        assert result == ElectionResult(None, tuple(isr))


# -- controlled shutdown ---------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership_and_drops_shutting_down_brokers_from_isr() -> None:
    result = controlled_shutdown_election([1, 2, 3], [1, 2, 3], live={1, 2, 3}, shutting_down={1})
    assert result == ElectionResult(2, (2, 3))


def test_controlled_shutdown_skips_dead_and_out_of_sync_replicas() -> None:
    result = controlled_shutdown_election(
        [1, 2, 3, 4], [1, 3, 4], live={1, 2, 4}, shutting_down={1}
    )
    assert result == ElectionResult(4, (3, 4))


def test_controlled_shutdown_with_no_other_isr_replica_changes_nothing() -> None:
    result = controlled_shutdown_election([1, 2], [1], live={1, 2}, shutting_down={1})
    assert result == ElectionResult(None, (1,))


@settings(max_examples=300)
@given(partitions(), broker_sets, broker_sets)
def test_controlled_shutdown_properties(
    partition: tuple[list[int], list[int]], live: frozenset[int], shutting_down: frozenset[int]
) -> None:
    assignment, isr = partition
    result = controlled_shutdown_election(assignment, isr, live, shutting_down)
    candidates = [r for r in assignment if r in live and r in isr and r not in shutting_down]
    assert not result.unclean
    if candidates:
        assert result.leader == candidates[0]
        assert result.isr == tuple(r for r in isr if r not in shutting_down)
        assert result.leader in result.isr
    else:
        assert result == ElectionResult(None, tuple(isr))


# -- preferred replica -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("isr", "live", "leader"),
    [
        ([2, 1], {1, 2}, 1),  # preferred replica 1 is live and in sync: it leads
        ([2], {1, 2}, None),  # not in the ISR
        ([1, 2], {2}, None),  # not live
    ],
)
def test_preferred_election(isr: list[int], live: set[int], leader: int | None) -> None:
    assert preferred_election([1, 2], isr, live) == ElectionResult(leader, tuple(isr))


# -- ISR removal -----------------------------------------------------------------------------


def test_remove_from_isr_keeps_the_last_member() -> None:
    assert remove_from_isr([1, 2, 3], 2) == (1, 3)
    assert remove_from_isr([1, 3], 4) == (1, 3)
    assert remove_from_isr([3], 3) == (3,)
    assert remove_from_isr([3], 1) == (3,)


@given(partitions(), st.lists(st.sampled_from(BROKERS), max_size=8))
def test_removing_brokers_one_by_one_never_empties_the_isr(
    partition: tuple[list[int], list[int]], dying: list[int]
) -> None:
    _, isr = partition
    current = tuple(isr)
    for broker in dying:
        after = remove_from_isr(current, broker)
        assert after, "ISR never empty"
        assert set(after) <= set(current)
        assert after == current if len(current) == 1 else broker not in after
        current = after


# -- replica assignment ----------------------------------------------------------------------


class FixedStart(random.Random):
    """An rng whose start index and shift are both 0, as Kafka's tests fix them."""

    def randrange(self, *args: object, **kwargs: object) -> int:
        return 0


def test_assignment_matches_kafkas_worked_example() -> None:
    # Kafka's AdminUtils test: 5 brokers, 10 partitions, RF 3, start index 0, shift 0.
    expected = [
        [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 0], [4, 0, 1],
        [0, 2, 3], [1, 3, 4], [2, 4, 0], [3, 0, 1], [4, 1, 2],
    ]  # fmt: skip
    assert assign_replicas([4, 2, 0, 3, 1], 10, 3, rng=FixedStart()) == expected


@pytest.mark.parametrize(
    ("brokers", "partitions_", "rf", "error"),
    [
        ([0, 1, 2], 0, 1, ErrorCode.INVALID_PARTITIONS),
        ([0, 1, 2], -3, 1, ErrorCode.INVALID_PARTITIONS),
        ([0, 1, 2], 0, 9, ErrorCode.INVALID_PARTITIONS),  # partitions are checked first, as Kafka
        ([0, 1, 2], 3, 0, ErrorCode.INVALID_REPLICATION_FACTOR),
        ([0, 1, 2], 3, 4, ErrorCode.INVALID_REPLICATION_FACTOR),
        ([], 1, 1, ErrorCode.INVALID_REPLICATION_FACTOR),
    ],
)
def test_assignment_validation_errors(
    brokers: list[int], partitions_: int, rf: int, error: ErrorCode
) -> None:
    assert assign_replicas(brokers, partitions_, rf, rng=random.Random(0)) is error


@settings(max_examples=300)
@given(
    st.lists(st.integers(0, 1000), min_size=1, max_size=8, unique=True),
    st.integers(1, 40),
    st.data(),
    st.integers(0, 2**32 - 1),
)
def test_assignment_spreads_leaders_and_replicas(
    brokers: list[int], partition_count: int, data: st.DataObject, seed: int
) -> None:
    rf = data.draw(st.integers(1, len(brokers)))
    result = assign_replicas(brokers, partition_count, rf, rng=random.Random(seed))
    assert not isinstance(result, ErrorCode), f"seed={seed}"
    assert result == assign_replicas(brokers, partition_count, rf, rng=random.Random(seed))
    assert len(result) == partition_count
    for replicas in result:
        assert len(set(replicas)) == len(replicas) == rf, f"seed={seed} {result}"
        assert set(replicas) <= set(brokers), f"seed={seed}"
    leaders = Counter(replicas[0] for replicas in result)
    counts = [leaders[b] for b in brokers]
    assert max(counts) - min(counts) <= 1, f"leaders uneven, seed={seed}: {result}"
    hosted = Counter(b for replicas in result for b in replicas)
    counts = [hosted[b] for b in brokers]
    # Each full round of len(brokers) partitions puts every broker once in every position.
    if partition_count % len(brokers) == 0:
        assert max(counts) == min(counts), f"replicas uneven, seed={seed}: {result}"
    else:
        assert max(counts) - min(counts) <= rf, f"replicas uneven, seed={seed}: {result}"


def test_followers_of_one_brokers_partitions_are_spread() -> None:
    # With 4 brokers and 12 partitions, broker b leads 3 partitions; the shift moves their
    # second replica, so they do not all follow on the same neighbour.
    for seed in range(20):
        result = assign_replicas([0, 1, 2, 3], 12, 2, rng=random.Random(seed))
        assert not isinstance(result, ErrorCode)
        for leader in range(4):
            followers = {r[1] for r in result if r[0] == leader}
            assert len(followers) == 3, f"seed={seed}: {result}"


def test_different_seeds_start_on_different_brokers() -> None:
    firsts = set()
    for seed in range(50):
        result = assign_replicas([0, 1, 2], 1, 1, rng=random.Random(seed))
        assert not isinstance(result, ErrorCode)
        firsts.add(result[0][0])
    assert firsts == {0, 1, 2}


# -- topic names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("orders", ErrorCode.NONE),
        ("Orders.v2_eu-west-1", ErrorCode.NONE),
        ("a" * 249, ErrorCode.NONE),
        ("...", ErrorCode.NONE),
        ("a" * 250, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("", ErrorCode.INVALID_TOPIC_EXCEPTION),
        (".", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("..", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("a b", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("a/b", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("topic\n", ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("tópico", ErrorCode.INVALID_TOPIC_EXCEPTION),
    ],
)
def test_validate_topic_name(name: str, error: ErrorCode) -> None:
    assert validate_topic_name(name) is error


def test_topics_collide_when_dots_and_underscores_are_swapped() -> None:
    assert topics_collide("a.b", "a_b")
    assert topics_collide("a_b", "a.b")
    assert not topics_collide("a.b", "a.b")
    assert not topics_collide("a.b", "a-b")


# -- the selectors driven the way the controller drives them ---------------------------------


@settings(max_examples=200)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 5),
    st.booleans(),
)
def test_broker_failures_and_returns_keep_every_partition_invariant(
    seed: int, replication_factor: int, unclean: bool
) -> None:
    """One partition through random broker deaths and returns, handled as onBrokerFailure and
    onBrokerStartup do (election for a dead leader, then the dead replica leaves the ISR; a
    leaderless partition elects when a broker returns). The model asserts every record's
    invariants; here we check that a clean election never leaves the last ISR."""
    rng = random.Random(seed)
    topic_id = bytes(range(1, 17))
    model = ControllerModel()
    model.apply(TopicRecord("t", topic_id))
    assignment = assign_replicas(range(5), 1, replication_factor, rng=rng)
    assert not isinstance(assignment, ErrorCode)
    replicas = tuple(assignment[0])
    model.apply(PartitionRecord(topic_id, 0, replicas, replicas, replicas[0], 0, 0))
    live = set(range(5))

    def write(leader: int, isr: tuple[int, ...]) -> None:
        current = model.partition(topic_id, 0)
        assert current is not None
        if (leader, isr) == (current.leader, current.isr):
            return
        model.apply(
            PartitionRecord(
                topic_id,
                0,
                replicas,
                isr,
                leader,
                # A new leader epoch for a new leader only, not for an ISR shrink
                # (KAFKA-15021; actors/controller/journal.py, leader_epoch_moves).
                current.leader_epoch + (leader != current.leader),
                current.partition_epoch + (isr != current.isr),
            )
        )

    for step in range(40):
        broker = rng.randrange(5)
        before = model.partition(topic_id, 0)
        assert before is not None
        if broker in live:
            live.discard(broker)
            if before.leader == broker:
                result = offline_election(replicas, before.isr, live, unclean)
                write(-1 if result.leader is None else result.leader, result.isr)
            after_election = model.partition(topic_id, 0)
            assert after_election is not None
            isr = remove_from_isr(after_election.isr, broker)
            leader = -1 if after_election.leader == broker else after_election.leader
            write(leader, isr)  # the controller shrank the ISR
        else:
            live.add(broker)
            if before.leader == -1:
                result = offline_election(replicas, before.isr, live, unclean)
                if result.leader is not None:
                    write(result.leader, result.isr)
        after = model.partition(topic_id, 0)
        assert after is not None
        assert after.isr, f"seed={seed} step={step}"
        if after.leader != before.leader and after.leader != -1 and not unclean:
            assert after.leader in before.isr, f"seed={seed} step={step}: left the ISR"
        if after.leader == -1:
            # Leaderless only while nothing electable lives.
            assert not set(after.isr) & live, f"seed={seed} step={step}"
            assert not (unclean and set(replicas) & live), f"seed={seed} step={step}"
        else:
            assert after.leader in live, f"seed={seed} step={step}"
