"""The idempotent producer's bookkeeping: its producer id and epoch, and each partition's next
sequence number (the idempotent part of Kafka's `TransactionManager`).

Producer id. Before its first batch an idempotent producer asks any broker for a (producer id,
epoch) with InitProducerId (transactional id null; producer id and epoch -1: a new producer).
Answers COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR and
CONCURRENT_TRANSACTIONS, a lost or refused connection and a request timeout are retried after
retry.backoff.ms (exponential, capped by retry.backoff.max.ms), as Kafka's InitProducerIdHandler
re-enqueues them; any other error is fatal (`fatal_error`). The producer drains no batch while it
has no usable id, so its records wait in the accumulator and fail with `DeliveryTimeoutError`
(naming the last InitProducerId error) at delivery.timeout.ms: a producer that cannot get an id
never hangs. Attempts are made only while records are waiting (the producer's decision).

Sequences. Each partition has an entry: the (producer id, epoch) its sequences belong to and its
next sequence, starting at 0 and wrapping to 0 after 2^31-1 as the broker counts. A batch takes
its base sequence when it is first drained (`set_producer_state`) and keeps its id, epoch and
sequence on every retry, so a resend is byte-identical and the broker answers a duplicate with
the original offsets. A partition whose entry belongs to an older epoch is restarted at 0 under
the current one when its next batch is drained; that is safe because a partition has more than
one batch in flight only once a batch of it was acknowledged under the current epoch, and a
retried batch goes alone, oldest first (client/sender.py, "In flight"), so no earlier sequence
of the partition is still unresolved then.

Epoch bump (KIP-360). OUT_OF_ORDER_SEQUENCE_NUMBER or UNKNOWN_PRODUCER_ID for a partition's
head batch means the broker's idea of the sequence differs from ours (a batch that failed or
timed out before it was written, or state the broker lost). `handle_sequence_error` asks for a
new epoch with InitProducerId(producer id, epoch); when it arrives that partition restarts at 0
and the batch is rewritten as its first (its bytes are built again, with the new epoch and
sequence), every other partition restarting lazily as above. No batch is drained while the bump
is outstanding, so every drained batch carries the current epoch. The Java producer bumps a
non-transactional producer's epoch locally; asking the broker keeps the broker the authority on
epochs and lets it hand out a new id when the int16 epoch is exhausted. A batch that the broker
rejected for good (a non-retriable error) also asks for a bump (Kafka's adjustSequenceNumbers
path), since the next batch's sequence would leave a gap; a batch whose outcome is unknown (it
timed out) does not: if it was written the sequence is right, and if not the next batch's
OUT_OF_ORDER_SEQUENCE_NUMBER triggers the bump.

Fencing. INVALID_PRODUCER_EPOCH or PRODUCER_FENCED is fatal: `fatal_error` is set (a
`ProducerFencedError`), and the producer fails every queued record and every later `send()` with
it. Batches already in flight to other brokers settle by their own answers (one that was written
succeeds, as in Kafka, where only undrained batches are aborted); an error answer then fails them
with `fatal_error`. A transactional producer (client/transactions.py) gets its id and epoch from
its transaction coordinator instead, and sets `fatal_error` through `fail()` on its own fatal
errors; it does not use the epoch bump above (its bump comes with an abort).

Owned by one producer and touched only from its event loop (the producer's sender and
`send()`, and the manager's own InitProducerId task, each between awaits): no locks. The only
I/O is that task's request, made through the producer's client; everything else is bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from client.accumulator import ProducerBatch
from client.client import Client
from client.errors import DeliveryTimeoutError, ProducerFencedError, error_reason
from runtime.net.backoff import ExponentialBackoff
from wire.errors import ErrorCode, KafkaError
from wire.messages import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from wire.topic import TopicPartition

_log = logging.getLogger(__name__)

# Kafka's transaction.timeout.ms default. Brokers ignore it without a transactional id (the
# Java producer sends Integer.MAX_VALUE there; the value makes no difference).
TRANSACTION_TIMEOUT_MS: Final = 60_000
SEQUENCE_MODULUS: Final = 1 << 31  # sequences are non-negative int32s: after 2^31-1 comes 0

# InitProducerId answers after which the request is sent again (Kafka's InitProducerIdHandler).
_RETRIABLE_INIT_CODES: Final = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)
# Produce answers that mean the broker's sequence for the partition differs from ours.
SEQUENCE_ERRORS: Final = frozenset(
    {ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID}
)
# Produce answers that mean a newer epoch of this producer id exists: the producer must stop.
FENCING_ERRORS: Final = frozenset({ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED})


def increment_sequence(sequence: int, increment: int) -> int:
    return (sequence + increment) % SEQUENCE_MODULUS


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int
    epoch: int

    @property
    def is_valid(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID


NO_PRODUCER_ID_AND_EPOCH: Final = ProducerIdAndEpoch(NO_PRODUCER_ID, NO_PRODUCER_EPOCH)


@dataclass(slots=True)
class _PartitionEntry:
    """The sequences of one partition, valid under `producer_id_and_epoch` only."""

    producer_id_and_epoch: ProducerIdAndEpoch
    next_sequence: int = 0


def is_retriable_init_error(error: BaseException) -> bool:
    if isinstance(error, KafkaError):
        return error.code in _RETRIABLE_INIT_CODES
    # Refused or lost connections (also "no broker reachable") and request timeouts.
    return isinstance(error, ConnectionError | TimeoutError)


async def send_init_producer_id(
    client: Client, request: InitProducerIdRequest, *, timeout_ms: float
) -> ProducerIdAndEpoch:
    """One InitProducerId attempt at any reachable broker; raises `KafkaError` for an error
    code, or the client's connection errors."""
    response = await client.send_any(request, timeout_ms=timeout_ms)
    if not isinstance(response, InitProducerIdResponse):
        raise TypeError(f"InitProducerId answered with {type(response).__name__}")
    if response.error_code != ErrorCode.NONE:
        raise KafkaError(response.error_code, "InitProducerId")
    if response.producer_id < 0 or response.producer_epoch < 0:
        raise KafkaError(
            ErrorCode.UNKNOWN_SERVER_ERROR,
            f"InitProducerId answered producer id {response.producer_id} "
            f"epoch {response.producer_epoch}",
        )
    return ProducerIdAndEpoch(response.producer_id, response.producer_epoch)


class IdempotenceManager:
    def __init__(
        self,
        client: Client,
        *,
        request_timeout_ms: int,
        retry_backoff: ExponentialBackoff,
        rng: random.Random,
        wakeup: Callable[[], None],
    ) -> None:
        self._client = client
        self._request_timeout_ms = request_timeout_ms
        self._retry_backoff = retry_backoff
        self._rng = rng
        self._wakeup = wakeup  # the sender's: an InitProducerId attempt ended
        self._init_task: asyncio.Task[None] | None = None
        self.producer_id_and_epoch = NO_PRODUCER_ID_AND_EPOCH
        self._partitions: dict[TopicPartition, _PartitionEntry] = {}
        # Head batches to restart at sequence 0 once the requested epoch bump arrives.
        self._to_rewrite: dict[TopicPartition, ProducerBatch] = {}
        self._bump_requested = False
        self.fatal_error: Exception | None = None
        self.last_init_error: BaseException | None = None
        self._init_failures = 0  # consecutive, for the backoff
        self.init_retry_at_ms: int | None = None

    # -- producer id --------------------------------------------------------------------------

    def can_send(self) -> bool:
        """True when batches may be drained: an id, no bump pending, nothing fatal."""
        return (
            self.fatal_error is None
            and self.producer_id_and_epoch.is_valid
            and not self._bump_requested
        )

    @property
    def bump_requested(self) -> bool:
        return self._bump_requested

    def poll_producer_id(self, now_ms: int) -> int | None:
        """Called by the sender while records wait and `can_send()` is False: starts an
        InitProducerId attempt when none runs and the backoff is over. Returns when to call
        again (None: the attempt's end calls `wakeup`, or nothing can be done)."""
        if self.fatal_error is not None or self._init_task is not None:
            return None
        if self.init_retry_at_ms is not None and self.init_retry_at_ms > now_ms:
            return self.init_retry_at_ms
        self._init_task = asyncio.create_task(
            self._init_producer_id(), name="producer init producer id"
        )
        return None

    async def _init_producer_id(self) -> None:
        request = self.init_producer_id_request()
        try:
            result = await send_init_producer_id(
                self._client, request, timeout_ms=self._request_timeout_ms
            )
        except Exception as exc:
            self.init_failed(exc, self._client.clock.monotonic_ms())
        else:
            self.init_completed(result)
        finally:
            self._init_task = None
            self._wakeup()

    async def close(self) -> None:
        """Stop an InitProducerId attempt under way."""
        task, self._init_task = self._init_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def no_producer_id_error(self, batch: ProducerBatch, delivery_timeout_ms: int) -> Exception:
        """The error for a batch that expired before the producer had an id, naming why."""
        last = self.last_init_error
        reason = "none yet" if last is None else error_reason(last)
        error = DeliveryTimeoutError(
            f"{len(batch.records)} record(s) for {batch.tp} not sent within "
            f"delivery.timeout.ms ({delivery_timeout_ms} ms): the idempotent producer has no "
            f"producer id (last InitProducerId error: {reason})",
            topic=batch.tp.topic,
        )
        error.__cause__ = last
        return error

    def init_producer_id_request(self) -> InitProducerIdRequest:
        """A new producer's request, or the epoch bump's (the current id and epoch)."""
        assert self.fatal_error is None, "InitProducerId after a fatal error"
        assert not self.can_send(), "InitProducerId while the producer has a usable id"
        current = self.producer_id_and_epoch
        return InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
            producer_id=current.producer_id,
            producer_epoch=current.epoch,
        )

    def init_completed(self, producer_id_and_epoch: ProducerIdAndEpoch) -> None:
        assert producer_id_and_epoch.is_valid, producer_id_and_epoch
        _log.debug("producer id and epoch now %s", producer_id_and_epoch)
        self.producer_id_and_epoch = producer_id_and_epoch
        self._bump_requested = False
        self._init_failures = 0
        self.init_retry_at_ms = None
        self.last_init_error = None
        to_rewrite, self._to_rewrite = self._to_rewrite, {}
        for batch in to_rewrite.values():
            self._rewrite(batch)

    def init_failed(self, error: BaseException, now_ms: int) -> None:
        """Schedule the next attempt after a retriable error; anything else is fatal."""
        self.last_init_error = error
        if not is_retriable_init_error(error):
            _log.warning("InitProducerId failed for good: %s", error)
            self.fatal_error = KafkaError(
                error.code if isinstance(error, KafkaError) else ErrorCode.UNKNOWN_SERVER_ERROR,
                f"the idempotent producer could not get a producer id: {error}",
            )
            self.fatal_error.__cause__ = error
            return
        delay_ms = self._retry_backoff.delay_ms(self._init_failures, self._rng)
        self._init_failures += 1
        self.init_retry_at_ms = now_ms + round(delay_ms)
        _log.debug("InitProducerId failed (%s); retrying in %.0f ms", error, delay_ms)

    def fence(self, error: KafkaError) -> None:
        """The broker knows a newer epoch of this producer id: nothing more may be sent."""
        if self.fatal_error is None:
            current = self.producer_id_and_epoch
            _log.warning("producer %s fenced: %s", current, error)
            self.fatal_error = ProducerFencedError(
                error.code,
                f"producer id {current.producer_id} epoch {current.epoch} is fenced; "
                "the producer cannot send any more",
            )
            self.fatal_error.__cause__ = error

    def fail(self, error: Exception) -> None:
        """A fatal error found elsewhere (the transaction manager's): nothing more is sent."""
        if self.fatal_error is None:
            self.fatal_error = error

    # -- sequences ----------------------------------------------------------------------------

    def set_producer_state(self, batch: ProducerBatch) -> None:
        """Stamp a batch drained for the first time with the id, epoch and next sequence of its
        partition; a retried batch keeps what it has."""
        assert self.can_send(), "drained without a usable producer id"
        if batch.has_sequence:
            return
        current = self.producer_id_and_epoch
        entry = self._partitions.get(batch.tp)
        if entry is None or entry.producer_id_and_epoch != current:
            # New partition, or one whose sequences belong to an older epoch: restart at 0 (no
            # earlier batch of the partition is unresolved, see the module docstring).
            entry = _PartitionEntry(current)
            self._partitions[batch.tp] = entry
        batch.set_producer_state(current.producer_id, current.epoch, entry.next_sequence)
        entry.next_sequence = increment_sequence(entry.next_sequence, len(batch.records))

    def next_sequence(self, tp: TopicPartition) -> int:
        """The sequence the partition's next new batch would get under the current epoch."""
        entry = self._partitions.get(tp)
        if entry is None or entry.producer_id_and_epoch != self.producer_id_and_epoch:
            return 0
        return entry.next_sequence

    def handle_sequence_error(self, batch: ProducerBatch) -> None:
        """OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID for `batch`, the head of its
        partition, which the producer puts back at the front: restart it at sequence 0 under a
        newer epoch."""
        assert batch.has_sequence, "a sequence error for a batch sent without a sequence"
        if self._sent_under_current_epoch(batch):
            self._bump_requested = True
            self._to_rewrite[batch.tp] = batch
        else:
            # The epoch was bumped since this batch was sent: the current one will do.
            self._rewrite(batch)

    def batch_failed(self, batch: ProducerBatch, *, rejected: bool) -> None:
        """`batch` failed for good; `rejected` when the broker refused it (never written)."""
        if self._to_rewrite.get(batch.tp) is batch:
            del self._to_rewrite[batch.tp]
        if rejected and batch.has_sequence and self._sent_under_current_epoch(batch):
            # The next batch would leave a gap in the broker's sequence: start over at 0 under
            # a new epoch; the partition's entry restarts when its next batch is drained.
            self._bump_requested = True

    def _sent_under_current_epoch(self, batch: ProducerBatch) -> bool:
        current = self.producer_id_and_epoch
        return (batch.producer_id, batch.producer_epoch) == (current.producer_id, current.epoch)

    def _rewrite(self, batch: ProducerBatch) -> None:
        current = self.producer_id_and_epoch
        entry = _PartitionEntry(current)
        self._partitions[batch.tp] = entry
        batch.set_producer_state(current.producer_id, current.epoch, 0)
        entry.next_sequence = increment_sequence(0, len(batch.records))
