"""`TransactionShard`: the transaction coordinator for one `__transaction_state` partition this
broker leads (Kafka's TransactionCoordinator and TransactionStateManager, per partition).

One actor per led partition, started and stopped by the router (actors/transactions/
coordinator.py) as leadership moves, like the group coordinator's shards: loading, serving and
unloading one partition's transactional ids is one ordered stream with one owner.

* **Loading** (`on_start`, in a task of its own): every record of the partition below the high
  watermark seen when loading began (once the new leader's HW covers its epoch), later records
  overriding earlier ones, tombstones removing. Meanwhile `loading` is True and the router
  answers COORDINATOR_LOAD_IN_PROGRESS. A failed attempt is retried after a backoff. Once
  loaded, every transaction found in PrepareCommit or PrepareAbort has its markers sent again
  (the previous coordinator died between the decision and its completion): its end is decided
  and durable, so the markers are owed whatever happened since.
* **Serving** InitProducerId (transactional), AddPartitionsToTxn and EndTxn: each request's rule
  is a pure function of the id's `TransactionMetadata` (actors/transactions/rules.py) that
  answers an error or the transition to write; the transition is written to the partition with
  acks=all and applied to memory only once written (`complete_transition`), else dropped
  (`abort_transition`). The handler awaits its write, so transitions of this partition are
  written one at a time, in order.
* **Ending a transaction**: EndTxn writes PrepareCommit/PrepareAbort and answers the client; the
  Complete* transition is then pending (requests for the id get CONCURRENT_TRANSACTIONS), the
  markers go out in a task of their own (`MarkerSender`: WriteTxnMarkers to each partition's
  leader, retried until written), and when they are all written a `MarkersWritten` message comes
  back and the Complete* record is written.
* **Describing** (DescribeTransactions, ListTransactions): read-only snapshots of the ids'
  metadata (`TransactionDescription`), never a write; a Dead id (being expired) is not shown,
  as Kafka.
* **Timeouts**: every `transaction.abort.timed.out.transaction.cleanup.interval.ms` the ongoing
  transactions older than their timeout are aborted with the producer epoch bumped, so the
  producer that let them time out is fenced.
* **Unloading** (`stop()`): the requests already queued are served (their writes then fail if
  the partition is led elsewhere, which answers NOT_COORDINATOR), later ones get
  NOT_COORDINATOR from the router, and the state is dropped; marker tasks are cancelled (the next
  leader resends what is owed).

The coordinator epoch written into markers is the partition's leader epoch when this shard
loaded it (Kafka's), so markers from a deposed coordinator are fenced by the partitions.

A little over 500 lines: one actor's messages and the handlers that read or change its `txns`,
which they share; the rules themselves are already out, in rules.py and state.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, Protocol

from actors.partition_log import InternalTopicLog
from actors.transactions.config import TransactionConfig
from actors.transactions.rules import (
    ProducerIdAndEpoch,
    TransactionResult,
    needs_new_producer_id,
    prepare_add_partitions,
    prepare_complete_transaction,
    prepare_end_txn,
    prepare_init_producer_id,
    prepare_timed_out_abort,
    timed_out_transactions,
)
from actors.transactions.state import NO_TIMESTAMP, TransactionMetadata, TxnTransitMetadata
from runtime.actor import Actor, Ask, handles
from runtime.clock import Clock
from wire.errors import ErrorCode
from wire.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, CorruptRecordError
from wire.topic import TopicPartition
from wire.transaction_log import (
    TRANSACTION_STATE_TOPIC,
    TransactionLogError,
    TransactionState,
    build_transaction_batch,
    iter_transaction_records,
)

log = logging.getLogger(__name__)

LOAD_RETRY_BACKOFF_MS: Final = 100
LOAD_RETRY_BACKOFF_MAX_MS: Final = 1_000
# Kafka's answers for a failed write of the coordinator (TransactionStateManager's
# appendTransactionToLog): retriable ones send the client back to FindCoordinator or to retry.
_WRITE_ERRORS: Final = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
}


class MarkerSender(Protocol):
    """Writes a transaction's markers to its partitions' leaders (node/broker/txn_markers.py);
    returns once every one is written or can never be (the partition is gone)."""

    async def send(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        commit: bool,
        partitions: frozenset[TopicPartition],
    ) -> None: ...


@dataclass(frozen=True, slots=True)
class InitProducerId(Ask["InitAnswer"]):
    transactional_id: str
    txn_timeout_ms: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class InitAnswer:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class AddPartitions(Ask[ErrorCode]):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class EndTxn(Ask[ErrorCode]):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """One id's metadata as DescribeTransactions and ListTransactions show it, copied out."""

    transactional_id: str
    state: TransactionState
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    txn_start_timestamp: int  # -1: no transaction open
    topic_partitions: frozenset[TopicPartition]

    @classmethod
    def of(cls, m: TransactionMetadata) -> TransactionDescription:
        return cls(
            m.transactional_id,
            m.state,
            m.producer_id,
            m.producer_epoch,
            m.txn_timeout_ms,
            m.txn_start_timestamp,
            frozenset(m.topic_partitions),
        )


@dataclass(frozen=True, slots=True)
class DescribeTransaction(Ask[TransactionDescription | None]):
    """None: the id is unknown here (Kafka's TRANSACTIONAL_ID_NOT_FOUND)."""

    transactional_id: str


@dataclass(frozen=True, slots=True)
class ListTransactionStates(Ask[tuple[TransactionDescription, ...]]):
    """The ids matching every filter (Kafka's listTransactionStates): `states` None is no
    filter (an empty set matches nothing), `producer_ids` empty is none, and
    `duration_filter_ms` >= 0 keeps transactions open longer than that."""

    states: frozenset[TransactionState] | None = None
    producer_ids: frozenset[int] = frozenset()
    duration_filter_ms: int = -1

    def matches(self, m: TransactionMetadata, now_ms: int) -> bool:
        # Kafka's `now - start > duration`, except that an id with no start time (Empty) has
        # no transaction to be old: Kafka's formula would list it as open since 1970.
        start = m.txn_start_timestamp
        return (
            (self.states is None or m.state in self.states)
            and (not self.producer_ids or m.producer_id in self.producer_ids)
            and (
                self.duration_filter_ms < 0
                or (start != NO_TIMESTAMP and now_ms - start > self.duration_filter_ms)
            )
        )


@dataclass(frozen=True, slots=True)
class AbortTimedOut:
    """The timeout sweep's tick."""


@dataclass(frozen=True, slots=True)
class RetryCompletion:
    """A failed Complete* write's backoff ended: send the markers and complete again."""

    transactional_id: str


@dataclass(frozen=True, slots=True)
class MarkersWritten:
    """Every marker of the id's decided transaction is written: complete it."""

    transactional_id: str
    transit: TxnTransitMetadata


class TransactionShard(Actor):
    def __init__(
        self,
        partition: int,
        log_: InternalTopicLog,
        markers: MarkerSender,
        config: TransactionConfig,
        *,
        new_producer_id: Callable[[], Awaitable[int | ErrorCode]],
        coordinator_epoch: Callable[[int], int],
        clock: Clock,
    ) -> None:
        """`new_producer_id()`: a fresh producer id, or the error to answer when none can be
        had now (the controller's next block is late)."""
        super().__init__(f"txn-shard-{partition}", clock=clock)
        self.partition = partition
        self._log = log_
        self._markers = markers
        self._config = config
        self._new_producer_id = new_producer_id
        self._coordinator_epoch_of = coordinator_epoch
        self.coordinator_epoch = -1
        self.loading = True
        self.txns: dict[str, TransactionMetadata] = {}
        # Insertion-ordered (dicts as sets): the order they are closed or woken in is part of a
        # run, and a seeded simulation must replay it (a set of objects orders them by address).
        self._tasks: dict[asyncio.Task[None], None] = {}

    # -- loading and unloading -------------------------------------------------------------

    async def on_start(self) -> None:
        self._spawn(self._load_and_serve(), "load")

    def _spawn(self, coroutine: Awaitable[None], what: str) -> None:
        task = asyncio.ensure_future(coroutine)
        task.set_name(f"{self.name}-{what}")
        self._tasks[task] = None
        task.add_done_callback(lambda done: self._tasks.pop(done, None))

    async def _load_and_serve(self) -> None:
        backoff_ms = LOAD_RETRY_BACKOFF_MS
        while (error := await self._load_once()) is not ErrorCode.NONE:
            self.txns.clear()
            log.warning("%s: load failed (%s), retry in %d ms", self.name, error.name, backoff_ms)
            await self.clock.sleep(backoff_ms / 1000)
            backoff_ms = min(2 * backoff_ms, LOAD_RETRY_BACKOFF_MAX_MS)
        self.coordinator_epoch = self._coordinator_epoch_of(self.partition)
        self.loading = False
        log.info("%s: loaded %d transactional ids", self.name, len(self.txns))
        # Decided before the previous coordinator could complete them: their markers are owed.
        for metadata in list(self.txns.values()):
            if metadata.state in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT):
                self._send_markers(metadata)
        self._spawn(self._sweep_timeouts(), "timeouts")

    async def _load_once(self) -> ErrorCode:
        committed = await self._log.wait_committed(self.partition)
        if committed is not ErrorCode.NONE:
            return committed
        offset, end = 0, None
        while True:
            chunk = await self._log.read(self.partition, offset, self._config.load_buffer_size)
            if isinstance(chunk, ErrorCode):
                return chunk
            if end is None:
                end = chunk.high_watermark
            try:
                for record_offset, transactional_id, value in iter_transaction_records(
                    chunk.records
                ):
                    if record_offset >= end:
                        break
                    if value is None:
                        self.txns.pop(transactional_id, None)
                    else:
                        self.txns[transactional_id] = TransactionMetadata.from_log_value(
                            transactional_id, value
                        )
            except (TransactionLogError, CorruptRecordError) as exc:
                log.error("%s: unreadable record: %s", self.name, exc)
                return ErrorCode.CORRUPT_MESSAGE
            if chunk.next_offset <= offset or chunk.next_offset >= end:
                return ErrorCode.NONE
            offset = chunk.next_offset

    async def _sweep_timeouts(self) -> None:
        interval_s = self._config.abort_timed_out_transaction_cleanup_interval_ms / 1000
        while True:
            await self.clock.sleep(interval_s)
            with contextlib.suppress(Exception):
                self.try_tell(AbortTimedOut())

    async def on_stop(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.txns.clear()

    # -- writing ------------------------------------------------------------------------------

    async def _write(self, transactional_id: str, transit: TxnTransitMetadata) -> ErrorCode:
        """Write the transition; applied to memory when written, dropped otherwise."""
        metadata = self.txns[transactional_id]
        batch = build_transaction_batch(
            [(transactional_id, transit.to_log_value())], timestamp_ms=self.clock.wall_ms()
        )
        error = await self._log.append(self.partition, batch)
        if error is ErrorCode.NONE:
            metadata.complete_transition(transit)
            return ErrorCode.NONE
        metadata.abort_transition()
        log.warning("%s: %s: write failed: %s", self.name, transactional_id, error.name)
        return _WRITE_ERRORS.get(error, ErrorCode.UNKNOWN_SERVER_ERROR)

    # -- InitProducerId -----------------------------------------------------------------------

    @handles(InitProducerId)
    async def _init_producer_id(self, message: InitProducerId) -> InitAnswer:
        if not message.transactional_id:
            return InitAnswer(ErrorCode.INVALID_REQUEST)
        if message.txn_timeout_ms <= 0 or (
            message.txn_timeout_ms > self._config.transaction_max_timeout_ms
        ):
            return InitAnswer(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        expected = None
        if message.producer_id >= 0 or message.producer_epoch >= 0:
            if message.producer_id < 0 or message.producer_epoch < 0:
                return InitAnswer(ErrorCode.INVALID_REQUEST)
            expected = ProducerIdAndEpoch(message.producer_id, message.producer_epoch)
        now = self.clock.wall_ms()
        metadata = self.txns.get(message.transactional_id)
        if metadata is None:
            producer_id = await self._new_producer_id()
            if isinstance(producer_id, ErrorCode):
                return InitAnswer(producer_id)
            metadata = self.txns.setdefault(
                message.transactional_id,
                TransactionMetadata.new(
                    message.transactional_id, producer_id, message.txn_timeout_ms, now
                ),
            )
        new_id = None
        if needs_new_producer_id(metadata, expected):
            rotated = await self._new_producer_id()
            if isinstance(rotated, ErrorCode):
                return InitAnswer(rotated)
            new_id = rotated
        transit = prepare_init_producer_id(
            metadata,
            txn_timeout_ms=message.txn_timeout_ms,
            expected=expected,
            now_ms=now,
            new_producer_id=new_id,
        )
        if isinstance(transit, ErrorCode):
            return InitAnswer(transit)
        if transit.state is TransactionState.PREPARE_EPOCH_FENCE:
            # An ongoing transaction: abort it (with the epoch bumped) before the new producer
            # gets an epoch; the client retries meanwhile.
            abort = metadata.prepare_abort_after_fence(now)
            error = await self._write(message.transactional_id, abort)
            if error is ErrorCode.NONE:
                self._send_markers(metadata)
                return InitAnswer(ErrorCode.CONCURRENT_TRANSACTIONS)
            return InitAnswer(error)
        error = await self._write(message.transactional_id, transit)
        if error is not ErrorCode.NONE:
            return InitAnswer(error)
        return InitAnswer(ErrorCode.NONE, transit.producer_id, transit.producer_epoch)

    # -- AddPartitionsToTxn and EndTxn --------------------------------------------------------

    @handles(AddPartitions)
    async def _add_partitions(self, message: AddPartitions) -> ErrorCode:
        transit = prepare_add_partitions(
            self.txns.get(message.transactional_id),
            message.producer_id,
            message.producer_epoch,
            message.partitions,
            self.clock.wall_ms(),
        )
        if isinstance(transit, ErrorCode):
            return transit
        return await self._write(message.transactional_id, transit)

    @handles(EndTxn)
    async def _end_txn(self, message: EndTxn) -> ErrorCode:
        metadata = self.txns.get(message.transactional_id)
        transit = prepare_end_txn(
            metadata,
            message.producer_id,
            message.producer_epoch,
            TransactionResult(message.commit),
            self.clock.wall_ms(),
        )
        if isinstance(transit, ErrorCode):
            return transit
        error = await self._write(message.transactional_id, transit)
        if error is ErrorCode.NONE:
            assert metadata is not None
            self._send_markers(metadata)
        return error

    # -- DescribeTransactions and ListTransactions (read-only) ---------------------------------

    @handles(DescribeTransaction)
    def _describe(self, message: DescribeTransaction) -> TransactionDescription | None:
        metadata = self.txns.get(message.transactional_id)
        if metadata is None or metadata.state is TransactionState.DEAD:
            return None
        return TransactionDescription.of(metadata)

    @handles(ListTransactionStates)
    def _list(self, message: ListTransactionStates) -> tuple[TransactionDescription, ...]:
        now = self.clock.wall_ms()
        return tuple(
            TransactionDescription.of(metadata)
            for _, metadata in sorted(self.txns.items())
            if metadata.state is not TransactionState.DEAD and message.matches(metadata, now)
        )

    # -- markers and completion ---------------------------------------------------------------

    def _send_markers(self, metadata: TransactionMetadata) -> None:
        """The decided transaction's Complete* goes pending, its markers out in a task."""
        commit = metadata.state is TransactionState.PREPARE_COMMIT
        complete = prepare_complete_transaction(
            metadata,
            metadata.producer_id,
            metadata.producer_epoch,
            TransactionResult(commit),
            self.clock.wall_ms(),
        )
        if isinstance(complete, ErrorCode):
            log.error("%s: %s cannot complete: %s", self.name, metadata.transactional_id, complete)
            return
        partitions = frozenset(metadata.topic_partitions)

        async def send() -> None:
            await self._markers.send(
                metadata.producer_id,
                metadata.producer_epoch,
                self.coordinator_epoch,
                commit=commit,
                partitions=partitions,
            )
            await self.tell(MarkersWritten(metadata.transactional_id, complete))

        self._spawn(send(), f"markers-{metadata.transactional_id}")

    @handles(MarkersWritten)
    async def _markers_written(self, message: MarkersWritten) -> None:
        metadata = self.txns.get(message.transactional_id)
        if metadata is None or metadata.pending is not message.transit:
            return
        error = await self._write(message.transactional_id, message.transit)
        if error is not ErrorCode.NONE:
            # The markers are written; the record saying so is not. Try again after a backoff:
            # the Prepare* record is still the durable state, and resending markers is harmless.
            log.warning("%s: completing %s failed: %s", self.name, message.transactional_id, error)
            self._spawn(self._retry_completion(metadata), f"retry-{message.transactional_id}")

    async def _retry_completion(self, metadata: TransactionMetadata) -> None:
        await self.clock.sleep(LOAD_RETRY_BACKOFF_MS / 1000)
        await self.tell(RetryCompletion(metadata.transactional_id))

    @handles(RetryCompletion)
    def _retry_completion_now(self, message: RetryCompletion) -> None:
        metadata = self.txns.get(message.transactional_id)
        if (
            metadata is not None
            and metadata.state
            in (
                TransactionState.PREPARE_COMMIT,
                TransactionState.PREPARE_ABORT,
            )
            and not metadata.pending_transition_in_progress
        ):
            self._send_markers(metadata)

    @handles(AbortTimedOut)
    async def _abort_timed_out(self, message: AbortTimedOut) -> None:
        now = self.clock.wall_ms()
        for expired in timed_out_transactions(self.txns.values(), now):
            metadata = self.txns.get(expired.transactional_id)
            if metadata is None:
                continue
            transit = prepare_timed_out_abort(metadata, expired.producer_id, now)
            if transit is None:
                continue
            log.info(
                "%s: %s timed out after %d ms: aborting",
                self.name,
                expired.transactional_id,
                metadata.txn_timeout_ms,
            )
            if await self._write(expired.transactional_id, transit) is ErrorCode.NONE:
                self._send_markers(metadata)


__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "AddPartitions",
    "DescribeTransaction",
    "EndTxn",
    "InitAnswer",
    "InitProducerId",
    "ListTransactionStates",
    "MarkerSender",
    "TransactionDescription",
    "TransactionShard",
]
