"""A seeded random walk over a transactional id's state table: every step is allowed exactly
when Kafka's table allows it, and what is written loads back as the metadata."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace

import pytest

from actors.transactions.state import (
    MAX_PRODUCER_EPOCH,
    NO_TIMESTAMP,
    IllegalTransactionTransition,
    TransactionMetadata,
    TxnTransitMetadata,
)
from tests.unit.actors.transactions.helpers import (
    IN_TRANSACTION,
    KAFKA_MOVES,
    NOW_MS,
    TIMEOUT_MS,
    TP_A,
    TP_B,
    TP_C,
    metadata,
)
from wire.transaction_log import TransactionState, decode_value, encode_value

S = TransactionState
SEED = 19


# -- a seeded random walk over the table -----------------------------------------------------------


Step = Callable[[TransactionMetadata], tuple[TransactionState, TxnTransitMetadata]]


def _walk_steps(rng: random.Random) -> dict[str, tuple[TransactionState, Step]]:
    """Each step: the state it moves to, and how it is prepared."""

    def bump(m: TransactionMetadata) -> tuple[TransactionState, TxnTransitMetadata]:
        transit = m.prepare_increment_producer_epoch(TIMEOUT_MS, None, NOW_MS)
        assert isinstance(transit, TxnTransitMetadata)
        return S.EMPTY, transit

    def fence_then_abort(m: TransactionMetadata) -> tuple[TransactionState, TxnTransitMetadata]:
        m.prepare_fence_producer_epoch()
        return S.PREPARE_ABORT, m.prepare_abort_after_fence(NOW_MS)

    def add(m: TransactionMetadata) -> tuple[TransactionState, TxnTransitMetadata]:
        return S.ONGOING, m.prepare_add_partitions(rng.sample([TP_A, TP_B, TP_C], 2), NOW_MS)

    def complete(m: TransactionMetadata) -> tuple[TransactionState, TxnTransitMetadata]:
        transit = m.prepare_complete(NOW_MS)
        return transit.state, transit

    return {
        "bump": (S.EMPTY, bump),
        "rotate": (
            S.EMPTY,
            lambda m: (
                S.EMPTY,
                m.prepare_producer_id_rotation(
                    rng.randrange(1000), TIMEOUT_MS, NOW_MS, record_last_epoch=True
                ),
            ),
        ),
        "add": (S.ONGOING, add),
        "commit": (
            S.PREPARE_COMMIT,
            lambda m: (S.PREPARE_COMMIT, m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW_MS)),
        ),
        "abort": (
            S.PREPARE_ABORT,
            lambda m: (S.PREPARE_ABORT, m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW_MS)),
        ),
        "complete": (S.COMPLETE_ABORT, complete),  # or CompleteCommit: see _target
        "fence": (S.PREPARE_EPOCH_FENCE, fence_then_abort),
        "dead": (S.DEAD, lambda m: (S.DEAD, m.prepare_dead())),
    }


def _target(m: TransactionMetadata, name: str, target: TransactionState) -> TransactionState:
    """prepare_complete ends what the transaction is preparing."""
    if name == "complete" and m.state is S.PREPARE_COMMIT:
        return S.COMPLETE_COMMIT
    return target


def _allowed(m: TransactionMetadata, name: str, target: TransactionState) -> bool:
    if m.pending is not None:
        return False
    if name == "rotate":  # besides the table: never during a transaction
        return (m.state, target) in KAFKA_MOVES and m.state not in IN_TRANSACTION
    return (m.state, target) in KAFKA_MOVES


def _check_invariants(m: TransactionMetadata, where: str) -> None:
    assert 0 <= m.producer_epoch < MAX_PRODUCER_EPOCH, where
    if m.state in IN_TRANSACTION:
        assert m.topic_partitions, where
        assert m.txn_start_timestamp != NO_TIMESTAMP, where
    else:
        assert not m.topic_partitions, where
    assert m.state not in (S.DEAD, S.PREPARE_EPOCH_FENCE), where


def test_a_random_walk_follows_the_table() -> None:
    seed = SEED
    rng = random.Random(seed)
    steps = _walk_steps(rng)
    m = metadata(S.EMPTY, epoch=0)
    seen: set[tuple[TransactionState, TransactionState]] = set()
    for step_no in range(3000):
        where = f"seed={seed} step={step_no} state={m.state.kafka_name}"
        name = rng.choice(sorted(steps))
        target, step = steps[name]
        target = _target(m, name, target)
        before = m.current()
        if not _allowed(m, name, target):
            try:
                step(m)
            except IllegalTransactionTransition:
                pass
            else:
                pytest.fail(f"{where}: {name} was allowed")
            assert m.current() == before, where
            assert m.pending is None, where
            continue
        moved_to, transit = step(m)
        # A fence is held, never written: what is written is its abort.
        assert moved_to is transit.state, where
        assert moved_to is (S.PREPARE_ABORT if target is S.PREPARE_EPOCH_FENCE else target), where
        seen.add((before.state, target))
        if target is S.PREPARE_EPOCH_FENCE:
            seen.add((target, S.PREPARE_ABORT))
        if rng.random() < 0.1:
            # The write failed: nothing changes, and the transition may be tried again.
            m.abort_transition()
            assert m.current() == before, where
            continue
        if target is S.DEAD:
            m = metadata(S.EMPTY, epoch=0)  # the tombstone is written: the id starts over
            continue
        m.complete_transition(transit)
        assert m.current() == transit, where
        _check_invariants(m, where)
        # What is written loads back as the same metadata, bar what v0 does not carry.
        value = decode_value(encode_value(transit.to_log_value()))
        assert value is not None
        loaded = TransactionMetadata.from_log_value("txn", value).current()
        v0_lacks = replace(
            loaded,
            previous_producer_id=m.previous_producer_id,
            last_producer_epoch=m.last_producer_epoch,
        )
        assert v0_lacks == m.current(), where
    assert seen == KAFKA_MOVES, f"seed={seed}: never took {KAFKA_MOVES - seen}"
