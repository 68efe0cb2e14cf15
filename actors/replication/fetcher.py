"""Replica fetchers: a follower's pull of one leader's partitions (Kafka's ReplicaFetcherThread).

(About 580 lines: one fetch round and its error handling read as one loop; the pure parts
are in truncation.py, fetcher_requests.py and fetch_state.py.)

A `ReplicaFetcher` serves one (source broker, fetcher id) pair;
`actors.replication.fetcher_manager` owns the fetchers and routes partitions to them. The
fetcher's task repeats one round:

1. Partitions in TRUNCATING ask the leader, with OffsetForLeaderEpoch, where the follower's
   latest epoch ends there, and cut the follower's log at that point (KIP-101, KIP-279). Where
   the cut goes — possibly an intermediate one, after which the partition asks again next round
   with its new, older latest epoch — is decided in actors/replication/truncation.py.
2. Partitions in FETCHING go into one FetchRequest (replica_id = this broker, each partition with
   its fetch offset and current leader epoch, KIP-320; built in
   actors/replication/fetcher_requests.py). Every answered partition is appended to the
   follower's `PartitionActor` with the leader's high watermark and log start offset, and its
   fetch offset moves past what was appended. The fetcher holds an incremental fetch session
   with its leader (KIP-227, actors/replication/fetch_session_handler.py): after the first
   (full) fetch, a request lists only the partitions whose position changed, the answer only
   the partitions with something new, and the others have nothing new. Any answered partition
   the fetcher does not apply makes the next fetch a full one, so none is left behind.

Errors are values. OFFSET_OUT_OF_RANGE resets the position as Kafka 2.x does (ListOffsets to the
leader). FENCED_LEADER_EPOCH, or a follower that refuses the data as fenced / no longer a
follower, marks the partition FAILED: this leadership is over and nothing is fetched until the
ReplicaManager re-adds the partition with its new state. Other partition errors
(NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, ...) and connection failures delay the
partitions for replica.fetch.backoff.ms on the injected clock; re-adding them lifts the delay.
UNKNOWN_LEADER_EPOCH, from a leader that has not yet heard of the epoch the follower already
has, delays them only LEADER_BEHIND_BACKOFF_MS: the controller told both at once, so the leader
is about to catch up (Kafka backs off the full replica.fetch.backoff.ms here, which costs an
acks=all producer a second after each failover that loses this race).

State and why no lock is needed: the fetcher owns its partition table (`FetchStates`,
actors/replication/fetch_state.py), changed by the manager's synchronous `add_partitions` /
`remove_partitions` (called from the ReplicaManager's handler on the event loop) and by the
fetcher's own task between its awaits; neither ever awaits inside a read-modify-write of the
table. After each await the task keeps a result only if the partition's state is still the one
the request was built from (same generation and fetch offset), so a response for a partition
removed, re-added or moved meanwhile is dropped and fetched again from the new position.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Final, Protocol

from actors.replication.config import ReplicaFetcherConfig
from actors.replication.fetch_session_handler import SESSION_ERRORS, FetchSessionHandler
from actors.replication.fetch_state import (
    BrokerEndpoint,
    FetchStates,
    FetchStatus,
    InitialFetchState,
    PartitionFetchState,
    Sent,
)
from actors.replication.fetcher_requests import (
    epoch_answers,
    fetch_partitions,
    fetch_request,
    fetched_partitions,
    list_offsets_request,
    listed_partition,
    offset_for_leader_epoch_request,
)
from actors.replication.partition_messages import (
    AppendAsFollower,
    LastOffsetForEpoch,
    TruncateFullyAndStartAt,
    TruncateTo,
)
from actors.replication.truncation import (
    UNDEFINED_EPOCH,
    needs_local_epoch_end,
    truncation_by_leader_epoch,
    truncation_without_epochs,
)
from client.errors import ClientError
from runtime import reinjected
from runtime.actor import ActorFatalError, MailboxClosed
from runtime.clock import NS_PER_MS, Clock
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    FetchResponse,
    FetchResponsePartition,
    ListOffsetsResponse,
    OffsetForLeaderEpochResponse,
    Request,
    Response,
)
from wire.messages.data import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
)
from wire.topic import TopicPartition

if TYPE_CHECKING:
    from actors.replication.partition import PartitionActor

log = logging.getLogger(__name__)


# -- what a fetcher is given ----------------------------------------------------------------------


class FetcherClient(Protocol):
    """What a fetcher needs of `client.client.Client` (which satisfies it)."""

    async def send(
        self, target: Address, request: Request, *, timeout_ms: float | None = None
    ) -> Response: ...

    async def close(self) -> None: ...


PartitionLookup = Callable[[TopicPartition], "PartitionActor | None"]


# -- errors ---------------------------------------------------------------------------------------

_CONNECTION_ERRORS: Final = (ClientError, ConnectionError, TimeoutError)
_FOLLOWER_GONE: Final = (MailboxClosed, ActorFatalError)
# Answers meaning this leadership is over for the partition: wait for the ReplicaManager.
_FENCED: Final = frozenset({ErrorCode.FENCED_LEADER_EPOCH})
# How long a partition waits after UNKNOWN_LEADER_EPOCH: the leader is only behind the
# controller's news, not unreachable, so it is asked again soon (never later than the usual
# replica.fetch.backoff.ms).
LEADER_BEHIND_BACKOFF_MS: Final = 20
# The follower's own refusals with the same meaning (it moved to another epoch or role).
_FOLLOWER_FENCED: Final = frozenset(
    {ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER}
)


# -- the fetcher ----------------------------------------------------------------------------------


class ReplicaFetcher:
    """Fetches the partitions this broker follows from `source`, in one task (`start`/`stop`)."""

    def __init__(
        self,
        *,
        local_broker_id: int,
        source: BrokerEndpoint,
        fetcher_id: int,
        client: FetcherClient,
        partitions: PartitionLookup,
        clock: Clock,
        config: ReplicaFetcherConfig,
        generations: Iterable[int] | None = None,
    ) -> None:
        self.local_broker_id = local_broker_id
        self.source = source
        self.fetcher_id = fetcher_id
        self.name = f"replica-fetcher-{fetcher_id}-broker-{source.broker_id}"
        self._client = client
        self._lookup = partitions
        self.clock = clock
        self.config = config
        # Shared with the manager's other fetchers so a generation is never reused by a move.
        self._states = FetchStates(
            self.name, iter(generations) if generations is not None else itertools.count()
        )
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0  # fetch requests answered, for tests and statistics
        # The incremental fetch session with `source` (KIP-227); a new fetcher starts a new one.
        self.session = FetchSessionHandler()

    # -- control (synchronous: state changes only) --------------------------------------------

    def add_partitions(self, partitions: Mapping[TopicPartition, InitialFetchState]) -> None:
        """Start (or restart) fetching these partitions; a live partition re-added in the epoch
        it already fetches in keeps its state (`FetchStates.add`)."""
        self._states.add(partitions)
        self._wake.set()

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        self._states.remove(partitions)
        self._wake.set()

    def state(self, tp: TopicPartition) -> PartitionFetchState | None:
        return self._states.get(tp)

    @property
    def partition_count(self) -> int:
        """Partitions still fetched (FAILED ones wait for a re-add and do not count)."""
        return self._states.partition_count

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        assert self._task is None, f"{self.name} started twice"
        self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    def cancel(self) -> None:
        """Cancel the task now (synchronously); `stop()` still has to be awaited."""
        if self._task is not None:
            self._task.cancel()

    async def stop(self) -> None:
        """Cancel the task and wait for it, then close the client. A response in flight is
        dropped; whatever it carried is fetched again by the next fetcher of the partition."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # gather, not `await task`: the task's own CancelledError (or the error that ended
            # it, already logged by `_run`) is returned, while a cancellation of this caller
            # still propagates.
            await asyncio.gather(task, return_exceptions=True)
        await self._client.close()

    @property
    def running(self) -> bool:
        """Started and not told to stop."""
        task = self._task
        return task is not None and not task.done() and not task.cancelling()

    # -- the loop -----------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while True:
                await self._wait_for_work()
                await self._truncate_round()
                await self._fetch_round()
        except asyncio.CancelledError:
            raise
        except Exception:
            # A bug: the fetcher cannot be trusted to continue; the follower stops catching up,
            # which the leader's ISR shrink makes visible.
            log.exception("%s: stopped by an unexpected error", self.name)
            raise

    async def _wait_for_work(self) -> None:
        while True:
            if self._states.any_ready(self.clock.monotonic_ms()):
                return
            deadline_ms = self._states.next_deadline_ms()
            self._wake.clear()
            alarm = None
            if deadline_ms is not None:
                alarm = self.clock.call_at_ns(deadline_ms * NS_PER_MS, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                if alarm is not None:
                    alarm.cancel()

    def _ready(self, status: FetchStatus) -> dict[TopicPartition, PartitionFetchState]:
        return self._states.ready(status, self.clock.monotonic_ms())

    def _delay(self, tp: TopicPartition, sent: Sent) -> None:
        until_ms = self.clock.monotonic_ms() + self.config.replica_fetch_backoff_ms
        self._states.delay(tp, sent, until_ms)

    def _answer_error(self, tp: TopicPartition, sent: Sent, error: ErrorCode) -> None:
        if error in _FENCED:
            self._states.fail(tp, sent, error.name)
        elif error is ErrorCode.UNKNOWN_LEADER_EPOCH:
            # The leader has not yet processed the LeaderAndIsr this follower already has; the
            # controller sent both at once, so it is milliseconds behind. A full back-off here
            # made every such race cost a failover one replica.fetch.backoff.ms of acks=all
            # latency (bench/failover.py's "first produce" went from 3 ms to 1,009 ms).
            backoff_ms = min(LEADER_BEHIND_BACKOFF_MS, self.config.replica_fetch_backoff_ms)
            self._states.delay(tp, sent, self.clock.monotonic_ms() + backoff_ms)
        else:
            self._delay(tp, sent)

    # -- truncation (KIP-101 / KIP-279) -------------------------------------------------------

    async def _truncate_round(self) -> None:
        pending = self._ready(FetchStatus.TRUNCATING)
        if not pending:
            return
        asked: dict[TopicPartition, tuple[Sent, int]] = {}
        for tp, state in pending.items():
            sent = Sent.of(state)
            actor = self._lookup(tp)
            if actor is None:
                self._states.fail(tp, sent, "no local replica")
                continue
            # The fetcher is the follower's only writer and awaits each of its appends and
            # truncations, so the published view is current here.
            if reinjected.TRUNCATE_TO_HIGH_WATERMARK in reinjected.REINJECTED:
                hw = actor.view.high_watermark.message_offset  # the bug (runtime/reinjected.py)
                await self._truncate(tp, sent, actor, hw, complete=True)
                continue
            latest_epoch = actor.view.latest_epoch
            if latest_epoch == UNDEFINED_EPOCH:
                # No epochs held (an empty log): Kafka truncates to the initial offset (the HW).
                local_end = actor.view.log_end_offset.message_offset
                target = truncation_without_epochs(state.fetch_offset, local_end)
                await self._truncate(tp, sent, actor, target.offset, complete=target.complete)
            else:
                asked[tp] = (sent, latest_epoch)
        if not asked:
            return
        request = offset_for_leader_epoch_request(
            self.local_broker_id,
            {tp: (pending[tp].leader_epoch, epoch) for tp, (_, epoch) in asked.items()},
        )
        response = await self._send(request, asked, {tp: entry[0] for tp, entry in asked.items()})
        if response is None:
            return
        assert isinstance(response, OffsetForLeaderEpochResponse), response
        for tp, result in epoch_answers(response):
            entry = asked.get(tp)
            if entry is None or self._states.current(tp, entry[0]) is None:
                continue
            sent = entry[0]
            error = ErrorCode.from_code(result.error_code)
            if error is not ErrorCode.NONE:
                self._answer_error(tp, sent, error)
                continue
            await self._truncate_by_answer(tp, sent, result.leader_epoch, result.end_offset)

    async def _truncate_by_answer(
        self, tp: TopicPartition, sent: Sent, leader_epoch: int, leader_end_offset: int
    ) -> None:
        """Kafka's getOffsetTruncationState, then the cut."""
        actor = self._lookup(tp)
        if actor is None:
            self._states.fail(tp, sent, "no local replica")
            return
        local_end = actor.view.log_end_offset.message_offset
        local_epoch_end = None
        if needs_local_epoch_end(leader_epoch, leader_end_offset):
            local_epoch_end = await self._local_epoch_end(tp, sent, actor, leader_epoch)
            if local_epoch_end is None:
                return
        target = truncation_by_leader_epoch(
            fetch_offset=sent.fetch_offset,
            local_end=local_end,
            leader_epoch=leader_epoch,
            leader_end_offset=leader_end_offset,
            local_epoch_end=local_epoch_end,
        )
        await self._truncate(tp, sent, actor, target.offset, complete=target.complete)

    async def _local_epoch_end(
        self, tp: TopicPartition, sent: Sent, actor: PartitionActor, epoch: int
    ) -> tuple[int, int] | None:
        try:
            answer = await actor.ask(LastOffsetForEpoch(epoch))
        except _FOLLOWER_GONE as error:
            self._states.fail(tp, sent, f"local replica stopped: {error!r}")
            return None
        if answer.error is not ErrorCode.NONE:
            self._delay(tp, sent)  # not yet a follower: the ReplicaManager is mid-change
            return None
        return answer.leader_epoch, answer.end_offset

    async def _truncate(
        self,
        tp: TopicPartition,
        sent: Sent,
        actor: PartitionActor,
        offset: int,
        *,
        complete: bool,
    ) -> None:
        if self._states.current(tp, sent) is None:
            return
        try:
            error = await actor.ask(TruncateTo(offset))
        except _FOLLOWER_GONE as exc:
            self._states.fail(tp, sent, f"local replica stopped: {exc!r}")
            return
        if error is not ErrorCode.NONE:
            self._states.fail(tp, sent, f"truncation refused: {error.name}")
            return
        status = FetchStatus.FETCHING if complete else FetchStatus.TRUNCATING
        self._states.move(tp, sent, status, offset)

    # -- fetch --------------------------------------------------------------------------------

    async def _fetch_round(self) -> None:
        ready = self._ready(FetchStatus.FETCHING)
        if not ready:
            return
        sent = {tp: Sent.of(s) for tp, s in ready.items()}
        data = self.session.build(fetch_partitions(self.config, ready, self._local_log_start))
        request = fetch_request(self.local_broker_id, self.config, data)
        response = await self._request(request)
        if response is None:
            self.session.handle_error()
            self._delay_all(sent)
            return
        assert isinstance(response, FetchResponse), response
        if not self.session.handle_response(data, response):
            if response.error not in SESSION_ERRORS:
                self._delay_all(sent)
            # A session error costs no back-off: the next round is a full fetch, which opens a
            # new session and cannot fail that way.
            log.info(
                "%s: fetch session %d ended (%s): the next fetch is full",
                self.name,
                data.session_id,
                response.error.name,
            )
            return
        self.rounds += 1
        # A partition the answer leaves out has nothing new (fetch_session_handler.py says why
        # that holds only while every answered partition is applied).
        applied = True
        for tp, answer in fetched_partitions(response):
            applied = await self._take_answer(tp, sent.get(tp), answer) and applied
        if not applied:
            self.session.force_full_fetch()

    async def _take_answer(
        self, tp: TopicPartition, request_sent: Sent | None, data: FetchResponsePartition
    ) -> bool:
        """Apply one partition's answer; whether the follower now holds what it was told."""
        state = None if request_sent is None else self._states.current(tp, request_sent)
        if request_sent is None or state is None or state.status is not FetchStatus.FETCHING:
            return False  # removed, reset or moved since the request left: stale
        error = ErrorCode.from_code(data.error_code)
        if error is ErrorCode.NONE:
            return await self._append(tp, request_sent, state, data)
        if error is ErrorCode.OFFSET_OUT_OF_RANGE:
            await self._reset_out_of_range(tp, request_sent, state)
        else:
            self._answer_error(tp, request_sent, error)
        return False

    def _delay_all(self, sent: Mapping[TopicPartition, Sent]) -> None:
        for tp, request_sent in sent.items():
            self._delay(tp, request_sent)

    def _local_log_start(self, tp: TopicPartition) -> int:
        actor = self._lookup(tp)
        return -1 if actor is None else actor.view.log_start_offset

    async def _append(
        self,
        tp: TopicPartition,
        sent: Sent,
        state: PartitionFetchState,
        data: FetchResponsePartition,
    ) -> bool:
        """Append what the leader sent; whether it (and its high watermark) was taken."""
        actor = self._lookup(tp)
        if actor is None:
            self._states.fail(tp, sent, "no local replica")
            return False
        # Appended even when empty: the follower's HW and log start follow the leader's.
        try:
            result = await actor.ask(
                AppendAsFollower(
                    data.records, data.high_watermark, data.log_start_offset, state.leader_epoch
                )
            )
        except _FOLLOWER_GONE as exc:
            self._states.fail(tp, sent, f"local replica stopped: {exc!r}")
            return False
        if result.error in _FOLLOWER_FENCED:
            self._states.fail(tp, sent, f"follower refused the data: {result.error.name}")
            return False
        if result.error is ErrorCode.UNKNOWN_SERVER_ERROR:
            # Batches that do not continue the follower's log: the position is wrong (an append
            # by a retired fetcher landed after this state was set). Re-align by epoch from the
            # follower's end, after a back-off.
            local_end = actor.view.log_end_offset.message_offset
            log.warning(
                "%s: %s fetched at %d, log ends at %d: re-truncating",
                self.name,
                tp,
                sent.fetch_offset,
                local_end,
            )
            self._states.move(tp, sent, FetchStatus.TRUNCATING, min(sent.fetch_offset, local_end))
            self._delay(tp, Sent(sent.generation, min(sent.fetch_offset, local_end)))
            return False
        if result.error is not ErrorCode.NONE or result.info is None:
            # Corrupt batches: back off and fetch them again (Kafka retries).
            log.warning("%s: %s append failed: %s", self.name, tp, result.error.name)
            self._delay(tp, sent)
            return False
        if result.info.valid_bytes > 0:
            self._states.move(tp, sent, FetchStatus.FETCHING, result.info.next_offset)
        return True

    async def _reset_out_of_range(
        self, tp: TopicPartition, sent: Sent, state: PartitionFetchState
    ) -> None:
        """Kafka 2.x's fetchOffsetAndTruncate: a follower ahead of the leader's LEO (an
        unclean election) cuts to it; one behind the leader's log start starts over there."""
        actor = self._lookup(tp)
        if actor is None:
            self._states.fail(tp, sent, "no local replica")
            return
        leader_end = await self._list_offset(tp, sent, state, LATEST_TIMESTAMP)
        if leader_end is None:
            return
        local_end = actor.view.log_end_offset.message_offset
        if leader_end < local_end:
            log.warning(
                "%s: %s is at %d, beyond the leader's end %d: truncating (unclean election?)",
                self.name,
                tp,
                local_end,
                leader_end,
            )
            await self._truncate(tp, sent, actor, leader_end, complete=True)
            return
        leader_start = await self._list_offset(tp, sent, state, EARLIEST_TIMESTAMP)
        if leader_start is None or self._states.current(tp, sent) is None:
            return
        local_end = actor.view.log_end_offset.message_offset
        if leader_start > local_end:
            try:
                error = await actor.ask(TruncateFullyAndStartAt(leader_start))
            except _FOLLOWER_GONE as exc:
                self._states.fail(tp, sent, f"local replica stopped: {exc!r}")
                return
            if error is not ErrorCode.NONE:
                self._states.fail(tp, sent, f"truncation refused: {error.name}")
                return
        self._states.move(tp, sent, FetchStatus.FETCHING, max(leader_start, local_end))

    async def _list_offset(
        self, tp: TopicPartition, sent: Sent, state: PartitionFetchState, timestamp: int
    ) -> int | None:
        request = list_offsets_request(self.local_broker_id, tp, state.leader_epoch, timestamp)
        response = await self._send(request, (tp,), {tp: sent})
        if response is None or self._states.current(tp, sent) is None:
            return None
        assert isinstance(response, ListOffsetsResponse), response
        partition = listed_partition(response, tp)
        if partition is None:
            self._delay(tp, sent)  # the leader left the partition out: try again later
            return None
        error = ErrorCode.from_code(partition.error_code)
        if error is not ErrorCode.NONE:
            self._answer_error(tp, sent, error)
            return None
        return partition.offset

    # -- sending ------------------------------------------------------------------------------

    async def _send(
        self,
        request: Request,
        partitions: Iterable[TopicPartition],
        sent: Mapping[TopicPartition, Sent],
    ) -> Response | None:
        """One request to the leader; on a transport failure or a request-level error every
        partition in it backs off and None is returned."""
        response = await self._request(request)
        if response is not None and response.error_code == ErrorCode.NONE:
            return response
        for tp in list(partitions):
            self._delay(tp, sent[tp])
        return None

    async def _request(self, request: Request) -> Response | None:
        """One request to the leader: its answer, or None on a transport failure (logged)."""
        try:
            return await self._client.send(self.source.address, request)
        except _CONNECTION_ERRORS as error:
            log.info(
                "%s: %s to %s failed: %r",
                self.name,
                type(request).__name__,
                self.source.address,
                error,
            )
            return None
