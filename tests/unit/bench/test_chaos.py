"""The chaos run's pure parts (bench/chaos_workload.py, bench/chaos_faults.py): the checks on
the log read back, the unavailability measure, and the seeded schedule."""

from __future__ import annotations

import random

from bench.chaos import ChaosResult
from bench.chaos_faults import Kind, draw
from bench.chaos_workload import Ack, judge, longest_gap


def ack(partition: int, offset: int, value: bytes, at_s: float = 0.0) -> Ack:
    return Ack("native", partition, offset, value, at_s)


def test_a_clean_log_passes_every_check() -> None:
    logs = {(0, 0): b"a", (0, 1): b"b", (1, 0): b"c"}
    verdict = judge([ack(0, 0, b"a"), ack(1, 0, b"c")], logs, {(0, 1): b"b"})
    assert (verdict.lost, verdict.duplicated, verdict.diverged) == (0, 0, 0)
    assert verdict.acknowledged == {"native": 2}
    assert verdict.examples == ()


def test_an_acknowledged_offset_missing_or_holding_another_value_is_lost() -> None:
    logs = {(0, 0): b"other"}
    verdict = judge([ack(0, 0, b"mine"), ack(0, 1, b"gone")], logs, {})
    assert verdict.lost == 2
    assert "lost" in verdict.examples[0]


def test_a_value_at_two_offsets_is_a_duplicate() -> None:
    logs = {(0, 0): b"a", (0, 1): b"a", (1, 0): b"b"}
    verdict = judge([ack(0, 0, b"a")], logs, {})
    assert verdict.duplicated == 1
    assert verdict.lost == 0


def test_a_consumed_record_that_changed_has_diverged() -> None:
    logs = {(0, 0): b"new"}
    verdict = judge([], logs, {(0, 0): b"old", (0, 1): b"beyond the end"})
    assert verdict.diverged == 2


def test_the_longest_gap_counts_from_the_start_and_to_the_end() -> None:
    acks = [ack(0, i, b"", at) for i, at in enumerate([10.5, 11.0, 14.0, 14.2])]
    assert longest_gap(acks, 10.0, 15.0) == (3.0, 1.0)  # 11.0 .. 14.0
    assert longest_gap(acks, 10.0, 20.0) == (20.0 - 14.2, 14.2 - 10.0)
    assert longest_gap([], 10.0, 12.0) == (2.0, 0.0)


def test_a_seed_draws_the_same_faults_every_time() -> None:
    def schedule(seed: int) -> list[str]:
        rng = random.Random(seed)
        return [draw(rng, 3, 3, 1.0).describe() for _ in range(50)]

    assert schedule(7) == schedule(7)
    assert schedule(7) != schedule(8)
    kinds = {draw(random.Random(s), 3, 3, 1.0).kind for s in range(200)}
    assert kinds == set(Kind)


def test_pauses_outlast_the_session_timeout() -> None:
    rng = random.Random(3)
    pauses = [f for f in (draw(rng, 3, 3, 1.5) for _ in range(300)) if f.kind is Kind.PAUSE]
    assert pauses
    assert all(f.hold_s > 1.5 for f in pauses)


def test_any_loss_duplicate_divergence_or_verify_finding_fails_the_run() -> None:
    assert ChaosResult(seed=1, seconds=1, verify="clean").ok
    assert not ChaosResult(seed=1, seconds=1, lost=1).ok
    assert not ChaosResult(seed=1, seconds=1, duplicated=1).ok
    assert not ChaosResult(seed=1, seconds=1, diverged=1).ok
    assert not ChaosResult(seed=1, seconds=1, verify="findings").ok
    assert not ChaosResult(seed=1, seconds=1, recovery_error="no recovery").ok
