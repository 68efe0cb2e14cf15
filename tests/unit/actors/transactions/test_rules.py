"""The coordinator's request rules: InitProducerId, AddPartitionsToTxn, EndTxn, markers done,
timeouts and expiry, with Kafka's answers."""

from __future__ import annotations

import pytest

from actors.transactions.rules import (
    ProducerIdAndEpoch,
    TimedOutTransaction,
    TransactionResult,
    check_transaction_timeout,
    is_transactional_id_expired,
    needs_new_producer_id,
    prepare_add_partitions,
    prepare_complete_transaction,
    prepare_end_txn,
    prepare_init_producer_id,
    prepare_timed_out_abort,
    timed_out_transactions,
)
from actors.transactions.state import (
    MAX_PRODUCER_EPOCH,
    IllegalTransactionTransition,
    TransactionMetadata,
    TxnTransitMetadata,
)
from tests.unit.actors.transactions.helpers import (
    NOW_MS,
    START_MS,
    TIMEOUT_MS,
    TP_A,
    TP_B,
    TP_C,
    metadata,
)
from wire.errors import ErrorCode
from wire.transaction_log import TransactionState

S = TransactionState
E = ErrorCode
COMMIT, ABORT = TransactionResult.COMMIT, TransactionResult.ABORT
EXHAUSTED = MAX_PRODUCER_EPOCH - 1


def transit(answer: TxnTransitMetadata | ErrorCode) -> TxnTransitMetadata:
    assert isinstance(answer, TxnTransitMetadata), answer
    return answer


def init(
    m: TransactionMetadata,
    expected: ProducerIdAndEpoch | None = None,
    *,
    new_producer_id: int | None = None,
    timeout_ms: int = TIMEOUT_MS,
) -> TxnTransitMetadata | ErrorCode:
    return prepare_init_producer_id(
        m,
        txn_timeout_ms=timeout_ms,
        expected=expected,
        now_ms=NOW_MS,
        new_producer_id=new_producer_id,
    )


def test_end_txn_result_is_the_committed_flag() -> None:
    assert TransactionResult(True) is COMMIT
    assert TransactionResult(False) is ABORT


@pytest.mark.parametrize(
    ("timeout_ms", "answer"),
    [
        (1, E.NONE),
        (900_000, E.NONE),
        (900_001, E.INVALID_TRANSACTION_TIMEOUT),
        (0, E.INVALID_TRANSACTION_TIMEOUT),
        (-5, E.INVALID_TRANSACTION_TIMEOUT),
    ],
)
def test_the_timeout_must_be_positive_and_at_most_the_max(timeout_ms: int, answer: E) -> None:
    assert check_transaction_timeout(timeout_ms, max_txn_timeout_ms=900_000) is answer


# -- InitProducerId --------------------------------------------------------------------------------


def test_a_new_transactional_id_gets_epoch_zero() -> None:
    m = TransactionMetadata.new("txn", producer_id=7, txn_timeout_ms=TIMEOUT_MS, now_ms=START_MS)
    t = transit(init(m))
    assert (t.producer_id, t.producer_epoch, t.state) == (7, 0, S.EMPTY)


def test_a_new_transactional_id_accepts_any_expected_pair() -> None:
    # KIP-360: a producer recovering from UNKNOWN_PRODUCER_ID whose id expired meanwhile.
    m = TransactionMetadata.new("txn", producer_id=7, txn_timeout_ms=TIMEOUT_MS, now_ms=START_MS)
    t = transit(init(m, ProducerIdAndEpoch(3, 9)))
    assert (t.producer_id, t.producer_epoch) == (7, 0)


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_an_existing_id_gets_its_epoch_bumped_and_the_new_timeout(state: TransactionState) -> None:
    m = metadata(state, epoch=3)
    t = transit(init(m, timeout_ms=10_000))
    assert (t.producer_id, t.producer_epoch, t.txn_timeout_ms, t.state) == (42, 4, 10_000, S.EMPTY)
    m.complete_transition(t)
    assert (m.producer_epoch, m.txn_timeout_ms, m.topic_partitions) == (4, 10_000, set())


def test_a_pending_transition_makes_init_wait() -> None:
    m = metadata(S.EMPTY)
    m.prepare_add_partitions({TP_A}, NOW_MS)
    assert init(m) is E.CONCURRENT_TRANSACTIONS


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_init_waits_while_markers_are_written(state: TransactionState) -> None:
    assert init(metadata(state)) is E.CONCURRENT_TRANSACTIONS


def test_init_during_a_transaction_fences_it_then_the_abort_is_written() -> None:
    m = metadata(S.ONGOING, epoch=3)
    fence = transit(init(m))
    assert (fence.state, fence.producer_epoch) == (S.PREPARE_EPOCH_FENCE, 4)
    abort = m.prepare_abort_after_fence(NOW_MS)
    assert (abort.state, abort.producer_epoch) == (S.PREPARE_ABORT, 4)
    m.complete_transition(abort)
    # The old producer is fenced from now on.
    assert prepare_add_partitions(m, 42, 3, {TP_C}, NOW_MS) is E.PRODUCER_FENCED
    # Markers, then the client's retry bumps once more: it never saw epoch 4.
    m.complete_transition(transit(prepare_complete_transaction(m, 42, 4, ABORT, NOW_MS)))
    again = transit(init(m))
    assert (again.producer_epoch, again.state) == (5, S.EMPTY)


@pytest.mark.parametrize("state", [S.DEAD, S.PREPARE_EPOCH_FENCE])
def test_init_in_a_state_never_held_is_a_bug(state: TransactionState) -> None:
    m = metadata(S.EMPTY)
    m.state = state
    with pytest.raises(IllegalTransactionTransition, match=state.kafka_name):
        init(m)


def test_an_exhausted_epoch_rotates_to_the_new_producer_id_given() -> None:
    m = metadata(S.COMPLETE_COMMIT, epoch=EXHAUSTED)
    assert needs_new_producer_id(m, None)
    with pytest.raises(ValueError, match="no new producer id"):
        init(m)
    t = transit(init(m, new_producer_id=99))
    assert (t.producer_id, t.producer_epoch, t.last_producer_epoch) == (99, 0, -1)
    assert t.previous_producer_id == 42


def test_a_bump_to_the_exhausted_epoch_is_still_allowed() -> None:
    m = metadata(S.EMPTY, epoch=EXHAUSTED - 1)
    assert not needs_new_producer_id(m, None)
    assert transit(init(m)).producer_epoch == EXHAUSTED


def test_kip360_the_current_pair_bumps_and_remembers_the_last_epoch() -> None:
    m = metadata(S.COMPLETE_ABORT, epoch=3)
    t = transit(init(m, ProducerIdAndEpoch(42, 3)))
    assert (t.producer_id, t.producer_epoch, t.last_producer_epoch) == (42, 4, 3)


def test_kip360_a_retry_of_the_last_init_gets_the_same_answer() -> None:
    m = metadata(S.COMPLETE_ABORT, epoch=3)
    first = transit(init(m, ProducerIdAndEpoch(42, 3)))
    m.complete_transition(first)
    retry = transit(init(m, ProducerIdAndEpoch(42, 3)))  # the answer was lost
    assert (retry.producer_id, retry.producer_epoch) == (first.producer_id, first.producer_epoch)


@pytest.mark.parametrize(
    "expected",
    [
        ProducerIdAndEpoch(42, 1),  # an epoch older than the last one
        ProducerIdAndEpoch(42, 9),  # an epoch it never had
        ProducerIdAndEpoch(41, 3),  # another producer id
    ],
)
def test_kip360_a_stale_pair_is_producer_fenced(expected: ProducerIdAndEpoch) -> None:
    m = metadata(S.EMPTY, epoch=3, last_epoch=2)
    assert init(m, expected) is E.PRODUCER_FENCED
    assert m.pending is None


def test_kip360_an_exhausted_pair_rotates_and_its_retry_gets_the_new_id() -> None:
    m = metadata(S.COMPLETE_COMMIT, epoch=EXHAUSTED)
    pair = ProducerIdAndEpoch(42, EXHAUSTED)
    assert needs_new_producer_id(m, pair)
    rotated = transit(init(m, pair, new_producer_id=99))
    assert (rotated.producer_id, rotated.producer_epoch, rotated.last_producer_epoch) == (
        99,
        0,
        EXHAUSTED,
    )
    m.complete_transition(rotated)
    # The answer was lost: the producer retries with its old pair, and gets the same.
    assert not needs_new_producer_id(m, pair)
    retry = transit(init(m, pair))
    assert (retry.producer_id, retry.producer_epoch) == (99, 0)
    m.complete_transition(retry)
    # The old id with an epoch that was not exhausted is a zombie.
    assert init(m, ProducerIdAndEpoch(42, 5)) is E.PRODUCER_FENCED


def test_kip360_an_exhausted_id_retried_with_its_last_epoch_is_not_rotated() -> None:
    m = metadata(S.EMPTY, epoch=EXHAUSTED, last_epoch=EXHAUSTED - 1)
    pair = ProducerIdAndEpoch(42, EXHAUSTED - 1)
    assert not needs_new_producer_id(m, pair)
    t = transit(init(m, pair))
    assert (t.producer_id, t.producer_epoch) == (42, EXHAUSTED)


def test_needs_new_producer_id_is_false_whenever_init_answers_otherwise() -> None:
    exhausted = metadata(S.COMPLETE_COMMIT, epoch=EXHAUSTED)
    exhausted.prepare_add_partitions({TP_A}, NOW_MS)  # pending
    assert not needs_new_producer_id(exhausted, None)
    assert not needs_new_producer_id(metadata(S.ONGOING, epoch=EXHAUSTED), None)
    assert not needs_new_producer_id(
        metadata(S.EMPTY, epoch=EXHAUSTED), ProducerIdAndEpoch(7, EXHAUSTED)
    )


# -- AddPartitionsToTxn ----------------------------------------------------------------------------


def test_add_partitions_for_an_unknown_id_is_an_invalid_mapping() -> None:
    assert prepare_add_partitions(None, 42, 3, {TP_A}, NOW_MS) is E.INVALID_PRODUCER_ID_MAPPING


def test_add_partitions_checks_the_producer_before_anything_else() -> None:
    m = metadata(S.PREPARE_COMMIT, epoch=3)
    m.prepare_complete(NOW_MS)  # pending, and markers being written
    assert prepare_add_partitions(m, 41, 3, {TP_A}, NOW_MS) is E.INVALID_PRODUCER_ID_MAPPING
    assert prepare_add_partitions(m, 42, 2, {TP_A}, NOW_MS) is E.PRODUCER_FENCED
    assert prepare_add_partitions(m, 42, 4, {TP_A}, NOW_MS) is E.PRODUCER_FENCED
    assert prepare_add_partitions(m, 42, 3, {TP_A}, NOW_MS) is E.CONCURRENT_TRANSACTIONS


@pytest.mark.parametrize("state", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_add_partitions_waits_while_the_last_transaction_ends(state: TransactionState) -> None:
    answer = prepare_add_partitions(metadata(state), 42, 3, {TP_C}, NOW_MS)
    assert answer is E.CONCURRENT_TRANSACTIONS


def test_add_partitions_already_in_the_transaction_needs_no_write() -> None:
    m = metadata(S.ONGOING)
    assert prepare_add_partitions(m, 42, 3, {TP_A}, NOW_MS) is E.NONE
    assert prepare_add_partitions(m, 42, 3, [TP_A, TP_B], NOW_MS) is E.NONE
    assert m.pending is None


def test_add_partitions_with_a_new_one_writes_them_all() -> None:
    m = metadata(S.ONGOING)
    t = transit(prepare_add_partitions(m, 42, 3, {TP_A, TP_C}, NOW_MS))
    assert t.state is S.ONGOING
    assert t.topic_partitions == {TP_A, TP_B, TP_C}


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_add_partitions_after_a_finished_transaction_starts_one(state: TransactionState) -> None:
    t = transit(prepare_add_partitions(metadata(state), 42, 3, {TP_C}, NOW_MS))
    assert (t.state, t.txn_start_timestamp) == (S.ONGOING, NOW_MS)
    assert t.topic_partitions == {TP_C}


# -- EndTxn ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("result", "target"), [(COMMIT, S.PREPARE_COMMIT), (ABORT, S.PREPARE_ABORT)]
)
def test_end_txn_of_an_ongoing_transaction_prepares_it(
    result: TransactionResult, target: TransactionState
) -> None:
    t = transit(prepare_end_txn(metadata(S.ONGOING), 42, 3, result, NOW_MS))
    assert (t.state, t.topic_partitions, t.txn_last_update_timestamp) == (
        target,
        frozenset({TP_A, TP_B}),
        NOW_MS,
    )


@pytest.mark.parametrize(
    ("state", "result", "answer"),
    [
        (S.COMPLETE_COMMIT, COMMIT, E.NONE),  # a retry after it completed
        (S.COMPLETE_COMMIT, ABORT, E.INVALID_TXN_STATE),
        (S.COMPLETE_ABORT, ABORT, E.NONE),
        (S.COMPLETE_ABORT, COMMIT, E.INVALID_TXN_STATE),
        (S.PREPARE_COMMIT, COMMIT, E.CONCURRENT_TRANSACTIONS),  # a retry while markers go out
        (S.PREPARE_COMMIT, ABORT, E.INVALID_TXN_STATE),
        (S.PREPARE_ABORT, ABORT, E.CONCURRENT_TRANSACTIONS),
        (S.PREPARE_ABORT, COMMIT, E.INVALID_TXN_STATE),
        (S.EMPTY, COMMIT, E.INVALID_TXN_STATE),  # no transaction to end
        (S.EMPTY, ABORT, E.INVALID_TXN_STATE),
    ],
)
def test_end_txn_outside_a_transaction_answers_as_kafka(
    state: TransactionState, result: TransactionResult, answer: E
) -> None:
    m = metadata(state)
    assert prepare_end_txn(m, 42, 3, result, NOW_MS) is answer
    assert m.pending is None


def test_end_txn_checks_the_producer_and_the_pending_transition() -> None:
    m = metadata(S.ONGOING, epoch=3)
    assert prepare_end_txn(None, 42, 3, COMMIT, NOW_MS) is E.INVALID_PRODUCER_ID_MAPPING
    assert prepare_end_txn(m, 41, 3, COMMIT, NOW_MS) is E.INVALID_PRODUCER_ID_MAPPING
    assert prepare_end_txn(m, 42, 2, COMMIT, NOW_MS) is E.PRODUCER_FENCED
    m.prepare_add_partitions({TP_C}, NOW_MS)
    assert prepare_end_txn(m, 42, 3, COMMIT, NOW_MS) is E.CONCURRENT_TRANSACTIONS


def test_end_txn_while_a_fence_is_pending_waits() -> None:
    m = metadata(S.ONGOING, epoch=3)
    m.prepare_fence_producer_epoch()
    assert prepare_end_txn(m, 42, 3, ABORT, NOW_MS) is E.CONCURRENT_TRANSACTIONS


@pytest.mark.parametrize("state", [S.DEAD, S.PREPARE_EPOCH_FENCE])
def test_end_txn_in_a_state_never_held_is_a_bug(state: TransactionState) -> None:
    m = metadata(S.EMPTY)
    m.state = state
    with pytest.raises(IllegalTransactionTransition, match=state.kafka_name):
        prepare_end_txn(m, 42, 3, ABORT, NOW_MS)


# -- after the Prepare* record: markers, then Complete* --------------------------------------------


@pytest.mark.parametrize(
    ("state", "result", "done"),
    [(S.PREPARE_COMMIT, COMMIT, S.COMPLETE_COMMIT), (S.PREPARE_ABORT, ABORT, S.COMPLETE_ABORT)],
)
def test_markers_done_completes_and_clears_the_partitions(
    state: TransactionState, result: TransactionResult, done: TransactionState
) -> None:
    m = metadata(state)
    t = transit(prepare_complete_transaction(m, 42, 3, result, NOW_MS))
    assert (t.state, t.topic_partitions) == (done, frozenset())
    # While the markers go out, requests wait.
    assert prepare_add_partitions(m, 42, 3, {TP_C}, NOW_MS) is E.CONCURRENT_TRANSACTIONS
    assert init(m) is E.CONCURRENT_TRANSACTIONS
    m.complete_transition(t)
    assert (m.state, m.topic_partitions) == (done, set())


@pytest.mark.parametrize(
    ("state", "result"),
    [
        (S.PREPARE_COMMIT, ABORT),
        (S.PREPARE_ABORT, COMMIT),
        (S.ONGOING, COMMIT),
        (S.EMPTY, ABORT),
        (S.COMPLETE_COMMIT, COMMIT),
    ],
)
def test_markers_for_the_other_result_or_no_prepare_are_an_invalid_state(
    state: TransactionState, result: TransactionResult
) -> None:
    assert prepare_complete_transaction(metadata(state), 42, 3, result, NOW_MS) is (
        E.INVALID_TXN_STATE
    )


def test_markers_done_checks_the_producer_first() -> None:
    m = metadata(S.PREPARE_COMMIT)
    assert prepare_complete_transaction(None, 42, 3, COMMIT, NOW_MS) is (
        E.INVALID_PRODUCER_ID_MAPPING
    )
    assert prepare_complete_transaction(m, 42, 2, COMMIT, NOW_MS) is E.PRODUCER_FENCED
    m.prepare_complete(NOW_MS)
    assert prepare_complete_transaction(m, 42, 3, COMMIT, NOW_MS) is E.CONCURRENT_TRANSACTIONS


def test_markers_in_a_state_never_held_are_a_bug() -> None:
    m = metadata(S.EMPTY)
    m.state = S.DEAD
    with pytest.raises(IllegalTransactionTransition, match="Dead"):
        prepare_complete_transaction(m, 42, 3, ABORT, NOW_MS)


# -- transaction timeouts --------------------------------------------------------------------------


def test_only_ongoing_transactions_past_their_timeout_time_out() -> None:
    late = START_MS + TIMEOUT_MS
    ongoing = metadata(S.ONGOING)
    others = [metadata(s) for s in S if s not in (S.ONGOING, S.DEAD, S.PREPARE_EPOCH_FENCE)]
    pending = metadata(S.ONGOING)
    pending.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW_MS)
    candidates = [ongoing, pending, *others]
    assert timed_out_transactions(candidates, late) == []  # start + timeout == now: not yet
    assert timed_out_transactions(candidates, late + 1) == [TimedOutTransaction("txn", 42, 3)]


def test_a_timed_out_transaction_is_aborted_with_the_epoch_bumped() -> None:
    m = metadata(S.ONGOING, epoch=3)
    [late] = timed_out_transactions([m], START_MS + TIMEOUT_MS + 1)
    abort = prepare_timed_out_abort(m, late.producer_id, NOW_MS)
    assert abort is not None
    assert (abort.state, abort.producer_epoch, abort.topic_partitions) == (
        S.PREPARE_ABORT,
        4,
        frozenset({TP_A, TP_B}),
    )
    m.complete_transition(abort)
    # The producer that let it time out (a zombie, perhaps) is fenced.
    assert prepare_end_txn(m, 42, 3, COMMIT, NOW_MS) is E.PRODUCER_FENCED
    assert prepare_add_partitions(m, 42, 3, {TP_C}, NOW_MS) is E.PRODUCER_FENCED


def test_a_timed_out_transaction_that_changed_since_is_left_alone() -> None:
    assert prepare_timed_out_abort(metadata(S.ONGOING, producer_id=43), 42, NOW_MS) is None
    assert prepare_timed_out_abort(metadata(S.PREPARE_COMMIT), 42, NOW_MS) is None
    pending = metadata(S.ONGOING)
    pending.prepare_add_partitions({TP_C}, NOW_MS)
    assert prepare_timed_out_abort(pending, 42, NOW_MS) is None


# -- transactional id expiry -----------------------------------------------------------------------


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_an_idle_finished_id_expires(state: TransactionState) -> None:
    m = metadata(state)  # last updated at START_MS
    assert not is_transactional_id_expired(m, START_MS + 999, expiration_ms=1000)
    assert is_transactional_id_expired(m, START_MS + 1000, expiration_ms=1000)
    assert m.prepare_dead().state is S.DEAD
    assert not is_transactional_id_expired(m, START_MS + 1000, expiration_ms=1000)  # pending


@pytest.mark.parametrize("state", [S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_a_running_transaction_never_expires(state: TransactionState) -> None:
    assert not is_transactional_id_expired(metadata(state), 10**12, expiration_ms=1000)


# -- a whole transaction ---------------------------------------------------------------------------


def test_a_transaction_from_init_to_complete_commit() -> None:
    m = TransactionMetadata.new("txn", producer_id=7, txn_timeout_ms=TIMEOUT_MS, now_ms=0)
    m.complete_transition(transit(init(m)))
    m.complete_transition(transit(prepare_add_partitions(m, 7, 0, {TP_A}, 10)))
    m.complete_transition(transit(prepare_add_partitions(m, 7, 0, {TP_C}, 20)))
    m.complete_transition(transit(prepare_end_txn(m, 7, 0, COMMIT, 30)))
    assert (m.state, m.topic_partitions, m.txn_start_timestamp) == (
        S.PREPARE_COMMIT,
        {TP_A, TP_C},
        10,
    )
    m.complete_transition(transit(prepare_complete_transaction(m, 7, 0, COMMIT, 40)))
    assert (m.state, m.topic_partitions, m.txn_last_update_timestamp) == (
        S.COMPLETE_COMMIT,
        set(),
        40,
    )
    assert prepare_end_txn(m, 7, 0, COMMIT, 50) is E.NONE  # the client's retry
    # The next transaction, by the same producer.
    t = transit(prepare_add_partitions(m, 7, 0, {TP_B}, 60))
    assert t.topic_partitions == {TP_B}
    assert t.txn_start_timestamp == 60
