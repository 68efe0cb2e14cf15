"""`ProducerIdManager`: a broker's producer ids, taken from blocks the controller allocates
(KIP-730), and the InitProducerId handler built on them.

Blocks. The controller hands out ids in blocks (of 1000) with AllocateProducerIds, committing
each block's end to its metadata log first, so an id is never issued twice, across broker and
controller restarts alike. The manager asks for its first block on demand, hands ids out of the
current block in order, and prefetches the next block in the background once 90% of the current
one is used (Kafka's RPCProducerIdManager threshold), so a busy broker rarely waits. At most one
AllocateProducerIds is in flight. A block that does not lie wholly after the previous one, or is
empty or past the int64 range, is refused like a failed request (the controller never goes back,
so such an answer is a bug or a stale reply, and using it could repeat ids).

Waiting and failure. `generate()` callers that find no id wait for the fetch in flight (all of
them for the same one), and retry a failed fetch once `retry_backoff_ms` has passed on the
injected clock. A caller waits at most `block_wait_ms`, then gets `ProducerIdsUnavailableError`
with COORDINATOR_LOAD_IN_PROGRESS, which is what Kafka's brokers answer while their next block is
not there: the Java producer, librdkafka and aiokafka all back off and resend InitProducerId for
it (REQUEST_TIMED_OUT would be fatal to InitProducerId in older Java clients). Retries happen only
while someone needs a block (a waiting caller, or a claim past the prefetch threshold), so an
unreachable controller costs one request per backoff at most, and nothing while idle.

InitProducerId (`init_producer_id`):

* transactional_id set: ketch has no transaction coordinator. The answer is
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which is not retriable and which the Java producer,
  librdkafka and aiokafka all raise as a fatal error naming the transactional id, so a
  transactional producer fails at once with a clear reason. COORDINATOR_NOT_AVAILABLE or
  NOT_COORDINATOR would instead send it looking for a coordinator until its timeout (minutes).
  An empty transactional_id is INVALID_REQUEST, as in Kafka's coordinator.
* producer_id -1 and producer_epoch -1: a new id, epoch 0.
* producer_id >= 0 and producer_epoch >= 0 (KIP-360 epoch bump, InitProducerId v3+): the same id
  with the next epoch; when the epoch would pass 32767 (int16), a new id with epoch 0, as Kafka
  does when a producer's epoch is exhausted. (Kafka's brokers answer a non-transactional producer
  with a fresh id whatever pair it sent; bumping the pair keeps the producer's id: the
  partitions then expect sequence 0 under the new epoch and fence the old one.) Only one of
  the two given: INVALID_REQUEST.

The partitions enforce what the ids are for (runtime/log/producer_state.py): a retried batch
is answered with its first copy's offsets, a gap in sequence is OUT_OF_ORDER_SEQUENCE_NUMBER,
an older epoch INVALID_PRODUCER_EPOCH.

Ownership and why no lock: every method runs on the event loop. `_claim` never awaits, so two
callers can never take the same id; the fetch task is the only writer of the next block and of
the retry deadline, each between its awaits; the waiters only read after being woken.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from runtime.clock import NS_PER_MS, Clock
from wire.errors import ErrorCode
from wire.messages import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
)

log = logging.getLogger(__name__)

SendAllocateProducerIds = Callable[
    [AllocateProducerIdsRequest], Awaitable[AllocateProducerIdsResponse]
]

PREFETCH_PERCENT: Final = 90  # of the current block used before the next one is asked for
DEFAULT_BLOCK_WAIT_MS: Final = 2_000  # well inside every client's request timeout (30 s and up)
MAX_PRODUCER_ID: Final = 2**63 - 1  # int64 on the wire
MAX_PRODUCER_EPOCH: Final = 2**15 - 1  # int16 on the wire


class ProducerIdsUnavailableError(Exception):
    """No producer id could be had in time; `code` is the error to answer with."""

    def __init__(self, code: ErrorCode, reason: str) -> None:
        super().__init__(f"{code.name}: {reason}")
        self.code = code


@dataclass(slots=True)
class _Block:
    """Ids [start, end); `next_id` is the first not yet handed out."""

    start: int
    end: int
    next_id: int

    @property
    def prefetch_at(self) -> int:
        return self.start + (self.end - self.start) * PREFETCH_PERCENT // 100


class ProducerIdManager:
    def __init__(
        self,
        send: SendAllocateProducerIds,
        broker_id: int,
        broker_epoch: Callable[[], int],
        clock: Clock,
        retry_backoff_ms: int = 100,
        *,
        block_wait_ms: int = DEFAULT_BLOCK_WAIT_MS,
    ) -> None:
        if retry_backoff_ms < 1 or block_wait_ms < 0:
            raise ValueError(f"bad timings: backoff {retry_backoff_ms}, wait {block_wait_ms}")
        self.broker_id = broker_id
        self._send = send
        self._broker_epoch = broker_epoch
        self._clock = clock
        self._retry_backoff_ms = retry_backoff_ms
        self._block_wait_ms = block_wait_ms
        self._current: _Block | None = None
        self._next: _Block | None = None
        self._received_end = 0  # end of the newest block accepted; the next must start there+
        self._fetch: asyncio.Task[None] | None = None
        self._retry_at_ms = 0  # no new fetch before this (set after a failed one)
        # Insertion-ordered (dicts as sets): the order they are closed or woken in is part of a
        # run, and a seeded simulation must replay it (a set of objects orders them by address).
        self._waiters: dict[asyncio.Future[None], None] = {}
        self._stopped = False
        self.requests_sent = 0

    # -- ids ------------------------------------------------------------------------------------

    async def generate(self) -> int:
        """The next producer id; raises ProducerIdsUnavailableError after `block_wait_ms`
        without a block (or at once after `stop()`)."""
        deadline_ms = self._clock.monotonic_ms() + self._block_wait_ms
        while True:
            if self._stopped:
                raise ProducerIdsUnavailableError(
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, "the producer id manager is stopped"
                )
            producer_id = self._claim()
            if producer_id is not None:
                return producer_id
            self._maybe_fetch()
            now_ms = self._clock.monotonic_ms()
            if now_ms >= deadline_ms:
                raise ProducerIdsUnavailableError(
                    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                    f"no producer id block from the controller within {self._block_wait_ms} ms",
                )
            # Either a fetch is under way (wake when it ends) or one failed and the backoff
            # runs (wake when it is over, to start the retry).
            assert self._fetch is not None or self._retry_at_ms > now_ms, "no fetch to wait for"
            wake_ms = deadline_ms if self._fetch is not None else self._retry_at_ms
            await self._wait(min(deadline_ms, wake_ms))

    def _claim(self) -> int | None:
        block = self._current
        if block is None or block.next_id >= block.end:
            if self._next is None:
                return None
            block = self._current = self._next
            self._next = None
        producer_id = block.next_id
        block.next_id += 1
        if producer_id >= block.prefetch_at:
            self._maybe_fetch()
        return producer_id

    # -- fetching blocks ------------------------------------------------------------------------

    def _maybe_fetch(self) -> None:
        if self._stopped or self._fetch is not None or self._next is not None:
            return
        if self._clock.monotonic_ms() < self._retry_at_ms:
            return  # the backoff after a failure; a later claim or a waiter starts the retry
        self._fetch = asyncio.get_running_loop().create_task(
            self._fetch_block(), name=f"producer-ids@{self.broker_id}"
        )

    async def _fetch_block(self) -> None:
        request = AllocateProducerIdsRequest(
            broker_id=self.broker_id, broker_epoch=self._broker_epoch()
        )
        self.requests_sent += 1
        try:
            response = await self._send(request)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self._failed(f"{error!r}")
        else:
            problem = self._check(response)
            if problem is None:
                start = response.producer_id_start
                self._next = _Block(start, start + response.producer_id_len, start)
                self._received_end = self._next.end
                self._retry_at_ms = 0
                log.debug("broker %d: producer ids %d..%d", self.broker_id, start, self._next.end)
            else:
                self._failed(problem)
        finally:
            self._fetch = None
            self._wake_waiters()

    def _check(self, response: AllocateProducerIdsResponse) -> str | None:
        """Why a response cannot be used as the next block, or None."""
        if response.error is not ErrorCode.NONE:
            return response.error.name
        start, length = response.producer_id_start, response.producer_id_len
        if start < 0 or length <= 0 or start + length - 1 > MAX_PRODUCER_ID:
            return f"invalid block start {start} length {length}"
        if start < self._received_end:
            return f"block at {start} is not after the previous one (ends at {self._received_end})"
        return None

    def _failed(self, reason: str) -> None:
        self._retry_at_ms = self._clock.monotonic_ms() + self._retry_backoff_ms
        log.warning(
            "broker %d: AllocateProducerIds failed (%s); retrying in %d ms",
            self.broker_id,
            reason,
            self._retry_backoff_ms,
        )

    # -- waiting --------------------------------------------------------------------------------

    async def _wait(self, until_ms: int) -> None:
        """Until the fetch in flight ends, `stop()`, or `until_ms` on the clock."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = None
        alarm = self._clock.call_at_ns(until_ms * NS_PER_MS, lambda: _resolve(waiter))
        try:
            await waiter
        finally:
            alarm.cancel()
            self._waiters.pop(waiter, None)

    def _wake_waiters(self) -> None:
        for waiter in self._waiters:
            _resolve(waiter)

    # -- lifecycle ------------------------------------------------------------------------------

    async def stop(self) -> None:
        """Cancel the fetch in flight; waiting and later callers get the error at once."""
        self._stopped = True
        task, self._fetch = self._fetch, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._wake_waiters()

    # -- InitProducerId (22) --------------------------------------------------------------------

    async def init_producer_id(self, request: InitProducerIdRequest) -> InitProducerIdResponse:
        # transaction_timeout_ms bounds a transaction; a non-transactional producer has none,
        # so it is ignored (Kafka's coordinator ignores it for a null transactional id too).
        if request.transactional_id is not None:
            if not request.transactional_id:
                return InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST)
            return InitProducerIdResponse(
                error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            )
        producer_id, epoch = request.producer_id, request.producer_epoch
        if producer_id == NO_PRODUCER_ID and epoch == NO_PRODUCER_EPOCH:
            return await self._new_producer()
        if producer_id < 0 or epoch < 0:
            return InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST)
        if epoch < MAX_PRODUCER_EPOCH:
            return InitProducerIdResponse(producer_id=producer_id, producer_epoch=epoch + 1)
        return await self._new_producer()  # the epoch is exhausted: a new id starts over

    async def _new_producer(self) -> InitProducerIdResponse:
        try:
            producer_id = await self.generate()
        except ProducerIdsUnavailableError as error:
            return InitProducerIdResponse(error_code=error.code)
        return InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
