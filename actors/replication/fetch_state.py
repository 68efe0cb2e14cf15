"""What a replica fetcher fetches: the partitions it is given and each one's fetch state (Kafka's
`PartitionFetchState`), kept in the fetcher's table `FetchStates`.

The ReplicaManager hands a fetcher a partition with the leader's endpoint (`BrokerEndpoint`) and
where to start (`InitialFetchState`). From then on the partition's `PartitionFetchState` says
where the fetcher is (`fetch_offset`), in which leadership (`leader_epoch`), what it does next
(`status`, a transition table) and whether it backs off (`delayed_until_ms`):

    TRUNCATING -> TRUNCATING   an intermediate epoch cut; ask the leader again
    TRUNCATING -> FETCHING     the log is aligned with the leader's
    FETCHING   -> FETCHING     the position moved (an append, an out-of-range reset)
    FETCHING   -> TRUNCATING   re-align a position the follower's log no longer continues
    any        -> FAILED       this leadership is over; final until the partition is re-added

Every add that starts a partition over gives it a new `generation`. The fetcher awaits between
building a request and using its answer, and the partition may be removed, re-added or moved
meanwhile, so the answer is applied only if the partition is still there with the generation and
fetch offset the request was built from (`Sent`); otherwise it is dropped and fetched again from
the new position. `FetchStates.current` is that check, and every change below goes through it.

Owner: one `ReplicaFetcher` (actors/replication/fetcher.py). Its table is changed by the
manager's synchronous `add_partitions` / `remove_partitions` (from the ReplicaManager's handler on
the event loop) and by the fetcher's task between its awaits; no method here awaits, so neither
ever interleaves inside a change and no lock is needed.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

from runtime.net.transport import Address
from wire.topic import TopicPartition

log = logging.getLogger(__name__)


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
STATUS_MOVES: Final[dict[FetchStatus, frozenset[FetchStatus]]] = {
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
class Sent:
    """What a request was built from, to recognise a still-valid answer."""

    generation: int
    fetch_offset: int

    @classmethod
    def of(cls, state: PartitionFetchState) -> Sent:
        return cls(state.generation, state.fetch_offset)


class FetchStates:
    """One fetcher's partitions and their fetch states (see the module docstring)."""

    def __init__(self, name: str, generations: Iterator[int]) -> None:
        self._name = name  # the fetcher's, for log lines
        # Shared with the manager's other fetchers so a generation is never reused by a move.
        self._generations = generations
        self._states: dict[TopicPartition, PartitionFetchState] = {}

    # -- the manager's side -------------------------------------------------------------------

    def add(self, partitions: Mapping[TopicPartition, InitialFetchState]) -> None:
        """Start (or restart) these partitions. Re-adding a live partition with the epoch it
        already fetches in keeps its state (Kafka does the same), so a repeated LeaderAndIsr
        costs no truncation round; anything else starts over in TRUNCATING."""
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

    def remove(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._states.pop(tp, None)

    def get(self, tp: TopicPartition) -> PartitionFetchState | None:
        return self._states.get(tp)

    @property
    def partition_count(self) -> int:
        """Partitions still fetched (FAILED ones wait for a re-add and do not count)."""
        return sum(1 for s in self._states.values() if s.status is not FetchStatus.FAILED)

    # -- the fetcher's side -------------------------------------------------------------------

    def any_ready(self, now_ms: int) -> bool:
        return any(s.ready(now_ms) for s in self._states.values())

    def next_deadline_ms(self) -> int | None:
        """The earliest end of a back-off, if any partition waits for one."""
        deadlines = [
            s.delayed_until_ms
            for s in self._states.values()
            if s.status is not FetchStatus.FAILED and s.delayed_until_ms is not None
        ]
        return min(deadlines) if deadlines else None

    def ready(self, status: FetchStatus, now_ms: int) -> dict[TopicPartition, PartitionFetchState]:
        return {tp: s for tp, s in self._states.items() if s.status is status and s.ready(now_ms)}

    def current(self, tp: TopicPartition, sent: Sent) -> PartitionFetchState | None:
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

    def move(self, tp: TopicPartition, sent: Sent, status: FetchStatus, fetch_offset: int) -> None:
        state = self.current(tp, sent)
        if state is None:
            return  # removed or reset meanwhile: the newer state wins
        if status not in STATUS_MOVES[state.status]:
            raise IllegalFetchTransitionError(
                f"{self._name} {tp}: {state.status.value} -> {status.value}"
            )
        self._states[tp] = dataclasses.replace(
            state, status=status, fetch_offset=fetch_offset, delayed_until_ms=None
        )

    def fail(self, tp: TopicPartition, sent: Sent, why: str) -> None:
        state = self.current(tp, sent)
        if state is None:
            return
        log.info("%s: %s failed (%s); waiting to be re-added", self._name, tp, why)
        self._states[tp] = dataclasses.replace(state, status=FetchStatus.FAILED)

    def delay(self, tp: TopicPartition, sent: Sent, until_ms: int) -> None:
        state = self.current(tp, sent)
        if state is None:
            return
        self._states[tp] = dataclasses.replace(state, delayed_until_ms=until_ms)
