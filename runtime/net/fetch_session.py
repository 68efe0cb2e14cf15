"""Incremental fetch sessions (KIP-227): `FetchSessionCache` and the `FetchContext` of one Fetch.

Kafka's FetchSession.scala, modelled on its 3.x single-cache form. A client that fetches many
partitions over and over asks for a session (session id 0, epoch 0): the answer is a full one
and carries a new session id (0 when the cache has no room). From then on each request names the
session and its next epoch, lists only the partitions whose fetch offset or max bytes changed
(and `forgotten_topics_data` for those it drops); the broker fetches every partition of the
session, and answers only those with records, a changed high watermark, log start offset or
last stable offset, or an error. Epoch -1 (FINAL) closes a session; id 0 with epoch -1 is a
sessionless fetch, answered in full as before sessions existed.

    request (session id, epoch)    context            answer's session id
    (0, -1)                        sessionless        0
    (id, -1)                       sessionless        0, session id closed
    (0 or id, 0)                   full               a new session (id closed first), or 0
    (id, e > 0), e = session's     incremental        id (epoch becomes e + 1)
    (id, e > 0), id unknown        error              FETCH_SESSION_ID_NOT_FOUND, 0
    (id, e > 0), e != session's    error              INVALID_FETCH_SESSION_EPOCH, 0

Eviction, as Kafka's FetchSessionCache (`max.incremental.fetch.session.cache.slots` sessions at
most; `MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS`, Kafka's KafkaServer constant, 2 minutes): a new
session may always take the slot of a session not used for longer than that; otherwise a
follower's (privileged) session may evict the least valuable session that is a consumer's or
older than that, and a consumer's only one older than that; "least valuable" orders by
(privileged, partitions, id), and the newcomer wins only if it is not less valuable itself. So a
fresh session cannot be pushed out by churning consumers, and followers win slots from consumers.
The evictable sets are refreshed when a session is touched (created or used), as Kafka's are.
Kafka keeps three sorted maps; here the sessions dict is kept in last-used order (oldest first:
the stale check is O(1)) and the least valuable evictable session is found by a scan, which runs
only when the cache is full and a new session is asked for.

Which partitions an incremental answer carries (Kafka's CachedPartition.maybeUpdateResponseData):
records, an error, or a high watermark / log start offset / last stable offset other than the one
last answered; partitions new to the session start with high watermark -1, so their first answer
is always sent. A partition whose records went out moves to the end of the session's order, so
under the response's max bytes the others get their turn next time (Kafka's fairness rule).

The session's native request (every partition, grouped by topic) is rebuilt only when the
session changed; an incremental fetch of unchanged partitions builds nothing but its (short)
answer, which is what makes it cheaper than a full one (bench/fetch_sessions.py).

State: the cache is owned by the broker's event loop (one per broker, as KIP-227's: the Kafka
listener's dialect and, for followers, the native listener's call it from `admit` and `encode`,
all on the loop thread), so it needs no lock; a `FetchContext` lives from a
request's admission to its answer.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable
from typing import Final

from runtime.clock import Clock
from wire.errors import ErrorCode
from wire.messages import (
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    FetchTopic,
)

INVALID_SESSION_ID: Final = 0
INITIAL_EPOCH: Final = 0
FINAL_EPOCH: Final = -1
DEFAULT_MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS: Final = 1000
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: Final = 120_000
_MAX_EPOCH: Final = 0x7FFFFFFF
_MAX_SESSION_ID: Final = 0x7FFFFFFF
_UNKNOWN: Final = -1  # a new partition's last answered offsets: its first answer is always sent

TopicPartition = tuple[str, int]


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch` (Kafka's FetchMetadata.nextEpoch: it wraps to 1, never to 0)."""
    assert epoch >= 0, epoch
    return 1 if epoch == _MAX_EPOCH else epoch + 1


class CachedPartition:
    """A session's partition: what the client last asked (`fetch`) and what it was last told."""

    __slots__ = ("fetch", "high_watermark", "last_stable_offset", "log_start_offset")

    def __init__(self, fetch: FetchPartition) -> None:
        self.fetch = fetch
        self.high_watermark = _UNKNOWN
        self.log_start_offset = _UNKNOWN
        self.last_stable_offset = _UNKNOWN

    def must_respond(self, data: FetchResponsePartition) -> bool:
        """Whether an incremental answer carries `data`; records what the client is told."""
        changed = (
            data.high_watermark != self.high_watermark
            or data.log_start_offset != self.log_start_offset
            or data.last_stable_offset != self.last_stable_offset
        )
        if changed:
            self.high_watermark = data.high_watermark
            self.log_start_offset = data.log_start_offset
            self.last_stable_offset = data.last_stable_offset
        return changed or bool(data.records) or data.error_code != ErrorCode.NONE


class FetchSession:
    """One session: its partitions in fetch order, its epoch, when it was made and last used."""

    __slots__ = (
        "_request_topics",
        "cached_size",
        "creation_ms",
        "epoch",
        "id",
        "last_used_ms",
        "partitions",
        "privileged",
    )

    def __init__(
        self, session_id: int, privileged: bool, partitions: dict[TopicPartition, CachedPartition]
    ) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.creation_ms = 0
        self.last_used_ms = 0
        self.cached_size = 0  # the size the cache's partition count holds for it
        self._request_topics: list[FetchTopic] | None = None

    def evictable_key(self) -> tuple[bool, int, int]:
        """Kafka's EvictableKey: the smallest is the least valuable session."""
        return (self.privileged, len(self.partitions), self.id)

    def update(self, request: FetchRequest, forgotten: Iterable[tuple[str, list[int]]]) -> None:
        """Apply an incremental request: its partitions are added or updated, then the
        forgotten ones removed (Kafka's order)."""
        partitions = self.partitions
        changed = False
        for topic in request.topics:
            for fetch in topic.partitions:
                cached = partitions.get((topic.topic, fetch.partition))
                if cached is None:
                    partitions[topic.topic, fetch.partition] = CachedPartition(fetch)
                else:
                    cached.fetch = fetch
                changed = True
        for topic_name, indexes in forgotten:
            for index in indexes:
                changed = partitions.pop((topic_name, index), None) is not None or changed
        if changed:
            self._request_topics = None

    def request_topics(self) -> list[FetchTopic]:
        """Every partition of the session as a native request's topics (built once per change)."""
        topics = self._request_topics
        if topics is None:
            by_topic: dict[str, list[FetchPartition]] = {}
            for (topic, _), cached in self.partitions.items():
                by_topic.setdefault(topic, []).append(cached.fetch)
            topics = [FetchTopic(topic=t, partitions=p) for t, p in by_topic.items()]
            self._request_topics = topics
        return topics

    def answer(self, response: FetchResponse) -> FetchResponse:
        """The incremental answer to `response` (every session partition's data): only the
        partitions `CachedPartition.must_respond` keeps; those with records move to the end."""
        partitions = self.partitions
        answered: list[FetchableTopicResponse] = []
        rotated: list[TopicPartition] = []
        for topic in response.responses:
            kept = []
            for data in topic.partitions:
                key = (topic.topic, data.partition_index)
                cached = partitions.get(key)
                if cached is None or cached.must_respond(data):
                    kept.append(data)
                    if data.records and cached is not None:
                        rotated.append(key)
            if kept:
                answered.append(FetchableTopicResponse(topic=topic.topic, partitions=kept))
        for key in rotated:
            partitions[key] = partitions.pop(key)
        if rotated:
            self._request_topics = None
        return FetchResponse(
            error_code=response.error_code,
            throttle_time_ms=response.throttle_time_ms,
            responses=answered,
        )


class FetchContext:
    """A sessionless Fetch (and the base of the others): the native request to fetch, and
    `answer`, which turns the handler's response into (the answer to send, its session id)."""

    __slots__ = ("request",)

    def __init__(self, request: FetchRequest) -> None:
        self.request = request

    def answer(self, response: FetchResponse) -> tuple[FetchResponse, int]:
        return response, INVALID_SESSION_ID


class FullFetchContext(FetchContext):
    """A full Fetch asking for a session: answered in full, with a new session if there is room."""

    __slots__ = ("_cache",)

    def __init__(self, request: FetchRequest, cache: FetchSessionCache) -> None:
        super().__init__(request)
        self._cache = cache

    def answer(self, response: FetchResponse) -> tuple[FetchResponse, int]:
        partitions: dict[TopicPartition, CachedPartition] = {}
        for topic in self.request.topics:
            for fetch in topic.partitions:
                partitions[topic.topic, fetch.partition] = CachedPartition(fetch)
        for topic_data in response.responses:
            for data in topic_data.partitions:
                cached = partitions.get((topic_data.topic, data.partition_index))
                if cached is not None:
                    cached.must_respond(data)  # what the client is told now
        privileged = self.request.replica_id >= 0
        return response, self._cache.maybe_create_session(privileged, partitions)


class IncrementalFetchContext(FetchContext):
    """A Fetch in a session: every session partition is fetched, the changed ones answered."""

    __slots__ = ("_expected_epoch", "_session")

    def __init__(self, request: FetchRequest, session: FetchSession) -> None:
        super().__init__(request)
        self._session = session
        self._expected_epoch = session.epoch

    def answer(self, response: FetchResponse) -> tuple[FetchResponse, int]:
        session = self._session
        if session.epoch != self._expected_epoch:
            # Another request of the session came in between (Kafka's check).
            return error_answer(ErrorCode.INVALID_FETCH_SESSION_EPOCH), INVALID_SESSION_ID
        return session.answer(response), session.id


def error_answer(code: ErrorCode) -> FetchResponse:
    """A session error: top-level, with no partitions (Kafka's SessionErrorContext)."""
    return FetchResponse(error_code=code, responses=[])


class FetchSessionCache:
    """The broker's fetch sessions (see the module docstring), at most `max_entries`."""

    def __init__(
        self,
        clock: Clock,
        max_entries: int = DEFAULT_MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS,
        eviction_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
        rng: random.Random | None = None,
    ) -> None:
        if max_entries < 0:
            raise ValueError(f"cache slots must be >= 0: {max_entries}")
        self._clock = clock
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._rng = rng or random.Random()
        # Last-used order, oldest first: touching a session moves it to the end.
        self._sessions: dict[int, FetchSession] = {}
        self._evictable_by_all: set[int] = set()
        self._evictable_by_privileged: set[int] = set()
        self.num_partitions = 0
        self.incremental_fetches = 0  # answered in a session (Kafka has no such counter)
        self.evictions = 0  # Kafka's IncrementalFetchSessionEvictionsPerSec, as a total

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    # -- a request's context ---------------------------------------------------------------------

    def new_context(
        self,
        request: FetchRequest,
        session_id: int,
        epoch: int,
        forgotten: Iterable[tuple[str, list[int]]] = (),
    ) -> FetchContext | ErrorCode:
        """The context a Fetch with these session fields is served in, or the top-level error
        it is answered with (Kafka's FetchManager.newContext)."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            if epoch == FINAL_EPOCH:
                return FetchContext(request)
            return FullFetchContext(request, self)
        session = self._sessions.get(session_id)
        if session is None:
            return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if session.epoch != epoch:
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH
        session.update(request, forgotten)
        if not session.partitions:
            self.remove(session_id)
            return FetchContext(request)
        self.touch(session)
        session.epoch = next_epoch(session.epoch)
        self.incremental_fetches += 1
        full = dataclasses.replace(request, topics=session.request_topics())
        return IncrementalFetchContext(full, session)

    # -- the cache -------------------------------------------------------------------------------

    def maybe_create_session(
        self, privileged: bool, partitions: dict[TopicPartition, CachedPartition]
    ) -> int:
        """A new session's id, or 0 when there is no room (Kafka's maybeCreateSession)."""
        now_ms = self._clock.monotonic_ms()
        key = (privileged, len(partitions), INVALID_SESSION_ID)
        if len(self._sessions) >= self.max_entries and not self._try_evict(privileged, key, now_ms):
            return INVALID_SESSION_ID
        session_id = self._new_session_id()
        session = FetchSession(session_id, privileged, partitions)
        session.creation_ms = now_ms
        self._sessions[session_id] = session
        self.touch(session)
        return session_id

    def touch(self, session: FetchSession) -> None:
        """Mark a session used now, and refresh its size and evictability (Kafka's touch)."""
        now_ms = self._clock.monotonic_ms()
        self._sessions[session.id] = self._sessions.pop(session.id)  # now the newest
        session.last_used_ms = now_ms
        self.num_partitions += len(session.partitions) - session.cached_size
        session.cached_size = len(session.partitions)
        old = now_ms - session.creation_ms > self.eviction_ms
        _mark(self._evictable_by_privileged, session.id, old or not session.privileged)
        _mark(self._evictable_by_all, session.id, old)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            self._evictable_by_all.discard(session_id)
            self._evictable_by_privileged.discard(session_id)
            self.num_partitions -= session.cached_size
        return session

    def _try_evict(self, privileged: bool, key: tuple[bool, int, int], now_ms: int) -> bool:
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            self._evict(oldest.id)
            return True
        candidates = self._evictable_by_privileged if privileged else self._evictable_by_all
        if not candidates:
            return False
        victim = min((self._sessions[i] for i in candidates), key=FetchSession.evictable_key)
        if key < victim.evictable_key():
            return False
        self._evict(victim.id)
        return True

    def _evict(self, session_id: int) -> None:
        self.remove(session_id)
        self.evictions += 1

    def _new_session_id(self) -> int:
        # Random, as Kafka's, so that a restarted broker does not recognise a stale id; the
        # cache is far smaller than the id space, so this loop ends at once.
        while True:
            session_id = self._rng.randint(1, _MAX_SESSION_ID)
            if session_id not in self._sessions:
                return session_id


def _mark(members: set[int], session_id: int, member: bool) -> None:
    if member:
        members.add(session_id)
    else:
        members.discard(session_id)
