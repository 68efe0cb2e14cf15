"""Replica fetchers: a follower's pull of one leader's partitions (Kafka's ReplicaFetcherThread).

A `ReplicaFetcher` serves one (source broker, fetcher id) pair;
`actors.replication.fetcher_manager` owns
the fetchers and routes partitions to them. The fetcher's task repeats one round:

1. Partitions in TRUNCATING ask the leader, with OffsetForLeaderEpoch, where the follower's
   latest epoch ends there, and cut the follower's log at that point (KIP-101, KIP-279: the end
   offset of the largest leader epoch <= the follower's latest, never above the follower's own
   end of that epoch). When the leader answers with an epoch the follower does not hold, the cut
   is intermediate — to the follower's end of the largest epoch below it — and the partition asks
   again next round with its new, older latest epoch, as Kafka's `getOffsetTruncationState` does.
2. Partitions in FETCHING go into one FetchRequest (replica_id = this broker, each partition with
   its fetch offset and current leader epoch, KIP-320). Every answered partition is appended to
   the follower's `PartitionActor` with the leader's high watermark and log start offset, and its
   fetch offset moves past what was appended.

Errors are values. OFFSET_OUT_OF_RANGE resets the position as Kafka 2.x does (ListOffsets to the
leader). FENCED_LEADER_EPOCH, or a follower that refuses the data as fenced / no longer a
follower, marks the partition FAILED: this leadership is over and nothing is fetched until the
ReplicaManager re-adds the partition with its new state. Other partition errors
(UNKNOWN_LEADER_EPOCH and NOT_LEADER_OR_FOLLOWER from a leader that has not caught up with the
controller yet, UNKNOWN_TOPIC_OR_PARTITION, ...) and connection failures delay the partitions
for replica.fetch.backoff.ms on the injected clock; re-adding them lifts the delay.

State and why no lock is needed: the partition table (`_states`) is changed by the manager's
synchronous `add_partitions` / `remove_partitions` (called from the ReplicaManager's handler on
the event loop) and by the fetcher's own task between its awaits. Neither ever awaits inside a
read-modify-write of the table. Every state carries a `generation`, new for every add that
resets it; after each await the task keeps a result only if the partition is still there with
the generation and fetch offset the request was built from, so a response for a partition that
was removed, re-added or moved meanwhile is dropped rather than appended (it is fetched again
from the new position).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from actors.replication.partition_messages import (
    AppendAsFollower,
    LastOffsetForEpoch,
    TruncateFullyAndStartAt,
    TruncateTo,
)
from client.errors import ClientError
from runtime.actor import ActorFatalError, MailboxClosed
from runtime.clock import NS_PER_MS, Clock
from runtime.net.transport import Address
from runtime.properties import int_property
from wire.errors import ErrorCode
from wire.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
    Request,
    Response,
)
from wire.topic import TopicPartition

if TYPE_CHECKING:
    from actors.replication.partition import PartitionActor

log = logging.getLogger(__name__)

UNDEFINED_EPOCH: Final = -1  # OffsetForLeaderEpoch's "no such epoch"
UNDEFINED_EPOCH_OFFSET: Final = -1  # ... and its "no end offset"
LATEST_TIMESTAMP: Final = -1  # ListOffsets: the leader's LEO (for a follower's replica_id)
EARLIEST_TIMESTAMP: Final = -2  # ListOffsets: the leader's log start offset


# -- the contract with the ReplicaManager ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    broker_id: int
    host: str
    port: int

    @property
    def address(self) -> Address:
        return Address(self.host, self.port)


@dataclass(frozen=True, slots=True)
class InitialFetchState:
    """Where to start: `fetch_offset` is the follower's position (its HW, as Kafka passes, or
    its LEO); epoch truncation moves it first. `leader_epoch` is the epoch of the leadership
    being followed, sent as current_leader_epoch and checked by the follower on append."""

    fetch_offset: int
    leader_epoch: int


class FetcherControl(Protocol):
    def add_partitions(
        self, leader: BrokerEndpoint, partitions: Mapping[TopicPartition, InitialFetchState]
    ) -> None: ...

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None: ...

    async def shutdown_idle(self) -> None:
        """Stop fetchers with no partitions left."""
        ...

    async def shutdown(self) -> None: ...


class FetcherClient(Protocol):
    """What a fetcher needs of `client.client.Client` (which satisfies it)."""

    async def send(
        self, target: Address, request: Request, *, timeout_ms: float | None = None
    ) -> Response: ...

    async def close(self) -> None: ...


PartitionLookup = Callable[[TopicPartition], "PartitionActor | None"]


# -- configuration --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaFetcherConfig:
    """The replica.fetch.* settings and num.replica.fetchers, with Kafka's defaults."""

    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_response_max_bytes: int = 10_485_760
    replica_fetch_backoff_ms: int = 1_000
    num_replica_fetchers: int = 1

    PROPERTIES = (
        "replica.fetch.wait.max.ms",
        "replica.fetch.min.bytes",
        "replica.fetch.max.bytes",
        "replica.fetch.response.max.bytes",
        "replica.fetch.backoff.ms",
        "num.replica.fetchers",
    )

    def __post_init__(self) -> None:
        for name in ("replica_fetch_wait_max_ms", "replica_fetch_backoff_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative: {getattr(self, name)}")
        for name in (
            "replica_fetch_min_bytes",
            "replica_fetch_max_bytes",
            "replica_fetch_response_max_bytes",
            "num_replica_fetchers",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1: {getattr(self, name)}")

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> ReplicaFetcherConfig:
        """Read Kafka's property names; other keys belong to other parts of the node."""
        values: dict[str, int] = {}
        for key in cls.PROPERTIES:
            if key in properties:
                values[key.replace(".", "_")] = int_property(properties, key, 0)
        return cls(**values)


# -- per-partition state --------------------------------------------------------------------------


class FetchStatus(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"
    FAILED = "failed"


class IllegalFetchTransitionError(RuntimeError):
    """A move the table below forbids: a bug in the fetcher."""


# TRUNCATING -> TRUNCATING is an intermediate epoch cut; FETCHING -> FETCHING a position change;
# FETCHING -> TRUNCATING re-aligns a position the follower's log no longer continues. FAILED is
# final for a state: only a new add (a new state, a new generation) fetches again.
_ANY_STATUS: Final = frozenset({FetchStatus.TRUNCATING, FetchStatus.FETCHING, FetchStatus.FAILED})
_STATUS_MOVES: Final[dict[FetchStatus, frozenset[FetchStatus]]] = {
    FetchStatus.TRUNCATING: _ANY_STATUS,
    FetchStatus.FETCHING: _ANY_STATUS,
    FetchStatus.FAILED: frozenset(),
}


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    fetch_offset: int
    leader_epoch: int
    status: FetchStatus
    generation: int
    delayed_until_ms: int | None = None  # monotonic; None: ready now

    def ready(self, now_ms: int) -> bool:
        return self.status is not FetchStatus.FAILED and (
            self.delayed_until_ms is None or self.delayed_until_ms <= now_ms
        )


@dataclass(frozen=True, slots=True)
class _Sent:
    """What a request was built from, to recognise a still-valid answer."""

    generation: int
    fetch_offset: int


_CONNECTION_ERRORS: Final = (ClientError, ConnectionError, TimeoutError)
_FOLLOWER_GONE: Final = (MailboxClosed, ActorFatalError)
# Answers meaning this leadership is over for the partition: wait for the ReplicaManager.
_FENCED: Final = frozenset({ErrorCode.FENCED_LEADER_EPOCH})
# The follower's own refusals with the same meaning (it moved to another epoch or role).
_FOLLOWER_FENCED: Final = frozenset(
    {ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.NOT_LEADER_OR_FOLLOWER}
)


def _error(code: int) -> ErrorCode:
    try:
        return ErrorCode(code)
    except ValueError:
        return ErrorCode.UNKNOWN_SERVER_ERROR


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
        self._generations = iter(generations) if generations is not None else itertools.count()
        self._states: dict[TopicPartition, PartitionFetchState] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0  # fetch requests answered, for tests and statistics

    # -- control (synchronous: state changes only) --------------------------------------------

    def add_partitions(self, partitions: Mapping[TopicPartition, InitialFetchState]) -> None:
        """Start (or restart) fetching these partitions. Re-adding a live partition with the
        epoch it already fetches in keeps its state (Kafka does the same), so a repeated
        LeaderAndIsr costs no truncation round; anything else starts over in TRUNCATING."""
        for tp, initial in partitions.items():
            current = self._states.get(tp)
            if (
                current is not None
                and current.status is not FetchStatus.FAILED
                and current.leader_epoch == initial.leader_epoch
            ):
                self._states[tp] = dataclasses.replace(current, delayed_until_ms=None)
                continue
            self._states[tp] = PartitionFetchState(
                initial.fetch_offset,
                initial.leader_epoch,
                FetchStatus.TRUNCATING,
                next(self._generations),
            )
        self._wake.set()

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._states.pop(tp, None)
        self._wake.set()

    def state(self, tp: TopicPartition) -> PartitionFetchState | None:
        return self._states.get(tp)

    @property
    def partition_count(self) -> int:
        """Partitions still fetched (FAILED ones wait for a re-add and do not count)."""
        return sum(1 for s in self._states.values() if s.status is not FetchStatus.FAILED)

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
            now_ms = self.clock.monotonic_ms()
            if any(s.ready(now_ms) for s in self._states.values()):
                return
            deadlines = [
                s.delayed_until_ms
                for s in self._states.values()
                if s.status is not FetchStatus.FAILED and s.delayed_until_ms is not None
            ]
            self._wake.clear()
            alarm = None
            if deadlines:
                alarm = self.clock.call_at_ns(min(deadlines) * NS_PER_MS, self._wake.set)
            try:
                await self._wake.wait()
            finally:
                if alarm is not None:
                    alarm.cancel()

    def _ready(self, status: FetchStatus) -> dict[TopicPartition, PartitionFetchState]:
        now_ms = self.clock.monotonic_ms()
        return {tp: s for tp, s in self._states.items() if s.status is status and s.ready(now_ms)}

    def _current(self, tp: TopicPartition, sent: _Sent) -> PartitionFetchState | None:
        """The partition's state if a result for `sent` still applies to it."""
        state = self._states.get(tp)
        if (
            state is None
            or state.generation != sent.generation
            or state.fetch_offset != sent.fetch_offset
            or state.status is FetchStatus.FAILED
        ):
            return None
        return state

    def _move(
        self, tp: TopicPartition, sent: _Sent, status: FetchStatus, fetch_offset: int
    ) -> None:
        state = self._current(tp, sent)
        if state is None:
            return  # removed or reset meanwhile: the newer state wins
        if status not in _STATUS_MOVES[state.status]:
            raise IllegalFetchTransitionError(
                f"{self.name} {tp}: {state.status.value} -> {status.value}"
            )
        self._states[tp] = dataclasses.replace(
            state, status=status, fetch_offset=fetch_offset, delayed_until_ms=None
        )

    def _fail(self, tp: TopicPartition, sent: _Sent, why: str) -> None:
        if self._current(tp, sent) is None:
            return
        log.info("%s: %s failed (%s); waiting to be re-added", self.name, tp, why)
        state = self._states[tp]
        self._states[tp] = dataclasses.replace(state, status=FetchStatus.FAILED)

    def _delay(self, tp: TopicPartition, sent: _Sent) -> None:
        state = self._current(tp, sent)
        if state is None:
            return
        until_ms = self.clock.monotonic_ms() + self.config.replica_fetch_backoff_ms
        self._states[tp] = dataclasses.replace(state, delayed_until_ms=until_ms)

    def _answer_error(self, tp: TopicPartition, sent: _Sent, error: ErrorCode) -> None:
        if error in _FENCED:
            self._fail(tp, sent, error.name)
        else:
            self._delay(tp, sent)

    # -- truncation (KIP-101 / KIP-279) -------------------------------------------------------

    async def _truncate_round(self) -> None:
        pending = self._ready(FetchStatus.TRUNCATING)
        if not pending:
            return
        asked: dict[TopicPartition, tuple[_Sent, int]] = {}
        for tp, state in pending.items():
            sent = _Sent(state.generation, state.fetch_offset)
            actor = self._lookup(tp)
            if actor is None:
                self._fail(tp, sent, "no local replica")
                continue
            # The fetcher is the follower's only writer and awaits each of its appends and
            # truncations, so the published view is current here.
            latest_epoch = actor.view.latest_epoch
            if latest_epoch == UNDEFINED_EPOCH:
                # No epochs held (an empty log): Kafka truncates to the initial offset (the HW).
                local_end = actor.view.log_end_offset.message_offset
                target = min(state.fetch_offset, local_end)
                await self._truncate(tp, sent, actor, target, complete=True)
            else:
                asked[tp] = (sent, latest_epoch)
        if not asked:
            return
        request = OffsetForLeaderEpochRequest(
            replica_id=self.local_broker_id,
            topics=[
                OffsetForLeaderTopic(
                    topic=topic,
                    partitions=[
                        OffsetForLeaderPartition(
                            partition=tp.partition,
                            current_leader_epoch=pending[tp].leader_epoch,
                            leader_epoch=epoch,
                        )
                        for tp, (_, epoch) in asked.items()
                        if tp.topic == topic
                    ],
                )
                for topic in dict.fromkeys(tp.topic for tp in asked)
            ],
        )
        response = await self._send(request, asked, {tp: entry[0] for tp, entry in asked.items()})
        if response is None:
            return
        assert isinstance(response, OffsetForLeaderEpochResponse), response
        for topic_result in response.topics:
            for result in topic_result.partitions:
                tp = TopicPartition(topic_result.topic, result.partition)
                entry = asked.get(tp)
                if entry is None or self._current(tp, entry[0]) is None:
                    continue
                sent = entry[0]
                error = _error(result.error_code)
                if error is not ErrorCode.NONE:
                    self._answer_error(tp, sent, error)
                    continue
                await self._truncate_by_answer(tp, sent, result.leader_epoch, result.end_offset)

    async def _truncate_by_answer(
        self, tp: TopicPartition, sent: _Sent, leader_epoch: int, leader_end_offset: int
    ) -> None:
        """Kafka's getOffsetTruncationState, then the cut."""
        actor = self._lookup(tp)
        if actor is None:
            self._fail(tp, sent, "no local replica")
            return
        local_end = actor.view.log_end_offset.message_offset
        if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
            # The leader holds no epoch <= ours (its log starts later): fall back to the
            # initial fetch offset; an out-of-range fetch then moves to the leader's start.
            target = min(sent.fetch_offset, local_end)
            await self._truncate(tp, sent, actor, target, complete=True)
            return
        if leader_epoch == UNDEFINED_EPOCH:
            # An answer without an epoch (Kafka: a pre-2.0 leader): trust only the offset.
            await self._truncate(tp, sent, actor, min(leader_end_offset, local_end), complete=True)
            return
        own = await self._local_epoch_end(tp, sent, actor, leader_epoch)
        if own is None:
            return
        own_epoch, own_end = own
        if own_epoch == UNDEFINED_EPOCH:
            target, complete = min(leader_end_offset, local_end), True
        elif own_epoch != leader_epoch:
            # We never held the leader's epoch: cut to the end of our largest epoch below it,
            # then ask again with that epoch (the next round).
            target, complete = min(own_end, local_end), False
        else:
            target, complete = min(own_end, leader_end_offset, local_end), True
        await self._truncate(tp, sent, actor, target, complete=complete)

    async def _local_epoch_end(
        self, tp: TopicPartition, sent: _Sent, actor: PartitionActor, epoch: int
    ) -> tuple[int, int] | None:
        try:
            answer = await actor.ask(LastOffsetForEpoch(epoch))
        except _FOLLOWER_GONE as error:
            self._fail(tp, sent, f"local replica stopped: {error!r}")
            return None
        if answer.error is not ErrorCode.NONE:
            self._delay(tp, sent)  # not yet a follower: the ReplicaManager is mid-change
            return None
        return answer.leader_epoch, answer.end_offset

    async def _truncate(
        self,
        tp: TopicPartition,
        sent: _Sent,
        actor: PartitionActor,
        offset: int,
        *,
        complete: bool,
    ) -> None:
        if self._current(tp, sent) is None:
            return
        try:
            error = await actor.ask(TruncateTo(offset))
        except _FOLLOWER_GONE as exc:
            self._fail(tp, sent, f"local replica stopped: {exc!r}")
            return
        if error is not ErrorCode.NONE:
            self._fail(tp, sent, f"truncation refused: {error.name}")
            return
        status = FetchStatus.FETCHING if complete else FetchStatus.TRUNCATING
        self._move(tp, sent, status, offset)

    # -- fetch --------------------------------------------------------------------------------

    async def _fetch_round(self) -> None:
        ready = self._ready(FetchStatus.FETCHING)
        if not ready:
            return
        sent = {tp: _Sent(s.generation, s.fetch_offset) for tp, s in ready.items()}
        request = FetchRequest(
            replica_id=self.local_broker_id,
            max_wait_ms=self.config.replica_fetch_wait_max_ms,
            min_bytes=self.config.replica_fetch_min_bytes,
            max_bytes=self.config.replica_fetch_response_max_bytes,
            topics=[
                FetchTopic(
                    topic=topic,
                    partitions=[
                        FetchPartition(
                            partition=tp.partition,
                            current_leader_epoch=s.leader_epoch,
                            fetch_offset=s.fetch_offset,
                            log_start_offset=self._local_log_start(tp),
                            partition_max_bytes=self.config.replica_fetch_max_bytes,
                        )
                        for tp, s in ready.items()
                        if tp.topic == topic
                    ],
                )
                for topic in dict.fromkeys(tp.topic for tp in ready)
            ],
        )
        response = await self._send(request, ready, sent)
        if response is None:
            return
        assert isinstance(response, FetchResponse), response
        self.rounds += 1
        for topic_response in response.responses:
            for data in topic_response.partitions:
                tp = TopicPartition(topic_response.topic, data.partition_index)
                request_sent = sent.get(tp)
                state = None if request_sent is None else self._current(tp, request_sent)
                if (
                    request_sent is None
                    or state is None
                    or state.status is not FetchStatus.FETCHING
                ):
                    continue  # removed, reset or moved since the request left: stale
                error = _error(data.error_code)
                if error is ErrorCode.NONE:
                    await self._append(
                        tp,
                        request_sent,
                        state,
                        data.records,
                        data.high_watermark,
                        data.log_start_offset,
                    )
                elif error is ErrorCode.OFFSET_OUT_OF_RANGE:
                    await self._reset_out_of_range(tp, request_sent, state)
                else:
                    self._answer_error(tp, request_sent, error)

    def _local_log_start(self, tp: TopicPartition) -> int:
        actor = self._lookup(tp)
        return -1 if actor is None else actor.view.log_start_offset

    async def _append(
        self,
        tp: TopicPartition,
        sent: _Sent,
        state: PartitionFetchState,
        records: bytes,
        high_watermark: int,
        log_start_offset: int,
    ) -> None:
        actor = self._lookup(tp)
        if actor is None:
            self._fail(tp, sent, "no local replica")
            return
        # Appended even when empty: the follower's HW and log start follow the leader's.
        try:
            result = await actor.ask(
                AppendAsFollower(records, high_watermark, log_start_offset, state.leader_epoch)
            )
        except _FOLLOWER_GONE as exc:
            self._fail(tp, sent, f"local replica stopped: {exc!r}")
            return
        if result.error in _FOLLOWER_FENCED:
            self._fail(tp, sent, f"follower refused the data: {result.error.name}")
            return
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
            self._move(tp, sent, FetchStatus.TRUNCATING, min(sent.fetch_offset, local_end))
            self._delay(tp, _Sent(sent.generation, min(sent.fetch_offset, local_end)))
            return
        if result.error is not ErrorCode.NONE or result.info is None:
            # Corrupt batches: back off and fetch them again (Kafka retries).
            log.warning("%s: %s append failed: %s", self.name, tp, result.error.name)
            self._delay(tp, sent)
            return
        if result.info.valid_bytes > 0:
            self._move(tp, sent, FetchStatus.FETCHING, result.info.next_offset)

    async def _reset_out_of_range(
        self, tp: TopicPartition, sent: _Sent, state: PartitionFetchState
    ) -> None:
        """Kafka 2.x's fetchOffsetAndTruncate: a follower ahead of the leader's LEO (an
        unclean election) cuts to it; one behind the leader's log start starts over there."""
        actor = self._lookup(tp)
        if actor is None:
            self._fail(tp, sent, "no local replica")
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
        if leader_start is None or self._current(tp, sent) is None:
            return
        local_end = actor.view.log_end_offset.message_offset
        if leader_start > local_end:
            try:
                error = await actor.ask(TruncateFullyAndStartAt(leader_start))
            except _FOLLOWER_GONE as exc:
                self._fail(tp, sent, f"local replica stopped: {exc!r}")
                return
            if error is not ErrorCode.NONE:
                self._fail(tp, sent, f"truncation refused: {error.name}")
                return
        self._move(tp, sent, FetchStatus.FETCHING, max(leader_start, local_end))

    async def _list_offset(
        self, tp: TopicPartition, sent: _Sent, state: PartitionFetchState, timestamp: int
    ) -> int | None:
        request = ListOffsetsRequest(
            replica_id=self.local_broker_id,
            topics=[
                ListOffsetsTopic(
                    name=tp.topic,
                    partitions=[
                        ListOffsetsPartition(
                            partition_index=tp.partition,
                            current_leader_epoch=state.leader_epoch,
                            timestamp=timestamp,
                        )
                    ],
                )
            ],
        )
        response = await self._send(request, (tp,), {tp: sent})
        if response is None or self._current(tp, sent) is None:
            return None
        assert isinstance(response, ListOffsetsResponse), response
        for topic in response.topics:
            for partition in topic.partitions:
                if (topic.name, partition.partition_index) != (tp.topic, tp.partition):
                    continue
                error = _error(partition.error_code)
                if error is not ErrorCode.NONE:
                    self._answer_error(tp, sent, error)
                    return None
                return partition.offset
        self._delay(tp, sent)  # the leader left the partition out: try again later
        return None

    # -- sending ------------------------------------------------------------------------------

    async def _send(
        self,
        request: Request,
        partitions: Iterable[TopicPartition],
        sent: Mapping[TopicPartition, _Sent],
    ) -> Response | None:
        """One request to the leader; on a transport failure or a request-level error every
        partition in it backs off and None is returned."""
        try:
            response = await self._client.send(self.source.address, request)
        except _CONNECTION_ERRORS as error:
            log.info(
                "%s: %s to %s failed: %r",
                self.name,
                type(request).__name__,
                self.source.address,
                error,
            )
            response = None
        if response is not None and response.error_code == ErrorCode.NONE:
            return response
        for tp in list(partitions):
            self._delay(tp, sent[tp])
        return None
