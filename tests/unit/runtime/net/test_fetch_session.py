"""runtime/net/fetch_session.py on a manual clock: sessions made by a full fetch, incremental
answers that leave out unchanged partitions and carry changed ones, forgotten partitions, the
FINAL epoch, unknown ids and wrong epochs, and Kafka's eviction rules at the slot limit. Session
ids come from a seeded PRNG (seed 7), so every run makes the same ids."""

from __future__ import annotations

import random
from typing import Final

import pytest

from runtime.clock import ManualClock
from runtime.net.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchContext,
    FetchSessionCache,
    FullFetchContext,
    IncrementalFetchContext,
    next_epoch,
)
from wire.errors import ErrorCode
from wire.messages import (
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    FetchTopic,
)

EVICTION_MS: Final = 1_000
TOPIC: Final = "orders"


def request(*partitions: tuple[str, int, int], replica_id: int = -1) -> FetchRequest:
    """A Fetch of (topic, partition, fetch offset) each, grouped by topic in the order given."""
    by_topic: dict[str, list[FetchPartition]] = {}
    for topic, index, offset in partitions:
        fetch = FetchPartition(partition=index, fetch_offset=offset, partition_max_bytes=1 << 20)
        by_topic.setdefault(topic, []).append(fetch)
    topics = [FetchTopic(topic=t, partitions=p) for t, p in by_topic.items()]
    return FetchRequest(replica_id=replica_id, max_wait_ms=0, min_bytes=1, topics=topics)


def data(index: int, hw: int, *, records: bytes = b"", error: int = 0) -> FetchResponsePartition:
    return FetchResponsePartition(
        partition_index=index,
        error_code=error,
        high_watermark=hw,
        last_stable_offset=hw,
        log_start_offset=0,
        records=records,
    )


def response_to(fetch: FetchRequest, hws: dict[tuple[str, int], int]) -> FetchResponse:
    """What the request path answers: every partition fetched, with the given high watermarks
    (0 by default) and one record set where the high watermark is past the fetch offset."""
    topics = []
    for topic in fetch.topics:
        parts = []
        for p in topic.partitions:
            hw = hws.get((topic.topic, p.partition), 0)
            parts.append(data(p.partition, hw, records=b"r" if hw > p.fetch_offset else b""))
        topics.append(FetchableTopicResponse(topic=topic.topic, partitions=parts))
    return FetchResponse(responses=topics)


def answered(response: FetchResponse) -> list[tuple[str, int]]:
    return [(t.topic, p.partition_index) for t in response.responses for p in t.partitions]


def fetched(fetch: FetchRequest) -> list[tuple[str, int, int]]:
    return [(t.topic, p.partition, p.fetch_offset) for t in fetch.topics for p in t.partitions]


class Sessions:
    def __init__(self, slots: int = 10) -> None:
        self.clock = ManualClock()
        self.cache = FetchSessionCache(self.clock, slots, EVICTION_MS, random.Random(7))

    def context(
        self,
        fetch: FetchRequest,
        session_id: int,
        epoch: int,
        forgotten: list[tuple[str, list[int]]] | None = None,
    ) -> FetchContext:
        context = self.cache.new_context(fetch, session_id, epoch, forgotten or [])
        assert isinstance(context, FetchContext), context
        return context

    def open(self, *partitions: tuple[str, int, int], replica_id: int = -1) -> int:
        """A new session of these partitions (all at high watermark 0); its id."""
        fetch = request(*partitions, replica_id=replica_id)
        context = self.context(fetch, INVALID_SESSION_ID, INITIAL_EPOCH)
        assert isinstance(context, FullFetchContext)
        _, session_id = context.answer(response_to(fetch, {}))
        return session_id


THREE: Final = ((TOPIC, 0, 0), (TOPIC, 1, 0), ("audit", 0, 0))


def test_a_full_fetch_opens_a_session_and_answers_everything() -> None:
    sessions = Sessions()
    fetch = request(*THREE)
    context = sessions.context(fetch, INVALID_SESSION_ID, INITIAL_EPOCH)
    full = response_to(fetch, {})
    answer, session_id = context.answer(full)
    assert answer is full
    assert session_id != INVALID_SESSION_ID
    session = sessions.cache.get(session_id)
    assert session is not None
    assert session.epoch == 1
    assert (len(sessions.cache), sessions.cache.num_partitions) == (1, 3)


def test_an_incremental_fetch_answers_only_what_changed() -> None:
    sessions = Sessions()
    session_id = sessions.open(*THREE)
    # Nothing listed: every session partition is fetched, none has changed.
    context = sessions.context(request(), session_id, 1)
    assert isinstance(context, IncrementalFetchContext)
    assert fetched(context.request) == [(TOPIC, 0, 0), (TOPIC, 1, 0), ("audit", 0, 0)]
    answer, answered_id = context.answer(response_to(context.request, {}))
    assert (answered(answer), answered_id) == ([], session_id)
    # Partition 1 got records (its high watermark moved): only it is answered.
    context = sessions.context(request(), session_id, 2)
    answer, _ = context.answer(response_to(context.request, {(TOPIC, 1): 5}))
    assert answered(answer) == [(TOPIC, 1)]
    # The client moves its offset on partition 1; the high watermark is what it was told.
    context = sessions.context(request((TOPIC, 1, 5)), session_id, 3)
    assert fetched(context.request) == [(TOPIC, 0, 0), (TOPIC, 1, 5), ("audit", 0, 0)]
    answer, _ = context.answer(response_to(context.request, {(TOPIC, 1): 5}))
    assert answered(answer) == []
    assert sessions.cache.incremental_fetches == 3


def test_a_changed_log_start_or_lso_or_an_error_is_answered() -> None:
    sessions = Sessions()
    session_id = sessions.open((TOPIC, 0, 0), (TOPIC, 1, 0), (TOPIC, 2, 0))
    context = sessions.context(request(), session_id, 1)
    moved_start = FetchResponsePartition(
        partition_index=0, high_watermark=0, last_stable_offset=0, log_start_offset=3
    )
    moved_lso = FetchResponsePartition(
        partition_index=1, high_watermark=0, last_stable_offset=-1, log_start_offset=0
    )
    failed = data(2, 0, error=ErrorCode.NOT_LEADER_OR_FOLLOWER)
    parts = [moved_start, moved_lso, failed]
    response = FetchResponse(responses=[FetchableTopicResponse(topic=TOPIC, partitions=parts)])
    answer, _ = context.answer(response)
    assert answered(answer) == [(TOPIC, 0), (TOPIC, 1), (TOPIC, 2)]


def test_new_partitions_are_answered_and_forgotten_ones_dropped() -> None:
    sessions = Sessions()
    session_id = sessions.open((TOPIC, 0, 0), (TOPIC, 1, 0))
    context = sessions.context(request(("audit", 0, 0)), session_id, 1, [(TOPIC, [1, 9])])
    assert fetched(context.request) == [(TOPIC, 0, 0), ("audit", 0, 0)]
    answer, _ = context.answer(response_to(context.request, {}))
    assert answered(answer) == [("audit", 0)]  # new: its first answer is always sent
    assert sessions.cache.num_partitions == 2


def test_forgetting_every_partition_ends_the_session() -> None:
    sessions = Sessions()
    session_id = sessions.open((TOPIC, 0, 0))
    context = sessions.context(request(), session_id, 1, [(TOPIC, [0])])
    assert type(context) is FetchContext
    assert sessions.cache.get(session_id) is None


def test_final_epoch_closes_the_session_and_is_answered_sessionless() -> None:
    sessions = Sessions()
    session_id = sessions.open(*THREE)
    fetch = request(*THREE)
    context = sessions.context(fetch, session_id, FINAL_EPOCH)
    assert type(context) is FetchContext
    full = response_to(fetch, {})
    assert context.answer(full) == (full, INVALID_SESSION_ID)
    assert len(sessions.cache) == 0
    assert sessions.cache.new_context(request(), session_id, 1) == (
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    )


def test_epoch_zero_with_an_id_replaces_the_session() -> None:
    sessions = Sessions()
    old = sessions.open(*THREE)
    new = sessions.open(*THREE)
    fetch = request(*THREE)
    _, replacement = sessions.context(fetch, old, INITIAL_EPOCH).answer(response_to(fetch, {}))
    assert sessions.cache.get(old) is None
    assert sessions.cache.get(new) is not None
    assert sessions.cache.get(replacement) is not None
    assert len(sessions.cache) == 2


def test_unknown_id_and_wrong_epoch_are_top_level_errors() -> None:
    sessions = Sessions()
    session_id = sessions.open(*THREE)
    unknown = sessions.cache.new_context(request(), session_id + 1, 1)
    assert unknown == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert sessions.cache.new_context(request(), session_id, 2) == (
        ErrorCode.INVALID_FETCH_SESSION_EPOCH
    )
    sessions.context(request(), session_id, 1)
    assert sessions.cache.new_context(request(), session_id, 1) == (
        ErrorCode.INVALID_FETCH_SESSION_EPOCH
    )


def test_a_request_overtaken_in_its_session_answers_invalid_epoch() -> None:
    sessions = Sessions()
    session_id = sessions.open(*THREE)
    first = sessions.context(request(), session_id, 1)
    second = sessions.context(request(), session_id, 2)
    answer, answered_id = first.answer(response_to(first.request, {}))
    assert answer.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert (answer.responses, answered_id) == ([], INVALID_SESSION_ID)
    assert second.answer(response_to(second.request, {}))[1] == session_id


def test_partitions_with_records_move_to_the_end() -> None:
    sessions = Sessions()
    session_id = sessions.open(*THREE)
    context = sessions.context(request(), session_id, 1)
    context.answer(response_to(context.request, {(TOPIC, 0): 4}))
    context = sessions.context(request(), session_id, 2)
    assert fetched(context.request) == [(TOPIC, 1, 0), (TOPIC, 0, 0), ("audit", 0, 0)]


@pytest.mark.parametrize("epoch", [1, 5, 0x7FFFFFFE])
def test_next_epoch_counts_up(epoch: int) -> None:
    assert next_epoch(epoch) == epoch + 1


def test_next_epoch_wraps_to_one() -> None:
    assert next_epoch(0x7FFFFFFF) == 1


# -- eviction ----------------------------------------------------------------------------------


def test_a_full_cache_answers_without_a_session_while_its_sessions_are_fresh() -> None:
    sessions = Sessions(slots=2)
    first = sessions.open((TOPIC, 0, 0))
    second = sessions.open((TOPIC, 0, 0))
    # Bigger, but the others are younger than the eviction time: no room.
    assert sessions.open(*THREE) == INVALID_SESSION_ID
    assert sessions.cache.get(first) is not None
    assert sessions.cache.get(second) is not None
    assert sessions.cache.evictions == 0


def test_a_session_unused_past_the_eviction_time_gives_up_its_slot() -> None:
    sessions = Sessions(slots=2)
    stale = sessions.open((TOPIC, 0, 0))
    used = sessions.open((TOPIC, 0, 0))
    sessions.clock.advance(EVICTION_MS * 0.6)
    sessions.context(request(), used, 1)  # used, so not the least recently used
    sessions.clock.advance(EVICTION_MS * 0.6)
    newcomer = sessions.open((TOPIC, 0, 0))  # even a smaller one takes a stale slot
    assert newcomer != INVALID_SESSION_ID
    assert sessions.cache.get(stale) is None
    assert sessions.cache.get(used) is not None
    assert sessions.cache.evictions == 1


def test_a_consumer_evicts_an_old_smaller_session_once_touched() -> None:
    sessions = Sessions(slots=1)
    small = sessions.open((TOPIC, 0, 0))
    sessions.clock.advance(EVICTION_MS * 1.5)
    sessions.context(request(), small, 1)  # touched after the eviction time: evictable by all
    assert sessions.open((TOPIC, 0, 0)) == INVALID_SESSION_ID  # not bigger: no room
    bigger = sessions.open(*THREE)
    assert bigger != INVALID_SESSION_ID
    assert sessions.cache.get(small) is None


def test_a_follower_evicts_a_fresh_consumer_session_but_not_a_fresh_follower() -> None:
    sessions = Sessions(slots=1)
    consumer = sessions.open(*THREE)
    follower = sessions.open((TOPIC, 0, 0), replica_id=2)  # privileged wins over any consumer
    assert follower != INVALID_SESSION_ID
    assert sessions.cache.get(consumer) is None
    assert sessions.open((TOPIC, 0, 0), (TOPIC, 1, 0), replica_id=3) == INVALID_SESSION_ID
    assert sessions.open(*THREE) == INVALID_SESSION_ID  # a consumer never evicts it


def test_no_slots_means_no_sessions() -> None:
    sessions = Sessions(slots=0)
    assert sessions.open(*THREE) == INVALID_SESSION_ID
    assert len(sessions.cache) == 0
