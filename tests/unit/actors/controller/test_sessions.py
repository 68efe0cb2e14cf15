"""The controller's liveness table: sessions open, expire after the timeout (not at it), and a
broker in controlled shutdown is live but not eligible until its session opens again."""

from __future__ import annotations

import pytest

from actors.controller.sessions import BrokerSessions


def test_a_session_expires_only_after_the_timeout() -> None:
    sessions = BrokerSessions()
    sessions.open(2, now_ms=1_000)
    sessions.open(1, now_ms=1_000)
    sessions.heard_from(2, now_ms=1_200)
    assert sessions.expired(now_ms=1_300, timeout_ms=300) == []
    assert sessions.expired(now_ms=1_301, timeout_ms=300) == [1]
    assert sessions.expired(now_ms=1_501, timeout_ms=300) == [1, 2]


def test_shutting_down_is_live_but_not_eligible_until_a_new_session() -> None:
    sessions = BrokerSessions()
    for broker_id in (1, 2):
        sessions.open(broker_id, now_ms=0)
    sessions.begin_shutdown(1)
    assert sessions.live() == {1, 2}
    assert sessions.eligible() == {2}
    assert sessions.shutting_down() == {1}
    assert [sessions.state(b) for b in (1, 2, 3)] == ["shutting_down", "running", "fenced"]
    sessions.open(1, now_ms=10)  # it registered again
    assert sessions.eligible() == {1, 2}


def test_closing_a_session_fences_and_ends_the_shutdown() -> None:
    sessions = BrokerSessions()
    sessions.open(1, now_ms=0)
    sessions.begin_shutdown(1)
    sessions.close(1)
    assert not sessions.is_live(1)
    assert not sessions.is_shutting_down(1)
    assert sessions.state(1) == "fenced"
    assert sessions.expired(now_ms=10**9, timeout_ms=1) == []


def test_only_a_live_broker_is_heard_from() -> None:
    with pytest.raises(AssertionError):
        BrokerSessions().heard_from(1, now_ms=0)
