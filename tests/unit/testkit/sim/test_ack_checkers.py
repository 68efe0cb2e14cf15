"""`acks_all_held_by_min_insync_replicas` on small hand-built histories: a write acknowledged
with acks=all must have been in at least min.insync.replicas running replicas' logs at once, at
some sample between its send and its answer."""

from __future__ import annotations

from collections.abc import Iterable

from testkit.sim.checkers import ALL_CHECKERS, acks_all_held_by_min_insync_replicas
from testkit.sim.history import Ack, History, LogEnd, TopicDeleted
from wire.topic import TopicPartition

TP = TopicPartition("t", 0)
SENT_NS = 100
ACKED_NS = 200


def history_of(
    samples: Iterable[tuple[int, int, int]],
    *,
    offset: int = 4,
    acks: int = -1,
    min_insync_replicas: int | None = 2,
    sent_ns: int | None = SENT_NS,
    incarnation: int = 0,
) -> History:
    """One write of b"v" at `offset`, sent at SENT_NS and answered at ACKED_NS, and log-end
    samples (broker, log end offset, at_ns) of TP's replicas."""
    history = History(seed=3)
    if min_insync_replicas is not None:
        history.set_min_insync_replicas(TP.topic, min_insync_replicas)
    history.append_attempt("p1", b"v", idempotent=True)
    if sent_ns is not None:
        history.set_attempted_at(b"v", sent_ns)
    for broker, end, at_ns in samples:
        history.append_log_end(LogEnd(broker, incarnation, TP, end, at_ns))
    history.append_ack(Ack("p1", TP, b"v", offset, acks, True, at_ns=ACKED_NS))
    return history


def violations(history: History) -> list[str]:
    return [violation.message for violation in acks_all_held_by_min_insync_replicas(history)]


def test_it_is_registered() -> None:
    assert ALL_CHECKERS["acks_all_held_by_min_insync_replicas"] is (
        acks_all_held_by_min_insync_replicas
    )


def test_a_write_two_replicas_held_before_its_answer_passes() -> None:
    # Broker 0 leads and appends; broker 1 fetches it; broker 2 lags and never gets it.
    samples = [(0, 4, 10), (1, 4, 10), (2, 2, 10), (0, 5, 120), (1, 5, 150)]
    assert violations(history_of(samples)) == []


def test_a_write_only_its_leader_held_is_caught() -> None:
    samples = [(0, 4, 10), (1, 3, 10), (2, 3, 10), (0, 5, 120), (0, 6, 190), (1, 4, 195)]
    assert violations(history_of(samples)) == [
        "t-0 offset 4: p1's acks=all write b'v' was acknowledged, but at most 1 replica(s) [0] "
        "held it at once between its send (100 ns) and its answer (min.insync.replicas 2)"
    ]


def test_the_window_is_inclusive_at_both_ends() -> None:
    # Held by two exactly at the send's stamp; and, in another run, exactly at the answer's.
    assert violations(history_of([(0, 5, SENT_NS), (1, 5, SENT_NS)])) == []
    assert violations(history_of([(0, 5, 150), (1, 5, ACKED_NS)])) == []


def test_two_replicas_holding_it_only_after_the_answer_is_caught() -> None:
    samples = [(0, 5, 120), (1, 5, ACKED_NS + 1)]
    assert len(violations(history_of(samples))) == 1


def test_two_replicas_holding_the_offset_before_the_send_do_not_count() -> None:
    # Offset 4 was in two logs before this write was sent (an earlier record there, truncated
    # from broker 1 at 80): that says nothing about this write.
    samples = [(0, 6, 10), (1, 6, 10), (1, 3, 80)]
    assert len(violations(history_of(samples))) == 1
    # Without a send time the whole run before the answer is searched (a weaker check).
    assert violations(history_of(samples, sent_ns=None)) == []


def test_replicas_must_hold_it_at_once() -> None:
    # Broker 0 held it and stopped (-1) before broker 1 had it: never two at once.
    samples = [(0, 5, 120), (0, -1, 130), (1, 5, 140)]
    assert violations(history_of(samples)) == [
        "t-0 offset 4: p1's acks=all write b'v' was acknowledged, but at most 1 replica(s) [0] "
        "held it at once between its send (100 ns) and its answer (min.insync.replicas 2)"
    ]


def test_a_stopped_broker_and_its_next_incarnation_count_once() -> None:
    history = history_of([(0, 5, 120), (1, 5, 130), (1, -1, 140)])
    history.append_log_end(LogEnd(1, 1, TP, 5, at_ns=150))  # broker 1 restarted
    assert violations(history) == []
    history = history_of([(0, 5, 120), (1, -1, 110)])
    history.append_log_end(LogEnd(1, 1, TP, 5, at_ns=ACKED_NS + 5))  # only after the answer
    assert len(violations(history)) == 1


def test_min_insync_replicas_is_the_topics() -> None:
    samples = [(0, 5, 120), (1, 5, 130), (2, 4, 140)]
    assert violations(history_of(samples, min_insync_replicas=2)) == []
    assert violations(history_of(samples, min_insync_replicas=3)) == [
        "t-0 offset 4: p1's acks=all write b'v' was acknowledged, but at most 2 replica(s) "
        "[0, 1] held it at once between its send (100 ns) and its answer "
        "(min.insync.replicas 3)"
    ]
    assert violations(history_of(samples, min_insync_replicas=1)) == []


def test_what_it_does_not_judge() -> None:
    only_leader = [(0, 5, 120)]
    # acks=1 promises nothing beyond the leader; a topic with no known minimum is not judged.
    assert violations(history_of(only_leader, acks=1)) == []
    assert violations(history_of(only_leader, min_insync_replicas=None)) == []
    # An answer after the topic's deletion was asked: its replicas were going away.
    history = history_of(only_leader)
    history.append_topic_deleted(TopicDeleted(TP.topic, at_ns=ACKED_NS))
    assert violations(history) == []
    # A deletion asked after the answer exempts nothing.
    history = history_of(only_leader)
    history.append_topic_deleted(TopicDeleted(TP.topic, at_ns=ACKED_NS + 1))
    assert len(violations(history)) == 1


def test_samples_out_of_order_are_judged_by_their_times() -> None:
    samples = [(1, 5, 150), (0, 5, 120), (0, -1, 160)]
    assert violations(history_of(samples)) == []
