"""The transactional producer's state and its conversation with the coordinators (the
transactional part of Kafka's `TransactionManager`; the idempotent part is client/idempotence.py).

    producer = Producer(client, config=ProducerConfig(transactional_id="payments-1"))
    await producer.init_transactions()          # InitProducerId(transactional id): id and epoch
    producer.begin_transaction()                # local only
    await producer.send("out", key, value)      # AddPartitionsToTxn before the partition's batch
    await producer.send_offsets_to_transaction({tp: 42}, "g")  # AddOffsetsToTxn, TxnOffsetCommit
    await producer.commit_transaction()         # flush, then EndTxn(commit)

State. Kafka's states and transitions, as a table (`_VALID_SOURCES`, checked by `transition`):

    UNINITIALIZED --init_transactions--> INITIALIZING --InitProducerId--> READY
    READY --begin_transaction--> IN_TRANSACTION
    IN_TRANSACTION --commit--> COMMITTING_TRANSACTION --EndTxn--> READY
    IN_TRANSACTION | ABORTABLE_ERROR --abort--> ABORTING_TRANSACTION --EndTxn--> READY
    IN_TRANSACTION | COMMITTING_TRANSACTION --a record or request failed--> ABORTABLE_ERROR
    any --fenced, or an error nothing can cure--> FATAL_ERROR (final)

A call the state does not allow raises `TransactionStateError` and changes nothing; in
ABORTABLE_ERROR everything but `abort_transaction()` raises `TransactionAbortableError` (with the
first failure as its cause); in FATAL_ERROR everything raises the fatal error. A call that ran
out of time (`DeliveryTimeoutError`) leaves the state where it was, so calling it again resumes:
EndTxn and InitProducerId are safe to repeat (the coordinator answers a repeat of a decided end
NONE, or CONCURRENT_TRANSACTIONS while its markers are written, which is retried).

Errors. Each answer is classified per API (`classify`, Kafka's handlers' rules):
NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE (and a lost or refused connection) look the
coordinator up again with FindCoordinator and retry; COORDINATOR_LOAD_IN_PROGRESS and
CONCURRENT_TRANSACTIONS retry; all after the producer's retry.backoff.ms (exponential up to
retry.backoff.max.ms), each attempt bounded by request.timeout.ms and the whole call by
delivery.timeout.ms. PRODUCER_FENCED and INVALID_PRODUCER_EPOCH mean a newer instance exists:
fatal, `ProducerFencedError`. The codes Kafka treats as abortable (authorization failures of a
topic or group, a coordinator that lost the producer id, a group member fenced) make the
transaction abortable; anything else is fatal. A failed record (any batch of the transaction)
makes it abortable too; a record answered with a fencing code is fatal.

Partitions. `send()` adds its partition to the pending set; the producer's sender starts one
AddPartitionsToTxn at a time for the pending partitions (`poll_add_partitions`) and drains a
partition's batches only once it is in the transaction (`is_partition_added`). If that request
fails or times out, the transaction becomes abortable and the partitions' records are failed.
(Kafka retries a transactional request until it is answered; here each is bounded by
delivery.timeout.ms, so an AddPartitionsToTxn that timed out may have reached the coordinator
unnoticed: such a transaction is then ended by the coordinator's transaction.timeout.ms.)

Aborting. In ABORTABLE_ERROR and ABORTING_TRANSACTION the sender fails every batch that was never
sent (`abort_error()`) and still sends a batch that was (it holds a sequence number: resending
it keeps the partition's sequences gap-free). `abort_transaction()` waits for those, sends
EndTxn(abort) if anything joined the transaction, and — if a batch with a sequence failed, so the
broker's sequence may differ from ours — bumps the epoch with InitProducerId(transactional id,
producer id, epoch) (KIP-360), after which every partition restarts at sequence 0. Sequence
errors inside a transaction are therefore not repaired on the spot as an idempotent producer
does (idempotence.py), but through the abort.

Owned by one producer and touched only from its event loop (the producer's calls and sender, and
this manager's AddPartitionsToTxn task, each between awaits): no locks. Its I/O is the requests
to the coordinators, made through the producer's client.

Size: over the ~500-line guide, because the state table, the per-API error table and the manager
that drives both are one state machine and read best together; the hooks into the producer's
batch lifecycle are in producer.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from client.client import Client
from client.config import ProducerConfig
from client.errors import (
    ClientClosedError,
    DeliveryTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionStateError,
)
from client.idempotence import NO_PRODUCER_ID_AND_EPOCH, IdempotenceManager, ProducerIdAndEpoch
from runtime.clock import NS_PER_MS
from runtime.net.backoff import ExponentialBackoff
from runtime.net.transport import Address
from wire.errors import ErrorCode, KafkaError
from wire.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
    ApiKey,
    EndTxnRequest,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)
from wire.messages.base import Request, Response
from wire.messages.groups import COORDINATOR_GROUP, COORDINATOR_TRANSACTION
from wire.topic import TopicPartition

_log = logging.getLogger(__name__)


class TransactionState(enum.Enum):
    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING_TRANSACTION = "CommittingTransaction"
    ABORTING_TRANSACTION = "AbortingTransaction"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


S = TransactionState

# Each state and the states it may be entered from (Kafka's State.isTransitionValid).
_VALID_SOURCES: Final[Mapping[TransactionState, frozenset[TransactionState]]] = {
    S.UNINITIALIZED: frozenset(),
    S.INITIALIZING: frozenset({S.UNINITIALIZED}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR}),
    S.FATAL_ERROR: frozenset(TransactionState),
}


def transition(current: TransactionState, target: TransactionState) -> TransactionState:
    """`target` if the table allows moving there from `current`; else TransactionStateError."""
    if current not in _VALID_SOURCES[target]:
        raise TransactionStateError(f"invalid transition from {current.value} to {target.value}")
    return target


class ErrorClass(enum.Enum):
    """What an answer's error code means for the transactional producer."""

    NONE = enum.auto()
    RETRY = enum.auto()  # send the same request again after a backoff
    FIND_COORDINATOR = enum.auto()  # look the coordinator up again, then retry
    FENCED = enum.auto()  # fatal: a newer instance of the producer exists
    ABORTABLE = enum.auto()  # the open transaction must be aborted
    FATAL = enum.auto()  # nothing can cure it: the producer must be closed


C = ErrorClass
# Codes every transactional API shares; anything found in neither table is fatal.
_COMMON: Final[Mapping[ErrorCode, ErrorClass]] = {
    ErrorCode.NONE: C.NONE,
    ErrorCode.NOT_COORDINATOR: C.FIND_COORDINATOR,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: C.FIND_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: C.RETRY,
    ErrorCode.CONCURRENT_TRANSACTIONS: C.RETRY,
    ErrorCode.PRODUCER_FENCED: C.FENCED,
    ErrorCode.INVALID_PRODUCER_EPOCH: C.FENCED,
    ErrorCode.TRANSACTION_ABORTABLE: C.ABORTABLE,
}
# The coordinator no longer knows the producer id: abort, then bump the epoch (KIP-360).
_LOST_PRODUCER: Final[Mapping[ErrorCode, ErrorClass]] = {
    ErrorCode.UNKNOWN_PRODUCER_ID: C.ABORTABLE,
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: C.ABORTABLE,
}
_BY_API: Final[Mapping[ApiKey, Mapping[ErrorCode, ErrorClass]]] = {
    ApiKey.FIND_COORDINATOR: {
        # FindCoordinator goes to any broker: there is no coordinator to look up again.
        ErrorCode.COORDINATOR_NOT_AVAILABLE: C.RETRY,
        ErrorCode.NOT_COORDINATOR: C.RETRY,
        ErrorCode.GROUP_AUTHORIZATION_FAILED: C.ABORTABLE,
    },
    ApiKey.INIT_PRODUCER_ID: {},
    ApiKey.ADD_PARTITIONS_TO_TXN: {
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: C.RETRY,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED: C.ABORTABLE,
        **_LOST_PRODUCER,
    },
    ApiKey.ADD_OFFSETS_TO_TXN: {
        ErrorCode.GROUP_AUTHORIZATION_FAILED: C.ABORTABLE,
        **_LOST_PRODUCER,
    },
    ApiKey.TXN_OFFSET_COMMIT: {
        ErrorCode.REQUEST_TIMED_OUT: C.FIND_COORDINATOR,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: C.RETRY,
        ErrorCode.UNKNOWN_MEMBER_ID: C.ABORTABLE,
        ErrorCode.ILLEGAL_GENERATION: C.ABORTABLE,
        ErrorCode.FENCED_INSTANCE_ID: C.ABORTABLE,
        ErrorCode.GROUP_AUTHORIZATION_FAILED: C.ABORTABLE,
        **_LOST_PRODUCER,
    },
    ApiKey.END_TXN: dict(_LOST_PRODUCER),
}


def classify(api: ApiKey, code: ErrorCode) -> ErrorClass:
    """How the transactional producer treats `code` in an answer to `api`."""
    return _BY_API[api].get(code) or _COMMON.get(code, C.FATAL)


@dataclass(frozen=True, slots=True)
class CoordinatorNode:
    node_id: int
    address: Address


async def find_coordinator(
    client: Client, key_type: int, key: str, *, timeout_ms: float
) -> CoordinatorNode:
    """One FindCoordinator attempt at any reachable broker for a group (`COORDINATOR_GROUP`) or a
    transactional id (`COORDINATOR_TRANSACTION`); raises `KafkaError` for an error code, or the
    client's connection errors."""
    request = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[key])
    response = await client.send_any(request, timeout_ms=timeout_ms)
    if not isinstance(response, FindCoordinatorResponse):
        raise TypeError(f"FindCoordinator answered with {type(response).__name__}")
    if response.error_code != ErrorCode.NONE:
        raise KafkaError(response.error_code, f"FindCoordinator({key!r})")
    found = next((c for c in response.coordinators if c.key == key), None)
    if found is None:
        raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"no answer for {key!r}")
    if found.error_code != ErrorCode.NONE:
        raise KafkaError(found.error_code, found.error_message or f"FindCoordinator({key!r})")
    return CoordinatorNode(found.node_id, Address(found.host, found.port))


_Attempt = tuple[ErrorClass, BaseException | None, Response | None]


class TransactionManager:
    def __init__(
        self,
        client: Client,
        idempotence: IdempotenceManager,
        *,
        config: ProducerConfig,
        retry_backoff: ExponentialBackoff,
        rng: random.Random,
        wakeup: Callable[[], None],
    ) -> None:
        assert config.transactional_id is not None, "a transaction manager needs an id"
        self.transactional_id: str = config.transactional_id
        self._client = client
        self._clock = client.clock
        self._idempotence = idempotence
        self._config = config
        self._retry_backoff = retry_backoff
        self._rng = rng
        self._wakeup = wakeup  # the sender's: partitions were added, or the state changed
        self.state = S.UNINITIALIZED
        # Insertion-ordered dicts as sets: a seeded simulation replays their order.
        self._partitions: dict[TopicPartition, None] = {}  # in the transaction
        self._pending: dict[TopicPartition, None] = {}  # to add with the next request
        self._adding: dict[TopicPartition, None] = {}  # in the request under way
        self._add_task: asyncio.Task[None] | None = None
        self._coordinators: dict[tuple[int, str], CoordinatorNode] = {}
        # Whether the coordinator has the transaction (a partition or a group joined it): only
        # then is EndTxn sent, as the coordinator answers an empty one INVALID_TXN_STATE.
        self.transaction_started = False
        self.epoch_bump_required = False
        self.last_error: BaseException | None = None  # why the transaction is abortable
        self.fatal_error: Exception | None = None
        self._operation: str | None = None

    # -- state ------------------------------------------------------------------------------

    def _transition(self, target: TransactionState) -> None:
        _log.debug("%s: %s -> %s", self.transactional_id, self.state.value, target.value)
        self.state = transition(self.state, target)

    @property
    def has_open_transaction(self) -> bool:
        """A transaction is open and no call is under way (what `close()` aborts)."""
        open_states = (S.IN_TRANSACTION, S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION)
        return self.state in open_states and self._operation is None

    @property
    def aborting_batches(self) -> bool:
        """Whether batches never sent must be failed instead (see the module docstring)."""
        return self.state in (S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION)

    def abort_error(self) -> Exception:
        """The error for a record failed because its transaction cannot commit."""
        if self.state is S.ABORTABLE_ERROR:
            error = TransactionAbortedError(
                f"{self.transactional_id}: the transaction is abortable ({self.last_error})"
            )
            error.__cause__ = self.last_error
            return error
        return TransactionAbortedError(f"{self.transactional_id}: the transaction was aborted")

    def _check(self, call: str, *allowed: TransactionState) -> None:
        """Raise unless the state is one of `allowed`: the fatal error, the abortable error, or
        TransactionStateError."""
        if self.fatal_error is not None:
            raise self.fatal_error
        if self.state in allowed:
            return
        if self.state is S.ABORTABLE_ERROR:
            raise self._abortable_error(call)
        raise TransactionStateError(
            f"{call}() is not allowed in state {self.state.value} "
            f"(transactional id {self.transactional_id!r})"
        )

    def _abortable_error(self, call: str | None = None) -> TransactionAbortableError:
        prefix = "" if call is None else f"{call}(): "
        error = TransactionAbortableError(
            f"{prefix}the transaction of {self.transactional_id!r} must be aborted: "
            f"{self.last_error}"
        )
        error.__cause__ = self.last_error
        return error

    @contextlib.contextmanager
    def _running(self, call: str) -> Iterator[None]:
        """One public call at a time: their requests to the coordinator must not interleave."""
        if self._operation is not None:
            raise TransactionStateError(f"{call}() while {self._operation}() is under way")
        self._operation = call
        try:
            yield
        finally:
            self._operation = None

    def _to_fatal(self, error: Exception) -> Exception:
        if self.fatal_error is None:
            _log.warning("%s: fatal error: %s", self.transactional_id, error)
            self.fatal_error = error
            self._transition(S.FATAL_ERROR)
            self._idempotence.fail(error)  # the sender fails every queued record with it
            self._wakeup()
        return self.fatal_error

    def fence(self, error: KafkaError) -> Exception:
        """A broker or coordinator answered PRODUCER_FENCED or INVALID_PRODUCER_EPOCH."""
        self._idempotence.fence(error)
        fatal = self._idempotence.fatal_error
        assert fatal is not None
        return self._to_fatal(fatal)

    def _on_abortable(self, error: BaseException) -> Exception:
        """The open transaction cannot commit any more. While aborting it the error is only
        raised (the abort decides what it means); outside a transaction it is fatal."""
        if self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR):
            if self.last_error is None:
                self.last_error = error
            self._transition(S.ABORTABLE_ERROR)
            self._wakeup()  # the sender fails the records never sent
            return self._abortable_error()
        if self.state is S.ABORTING_TRANSACTION:
            abortable = TransactionAbortableError(f"while aborting: {error}")
            abortable.__cause__ = error
            return abortable
        fatal = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"in state {self.state.value}: {error}")
        fatal.__cause__ = error
        return self._to_fatal(fatal)

    # -- hooks of the producer --------------------------------------------------------------

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        """`send()` to `tp`: allowed only in a transaction; the partition joins it before its
        first batch is sent."""
        self._check("send", S.IN_TRANSACTION)
        if tp not in self._partitions and tp not in self._adding:
            self._pending[tp] = None

    def is_partition_added(self, tp: TopicPartition) -> bool:
        return tp in self._partitions

    def poll_add_partitions(self) -> None:
        """Called by the sender: start AddPartitionsToTxn for the pending partitions, unless
        one is under way."""
        adding = self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION)
        if self._add_task is not None or not self._pending or not adding:
            return
        self._adding, self._pending = self._pending, {}
        self._add_task = asyncio.create_task(
            self._add_partitions(list(self._adding)), name="producer AddPartitionsToTxn"
        )

    def batch_failed(self, has_sequence: bool, error: BaseException) -> None:
        """A batch of the transaction failed for good (the producer fails its records)."""
        if has_sequence:
            # Rejected or timed out after taking a sequence: the broker's next expected
            # sequence is unknown; the abort bumps the epoch so every partition restarts at 0.
            self.epoch_bump_required = True
        if self.fatal_error is None and self.state is not S.ABORTING_TRANSACTION:
            self._on_abortable(error)

    async def _add_partitions(self, partitions: list[TopicPartition]) -> None:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        current = self._idempotence.producer_id_and_epoch
        request = AddPartitionsToTxnRequest(
            transactions=[
                AddPartitionsToTxnTransaction(
                    transactional_id=self.transactional_id,
                    producer_id=current.producer_id,
                    producer_epoch=current.epoch,
                    topics=[
                        AddPartitionsToTxnTopic(name=topic, partitions=indexes)
                        for topic, indexes in by_topic.items()
                    ],
                )
            ]
        )
        try:
            await self._request(ApiKey.ADD_PARTITIONS_TO_TXN, request, _add_partitions_error)
        except (TransactionAbortableError, ProducerFencedError, KafkaError, ClientClosedError):
            pass  # the state changed already
        except DeliveryTimeoutError as exc:
            if self.fatal_error is None:
                self._on_abortable(exc)
        else:
            self._partitions.update(dict.fromkeys(partitions))
            self.transaction_started = True
        finally:
            self._adding = {}
            self._add_task = None
            self._wakeup()

    async def wait_for_add_partitions(self) -> None:
        task = self._add_task
        if task is not None:
            await asyncio.wait([task])

    async def close(self) -> None:
        """Stop an AddPartitionsToTxn under way (the producer is closing)."""
        task, self._add_task = self._add_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- the calls of the API ---------------------------------------------------------------

    async def init_transactions(self) -> None:
        with self._running("init_transactions"):
            if self.state is S.UNINITIALIZED:
                self._transition(S.INITIALIZING)
            else:
                self._check("init_transactions", S.INITIALIZING)  # resuming a timed-out call
            await self._init_producer_id(NO_PRODUCER_ID_AND_EPOCH)
            self._transition(S.READY)

    def begin_transaction(self) -> None:
        if self._operation is not None:
            raise TransactionStateError(f"begin_transaction() while {self._operation}() runs")
        self._check("begin_transaction", S.READY)
        self._transition(S.IN_TRANSACTION)

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_id: str
    ) -> None:
        with self._running("send_offsets_to_transaction"):
            self._check("send_offsets_to_transaction", S.IN_TRANSACTION)
            current = self._idempotence.producer_id_and_epoch
            add_offsets = AddOffsetsToTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=current.producer_id,
                producer_epoch=current.epoch,
                group_id=group_id,
            )
            await self._request(ApiKey.ADD_OFFSETS_TO_TXN, add_offsets, _error_code)
            self.transaction_started = True
            by_topic: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
            for tp, offset in offsets.items():
                by_topic.setdefault(tp.topic, []).append(
                    TxnOffsetCommitRequestPartition(
                        partition_index=tp.partition, committed_offset=offset
                    )
                )
            commit = TxnOffsetCommitRequest(
                transactional_id=self.transactional_id,
                group_id=group_id,
                producer_id=current.producer_id,
                producer_epoch=current.epoch,
                topics=[
                    TxnOffsetCommitRequestTopic(name=topic, partitions=partitions)
                    for topic, partitions in by_topic.items()
                ],
            )
            await self._request(
                ApiKey.TXN_OFFSET_COMMIT, commit, _txn_offset_commit_error, group=group_id
            )

    async def commit_transaction(self, flush: Callable[[], Awaitable[None]]) -> None:
        """`flush`: the producer's, which settles every record of the transaction."""
        with self._running("commit_transaction"):
            if self.state is not S.COMMITTING_TRANSACTION:  # else resuming a timed-out call
                self._check("commit_transaction", S.IN_TRANSACTION)
                self._transition(S.COMMITTING_TRANSACTION)
            await flush()
            await self.wait_for_add_partitions()
            # A record that failed made the transaction abortable; a fenced one, fatal.
            self._check("commit_transaction", S.COMMITTING_TRANSACTION)
            if self.transaction_started:
                await self._end_txn(commit=True)
            self._complete()

    async def abort_transaction(self, settle: Callable[[], Awaitable[None]]) -> None:
        """`settle`: the producer's wait for every record to be sent or failed."""
        with self._running("abort_transaction"):
            if self.state is not S.ABORTING_TRANSACTION:  # else resuming a timed-out call
                self._check("abort_transaction", S.IN_TRANSACTION, S.ABORTABLE_ERROR)
                self._transition(S.ABORTING_TRANSACTION)
            self._pending.clear()
            self._wakeup()  # the sender fails the batches never sent
            await settle()
            await self.wait_for_add_partitions()
            self._check("abort_transaction", S.ABORTING_TRANSACTION)
            if self.transaction_started:
                try:
                    await self._end_txn(commit=False)
                except TransactionAbortableError as exc:
                    # The coordinator lost the producer id: the transaction cannot end.
                    cause = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
                    raise self._to_fatal(cause) from exc
            if self.epoch_bump_required:
                await self._init_producer_id(self._idempotence.producer_id_and_epoch)
            self._complete()

    def _complete(self) -> None:
        self._transition(S.READY)
        self._partitions.clear()
        self._pending.clear()
        self.transaction_started = False
        self.last_error = None

    async def _end_txn(self, *, commit: bool) -> None:
        current = self._idempotence.producer_id_and_epoch
        request = EndTxnRequest(
            transactional_id=self.transactional_id,
            producer_id=current.producer_id,
            producer_epoch=current.epoch,
            committed=commit,
        )
        await self._request(ApiKey.END_TXN, request, _error_code)

    async def _init_producer_id(self, current: ProducerIdAndEpoch) -> None:
        """A new producer's id and epoch, or (with the current ones) the next epoch."""
        request = InitProducerIdRequest(
            transactional_id=self.transactional_id,
            transaction_timeout_ms=self._config.transaction_timeout_ms,
            producer_id=current.producer_id,
            producer_epoch=current.epoch,
        )
        response = await self._request(ApiKey.INIT_PRODUCER_ID, request, _error_code)
        assert isinstance(response, InitProducerIdResponse), response
        if response.producer_id < 0 or response.producer_epoch < 0:
            raise self._to_fatal(
                KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"InitProducerId answered producer id {response.producer_id} "
                    f"epoch {response.producer_epoch}",
                )
            )
        self._idempotence.init_completed(
            ProducerIdAndEpoch(response.producer_id, response.producer_epoch)
        )
        self.epoch_bump_required = False

    # -- requests to the coordinators -------------------------------------------------------

    async def _request(
        self,
        api: ApiKey,
        request: Request,
        error_of: Callable[[Response], ErrorCode],
        *,
        group: str | None = None,
    ) -> Response:
        """Send `request` to the transaction coordinator (or `group`'s coordinator) until it
        succeeds; raise what the answer's class calls for (module docstring), or
        DeliveryTimeoutError once delivery.timeout.ms would pass before the next attempt."""
        key = (COORDINATOR_TRANSACTION, self.transactional_id)
        if group is not None:
            key = (COORDINATOR_GROUP, group)
        budget_ms = self._config.delivery_timeout_ms
        deadline_ns = self._clock.monotonic_ns() + budget_ms * NS_PER_MS
        attempts = 0
        while True:
            if self.fatal_error is not None:
                raise self.fatal_error
            kind, error, response = await self._attempt(api, key, request, error_of)
            if kind is C.NONE:
                assert response is not None
                return response
            assert error is not None
            if kind is C.FENCED:
                assert isinstance(error, KafkaError), error
                raise self.fence(error)
            if kind is C.FATAL:
                assert isinstance(error, Exception), error
                raise self._to_fatal(error)
            if kind is C.ABORTABLE:
                raise self._on_abortable(error)
            if kind is C.FIND_COORDINATOR:
                self._coordinators.pop(key, None)
            delay_ms = self._retry_backoff.delay_ms(attempts, self._rng)
            attempts += 1
            remaining_ms = (deadline_ns - self._clock.monotonic_ns()) / NS_PER_MS
            if delay_ms >= remaining_ms:
                raise DeliveryTimeoutError(
                    f"{api.name} for {self.transactional_id!r} did not succeed within "
                    f"delivery.timeout.ms={budget_ms} ({attempts} attempts): {error}"
                ) from error
            _log.debug("%s failed (%s); retrying in %.0f ms", api.name, error, delay_ms)
            await self._clock.sleep(delay_ms / 1000)

    async def _attempt(
        self,
        api: ApiKey,
        key: tuple[int, str],
        request: Request,
        error_of: Callable[[Response], ErrorCode],
    ) -> _Attempt:
        timeout_ms = self._config.request_timeout_ms
        coordinator = self._coordinators.get(key)
        if coordinator is None:
            try:
                coordinator = await find_coordinator(self._client, *key, timeout_ms=timeout_ms)
            except KafkaError as exc:
                return classify(ApiKey.FIND_COORDINATOR, exc.code), exc, None
            except (ConnectionError, TimeoutError) as exc:
                return C.RETRY, exc, None
            self._coordinators[key] = coordinator
        try:
            response = await self._client.send(coordinator.address, request, timeout_ms=timeout_ms)
        except (ConnectionError, TimeoutError) as exc:
            return C.FIND_COORDINATOR, exc, None  # the coordinator may be gone
        assert isinstance(response, request.RESPONSE), response
        code = error_of(response)
        if code is ErrorCode.NONE:
            return C.NONE, None, response
        error = KafkaError(code, f"{api.name} at broker {coordinator.node_id}")
        return classify(api, code), error, response


def _error_code(response: Response) -> ErrorCode:
    return ErrorCode.from_code(response.error_code)


def _add_partitions_error(response: Response) -> ErrorCode:
    """The answer's first partition error; OPERATION_NOT_ATTEMPTED (another partition failed
    the request) only when it is the sole error."""
    assert isinstance(response, AddPartitionsToTxnResponse), response
    codes = [ErrorCode.from_code(response.error_code)] + [
        ErrorCode.from_code(partition.partition_error_code)
        for result in response.results_by_transaction
        for topic in result.topic_results
        for partition in topic.results_by_partition
    ]
    failed = [code for code in codes if code is not ErrorCode.NONE]
    cause = [code for code in failed if code is not ErrorCode.OPERATION_NOT_ATTEMPTED]
    return (cause or failed or [ErrorCode.NONE])[0]


def _txn_offset_commit_error(response: Response) -> ErrorCode:
    assert isinstance(response, TxnOffsetCommitResponse), response
    codes = [ErrorCode.from_code(response.error_code)] + [
        ErrorCode.from_code(partition.error_code)
        for topic in response.topics
        for partition in topic.partitions
    ]
    return next((code for code in codes if code is not ErrorCode.NONE), ErrorCode.NONE)
