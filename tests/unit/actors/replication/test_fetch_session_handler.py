"""The follower's fetch-session handler (actors/replication/fetch_session_handler.py): what each
request lists and forgets, and the fall-back to a full fetch on every kind of failure. Pure
values: no loop, no clock, no randomness."""

from __future__ import annotations

import dataclasses

import pytest

from actors.replication.fetch_session_handler import (
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchRequestData,
    FetchSessionHandler,
)
from wire.errors import ErrorCode
from wire.messages import (
    FetchableTopicResponse,
    FetchPartition,
    FetchResponse,
    FetchResponsePartition,
)
from wire.topic import TopicPartition

A0 = TopicPartition("a", 0)
A1 = TopicPartition("a", 1)
B0 = TopicPartition("b", 0)
SESSION = 4242


def fetch(tp: TopicPartition, offset: int, epoch: int = 3) -> FetchPartition:
    return FetchPartition(
        partition=tp.partition,
        current_leader_epoch=epoch,
        fetch_offset=offset,
        log_start_offset=0,
        partition_max_bytes=1024,
    )


def answer(
    session_id: int, *tps: TopicPartition, error: ErrorCode = ErrorCode.NONE
) -> FetchResponse:
    by_topic: dict[str, list[FetchResponsePartition]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(
            FetchResponsePartition(partition_index=tp.partition, high_watermark=5)
        )
    return FetchResponse(
        error_code=int(error),
        session_id=session_id,
        responses=[FetchableTopicResponse(topic=t, partitions=p) for t, p in by_topic.items()],
    )


def opened(*tps: TopicPartition) -> FetchSessionHandler:
    """A handler whose first (full) fetch of `tps` at offset 0 opened session SESSION."""
    handler = FetchSessionHandler()
    data = handler.build({tp: fetch(tp, 0) for tp in tps})
    assert handler.handle_response(data, answer(SESSION, *tps))
    return handler


def test_the_first_fetch_is_full_and_asks_for_a_session() -> None:
    handler = FetchSessionHandler()
    partitions = {A0: fetch(A0, 0), B0: fetch(B0, 7)}
    data = handler.build(partitions)
    assert (data.session_id, data.session_epoch) == (INVALID_SESSION_ID, INITIAL_EPOCH)
    assert data.full
    assert data.to_send == partitions
    assert data.forgotten == []
    assert handler.handle_response(data, answer(SESSION, A0, B0))
    assert (handler.session_id, handler.epoch) == (SESSION, 1)


def test_an_incremental_fetch_lists_only_changed_and_added_partitions() -> None:
    handler = opened(A0, A1)
    data = handler.build({A0: fetch(A0, 0), A1: fetch(A1, 9), B0: fetch(B0, 0)})
    assert (data.session_id, data.session_epoch) == (SESSION, 1)
    assert not data.full
    assert data.to_send == {A1: fetch(A1, 9), B0: fetch(B0, 0)}
    assert data.forgotten == []
    assert data.session_partitions == {A0, A1, B0}
    assert handler.handle_response(data, answer(SESSION, A1))
    assert handler.epoch == 2
    # Nothing changed: nothing listed, the leader still fetches all three.
    quiet = handler.build({A0: fetch(A0, 0), A1: fetch(A1, 9), B0: fetch(B0, 0)})
    assert quiet.to_send == {}
    assert quiet.session_partitions == {A0, A1, B0}
    assert quiet.session_epoch == 2


def test_a_new_leader_epoch_makes_the_round_full() -> None:
    handler = opened(A0, A1)
    data = handler.build({A0: fetch(A0, 0, epoch=4), A1: fetch(A1, 0)})
    assert (data.session_id, data.session_epoch) == (SESSION, INITIAL_EPOCH)
    assert data.to_send == {A0: fetch(A0, 0, epoch=4), A1: fetch(A1, 0)}
    assert handler.handle_response(data, answer(SESSION + 1, A0, A1))
    # The new session holds the new epoch: the next round is incremental again.
    assert not handler.build({A0: fetch(A0, 0, epoch=4), A1: fetch(A1, 0)}).full


def test_partitions_left_out_of_a_round_are_forgotten_and_re_added_later() -> None:
    handler = opened(A0, A1, B0)
    data = handler.build({A0: fetch(A0, 0)})
    assert data.to_send == {}
    assert sorted(data.forgotten, key=str) == sorted([A1, B0], key=str)
    assert data.session_partitions == {A0}
    assert handler.handle_response(data, answer(SESSION))
    back = handler.build({A0: fetch(A0, 0), A1: fetch(A1, 0)})
    assert back.to_send == {A1: fetch(A1, 0)}  # new to the session again: listed
    assert back.forgotten == []


def test_an_incremental_answer_needs_the_same_session_id() -> None:
    handler = opened(A0)
    data = handler.build({A0: fetch(A0, 1)})
    assert not handler.handle_response(data, answer(SESSION + 1, A0))
    again = handler.build({A0: fetch(A0, 1)})
    assert again.full
    assert again.session_id == SESSION  # names the old session, so the leader closes it
    assert again.to_send == {A0: fetch(A0, 1)}


def test_an_incremental_answer_naming_a_partition_outside_the_session_is_refused() -> None:
    handler = opened(A0)
    data = handler.build({A0: fetch(A0, 1)})
    assert not handler.handle_response(data, answer(SESSION, A0, B0))
    assert handler.build({A0: fetch(A0, 1)}).full


def test_session_id_not_found_opens_a_fresh_session() -> None:
    handler = opened(A0)
    data = handler.build({A0: fetch(A0, 1)})
    response = answer(0, error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    assert not handler.handle_response(data, response)
    again = handler.build({A0: fetch(A0, 1)})
    assert (again.session_id, again.session_epoch) == (INVALID_SESSION_ID, INITIAL_EPOCH)


@pytest.mark.parametrize(
    "error",
    [ErrorCode.INVALID_FETCH_SESSION_EPOCH, ErrorCode.UNKNOWN_SERVER_ERROR],
)
def test_other_request_errors_close_the_session_with_a_full_fetch(error: ErrorCode) -> None:
    handler = opened(A0, A1)
    data = handler.build({A0: fetch(A0, 1), A1: fetch(A1, 0)})
    assert not handler.handle_response(data, answer(0, error=error))
    again = handler.build({A0: fetch(A0, 1), A1: fetch(A1, 0)})
    assert (again.session_id, again.session_epoch) == (SESSION, INITIAL_EPOCH)
    assert again.to_send == {A0: fetch(A0, 1), A1: fetch(A1, 0)}  # everything, unchanged or not


def test_a_lost_request_falls_back_to_a_full_fetch() -> None:
    handler = opened(A0, A1)
    handler.build({A0: fetch(A0, 1), A1: fetch(A1, 0)})
    handler.handle_error()
    again = handler.build({A0: fetch(A0, 1), A1: fetch(A1, 0)})
    assert again.full
    assert set(again.to_send) == {A0, A1}


def test_an_answer_the_fetcher_could_not_apply_forces_a_full_fetch() -> None:
    handler = opened(A0, A1)
    data = handler.build({A0: fetch(A0, 0), A1: fetch(A1, 0)})
    assert handler.handle_response(data, answer(SESSION, A1))
    handler.force_full_fetch()
    again = handler.build({A0: fetch(A0, 0), A1: fetch(A1, 0)})
    assert again.full
    assert set(again.to_send) == {A0, A1}
    assert (handler.full_fetches, handler.incremental_fetches) == (2, 1)


def test_no_room_on_the_leader_keeps_every_fetch_full() -> None:
    handler = FetchSessionHandler()
    for _ in range(3):
        data = handler.build({A0: fetch(A0, 0)})
        assert dataclasses.astuple(data)[:2] == (INVALID_SESSION_ID, INITIAL_EPOCH)
        assert handler.handle_response(data, answer(INVALID_SESSION_ID, A0))
    assert handler.full_fetches == 3


def test_a_full_fetch_resets_what_the_session_holds() -> None:
    handler = opened(A0, A1)
    handler.force_full_fetch()
    data = handler.build({A0: fetch(A0, 2)})
    assert data.session_partitions == {A0}
    assert handler.handle_response(data, answer(SESSION + 1, A0))
    # A1 was dropped by the full fetch: coming back it is listed, and nothing is forgotten.
    later = handler.build({A0: fetch(A0, 2), A1: fetch(A1, 0)})
    assert later.to_send == {A1: fetch(A1, 0)}
    assert later.forgotten == []
    assert isinstance(later, FetchRequestData)
