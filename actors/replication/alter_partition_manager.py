"""`AlterPartitionManager`: sends the partition leaders' ISR proposals to the controller.

It is the broker's `AlterPartitionSink` (actors/replication/alter_partition.py), as Kafka's
AlterPartitionManager (KIP-497): partition actors `submit` proposals; the manager batches all
proposals waiting at that moment into one AlterPartition request, keeps one request in flight at
a time (so at most one proposal per partition is ever in flight), and calls each proposal's
callback exactly once with the controller's per-partition answer.

* A second proposal for a partition whose proposal is still queued replaces it (the queued one
  is answered OPERATION_NOT_ATTEMPTED: it never reached the controller). One for a partition with
  a proposal in flight is answered OPERATION_NOT_ATTEMPTED at once; the partition actor then
  falls back to its committed ISR and proposes again later, as in Kafka.
* Transport failures and request-level errors (NOT_CONTROLLER, STALE_BROKER_EPOCH while a new
  registration is under way, ...) answer nobody: the batch goes back to the queue and is resent
  after an exponential backoff on the injected clock. While the controller is unreachable the
  proposals simply wait (DESIGN.md: ISR changes wait and are retried).
* A response with per-partition errors is handed on (the partition actor decides: revert, wait
  for metadata, or resubmit), and the next request waits one backoff step, so a controller that
  keeps failing a partition is not asked again in a tight loop.
* A partition missing from the response is answered UNKNOWN_SERVER_ERROR (the actor resubmits).
* `stop()` answers what is left with OPERATION_NOT_ATTEMPTED, so no callback is lost.

Ownership and why no lock: the manager's state (queue, in-flight batch, failure count) is touched
only on the event-loop thread, by `submit` (synchronous) and by the manager's own sending task
between its awaits. `submit` never awaits, so it cannot interleave with itself; the sending task
takes the whole queue in one step before awaiting the send.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from actors.replication.alter_partition import IsrProposal, IsrProposalResult
from runtime import reinjected
from runtime.clock import Clock
from runtime.net.backoff import ExponentialBackoff
from wire.errors import ErrorCode
from wire.messages import (
    ZERO_UUID,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionTopicData,
)
from wire.topic import TopicPartition

log = logging.getLogger(__name__)

SendAlterPartition = Callable[[AlterPartitionRequest], Awaitable[AlterPartitionResponse]]
ResultCallback = Callable[[IsrProposalResult], None]

# Kafka's retry.backoff.ms and retry.backoff.max.ms defaults.
DEFAULT_BACKOFF: Final = ExponentialBackoff(initial_ms=100, max_ms=1_000)


@dataclass(frozen=True, slots=True)
class _Item:
    proposal: IsrProposal
    on_result: ResultCallback


class AlterPartitionClosedError(RuntimeError):
    """`submit` after `stop()`: a bug in the caller's shutdown order."""


class AlterPartitionManager:
    def __init__(
        self,
        broker_id: int,
        send: SendAlterPartition,
        clock: Clock,
        *,
        broker_epoch: Callable[[], int] = lambda: -1,
        topic_id: Callable[[str], bytes] = lambda topic: ZERO_UUID,
        backoff: ExponentialBackoff = DEFAULT_BACKOFF,
        rng: random.Random | None = None,
    ) -> None:
        self.broker_id = broker_id
        self._send = send
        self._clock = clock
        self._broker_epoch = broker_epoch
        self._topic_id = topic_id
        self._backoff = backoff
        self._rng = rng if rng is not None else random.Random(0)
        self._unsent: dict[TopicPartition, _Item] = {}
        self._in_flight: dict[TopicPartition, _Item] = {}
        self._failures = 0  # consecutive failed sends (transport or request-level error)
        self._next_send_ms = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.requests_sent = 0

    # -- the sink -----------------------------------------------------------------------------

    def submit(self, proposal: IsrProposal, on_result: ResultCallback) -> None:
        if self._closed:
            raise AlterPartitionClosedError(f"AlterPartition manager of {self.broker_id} stopped")
        tp = proposal.topic_partition
        if tp in self._in_flight:
            on_result(IsrProposalResult.failed(ErrorCode.OPERATION_NOT_ATTEMPTED))
            return
        replaced = self._unsent.get(tp)
        self._unsent[tp] = _Item(proposal, on_result)
        if replaced is not None:
            replaced.on_result(IsrProposalResult.failed(ErrorCode.OPERATION_NOT_ATTEMPTED))
        self._wake.set()

    @property
    def queued(self) -> int:
        return len(self._unsent)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("AlterPartition manager already started")
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"alter-partition@{self.broker_id}"
        )

    async def stop(self) -> None:
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        left = [*self._in_flight.values(), *self._unsent.values()]
        self._in_flight.clear()
        self._unsent.clear()
        for item in left:
            item.on_result(IsrProposalResult.failed(ErrorCode.OPERATION_NOT_ATTEMPTED))

    # -- sending ------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            while not self._unsent:
                self._wake.clear()
                await self._wake.wait()
            wait_ms = self._next_send_ms - self._clock.monotonic_ms()
            if wait_ms > 0:
                await self._clock.sleep(wait_ms / 1000)
            await self._send_queued()

    async def _send_queued(self) -> None:
        batch, self._unsent = self._unsent, {}
        self._in_flight = batch
        request = self._build_request(batch)
        self.requests_sent += 1
        try:
            response = await self._send(request)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if reinjected.LOST_ALTER_PARTITION_ANSWER in reinjected.REINJECTED:
                self._in_flight = {}  # the bug (runtime/reinjected.py): nobody is ever answered
                return
            log.warning("AlterPartition to the controller failed: %r; retrying", error)
            self._requeue(batch)
            return
        if response.error is not ErrorCode.NONE:
            log.warning("AlterPartition answered %s; retrying", response.error.name)
            self._requeue(batch)
            return
        self._failures = 0
        self._in_flight = {}
        self._deliver(batch, response)

    def _build_request(self, batch: dict[TopicPartition, _Item]) -> AlterPartitionRequest:
        by_topic: dict[str, list[IsrProposal]] = {}
        for tp, item in batch.items():
            by_topic.setdefault(tp.topic, []).append(item.proposal)
        return AlterPartitionRequest(
            broker_id=self.broker_id,
            broker_epoch=self._broker_epoch(),
            topics=[
                AlterPartitionTopicData(
                    topic_name=topic,
                    topic_id=self._topic_id(topic),
                    partitions=[proposal.to_partition_data() for proposal in proposals],
                )
                for topic, proposals in by_topic.items()
            ],
        )

    def _requeue(self, batch: dict[TopicPartition, _Item]) -> None:
        """Put a failed batch back in front of anything queued meanwhile (nothing for its
        partitions can have been queued: submit refuses those while they are in flight)."""
        self._in_flight = {}
        self._unsent = {**batch, **self._unsent}
        delay_ms = self._backoff.delay_ms(self._failures, self._rng)
        self._failures += 1
        self._next_send_ms = self._clock.monotonic_ms() + round(delay_ms)

    def _deliver(
        self, batch: dict[TopicPartition, _Item], response: AlterPartitionResponse
    ) -> None:
        answers: dict[TopicPartition, IsrProposalResult] = {}
        for topic in response.topics:
            for partition in topic.partitions:
                tp = TopicPartition(topic.topic_name, partition.partition_index)
                answers[tp] = IsrProposalResult.from_partition_result(partition)
        any_error = False
        for tp, item in batch.items():
            result = answers.get(tp)
            if result is None:
                log.warning("AlterPartition response has no answer for %s", tp)
                result = IsrProposalResult.failed(ErrorCode.UNKNOWN_SERVER_ERROR)
            any_error = any_error or result.error is not ErrorCode.NONE
            item.on_result(result)
        if any_error:
            # The actors may resubmit at once; pace the next request.
            self._next_send_ms = self._clock.monotonic_ms() + round(
                self._backoff.delay_ms(0, self._rng)
            )
