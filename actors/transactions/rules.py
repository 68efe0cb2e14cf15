"""The transaction coordinator's request rules (Kafka's TransactionCoordinator checks), as pure
functions of a `TransactionMetadata`.

Each `prepare_*` answers a request's question — may this transactional id move, and to what — and
returns either the `TxnTransitMetadata` to write to `__transaction_state` (it is then pending on
the metadata: complete or abort it when the write ends, see state.py), or the `ErrorCode` to
answer with and nothing to write; `ErrorCode.NONE` there means "success, already done" (Kafka's
`Left(Errors.NONE)`). Errors are Kafka's (>= 2.7, which answers PRODUCER_FENCED for a stale epoch;
the Kafka dialect, wire/kafka/apis.py, answers INVALID_PRODUCER_EPOCH instead to clients older
than KIP-588, as Kafka's KafkaApis does).

What the coordinator actor does around them (the order matters, and it all runs in one mailbox
turn unless said otherwise, since the rules read the metadata):

* InitProducerId: an empty transactional id is INVALID_REQUEST; then `check_transaction_timeout`;
  an unknown id gets `TransactionMetadata.new(...)` with a fresh producer id (epoch -1, so the
  prepare bumps it to 0). If `needs_new_producer_id` (the epoch is exhausted), allocate an id and
  pass it as `new_producer_id` (allocating may await: check again after). The answer is the
  transit's producer id and epoch once it is written. A transit in state PrepareEpochFence means
  an ongoing transaction must be aborted first: call `metadata.prepare_abort_after_fence(now_ms)`
  at once, write that PrepareAbort, and answer CONCURRENT_TRANSACTIONS (the client retries, and
  gets its epoch after the abort completes) or the write's error.
* AddPartitionsToTxn and EndTxn: `prepare_add_partitions` / `prepare_end_txn` with the cached
  metadata or None.
* After a Prepare* write: `prepare_complete_transaction`, then send the markers to the metadata's
  partitions (before completing: the transit has none), then write the Complete* transit.
* Every abort-timer tick: `timed_out_transactions`, then `prepare_timed_out_abort` for each.
* Expiry: `is_transactional_id_expired`, then `metadata.prepare_dead()` and a tombstone.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from actors.transactions.state import (
    EXPIRABLE,
    IllegalTransactionTransition,
    TransactionMetadata,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from wire.errors import ErrorCode
from wire.records import NO_PRODUCER_EPOCH
from wire.topic import TopicPartition
from wire.transaction_log import TransactionState

S = TransactionState


class TransactionResult(enum.Enum):
    """How a transaction ends; the value is EndTxn's `committed` flag."""

    ABORT = False
    COMMIT = True


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class TimedOutTransaction:
    """Kafka's TransactionalIdAndProducerIdEpoch: an ongoing transaction past its timeout."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


class _Init(enum.Enum):
    FENCE = enum.auto()  # abort the ongoing transaction first
    ROTATE = enum.auto()  # epoch exhausted: a new producer id
    BUMP = enum.auto()  # the next epoch (or the same answer, for a retry)


def check_transaction_timeout(txn_timeout_ms: int, max_txn_timeout_ms: int) -> ErrorCode:
    """INVALID_TRANSACTION_TIMEOUT unless 0 < timeout <= transaction.max.timeout.ms."""
    if 0 < txn_timeout_ms <= max_txn_timeout_ms:
        return ErrorCode.NONE
    return ErrorCode.INVALID_TRANSACTION_TIMEOUT


# -- InitProducerId --------------------------------------------------------------------------------


def _known_producer(metadata: TransactionMetadata, expected: ProducerIdAndEpoch) -> bool:
    """KIP-360: the producer that sent its id and epoch may go on if the metadata was just
    created (epoch -1: it recovers from UNKNOWN_PRODUCER_ID), if the id is the current one (the
    epoch is checked when bumping), or if it is the id an exhausted epoch was rotated away from
    (a retry of that rotation whose answer was lost)."""
    return (
        metadata.producer_epoch == NO_PRODUCER_EPOCH
        or expected.producer_id == metadata.producer_id
        or (
            expected.producer_id == metadata.previous_producer_id
            and is_epoch_exhausted(expected.producer_epoch)
        )
    )


def _init_step(
    metadata: TransactionMetadata, expected: ProducerIdAndEpoch | None
) -> _Init | ErrorCode:
    if metadata.pending_transition_in_progress:
        return ErrorCode.CONCURRENT_TRANSACTIONS
    if expected is not None and not _known_producer(metadata, expected):
        return ErrorCode.PRODUCER_FENCED
    match metadata.state:
        case S.PREPARE_COMMIT | S.PREPARE_ABORT:
            return ErrorCode.CONCURRENT_TRANSACTIONS  # markers are being written: retry later
        case S.ONGOING:
            return _Init.FENCE
        case S.EMPTY | S.COMPLETE_COMMIT | S.COMPLETE_ABORT:
            exhausted = metadata.is_producer_epoch_exhausted
            if exhausted and (
                expected is None or expected.producer_epoch == metadata.producer_epoch
            ):
                return _Init.ROTATE
            return _Init.BUMP
        case _:
            raise IllegalTransactionTransition(
                f"{metadata.transactional_id}: InitProducerId in state {metadata.state.kafka_name}"
            )


def needs_new_producer_id(
    metadata: TransactionMetadata, expected: ProducerIdAndEpoch | None
) -> bool:
    """Whether `prepare_init_producer_id` needs a fresh producer id (the epoch is exhausted)."""
    return _init_step(metadata, expected) is _Init.ROTATE


def prepare_init_producer_id(
    metadata: TransactionMetadata,
    *,
    txn_timeout_ms: int,
    expected: ProducerIdAndEpoch | None,
    now_ms: int,
    new_producer_id: int | None = None,
) -> TxnTransitMetadata | ErrorCode:
    """InitProducerId for a transactional id. `expected`: the producer's id and epoch (KIP-360,
    InitProducerId v3+), None when it sent -1/-1. A PrepareEpochFence transit is not to be
    written: see the module doc."""
    step = _init_step(metadata, expected)
    if isinstance(step, ErrorCode):
        return step
    if step is _Init.FENCE:
        # The fenced epoch is never returned: the client gets CONCURRENT_TRANSACTIONS and its
        # retry bumps again (or rotates the id, if the fence used the last epoch).
        return metadata.prepare_fence_producer_epoch()
    if step is _Init.ROTATE:
        if new_producer_id is None:
            raise ValueError(
                f"{metadata.transactional_id}: the epoch is exhausted and no new producer id was "
                "given (ask needs_new_producer_id first)"
            )
        return metadata.prepare_producer_id_rotation(
            new_producer_id, txn_timeout_ms, now_ms, record_last_epoch=expected is not None
        )
    expected_epoch = None if expected is None else expected.producer_epoch
    return metadata.prepare_increment_producer_epoch(txn_timeout_ms, expected_epoch, now_ms)


# -- AddPartitionsToTxn, EndTxn and the markers ----------------------------------------------------


def _check_producer(
    metadata: TransactionMetadata | None, producer_id: int, producer_epoch: int
) -> ErrorCode:
    if metadata is None or metadata.producer_id != producer_id:
        return ErrorCode.INVALID_PRODUCER_ID_MAPPING
    if metadata.producer_epoch != producer_epoch:
        return ErrorCode.PRODUCER_FENCED
    if metadata.pending_transition_in_progress:
        return ErrorCode.CONCURRENT_TRANSACTIONS  # one transition at a time: retry later
    return ErrorCode.NONE


def prepare_add_partitions(
    metadata: TransactionMetadata | None,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
    now_ms: int,
) -> TxnTransitMetadata | ErrorCode:
    """AddPartitionsToTxn (and AddOffsetsToTxn, with the group's offsets partition).
    `metadata` None: the coordinator knows no such transactional id."""
    error = _check_producer(metadata, producer_id, producer_epoch)
    if error is not ErrorCode.NONE or metadata is None:
        return error
    added = frozenset(partitions)
    if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
        return ErrorCode.CONCURRENT_TRANSACTIONS  # the previous transaction is still ending
    if metadata.state is S.ONGOING and added <= metadata.topic_partitions:
        return ErrorCode.NONE  # nothing new: no write
    return metadata.prepare_add_partitions(added, now_ms)


def prepare_end_txn(
    metadata: TransactionMetadata | None,
    producer_id: int,
    producer_epoch: int,
    result: TransactionResult,
    now_ms: int,
) -> TxnTransitMetadata | ErrorCode:
    """EndTxn from the client. A retry of an end already decided is answered as Kafka does:
    NONE once it completed, CONCURRENT_TRANSACTIONS while its markers are being written, and
    INVALID_TXN_STATE for the other result (or for no transaction at all)."""
    error = _check_producer(metadata, producer_id, producer_epoch)
    if error is not ErrorCode.NONE or metadata is None:
        return error
    commit = result is TransactionResult.COMMIT
    match metadata.state:
        case S.ONGOING:
            target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            return metadata.prepare_abort_or_commit(target, now_ms)
        case S.COMPLETE_COMMIT | S.COMPLETE_ABORT:
            done = (metadata.state is S.COMPLETE_COMMIT) == commit
            return ErrorCode.NONE if done else ErrorCode.INVALID_TXN_STATE
        case S.PREPARE_COMMIT | S.PREPARE_ABORT:
            same = (metadata.state is S.PREPARE_COMMIT) == commit
            return ErrorCode.CONCURRENT_TRANSACTIONS if same else ErrorCode.INVALID_TXN_STATE
        case S.EMPTY:
            return ErrorCode.INVALID_TXN_STATE
        case _:
            raise IllegalTransactionTransition(
                f"{metadata.transactional_id}: EndTxn in state {metadata.state.kafka_name}"
            )


def prepare_complete_transaction(
    metadata: TransactionMetadata | None,
    producer_id: int,
    producer_epoch: int,
    result: TransactionResult,
    now_ms: int,
) -> TxnTransitMetadata | ErrorCode:
    """After the Prepare* record is written: the Complete* transit to write once the markers
    are (Kafka's checks before sending markers). Its pending state makes requests meanwhile
    answer CONCURRENT_TRANSACTIONS. `producer_epoch` is the written transit's (a fence's is
    bumped)."""
    error = _check_producer(metadata, producer_id, producer_epoch)
    if error is not ErrorCode.NONE or metadata is None:
        return error
    expected = S.PREPARE_COMMIT if result is TransactionResult.COMMIT else S.PREPARE_ABORT
    if metadata.state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
        raise IllegalTransactionTransition(
            f"{metadata.transactional_id}: markers in state {metadata.state.kafka_name}"
        )
    if metadata.state is not expected:
        return ErrorCode.INVALID_TXN_STATE
    return metadata.prepare_complete(now_ms)


# -- timeouts and expiry ---------------------------------------------------------------------------


def timed_out_transactions(
    metadatas: Iterable[TransactionMetadata], now_ms: int
) -> list[TimedOutTransaction]:
    """The ongoing transactions, with no transition pending, whose start + timeout < now."""
    return [
        TimedOutTransaction(m.transactional_id, m.producer_id, m.producer_epoch)
        for m in metadatas
        if m.state is S.ONGOING
        and not m.pending_transition_in_progress
        and m.txn_start_timestamp + m.txn_timeout_ms < now_ms
    ]


def prepare_timed_out_abort(
    metadata: TransactionMetadata, producer_id: int, now_ms: int
) -> TxnTransitMetadata | None:
    """The PrepareAbort to write for a timed-out transaction, with the epoch bumped so the
    producer that let it time out (a zombie, perhaps) is fenced; None when it changed since it
    was listed (another producer id, a transition pending, no longer ongoing)."""
    if (
        metadata.producer_id != producer_id
        or metadata.pending_transition_in_progress
        or metadata.state is not S.ONGOING
    ):
        return None
    metadata.prepare_fence_producer_epoch()
    return metadata.prepare_abort_after_fence(now_ms)


def is_transactional_id_expired(
    metadata: TransactionMetadata, now_ms: int, expiration_ms: int
) -> bool:
    """transactional.id.expiration.ms: no transaction running or ending, nothing pending, and
    no update for that long."""
    return (
        metadata.state in EXPIRABLE
        and not metadata.pending_transition_in_progress
        and metadata.txn_last_update_timestamp <= now_ms - expiration_ms
    )
