"""`ketch verify`'s idempotent producer checks (`offline.verify_producer_checks`) on hand-made
batch rows: duplicates and epochs going back are findings, sequence gaps are counted apart, and
wrap-around, new epochs, other producers, non-idempotent, control and invalid batches are
neither; the columnar fast path passes nothing the per-batch check reports (seeded)."""

from __future__ import annotations

import random

from offline.verify_checks import BatchRow
from offline.verify_producer_checks import (
    SequenceGap,
    has_producer_batches,
    last_sequence,
    plainly_in_sequence,
    producer_findings,
)

KEY = ("/d/broker-0", "t", 0)
INT32_MAX = 2**31 - 1


class Log:
    """Rows appended one after another (offsets contiguous, one segment), as a log holds them."""

    def __init__(self) -> None:
        self.rows: list[BatchRow] = []
        self.next_offset = 0

    def add(
        self,
        pid: int,
        epoch: int,
        seq: int,
        count: int = 3,
        *,
        control: bool = False,
        reason: str | None = None,
    ) -> tuple[int, int]:
        base, last = self.next_offset, self.next_offset + count - 1
        position = 100 * len(self.rows)
        self.rows.append(
            BatchRow(0, position, base, last, 1, 100, 7, reason, pid, epoch, seq, control)
        )
        self.next_offset = last + 1
        return base, last


def _judge(log: Log) -> tuple[list[tuple[str, tuple[int, int] | None]], list[SequenceGap]]:
    found, gaps = producer_findings(KEY, log.rows)
    return [(f.kind, f.offsets) for f in found], gaps


def test_contiguous_producers_across_epochs_are_clean() -> None:
    log = Log()
    log.add(7, 0, 0)
    log.add(-1, -1, -1)  # not idempotent, between the producer's batches
    log.add(8, 5, 100)  # another producer id, starting anywhere
    log.add(7, 0, 3)
    log.add(8, 5, 103, count=1)
    log.add(7, 1, 0)  # a new epoch starts at 0 ...
    log.add(7, 1, 3)
    log.add(7, 4, 17)  # ... or anywhere (KIP-360 bump, expired producer state)
    log.add(7, 4, 20)
    log.add(7, 5, 0)  # the same sequences again, in another epoch: not a duplicate
    assert _judge(log) == ([], [])


def test_a_batch_written_twice_is_a_duplicate() -> None:
    log = Log()
    log.add(7, 2, 0)
    log.add(7, 2, 3)
    again = log.add(7, 2, 0)  # the first batch's retry, appended instead of answered
    log.add(7, 2, 6)  # follows the original: no gap
    older = log.add(7, 2, 3)  # a retry of a batch further back
    log.add(7, 2, 9)
    found, gaps = producer_findings(KEY, log.rows)
    assert [(f.kind, f.offsets) for f in found] == [
        ("duplicate_sequence", again),
        ("duplicate_sequence", older),
    ]
    assert gaps == []
    assert found[0].segment == 0
    assert found[0].detail == (
        "batch at byte 200 of segment 0: producer 7 epoch 2: sequences 0..2 at offsets 6..8 "
        "were already written at offsets 0..2"
    )


def test_an_overlapping_range_is_a_gap_not_a_duplicate() -> None:
    log = Log()
    log.add(7, 0, 0, count=4)  # 0..3
    log.add(7, 0, 2, count=4)  # 2..5: another range, so not the same write
    found, gaps = _judge(log)
    assert found == []
    assert [(g.expected_sequence, g.base_sequence) for g in gaps] == [(4, 2)]


def test_an_epoch_going_back_is_a_finding_and_the_producer_keeps_its_epoch() -> None:
    log = Log()
    log.add(7, 3, 0)
    log.add(7, 3, 3)
    fenced = log.add(7, 2, 6)  # a zombie of the previous epoch
    log.add(7, 3, 6)  # continues epoch 3: no gap
    log.add(8, 1, 0)  # another producer id is not compared with 7
    found, gaps = producer_findings(KEY, log.rows)
    assert [(f.kind, f.offsets) for f in found] == [("producer_epoch_decreasing", fenced)]
    assert "producer 7: epoch 2 at offsets 6..8 after epoch 3 (up to offset 5)" in found[0].detail
    assert gaps == []


def test_a_sequence_gap_within_an_epoch_is_reported_apart() -> None:
    log = Log()
    log.add(7, 0, 0)  # 0..2 at offsets 0..2
    log.add(7, 0, 10)  # compaction or retention removed 3..9
    log.add(7, 0, 13)
    found, gaps = _judge(log)
    assert found == []
    assert gaps == [SequenceGap(KEY[0], "t", 0, 7, 0, 3, 10, 3, 2)]


def test_wrap_around_is_neither_a_gap_nor_a_duplicate() -> None:
    log = Log()
    log.add(7, 0, INT32_MAX - 5)  # ..MAX-3
    log.add(7, 0, INT32_MAX - 2)  # MAX-2..MAX
    log.add(7, 0, 0)  # after INT32_MAX comes 0
    log.add(8, 0, INT32_MAX - 1)  # MAX-1, MAX, 0: a batch across the wrap
    log.add(8, 0, 1)
    assert _judge(log) == ([], [])
    assert last_sequence(log.rows[3]) == 0


def test_a_retry_across_the_wrap_is_a_duplicate_but_a_lap_later_the_range_is_new() -> None:
    log = Log()
    log.add(7, 0, INT32_MAX - 2)  # MAX-2..MAX
    log.add(7, 0, 0)
    retry = log.add(7, 0, INT32_MAX - 2)
    lap = Log()
    lap.add(7, 0, 0)  # 0..2
    lap.add(7, 0, 3, count=INT32_MAX - 2)  # 3..MAX: a whole lap of sequences
    lap.add(7, 0, 0)  # 0..2 again, a lap later: new
    assert _judge(log) == ([("duplicate_sequence", retry)], [])
    assert _judge(lap) == ([], [])


def test_batches_without_producer_control_invalid_or_unsequenced_are_ignored() -> None:
    log = Log()
    log.add(-1, -1, -1)
    log.add(-1, -1, -1)  # the "same" non-idempotent batch twice is nobody's sequence
    log.add(7, 3, 0)
    log.add(7, 3, 0, control=True)  # a marker: no sequence of the producer's data
    log.add(7, 0, 0, control=True)  # nor an epoch to compare (only data batches fence here)
    log.add(7, 3, 0, reason="crc_mismatch: stored 1, computed 2")  # fields not trusted
    log.add(7, 3, -1)  # a producer id without a sequence
    log.add(7, 3, 3)
    assert _judge(log) == ([], [])


def test_only_columns_with_a_producer_id_need_rows() -> None:
    def columns(pids: list[int]) -> tuple[list[int], ...]:
        rows = [BatchRow(0, i, i, i, 1, 100, 7, None, p, 0, 0, False) for i, p in enumerate(pids)]
        return tuple(list(c) for c in zip(*rows, strict=True)) or tuple(
            [] for _ in BatchRow._fields
        )

    assert not has_producer_batches(columns([]))
    assert not has_producer_batches(columns([-1, -1]))
    assert has_producer_batches(columns([-1, 0]))  # producer id 0 is a producer


def _random_log(rng: random.Random) -> Log:
    """A few producers' interleaved batches, in sequence (new epochs now and then, some near the
    wrap), plus batches without a producer, then perhaps a fault the checks look for."""
    log = Log()
    state = {pid: [rng.randrange(3), rng.choice([0, INT32_MAX - 4])] for pid in range(3)}
    for _ in range(rng.randrange(0, 14)):
        pid = rng.randrange(-1, 3)
        if pid < 0:
            log.add(-1, -1, -1)
            continue
        if rng.random() < 0.15:
            state[pid] = [state[pid][0] + 1, rng.choice([0, 9])]
        epoch, seq = state[pid]
        count = rng.randrange(1, 4)
        log.add(pid, epoch, seq, count)
        state[pid][1] = (seq + count) % (INT32_MAX + 1)
    if log.rows and rng.random() < 0.6:
        at = rng.randrange(len(log.rows))
        row = log.rows[at]
        assert row.base_sequence is not None
        assert row.producer_epoch is not None
        earlier = log.rows[rng.randrange(at + 1)]
        faults = [
            row._replace(base_sequence=row.base_sequence + rng.choice([-1, 1, 5])),
            row._replace(producer_epoch=row.producer_epoch - 1),
            row._replace(is_control=True),
            row._replace(producer_id=rng.randrange(3)),
            earlier._replace(position=row.position, base_offset=row.base_offset),
        ]
        log.rows[at] = rng.choice(faults)
    return log


def test_the_fast_path_passes_only_what_the_per_batch_check_passes() -> None:
    seed = 19
    rng = random.Random(seed)
    passed = 0
    for case in range(3_000):
        log = _random_log(rng)
        columns = tuple(list(c) for c in zip(*log.rows, strict=True)) or tuple(
            [] for _ in BatchRow._fields
        )
        if plainly_in_sequence(columns):
            passed += 1
            assert _judge(log) == ([], []), f"seed {seed} case {case}: {log.rows}"
    assert 600 < passed < 2_700, f"seed {seed}: {passed} cases passed; faults too rare/common"
    clean, gap = Log(), Log()
    for log, second in ((clean, 3), (gap, 4)):
        log.add(0, 1, 0)
        log.add(-1, -1, -1)
        log.add(0, 1, second)
    assert plainly_in_sequence(tuple(list(c) for c in zip(*clean.rows, strict=True)))
    assert not plainly_in_sequence(tuple(list(c) for c in zip(*gap.rows, strict=True)))
