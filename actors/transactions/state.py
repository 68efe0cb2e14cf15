"""`TransactionMetadata`: one transactional id's state, and the only way it changes.

This is the model the transaction coordinator's actor owns (one object per transactional id it
coordinates); only that actor's task touches it, so it needs no lock (Kafka's per-metadata lock
disappears). It does no IO and reads no clock: times come in as arguments.

States (Kafka's TransactionState; `wire.transaction_log.TransactionState` holds their ids, which
are the status byte of the log record) and the states each may be entered from (Kafka's
validPreviousStates), as `ENTERED_FROM`:

    Empty              <- Empty, CompleteCommit, CompleteAbort         (InitProducerId)
    Ongoing            <- Ongoing, Empty, CompleteCommit, CompleteAbort (AddPartitionsToTxn)
    PrepareCommit      <- Ongoing                                      (EndTxn commit)
    PrepareAbort       <- Ongoing, PrepareEpochFence                   (EndTxn abort, fencing)
    CompleteCommit     <- PrepareCommit                                (markers written)
    CompleteAbort      <- PrepareAbort                                 (markers written)
    Dead               <- Empty, CompleteAbort, CompleteCommit          (expired: tombstone)
    PrepareEpochFence  <- Ongoing                                      (never written)

A change is two steps, as Kafka's prepareXxx / completeTransitionTo: a `prepare_*` method checks
the move and returns the `TxnTransitMetadata` to write to `__transaction_state`, holding it as the
pending transition (Kafka's pendingState: only one at a time, requests meanwhile are answered
CONCURRENT_TRANSACTIONS by `rules.py`); once the write is replicated `complete_transition(transit)`
makes it the state, and when it fails `abort_transition()` drops it. A move the table forbids, a
second pending transition, or completing something other than the pending transit raise
`IllegalTransactionTransition`: those are coordinator bugs, never client errors (client errors are
`ErrorCode` values returned by `rules.py`).

Fencing an ongoing transaction (a new producer's InitProducerId, or the transaction timing out)
bumps the epoch and aborts: `prepare_fence_producer_epoch()` holds a PrepareEpochFence transit
(epoch + 1, never written), and `prepare_abort_after_fence()` turns it into the PrepareAbort
transit, with that epoch, that is written. Unlike Kafka, the bumped epoch is not put into the
metadata before the write (Kafka does, then remembers `hasFailedEpochFence` so a failed write is
not bumped twice): here a failed write leaves the epoch as it was, and the next fence bumps it to
the same value, so the flag is not needed.

`complete_transition` copies the whole transit into the metadata, so what the coordinator holds is
what its log says (Kafka leaves an Empty transaction's start timestamp at the previous
transaction's in memory while its log says -1; here both say -1).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from wire.errors import ErrorCode
from wire.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID
from wire.topic import TopicPartition
from wire.transaction_log import (
    TransactionLogError,
    TransactionLogValue,
    TransactionState,
    TxnPartitions,
)

S = TransactionState
NO_TIMESTAMP: Final = -1
MAX_PRODUCER_EPOCH: Final = 2**15 - 1  # Java's Short.MAX_VALUE: epochs are int16 on the wire

ENTERED_FROM: Final[Mapping[TransactionState, frozenset[TransactionState]]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

# States whose metadata may expire (Kafka's isExpirationAllowed).
EXPIRABLE: Final = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class IllegalTransactionTransition(RuntimeError):
    """The coordinator tried a move the state machine forbids: a bug, not a client error."""


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """Kafka's isEpochExhausted: a client never gets Short.MAX_VALUE, so the coordinator can
    always fence the producer once more by bumping to it."""
    return producer_epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The state a transactional id moves to: what is written to `__transaction_state`.
    `previous_producer_id` is Kafka's lastProducerId: the id the last InitProducerId replaced
    (or kept), which recognises a retried InitProducerId after a producer id rotation."""

    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int

    def to_log_value(self) -> TransactionLogValue:
        """The record value, as Kafka writes it (v0: no previous producer id, no last epoch;
        null partitions for Empty; topics and partitions sorted so the bytes are stable)."""
        if self.state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
            raise IllegalTransactionTransition(f"{self.state.kafka_name} is never written")
        if self.state is S.EMPTY and self.topic_partitions:
            raise IllegalTransactionTransition(f"an Empty transaction with partitions: {self}")
        partitions: tuple[TxnPartitions, ...] | None = None
        if self.state is not S.EMPTY:
            by_topic: dict[str, list[int]] = {}
            for tp in sorted(self.topic_partitions):
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            partitions = tuple(TxnPartitions(t, tuple(ids)) for t, ids in by_topic.items())
        return TransactionLogValue(
            producer_id=self.producer_id,
            producer_epoch=self.producer_epoch,
            transaction_timeout_ms=self.txn_timeout_ms,
            transaction_status=self.state,
            transaction_partitions=partitions,
            transaction_last_update_timestamp_ms=self.txn_last_update_timestamp,
            transaction_start_timestamp_ms=self.txn_start_timestamp,
        )


@dataclass(slots=True, eq=False)
class TransactionMetadata:
    """One transactional id's state (Kafka's TransactionMetadata). Change it only through the
    prepare/complete methods; read the fields freely."""

    transactional_id: str
    producer_id: int
    txn_timeout_ms: int
    previous_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    state: TransactionState = S.EMPTY
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = NO_TIMESTAMP
    txn_last_update_timestamp: int = NO_TIMESTAMP
    pending: TxnTransitMetadata | None = None  # the transition being written, if any
    # Whether the pending PrepareAbort carries a fence's epoch bump.
    _fencing: bool = field(default=False, init=False, repr=False)

    @classmethod
    def new(
        cls, transactional_id: str, producer_id: int, txn_timeout_ms: int, now_ms: int
    ) -> TransactionMetadata:
        """A transactional id seen for the first time: Empty, no epoch yet (the InitProducerId
        that created it bumps it to 0)."""
        return cls(transactional_id, producer_id, txn_timeout_ms, txn_last_update_timestamp=now_ms)

    @classmethod
    def from_log_value(
        cls, transactional_id: str, value: TransactionLogValue
    ) -> TransactionMetadata:
        """The metadata a loaded record describes (Kafka's loader: no last epoch; an Empty
        record's partitions ignored). TransactionLogError for a state that is never written."""
        state = value.transaction_status
        if state in (S.DEAD, S.PREPARE_EPOCH_FENCE):
            raise TransactionLogError(
                f"transactional id {transactional_id!r}: state {state.kafka_name} is never written"
            )
        partitions: set[TopicPartition] = set()
        if state is not S.EMPTY:
            try:
                partitions = {
                    TopicPartition(entry.topic, partition)
                    for entry in value.transaction_partitions or ()
                    for partition in entry.partition_ids
                }
            except ValueError as exc:
                raise TransactionLogError(f"transactional id {transactional_id!r}: {exc}") from None
        return cls(
            transactional_id,
            producer_id=value.producer_id,
            txn_timeout_ms=value.transaction_timeout_ms,
            previous_producer_id=value.previous_producer_id,
            producer_epoch=value.producer_epoch,
            state=state,
            topic_partitions=partitions,
            txn_start_timestamp=value.transaction_start_timestamp_ms,
            txn_last_update_timestamp=value.transaction_last_update_timestamp_ms,
        )

    # -- reading ---------------------------------------------------------------------------------

    @property
    def pending_state(self) -> TransactionState | None:
        return None if self.pending is None else self.pending.state

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    def current(self) -> TxnTransitMetadata:
        """The present state as a transit (Kafka's prepareNoTransit), without preparing it."""
        return TxnTransitMetadata(
            producer_id=self.producer_id,
            previous_producer_id=self.previous_producer_id,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=self.last_producer_epoch,
            txn_timeout_ms=self.txn_timeout_ms,
            state=self.state,
            topic_partitions=frozenset(self.topic_partitions),
            txn_start_timestamp=self.txn_start_timestamp,
            txn_last_update_timestamp=self.txn_last_update_timestamp,
        )

    # -- preparing -------------------------------------------------------------------------------

    def _prepare(
        self, transit: TxnTransitMetadata, *, entered_from: TransactionState | None = None
    ) -> TxnTransitMetadata:
        """Kafka's prepareTransitionTo: check the move and hold `transit` as pending."""
        if self.pending is not None:
            raise IllegalTransactionTransition(
                f"{self.transactional_id}: preparing {transit.state.kafka_name} while "
                f"{self.pending.state.kafka_name} is pending"
            )
        source = self.state if entered_from is None else entered_from
        if source not in ENTERED_FROM[transit.state]:
            raise IllegalTransactionTransition(
                f"{self.transactional_id}: {source.kafka_name} -> {transit.state.kafka_name}"
            )
        if transit.producer_id < 0:
            raise IllegalTransactionTransition(f"illegal producer id {transit.producer_id}")
        epoch = transit.producer_epoch
        if transit.state is not S.DEAD and not 0 <= epoch <= MAX_PRODUCER_EPOCH:
            raise IllegalTransactionTransition(f"illegal producer epoch {epoch}")
        if transit.state is S.EMPTY:
            # Kafka's lastProducerId: InitProducerId sets it to the id it replaces (or keeps);
            # every other move leaves it.
            transit = replace(transit, previous_producer_id=self.producer_id)
        self.pending = transit
        return transit

    def prepare_increment_producer_epoch(
        self, txn_timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata | ErrorCode:
        """InitProducerId on a finished transaction: Empty with the next epoch, or (KIP-360,
        `expected_epoch` given) the same answer again for a retry of the last InitProducerId,
        or PRODUCER_FENCED for an epoch that is neither the current nor the last one."""
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            # A retry of a call that succeeded: answer it again, without bumping. A newer
            # producer's InitProducerId would have reset the last epoch to -1.
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.PRODUCER_FENCED
        if epoch > MAX_PRODUCER_EPOCH - 1:
            # Kafka raises as soon as the epoch is exhausted; refusing only a real bump past the
            # limit lets a retry (no bump) still be answered. Callers rotate the id first.
            raise IllegalTransactionTransition(
                f"{self.transactional_id}: no producer epoch left for producer {self.producer_id}"
            )
        return self._prepare(
            replace(
                self.current(),
                state=S.EMPTY,
                producer_epoch=epoch,
                last_producer_epoch=last_epoch,
                txn_timeout_ms=txn_timeout_ms,
                topic_partitions=frozenset(),
                txn_start_timestamp=NO_TIMESTAMP,
                txn_last_update_timestamp=now_ms,
            )
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, txn_timeout_ms: int, now_ms: int, *, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """Empty under a new producer id at epoch 0, once the epoch is exhausted. With
        `record_last_epoch` (KIP-360: the producer sent its id and epoch) the old epoch is kept as
        the last one, so a retry of this call is recognised."""
        if self.state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransactionTransition(
                f"{self.transactional_id}: rotating the producer id during a transaction"
            )
        return self._prepare(
            replace(
                self.current(),
                state=S.EMPTY,
                producer_id=new_producer_id,
                producer_epoch=0,
                last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                txn_timeout_ms=txn_timeout_ms,
                topic_partitions=frozenset(),
                txn_start_timestamp=NO_TIMESTAMP,
                txn_last_update_timestamp=now_ms,
            )
        )

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Hold a PrepareEpochFence with the next epoch (never written; see the module doc)."""
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise IllegalTransactionTransition(
                f"{self.transactional_id}: fencing epoch {self.producer_epoch} would overflow"
            )
        return self._prepare(
            replace(
                self.current(),
                state=S.PREPARE_EPOCH_FENCE,
                producer_epoch=self.producer_epoch + 1,
                last_producer_epoch=NO_PRODUCER_EPOCH,
            )
        )

    def prepare_abort_after_fence(self, now_ms: int) -> TxnTransitMetadata:
        """Turn the pending PrepareEpochFence into the PrepareAbort, with the fenced epoch, to
        write. Call it in the same mailbox turn as `prepare_fence_producer_epoch`."""
        fence = self.pending
        if fence is None or fence.state is not S.PREPARE_EPOCH_FENCE:
            raise IllegalTransactionTransition(
                f"{self.transactional_id}: aborting after a fence that is not pending"
            )
        self.pending = None
        transit = self._prepare(
            replace(fence, state=S.PREPARE_ABORT, txn_last_update_timestamp=now_ms),
            entered_from=S.PREPARE_EPOCH_FENCE,
        )
        self._fencing = True
        return transit

    def prepare_add_partitions(
        self, partitions: Iterable[TopicPartition], now_ms: int
    ) -> TxnTransitMetadata:
        """Ongoing with these partitions too; a new transaction starts now."""
        starts = self.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        return self._prepare(
            replace(
                self.current(),
                state=S.ONGOING,
                topic_partitions=frozenset(self.topic_partitions.union(partitions)),
                txn_start_timestamp=now_ms if starts else self.txn_start_timestamp,
                txn_last_update_timestamp=now_ms,
            )
        )

    def prepare_abort_or_commit(self, state: TransactionState, now_ms: int) -> TxnTransitMetadata:
        if state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransactionTransition(f"{state.kafka_name} is not an end of a transaction")
        return self._prepare(replace(self.current(), state=state, txn_last_update_timestamp=now_ms))

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        """CompleteCommit or CompleteAbort, once every partition has its marker."""
        done = S.COMPLETE_COMMIT if self.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._prepare(
            replace(
                self.current(),
                state=done,
                topic_partitions=frozenset(),
                txn_last_update_timestamp=now_ms,
            )
        )

    def prepare_dead(self) -> TxnTransitMetadata:
        """Dead, for an expired id: its tombstone is written, and on success the coordinator
        drops the metadata (never `complete_transition`)."""
        return self._prepare(replace(self.current(), state=S.DEAD, topic_partitions=frozenset()))

    def remove_partition(self, tp: TopicPartition) -> None:
        """A partition's marker is written (Kafka's removePartition): only while preparing."""
        if self.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            raise IllegalTransactionTransition(
                f"{self.transactional_id}: removing {tp} in state {self.state.kafka_name}"
            )
        self.topic_partitions.discard(tp)

    # -- completing ------------------------------------------------------------------------------

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """The pending transit is in the log: make it the state (Kafka's completeTransitionTo,
        with its consistency checks, which here catch a metadata changed while pending)."""
        if self.pending is None or transit != self.pending:
            raise IllegalTransactionTransition(
                f"{self.transactional_id}: completing {transit}, pending {self.pending}"
            )
        if not self._consistent(transit):
            raise IllegalTransactionTransition(
                f"{self.transactional_id}: {transit} does not follow {self.current()}"
            )
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.previous_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending = None
        self._fencing = False

    def abort_transition(self) -> None:
        """The write failed: forget the pending transit (the state stays as it was)."""
        self.pending = None
        self._fencing = False

    def _consistent(self, transit: TxnTransitMetadata) -> bool:
        same_producer = (
            transit.producer_id == self.producer_id
            and transit.producer_epoch == self.producer_epoch
        )
        same_timeout = transit.txn_timeout_ms == self.txn_timeout_ms
        match transit.state:
            case S.EMPTY:
                bumped = transit.producer_epoch == self.producer_epoch + 1 or (
                    transit.producer_epoch == 0 and transit.producer_id != self.producer_id
                )
                return (
                    (transit.producer_epoch == self.producer_epoch or bumped)
                    and not transit.topic_partitions
                    and transit.txn_start_timestamp == NO_TIMESTAMP
                )
            case S.ONGOING:
                return (
                    same_producer
                    and same_timeout
                    and self.topic_partitions <= transit.topic_partitions
                )
            case S.PREPARE_COMMIT | S.PREPARE_ABORT:
                fenced = (
                    self._fencing
                    and transit.producer_id == self.producer_id
                    and transit.producer_epoch == self.producer_epoch + 1
                )
                return (
                    (same_producer or fenced)
                    and same_timeout
                    and self.topic_partitions == transit.topic_partitions
                    and self.txn_start_timestamp == transit.txn_start_timestamp
                )
            case S.COMPLETE_COMMIT | S.COMPLETE_ABORT:
                return (
                    same_producer and same_timeout and transit.txn_start_timestamp != NO_TIMESTAMP
                )
            case S.DEAD:
                raise IllegalTransactionTransition(
                    f"{self.transactional_id}: an expired id is dropped once its tombstone is "
                    "written, never completed to Dead"
                )
            case _:  # PrepareEpochFence: turned into a PrepareAbort, never written
                return False
