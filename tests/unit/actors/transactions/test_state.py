"""One transactional id's metadata: its state table, the prepare/complete steps and its record."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from actors.transactions.state import (
    ENTERED_FROM,
    MAX_PRODUCER_EPOCH,
    NO_TIMESTAMP,
    IllegalTransactionTransition,
    TransactionMetadata,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from tests.unit.actors.transactions.helpers import (
    IN_TRANSACTION,
    KAFKA_MOVES,
    NOW_MS,
    START_MS,
    TIMEOUT_MS,
    TP_A,
    TP_B,
    TP_C,
    metadata,
)
from wire.errors import ErrorCode
from wire.transaction_log import (
    TransactionLogError,
    TransactionLogValue,
    TransactionState,
    TxnPartitions,
)

S = TransactionState
SEED = 19


def written(m: TransactionMetadata, transit: TxnTransitMetadata) -> None:
    """The log write of `transit` succeeded."""
    m.complete_transition(transit)


# -- the table -------------------------------------------------------------------------------------


def test_entered_from_is_kafkas_valid_previous_states() -> None:
    table = {(source, target) for target, sources in ENTERED_FROM.items() for source in sources}
    assert table == KAFKA_MOVES
    assert set(ENTERED_FROM) == set(S)


@pytest.mark.parametrize(("source", "target"), list(itertools.product(S, S)))
def test_preparing_a_move_is_allowed_exactly_by_the_table(
    source: TransactionState, target: TransactionState
) -> None:
    m = metadata(source)
    # The generic step under every prepare_* method: only the table decides here.
    transit = replace(m.current(), state=target)
    if (source, target) in KAFKA_MOVES:
        assert m._prepare(transit).state is target
        assert m.pending_state is target
    else:
        with pytest.raises(IllegalTransactionTransition, match=f"-> {target.kafka_name}"):
            m._prepare(transit)
        assert m.pending is None


def test_epochs_are_exhausted_one_below_short_max() -> None:
    assert MAX_PRODUCER_EPOCH == 32767
    assert not is_epoch_exhausted(32765)
    assert is_epoch_exhausted(32766)
    assert is_epoch_exhausted(32767)


# -- pending, complete, abort ----------------------------------------------------------------------


def test_only_one_transition_may_be_pending() -> None:
    m = metadata(S.ONGOING)
    m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW_MS)
    with pytest.raises(IllegalTransactionTransition, match="PrepareCommit is pending"):
        m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW_MS)
    with pytest.raises(IllegalTransactionTransition, match="is pending"):
        m.prepare_add_partitions({TP_C}, NOW_MS)
    assert m.pending_transition_in_progress
    assert m.state is S.ONGOING


def test_a_failed_write_leaves_the_state_as_it_was() -> None:
    m = metadata(S.ONGOING)
    before = m.current()
    m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW_MS)
    m.abort_transition()
    assert m.current() == before
    assert m.pending is None
    # And the next transition may be prepared.
    assert m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW_MS).state is S.PREPARE_COMMIT


def test_completing_needs_the_pending_transit() -> None:
    m = metadata(S.ONGOING)
    stray = replace(m.current(), state=S.PREPARE_COMMIT)
    with pytest.raises(IllegalTransactionTransition, match="pending None"):
        m.complete_transition(stray)
    transit = m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW_MS)
    with pytest.raises(IllegalTransactionTransition, match="completing"):
        m.complete_transition(replace(transit, txn_last_update_timestamp=NOW_MS + 1))
    written(m, transit)
    assert m.state is S.PREPARE_COMMIT
    assert m.txn_last_update_timestamp == NOW_MS
    assert m.pending is None


def test_completing_catches_a_metadata_changed_while_pending() -> None:
    m = metadata(S.ONGOING)
    transit = m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW_MS)
    m.topic_partitions.add(TP_C)  # a bug: nothing may change the metadata meanwhile
    with pytest.raises(IllegalTransactionTransition, match="does not follow"):
        m.complete_transition(transit)


def test_dead_is_never_completed_the_id_is_dropped_instead() -> None:
    m = metadata(S.COMPLETE_COMMIT)
    transit = m.prepare_dead()
    assert transit.state is S.DEAD
    assert not transit.topic_partitions
    with pytest.raises(IllegalTransactionTransition, match="never completed to Dead"):
        m.complete_transition(transit)
    with pytest.raises(IllegalTransactionTransition, match="never written"):
        transit.to_log_value()


# -- InitProducerId's moves ------------------------------------------------------------------------


def test_a_new_id_is_empty_without_an_epoch_until_its_first_bump() -> None:
    m = TransactionMetadata.new("txn", producer_id=7, txn_timeout_ms=TIMEOUT_MS, now_ms=START_MS)
    assert (m.state, m.producer_epoch, m.last_producer_epoch) == (S.EMPTY, -1, -1)
    assert (m.txn_start_timestamp, m.txn_last_update_timestamp) == (NO_TIMESTAMP, START_MS)
    transit = m.prepare_increment_producer_epoch(TIMEOUT_MS, None, NOW_MS)
    assert isinstance(transit, TxnTransitMetadata)
    written(m, transit)
    assert (m.producer_id, m.producer_epoch, m.state) == (7, 0, S.EMPTY)


def test_a_bump_without_expected_epoch_forgets_the_last_epoch() -> None:
    m = metadata(S.COMPLETE_ABORT, epoch=3, last_epoch=2)
    transit = m.prepare_increment_producer_epoch(30_000, None, NOW_MS)
    assert isinstance(transit, TxnTransitMetadata)
    assert (transit.producer_epoch, transit.last_producer_epoch) == (4, -1)
    assert (transit.txn_timeout_ms, transit.txn_start_timestamp) == (30_000, NO_TIMESTAMP)
    assert (
        transit.previous_producer_id == 42
    )  # an epoch bump keeps the id: it is "replaced" by itself
    written(m, transit)
    assert (m.state, m.txn_timeout_ms, m.topic_partitions) == (S.EMPTY, 30_000, set())


def test_a_bump_with_the_current_epoch_remembers_it_as_the_last() -> None:
    m = metadata(S.COMPLETE_COMMIT, epoch=3)
    transit = m.prepare_increment_producer_epoch(TIMEOUT_MS, 3, NOW_MS)
    assert isinstance(transit, TxnTransitMetadata)
    assert (transit.producer_epoch, transit.last_producer_epoch) == (4, 3)


def test_a_retried_init_with_the_last_epoch_gets_the_same_answer() -> None:
    m = metadata(S.EMPTY, epoch=4, last_epoch=3)
    transit = m.prepare_increment_producer_epoch(TIMEOUT_MS, 3, NOW_MS)
    assert isinstance(transit, TxnTransitMetadata)
    assert (transit.producer_id, transit.producer_epoch, transit.last_producer_epoch) == (42, 4, 3)


def test_a_stale_epoch_is_producer_fenced() -> None:
    m = metadata(S.EMPTY, epoch=4, last_epoch=3)
    assert m.prepare_increment_producer_epoch(TIMEOUT_MS, 2, NOW_MS) is ErrorCode.PRODUCER_FENCED
    assert m.pending is None


def test_bumping_past_the_last_epoch_is_refused() -> None:
    m = metadata(S.EMPTY, epoch=MAX_PRODUCER_EPOCH - 1)
    with pytest.raises(IllegalTransactionTransition, match="no producer epoch left"):
        m.prepare_increment_producer_epoch(TIMEOUT_MS, None, NOW_MS)
    # A retry needs no bump, so it is still answered.
    m.last_producer_epoch = MAX_PRODUCER_EPOCH - 2
    transit = m.prepare_increment_producer_epoch(TIMEOUT_MS, MAX_PRODUCER_EPOCH - 2, NOW_MS)
    assert isinstance(transit, TxnTransitMetadata)
    assert transit.producer_epoch == MAX_PRODUCER_EPOCH - 1


@pytest.mark.parametrize("record_last_epoch", [True, False])
def test_a_rotation_starts_a_new_producer_id_at_epoch_zero(record_last_epoch: bool) -> None:
    m = metadata(S.COMPLETE_COMMIT, epoch=MAX_PRODUCER_EPOCH - 1)
    transit = m.prepare_producer_id_rotation(
        99, 20_000, NOW_MS, record_last_epoch=record_last_epoch
    )
    assert (transit.producer_id, transit.producer_epoch, transit.previous_producer_id) == (
        99,
        0,
        42,
    )
    assert transit.last_producer_epoch == (MAX_PRODUCER_EPOCH - 1 if record_last_epoch else -1)
    written(m, transit)
    assert (m.producer_id, m.previous_producer_id, m.producer_epoch) == (99, 42, 0)


@pytest.mark.parametrize("state", sorted(IN_TRANSACTION))
def test_no_rotation_during_a_transaction(state: TransactionState) -> None:
    with pytest.raises(IllegalTransactionTransition, match="during a transaction"):
        metadata(state).prepare_producer_id_rotation(
            99, TIMEOUT_MS, NOW_MS, record_last_epoch=False
        )


# -- a transaction's moves -------------------------------------------------------------------------


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_adding_partitions_starts_a_transaction_now(state: TransactionState) -> None:
    m = metadata(state)
    transit = m.prepare_add_partitions({TP_C}, NOW_MS)
    assert (transit.state, transit.topic_partitions) == (S.ONGOING, frozenset({TP_C}))
    assert transit.txn_start_timestamp == NOW_MS
    written(m, transit)
    assert (m.state, m.topic_partitions, m.txn_start_timestamp) == (S.ONGOING, {TP_C}, NOW_MS)


def test_adding_partitions_to_an_ongoing_transaction_keeps_its_start() -> None:
    m = metadata(S.ONGOING)
    transit = m.prepare_add_partitions({TP_B, TP_C}, NOW_MS)
    assert transit.topic_partitions == {TP_A, TP_B, TP_C}
    assert (transit.txn_start_timestamp, transit.txn_last_update_timestamp) == (START_MS, NOW_MS)


@pytest.mark.parametrize("target", [S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_ending_keeps_the_partitions_until_their_markers_are_written(
    target: TransactionState,
) -> None:
    m = metadata(S.ONGOING)
    written(m, m.prepare_abort_or_commit(target, NOW_MS))
    assert (m.state, m.topic_partitions, m.txn_start_timestamp) == (target, {TP_A, TP_B}, START_MS)
    m.remove_partition(TP_A)  # its marker is written
    transit = m.prepare_complete(NOW_MS + 1)
    done = S.COMPLETE_COMMIT if target is S.PREPARE_COMMIT else S.COMPLETE_ABORT
    assert (transit.state, transit.topic_partitions) == (done, frozenset())
    written(m, transit)
    assert (m.state, m.topic_partitions, m.txn_start_timestamp) == (done, set(), START_MS)


def test_only_a_commit_or_an_abort_ends_a_transaction() -> None:
    with pytest.raises(IllegalTransactionTransition, match="not an end"):
        metadata(S.ONGOING).prepare_abort_or_commit(S.COMPLETE_COMMIT, NOW_MS)


@pytest.mark.parametrize("state", [s for s in S if s not in (S.PREPARE_COMMIT, S.PREPARE_ABORT)])
def test_partitions_are_removed_only_while_markers_are_written(state: TransactionState) -> None:
    with pytest.raises(IllegalTransactionTransition, match="removing"):
        metadata(state).remove_partition(TP_A)


def test_other_moves_keep_the_previous_producer_id() -> None:
    m = metadata(S.EMPTY, producer_id=99, previous_producer_id=42, epoch=0)
    written(m, m.prepare_add_partitions({TP_A}, NOW_MS))
    written(m, m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW_MS))
    written(m, m.prepare_complete(NOW_MS))
    assert (m.producer_id, m.previous_producer_id) == (99, 42)


# -- fencing ---------------------------------------------------------------------------------------


def test_a_fence_bumps_the_epoch_and_its_abort_writes_it() -> None:
    m = metadata(S.ONGOING, epoch=3, last_epoch=2)
    fence = m.prepare_fence_producer_epoch()
    assert (fence.state, fence.producer_epoch, fence.last_producer_epoch) == (
        S.PREPARE_EPOCH_FENCE,
        4,
        -1,
    )
    with pytest.raises(IllegalTransactionTransition, match="never written"):
        fence.to_log_value()
    abort = m.prepare_abort_after_fence(NOW_MS)
    assert (abort.state, abort.producer_epoch, abort.last_producer_epoch) == (
        S.PREPARE_ABORT,
        4,
        -1,
    )
    assert abort.topic_partitions == {TP_A, TP_B}
    assert abort.txn_start_timestamp == START_MS
    assert m.pending_state is S.PREPARE_ABORT
    assert m.producer_epoch == 3  # not bumped before the write
    written(m, abort)
    assert (m.state, m.producer_epoch, m.last_producer_epoch) == (S.PREPARE_ABORT, 4, -1)


def test_a_failed_fence_write_bumps_to_the_same_epoch_next_time() -> None:
    m = metadata(S.ONGOING, epoch=3)
    m.prepare_fence_producer_epoch()
    first = m.prepare_abort_after_fence(NOW_MS)
    m.abort_transition()
    assert (m.state, m.producer_epoch) == (S.ONGOING, 3)
    m.prepare_fence_producer_epoch()
    again = m.prepare_abort_after_fence(NOW_MS)
    assert again == first


def test_the_bumped_epoch_is_accepted_only_after_a_fence() -> None:
    m = metadata(S.ONGOING, epoch=3)
    transit = m.prepare_abort_or_commit(S.PREPARE_ABORT, NOW_MS)
    m.pending = replace(transit, producer_epoch=4)  # a bug: an abort with a bumped epoch
    with pytest.raises(IllegalTransactionTransition, match="does not follow"):
        m.complete_transition(m.pending)


def test_an_abort_after_a_fence_needs_the_fence() -> None:
    m = metadata(S.ONGOING)
    with pytest.raises(IllegalTransactionTransition, match="not pending"):
        m.prepare_abort_after_fence(NOW_MS)
    m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW_MS)
    with pytest.raises(IllegalTransactionTransition, match="not pending"):
        m.prepare_abort_after_fence(NOW_MS)


def test_fencing_the_last_epoch_would_overflow() -> None:
    with pytest.raises(IllegalTransactionTransition, match="overflow"):
        metadata(S.ONGOING, epoch=MAX_PRODUCER_EPOCH).prepare_fence_producer_epoch()


# -- the record ------------------------------------------------------------------------------------


def test_an_ongoing_transaction_is_written_as_kafka_writes_it() -> None:
    m = metadata(S.EMPTY)
    transit = m.prepare_add_partitions({TP_C, TP_B, TP_A}, NOW_MS)
    assert transit.to_log_value() == TransactionLogValue(
        producer_id=42,
        producer_epoch=3,
        transaction_timeout_ms=TIMEOUT_MS,
        transaction_status=S.ONGOING,
        transaction_partitions=(TxnPartitions("orders", (0, 1)), TxnPartitions("payments", (3,))),
        transaction_last_update_timestamp_ms=NOW_MS,
        transaction_start_timestamp_ms=NOW_MS,
    )


def test_an_empty_transaction_is_written_with_null_partitions() -> None:
    transit = metadata(S.COMPLETE_ABORT).prepare_increment_producer_epoch(TIMEOUT_MS, None, NOW_MS)
    assert isinstance(transit, TxnTransitMetadata)
    assert transit.to_log_value().transaction_partitions is None
    assert replace(transit, state=S.COMPLETE_ABORT).to_log_value().transaction_partitions == ()
    with pytest.raises(IllegalTransactionTransition, match="Empty transaction with partitions"):
        replace(transit, topic_partitions=frozenset({TP_A})).to_log_value()


def test_a_loaded_record_gives_back_the_metadata() -> None:
    m = metadata(S.ONGOING)
    written(m, m.prepare_abort_or_commit(S.PREPARE_COMMIT, NOW_MS))
    loaded = TransactionMetadata.from_log_value("txn", m.current().to_log_value())
    assert loaded.current() == m.current()
    assert loaded.pending is None


def test_a_loaded_empty_record_ignores_partitions_and_reads_v1s_previous_id() -> None:
    value = TransactionLogValue(
        7, 2, 100, S.EMPTY, (TxnPartitions("orders", (0,)),), 9, -1, previous_producer_id=5
    )
    loaded = TransactionMetadata.from_log_value("txn", value)
    assert (loaded.topic_partitions, loaded.previous_producer_id) == (set(), 5)
    assert loaded.last_producer_epoch == -1  # Kafka's loader: no last epoch


@pytest.mark.parametrize("state", [S.DEAD, S.PREPARE_EPOCH_FENCE])
def test_records_of_states_never_written_are_refused(state: TransactionState) -> None:
    value = TransactionLogValue(7, 2, 100, state, (), 9, 1)
    with pytest.raises(TransactionLogError, match="never written"):
        TransactionMetadata.from_log_value("txn", value)


def test_a_record_naming_an_illegal_topic_is_refused() -> None:
    value = TransactionLogValue(7, 2, 100, S.ONGOING, (TxnPartitions("a b", (0,)),), 9, 1)
    with pytest.raises(TransactionLogError, match="a b"):
        TransactionMetadata.from_log_value("txn", value)
