"""The follower's side of an incremental fetch session (KIP-227): `FetchSessionHandler`, Kafka's
FetchSessionHandler.java for one replica fetcher and its leader.

The leader's side is runtime/net/fetch_session.py (its module docstring has the table of session
ids and epochs). Here, each fetch round the fetcher hands `build` the partitions it fetches now
with their `FetchPartition`s, and gets back the request's session fields and what to list:

    no session (id 0)              full: every partition, epoch 0 (asks for a session)
    a session, epoch e             incremental: only partitions added or whose FetchPartition
                                   changed (fetch offset, leader epoch, log start, max bytes),
                                   and as forgotten those the session has but this round lacks

`handle_response` then reads the answer's session id: a full fetch's answer opens the session it
names (or none, id 0: the leader's cache had no room, and the next fetch is full again); an
incremental answer must carry the same id, and moves the epoch on. Everything else falls back to
a full fetch that opens a new session: a session error (FETCH_SESSION_ID_NOT_FOUND after a
leader restart, INVALID_FETCH_SESSION_EPOCH), any other request-level error, a lost request or
connection (`handle_error`), an answer naming a partition the session does not hold, and an
answer the fetcher could not apply (`force_full_fetch`, below), and a new leadership: a
partition's leader moving to another broker moves it to another fetcher (one per leader
endpoint, a new handler), and a partition of the session asked for in another leader epoch (the
same broker leads again, the follower truncated meanwhile) makes that round's fetch full, so
what the follower holds after its truncation is never judged by what the leader told it
before. A partition out of FETCHING for a round (truncating, backing off) is forgotten, and
when it comes back the leader answers it as new to the session, whatever it holds.

Why "could not apply" forces a full fetch: the leader leaves a partition out of an incremental
answer when its high watermark, log start and last stable offset are the ones it last answered
and it has no records; "nothing new" is true only if the follower applied that last answer. An
answer the fetcher drops (the partition moved meanwhile) or fails to append would leave the
follower behind the leader's idea of it, possibly with a stale high watermark for as long as
the leader's stays put. A full fetch answers every partition again, so the follower never
misses data or a high watermark because a partition was left out. Those paths are rare (errors,
leadership moves), and they cost what every fetch cost before sessions.

Owner: one `ReplicaFetcher` (actors/replication/fetcher.py), whose task alone calls it, one
fetch at a time; no lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from wire.errors import ErrorCode
from wire.messages import FetchPartition, FetchResponse
from wire.topic import TopicPartition

INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0
_MAX_EPOCH: Final = 0x7FFFFFFF
SESSION_ERRORS: Final = frozenset(
    {ErrorCode.FETCH_SESSION_ID_NOT_FOUND, ErrorCode.INVALID_FETCH_SESSION_EPOCH}
)


def _next_epoch(epoch: int) -> int:
    # Kafka's FetchMetadata.nextEpoch: it wraps to 1, never back to 0 (a full fetch).
    return 1 if epoch == _MAX_EPOCH else epoch + 1


@dataclass(frozen=True, slots=True)
class FetchRequestData:
    """One round's request: its session fields, the partitions to list (`to_send`), those to
    forget, and every partition the leader will fetch for it (`session_partitions`)."""

    session_id: int
    session_epoch: int
    to_send: dict[TopicPartition, FetchPartition]
    forgotten: list[TopicPartition]
    session_partitions: frozenset[TopicPartition]

    @property
    def full(self) -> bool:
        return self.session_epoch == INITIAL_EPOCH


class FetchSessionHandler:
    """The session this fetcher holds with its leader (see the module docstring)."""

    def __init__(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        # What the leader's session holds for each partition: what was last listed for it.
        self._session: dict[TopicPartition, FetchPartition] = {}
        self.full_fetches = 0  # for tests and statistics
        self.incremental_fetches = 0

    def build(self, partitions: Mapping[TopicPartition, FetchPartition]) -> FetchRequestData:
        """The next request for `partitions` (this round's, in their order)."""
        if self.epoch != INITIAL_EPOCH and self._new_leadership(partitions):
            self.epoch = INITIAL_EPOCH
        if self.epoch == INITIAL_EPOCH:
            self._session = dict(partitions)
            self.full_fetches += 1
            # The old session's id with epoch 0 closes it on the leader and opens a new one.
            return FetchRequestData(
                self.session_id, INITIAL_EPOCH, dict(partitions), [], frozenset(partitions)
            )
        session = self._session
        forgotten = [tp for tp in session if tp not in partitions]
        for tp in forgotten:
            del session[tp]
        to_send: dict[TopicPartition, FetchPartition] = {}
        for tp, fetch in partitions.items():
            if session.get(tp) != fetch:
                session[tp] = fetch
                to_send[tp] = fetch
        self.incremental_fetches += 1
        return FetchRequestData(self.session_id, self.epoch, to_send, forgotten, frozenset(session))

    def _new_leadership(self, partitions: Mapping[TopicPartition, FetchPartition]) -> bool:
        """Whether a partition of the session is now fetched in another leader epoch."""
        session = self._session
        for tp, fetch in partitions.items():
            held = session.get(tp)
            if held is not None and held.current_leader_epoch != fetch.current_leader_epoch:
                return True
        return False

    def handle_response(self, data: FetchRequestData, response: FetchResponse) -> bool:
        """Take the answer to `data`; False if it is not one the fetcher may apply (a
        request-level error, or an incremental answer that does not fit the session), in which
        case the next fetch is full."""
        if response.error_code != ErrorCode.NONE:
            self._reset(ErrorCode.from_code(response.error_code))
            return False
        if data.full:
            self.session_id = response.session_id
            self.epoch = (
                INITIAL_EPOCH
                if response.session_id == INVALID_SESSION_ID
                else _next_epoch(INITIAL_EPOCH)
            )
            return True
        if response.session_id != data.session_id or not _within(response, data):
            self._reset(None)
            return False
        self.epoch = _next_epoch(self.epoch)
        return True

    def handle_error(self) -> None:
        """The request got no answer (connection lost, timed out): start over with a full fetch."""
        self._reset(None)

    def force_full_fetch(self) -> None:
        """The fetcher could not apply an answered partition: the next fetch is full, so the
        leader answers every partition again (see the module docstring)."""
        self._reset(None)

    def _reset(self, error: ErrorCode | None) -> None:
        if error is ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
            # The leader has no such session (it restarted, or evicted it): open a fresh one.
            self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH


def _within(response: FetchResponse, data: FetchRequestData) -> bool:
    """Whether every answered partition belongs to the session (Kafka's
    verifyIncrementalFetchResponsePartitions)."""
    held = {(tp.topic, tp.partition) for tp in data.session_partitions}
    return all(
        (topic.topic, partition.partition_index) in held
        for topic in response.responses
        for partition in topic.partitions
    )
