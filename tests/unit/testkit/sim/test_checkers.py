"""Each checker passes a clean hand-built history and catches one that breaks its invariant."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from testkit.sim.checkers import (
    ALL_CHECKERS,
    Violation,
    acknowledged_offsets_unique,
    acknowledged_writes_kept,
    check_all,
    committed_offsets_kept,
    controller_epochs_monotonic,
    duplicate_counts,
    format_violations,
    high_watermark_monotonic,
    isr_never_empty,
    no_duplicates_from_idempotent_producers,
    one_leader_per_epoch,
    reads_match_the_log,
    replicas_agree_below_the_high_watermark,
    transactions_all_or_nothing,
)
from testkit.sim.history import (
    Ack,
    ConsumerRestart,
    ControllerEpoch,
    HighWatermark,
    History,
    IsrChange,
    LeaderClaim,
    LoggedRecord,
    OffsetCommitted,
    Read,
    ReplicaState,
    TopicDeleted,
    TransactionOutcome,
)
from wire.topic import TopicPartition

TP = TopicPartition("t", 0)
VALUES = (b"a", b"b", b"c", b"d")


def replica(
    broker: int,
    records: Mapping[int, bytes | None],
    *,
    leader: bool = False,
    high_watermark: int | None = None,
    batch_bytes: bytes | None = None,
    log_end_offset: int | None = None,
) -> ReplicaState:
    """A final replica of TP; its batch bytes default to a stand-in encoding of its records below
    the high watermark, so equal records give equal bytes."""
    end = max(records, default=-1) + 1 if log_end_offset is None else log_end_offset
    hw = end if high_watermark is None else high_watermark
    if batch_bytes is None:
        below = (offset for offset in sorted(records) if offset < hw)
        batch_bytes = b"".join(b"%d=%r;" % (offset, records[offset]) for offset in below)
    return ReplicaState(
        broker=broker,
        tp=TP,
        leader_epoch=3,
        is_leader=leader,
        high_watermark=hw,
        log_start_offset=0,
        log_end_offset=end,
        records=tuple(LoggedRecord(offset, records[offset]) for offset in sorted(records)),
        batch_bytes=batch_bytes,
    )


def settled(records: Mapping[int, bytes | None] | None = None) -> History:
    """Three replicas of TP that agree on `records` (VALUES at 0..3 unless given), broker 0
    leading, all three in the final ISR."""
    records = dict(enumerate(VALUES)) if records is None else records
    history = History(seed=7)
    history.append_isr_change(IsrChange(TP, 0, 3, 5, (0, 1, 2), at_ns=10))
    for broker in (0, 1, 2):
        history.append_final(replica(broker, records, leader=broker == 0))
    return history


def ack(value: bytes, offset: int, *, acks: int = -1, idempotent: bool = False) -> Ack:
    return Ack("p1", TP, value, offset, acks, idempotent, at_ns=100 + offset)


def read(offset: int, value: bytes | None, consumer: str = "c1") -> Read:
    return Read(consumer, TP, offset, value, at_ns=200 + offset)


def messages(violations: Sequence[Violation]) -> list[str]:
    return [violation.message for violation in violations]


# -- acknowledged_writes_kept ------------------------------------------------------------------


def test_acknowledged_writes_kept_passes_when_every_acks_all_write_is_in_the_leader_log() -> None:
    history = settled()
    for offset, value in enumerate(VALUES):
        history.append_ack(ack(value, offset))
    history.append_ack(ack(b"lost-acks-1", 4, acks=1))  # acks=1 may be lost with its leader
    history.append_ack(ack(b"never-known", -1, acks=0))
    assert acknowledged_writes_kept(history) == []


def test_acknowledged_writes_kept_catches_a_lost_a_replaced_and_an_uncommitted_write() -> None:
    history = settled()
    history.append_final(replica(3, {0: b"a"}))  # not a leader: never consulted
    history.final[TP][0] = replica(0, {0: b"a", 1: b"b", 2: b"c"}, leader=True, high_watermark=2)
    history.append_ack(ack(b"a", 0))
    history.append_ack(ack(b"x", 1))
    history.append_ack(ack(b"c", 2))
    history.append_ack(ack(b"d", 3))
    assert messages(acknowledged_writes_kept(history)) == [
        "t-0 offset 1: p1's acks=all write b'x' at offset 1 was lost: leader broker 0 (epoch 3) "
        "has b'b'",
        "t-0 offset 2: p1's acks=all write b'c' at offset 2 was lost: leader broker 0 (epoch 3) "
        "has it, but at or above its high watermark 2",
        "t-0 offset 3: p1's acks=all write b'd' at offset 3 was lost: leader broker 0 (epoch 3) "
        "has no data record there",
    ]


def test_acknowledged_writes_kept_wants_a_leader_but_exempts_deleted_topics() -> None:
    history = History(seed=1)
    history.append_ack(ack(b"a", 0))
    history.append_ack(ack(b"b", 1))
    assert messages(acknowledged_writes_kept(history)) == [
        "t-0: no leader at the end to hold p1's acks=all write b'a' at offset 0 (and any later "
        "ones)"
    ]
    history.append_topic_deleted(TopicDeleted("t", at_ns=300))
    assert acknowledged_writes_kept(history) == []


# -- acknowledged_offsets_unique ---------------------------------------------------------------


def test_acknowledged_offsets_unique_allows_a_retry_answered_with_its_first_offset() -> None:
    history = History(seed=1)
    history.append_ack(ack(b"a", 0, idempotent=True))
    history.append_ack(ack(b"a", 0, idempotent=True))
    history.append_ack(ack(b"b", 1))
    history.append_ack(ack(b"c", 1, acks=1))  # an acks=1 write may be truncated and reused
    assert acknowledged_offsets_unique(history) == []


def test_acknowledged_offsets_unique_catches_two_values_at_one_offset() -> None:
    history = History(seed=1)
    history.append_ack(ack(b"a", 0))
    history.append_ack(Ack("p2", TP, b"z", 0, -1, False, at_ns=150))
    [violation] = acknowledged_offsets_unique(history)
    assert violation.at_ns == 150
    assert violation.message == (
        "t-0 offset 0: acknowledged to p2 for b'z' after it was acknowledged for b'a'"
    )


# -- no_duplicates_from_idempotent_producers ---------------------------------------------------


def test_duplicates_from_a_plain_producer_are_counted_not_reported() -> None:
    history = settled({0: b"a", 1: b"b", 2: b"a", 3: b"a"})
    history.append_attempt("p1", b"a", idempotent=False)
    history.append_attempt("p2", b"b", idempotent=True)
    history.append_ack(ack(b"a", 0))
    assert no_duplicates_from_idempotent_producers(history) == []
    assert duplicate_counts(history) == {"p1": 2, "p2": 0}


def test_a_duplicate_of_an_idempotent_write_is_caught_even_if_never_acknowledged() -> None:
    history = settled({0: b"a", 1: b"b", 2: b"b"})
    history.append_attempt("p2", b"b", idempotent=True)
    [violation] = no_duplicates_from_idempotent_producers(history)
    assert violation.message == (
        "t-0: idempotent producer p2's value b'b' is 2 times in the log of leader broker 0 "
        "(epoch 3), at offsets [1, 2]"
    )
    assert duplicate_counts(history) == {"p2": 1}


def test_an_acknowledged_idempotent_write_counts_as_idempotent_without_an_attempt() -> None:
    history = settled({0: b"a", 1: b"a"})
    history.append_ack(ack(b"a", 0, idempotent=True))
    assert "offsets [0, 1]" in messages(no_duplicates_from_idempotent_producers(history))[0]


# -- reads_match_the_log -----------------------------------------------------------------------


def test_reads_pass_over_offsets_without_data_and_start_again_after_a_restart() -> None:
    # Offset 2 holds no data record (a transaction marker), so reading 1 then 3 is legal.
    history = settled({0: b"a", 1: b"b", 3: b"d"})
    for event in (read(0, b"a"), read(1, b"b"), read(3, b"d"), read(1, b"b", consumer="c2")):
        history.append_read(event)
    history.append_restart(ConsumerRestart("c1", TP, from_offset=1, at_ns=250))
    history.append_read(read(1, b"b"))
    history.append_read(read(3, b"d"))
    assert reads_match_the_log(history) == []


def test_reads_going_back_without_a_restart_are_caught() -> None:
    history = settled()
    for event in (read(0, b"a"), read(1, b"b"), read(1, b"b")):
        history.append_read(event)
    assert messages(reads_match_the_log(history)) == [
        "t-0 offset 1: c1 read it after offset 1 with no restart between"
    ]


def test_reads_of_other_values_or_of_missing_records_are_caught() -> None:
    history = settled({0: b"a", 1: b"b", 3: b"d"})
    for event in (read(0, b"a"), read(1, b"x"), read(2, b"c")):
        history.append_read(event)
    assert messages(reads_match_the_log(history)) == [
        "t-0 offset 1: c1 read b'x' but leader broker 0 (epoch 3) has b'b'",
        "t-0 offset 2: c1 read b'c' but leader broker 0 (epoch 3) has no data record there",
    ]


def test_a_read_that_skips_a_data_record_is_caught() -> None:
    history = settled()
    history.append_read(read(0, b"a"))
    history.append_read(read(3, b"d"))
    assert messages(reads_match_the_log(history)) == [
        "t-0 offset 3: c1 skipped offsets holding data records in the final log (1, 2)"
    ]


def test_a_restarted_run_is_checked_from_its_start_offset() -> None:
    history = settled()
    history.append_restart(ConsumerRestart("c1", TP, from_offset=2, at_ns=250))
    history.append_read(read(1, b"b"))
    history.append_restart(ConsumerRestart("c1", TP, from_offset=1, at_ns=260))
    history.append_read(read(3, b"d"))
    assert messages(reads_match_the_log(history)) == [
        "t-0 offset 1: c1 read it in a run that restarted from offset 2",
        "t-0 offset 3: c1 skipped offsets holding data records in the final log (1, 2)",
    ]


def test_reads_of_a_deleted_topic_are_exempt() -> None:
    history = History(seed=1)
    history.append_read(read(5, b"gone"))
    assert "no leader at the end" in messages(reads_match_the_log(history))[0]
    history.append_topic_deleted(TopicDeleted("t", at_ns=300))
    assert reads_match_the_log(history) == []


# -- replicas_agree_below_the_high_watermark ---------------------------------------------------


def test_replicas_agree_when_a_lagging_follower_outside_the_isr_has_a_prefix() -> None:
    history = settled()
    history.final[TP][2] = replica(2, {0: b"a", 1: b"b"})
    history.append_isr_change(IsrChange(TP, 0, 3, 6, (0, 1), at_ns=20))
    assert replicas_agree_below_the_high_watermark(history) == []


def test_an_isr_member_that_is_behind_is_caught() -> None:
    history = settled()
    history.final[TP][2] = replica(2, {0: b"a", 1: b"b"})
    found = messages(replicas_agree_below_the_high_watermark(history))
    assert len(found) == 1
    assert found[0].startswith("t-0: broker 2 is in the final ISR but has ")


def test_diverging_bytes_and_records_below_the_high_watermark_are_caught() -> None:
    history = settled()
    diverged = dict(enumerate(VALUES)) | {2: b"z"}
    history.final[TP][1] = replica(1, diverged)
    assert messages(replicas_agree_below_the_high_watermark(history)) == [
        "t-0: broker 1's batch bytes differ from leader broker 0's at byte 18 (below the "
        "leader's high watermark 4)",
        "t-0: offset 2: broker 1 has b'z' but leader broker 0 has b'c'",
    ]


def test_records_above_the_leaders_high_watermark_may_differ() -> None:
    history = settled()
    leader = replica(0, dict(enumerate(VALUES)), leader=True, high_watermark=2)
    history.final[TP] = [
        leader,
        replica(1, {0: b"a", 1: b"b", 2: b"other"}, high_watermark=2),
    ]
    history.append_isr_change(IsrChange(TP, 0, 3, 6, (0, 1), at_ns=20))
    assert replicas_agree_below_the_high_watermark(history) == []


def test_two_leaders_or_none_at_the_end_are_caught() -> None:
    history = settled()
    history.final[TP][1] = replica(1, dict(enumerate(VALUES)), leader=True)
    assert messages(replicas_agree_below_the_high_watermark(history)) == [
        "t-0: brokers [0, 1] all claim to lead at the end"
    ]
    history.final[TP] = [replica(broker, {0: b"a"}) for broker in (0, 1, 2)]
    assert messages(replicas_agree_below_the_high_watermark(history)) == [
        "t-0: no leader at the end"
    ]


# -- the sampled invariants --------------------------------------------------------------------


def test_high_watermark_may_only_fall_across_an_epoch_or_a_restart() -> None:
    history = History(seed=1)
    for broker, incarnation, epoch, hw, at_ns in [
        (0, 0, 1, 5, 10),
        (0, 0, 1, 7, 20),
        (0, 0, 2, 6, 30),  # a new leader epoch starts from the new leader's view
        (0, 1, 2, 2, 40),  # a restarted process recovers its HW from its checkpoint
        (1, 0, 1, 3, 15),
    ]:
        history.append_high_watermark(HighWatermark(broker, incarnation, TP, epoch, hw, at_ns))
    assert high_watermark_monotonic(history) == []
    history.append_high_watermark(HighWatermark(0, 1, TP, 2, 1, at_ns=50))
    assert messages(high_watermark_monotonic(history)) == [
        "t-0: broker 0 (incarnation 1, leader epoch 2) high watermark went back from 2 to 1"
    ]


def test_one_leader_per_epoch_catches_two_brokers_claiming_one_epoch() -> None:
    history = History(seed=1)
    history.append_leader_claim(LeaderClaim(0, 0, TP, 1, at_ns=10))
    history.append_leader_claim(LeaderClaim(0, 0, TP, 1, at_ns=11))  # a repeated notice
    history.append_leader_claim(LeaderClaim(1, 0, TP, 2, at_ns=20))
    history.append_leader_claim(LeaderClaim(2, 0, TopicPartition("t", 1), 1, at_ns=20))
    assert one_leader_per_epoch(history) == []
    history.append_leader_claim(LeaderClaim(2, 1, TP, 2, at_ns=30))
    [violation] = one_leader_per_epoch(history)
    assert violation.message == (
        "t-0 leader epoch 2: broker 2 (incarnation 1) claims it after broker 1 did"
    )


def test_isr_never_empty_and_always_holds_the_leader() -> None:
    history = History(seed=1)
    history.append_isr_change(IsrChange(TP, 0, 1, 1, (0, 1, 2), at_ns=10))
    history.append_isr_change(IsrChange(TP, -1, 2, 2, (0,), at_ns=20))  # leaderless, last member
    assert isr_never_empty(history) == []
    history.append_isr_change(IsrChange(TP, -1, 3, 3, (), at_ns=30))
    history.append_isr_change(IsrChange(TP, 1, 4, 4, (0, 2), at_ns=40))
    assert messages(isr_never_empty(history)) == [
        "t-0 (leader epoch 3, partition epoch 3): empty ISR",
        "t-0 (leader epoch 4, partition epoch 4): leader 1 is not in the ISR [0, 2]",
    ]


def test_controller_epochs_are_judged_in_time_order() -> None:
    history = History(seed=1)
    for epoch, at_ns in [(2, 20), (1, 10), (2, 30), (3, 40)]:  # appended out of time order
        history.append_controller_epoch(ControllerEpoch(epoch, at_ns))
    assert controller_epochs_monotonic(history) == []
    history.append_controller_epoch(ControllerEpoch(2, at_ns=50))
    assert controller_epochs_monotonic(history) == [
        Violation("controller_epochs_monotonic", "controller epoch went back from 3 to 2", 50)
    ]


# -- all together ------------------------------------------------------------------------------


def commit(offset: int, *, acknowledged: bool = True, group: str = "g") -> OffsetCommitted:
    return OffsetCommitted(group, TP, offset, acknowledged, at_ns=offset)


def test_committed_offsets_kept_allows_a_later_commit_whose_answer_was_lost() -> None:
    history = settled()
    for event in (commit(3), commit(5), commit(7, acknowledged=False)):
        history.append_offset_commit(event)
    for final in (5, 7):
        history.set_final_offset("g", TP, final)
        assert committed_offsets_kept(history) == []


def test_committed_offsets_kept_catches_a_lost_commit_and_an_offset_never_sent() -> None:
    history = settled()
    history.append_offset_commit(commit(3))
    history.append_offset_commit(commit(5))
    history.set_final_offset("g", TP, 3)
    assert messages(committed_offsets_kept(history)) == [
        "group g t-0: commit of 5 acknowledged, 3 at the end"
    ]
    history.set_final_offset("g", TP, 9)
    assert messages(committed_offsets_kept(history)) == [
        "group g t-0: 9 at the end, never sent (at most 5)"
    ]
    history.final_offsets.clear()  # nothing read back: the acknowledged commit is lost
    assert len(committed_offsets_kept(history)) == 1
    history.append_topic_deleted(TopicDeleted("t", at_ns=9))
    assert committed_offsets_kept(history) == []


def transactional(visible: Sequence[bytes], *outcomes: tuple[str, tuple[bytes, ...]]) -> History:
    history = settled()
    for offset, value in enumerate(visible):
        history.append_committed_read(TP, offset, value)
    for outcome, values in outcomes:
        history.append_transaction(TransactionOutcome("tx", values, outcome, at_ns=1))
    return history


def test_transactions_all_or_nothing_passes_whole_commits_and_invisible_aborts() -> None:
    history = transactional(
        [b"c1", b"c2", b"u1", b"u2"],
        ("committed", (b"c1", b"c2")),
        ("aborted", (b"a1", b"a2")),
        ("unknown", (b"u1", b"u2")),
        ("unknown", (b"v1", b"v2")),
    )
    assert transactions_all_or_nothing(history) == []


def test_transactions_all_or_nothing_catches_parts_visible_aborts_and_duplicates() -> None:
    history = transactional(
        [b"c1", b"a1", b"u1", b"d1", b"d1"],
        ("committed", (b"c1", b"c2")),
        ("aborted", (b"a1",)),
        ("unknown", (b"u1", b"u2")),
        ("committed", (b"d1",)),
    )
    assert messages(transactions_all_or_nothing(history)) == [
        "tx's committed transaction of 2 records: 1 visible to read_committed (b'c1'...)",
        "tx's aborted transaction of 1 records: 1 visible to read_committed (b'a1'...)",
        "tx's unknown transaction of 2 records: 1 visible to read_committed (b'u1'...)",
        "b'd1' visible 2 times to read_committed",
    ]


def test_check_all_runs_every_checker_and_a_clean_history_passes_them_all() -> None:
    assert len(ALL_CHECKERS) == 13
    history = settled()
    for offset, value in enumerate(VALUES):
        history.append_attempt("p1", value, idempotent=True)
        history.append_ack(ack(value, offset, idempotent=True))
        history.append_read(read(offset, value))
    history.append_leader_claim(LeaderClaim(0, 0, TP, 3, at_ns=5))
    history.append_high_watermark(HighWatermark(0, 0, TP, 3, 4, at_ns=90))
    history.append_controller_epoch(ControllerEpoch(1, at_ns=1))
    assert check_all(history) == []
    assert history.events_summary() == {
        "attempts": 4,
        "acks": 4,
        "reads": 4,
        "restarts": 0,
        "leader_claims": 1,
        "high_watermarks": 1,
        "log_ends": 0,
        "isr_changes": 1,
        "controller_epochs": 1,
        "topic_deletions": 0,
        "offset_commits": 0,
        "transactions": 0,
        "group_assignments": 0,
        "final_replicas": 3,
    }
    history.append_ack(ack(b"z", 0))
    assert {violation.checker for violation in check_all(history)} == {
        "acknowledged_writes_kept",
        "acknowledged_offsets_unique",
    }


def test_format_violations_prints_at_most_the_limit() -> None:
    assert format_violations([]) == "no violations"
    violations = [Violation("isr_never_empty", f"t-{n}: empty ISR", n) for n in range(3)]
    violations.append(Violation("replicas_agree_below_the_high_watermark", "t-9: x", None))
    assert format_violations(violations, limit=2) == (
        "4 violation(s):\n"
        "  [isr_never_empty] at 0 ns t-0: empty ISR\n"
        "  [isr_never_empty] at 1 ns t-1: empty ISR\n"
        "  ... and 2 more"
    )
    last_line = format_violations(violations).splitlines()[-1]
    assert last_line == "  [replicas_agree_below_the_high_watermark] t-9: x"
