"""Metadata in a chosen state, consistent as the coordinator would hold it, for the tests."""

from __future__ import annotations

from actors.transactions.state import NO_TIMESTAMP, TransactionMetadata
from wire.topic import TopicPartition
from wire.transaction_log import TransactionState

S = TransactionState
TP_A = TopicPartition("orders", 0)
TP_B = TopicPartition("orders", 1)
TP_C = TopicPartition("payments", 3)
TIMEOUT_MS = 60_000
START_MS = 1_000
NOW_MS = 5_000

# Kafka's TransactionState.validPreviousStates, pair by pair (from, to).
KAFKA_MOVES = {
    (S.EMPTY, S.EMPTY),
    (S.COMPLETE_COMMIT, S.EMPTY),
    (S.COMPLETE_ABORT, S.EMPTY),
    (S.ONGOING, S.ONGOING),
    (S.EMPTY, S.ONGOING),
    (S.COMPLETE_COMMIT, S.ONGOING),
    (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT),
    (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
    (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD),
    (S.COMPLETE_ABORT, S.DEAD),
    (S.COMPLETE_COMMIT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
}

# States in which a transaction is running or ending: they hold partitions and a start time.
IN_TRANSACTION = frozenset({S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT})


def metadata(
    state: TransactionState,
    *,
    producer_id: int = 42,
    epoch: int = 3,
    last_epoch: int = -1,
    previous_producer_id: int = -1,
) -> TransactionMetadata:
    running = state in IN_TRANSACTION
    return TransactionMetadata(
        "txn",
        producer_id=producer_id,
        txn_timeout_ms=TIMEOUT_MS,
        previous_producer_id=previous_producer_id,
        producer_epoch=epoch,
        last_producer_epoch=last_epoch,
        state=state,
        topic_partitions={TP_A, TP_B} if running else set(),
        txn_start_timestamp=START_MS if state is not S.EMPTY else NO_TIMESTAMP,
        txn_last_update_timestamp=START_MS,
    )
