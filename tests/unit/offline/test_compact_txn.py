"""Compaction and transactions, without Spark: the transaction scan's outcomes (aborted batches,
first unstable offset), the cleaner's rule for markers and aborted batches, and whole passes
(plan, write, install) over a partition with committed, aborted and open transactions written by
the storage engine: aborted records gone, committed ones compacted by key, every marker kept
until its transaction is empty and its horizon passed, ``.txnindex`` files consistent, and the
log reopening with the same last stable offset (from its snapshot, and after a full recovery)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from offline.batch_scan import control_type
from offline.compact_install import install_partition
from offline.compact_plan import PartitionPlan, plan_partition
from offline.compact_txn import TransactionScan
from offline.compact_write import (
    BatchCleaner,
    CleanedPartition,
    CleanStats,
    survivors_by_scan,
    write_cleaned_partition,
)
from runtime.log.producer_replay import end_txn_marker_batch
from tests.unit.offline.compact_helpers import (
    RETENTION_MS,
    WALL_MS,
    TxnPartition,
    build_transactional_partition,
    check_first_txn_pass,
    check_txn_index_entries,
    config,
    last_batch_below,
    marker_transactions_with_data,
    read_partition,
    reopen_txn_partition,
    txn_index_entries,
    txn_survivors,
)
from wire.batch_builder import build_batch
from wire.record_reader import iter_records
from wire.records import read_header

# -- the transaction scan -------------------------------------------------------------------------


def _data(base: int, pid: int = -1, *, txn: bool = False, count: int = 1) -> bytes:
    records = [(b"k%d" % (base + i), b"v") for i in range(count)]
    return build_batch(
        records, base_offset=base, producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1, is_transactional=txn, base_timestamp=WALL_MS,
    )  # fmt: skip


def _marker(base: int, pid: int, *, commit: bool, timestamp: int = WALL_MS) -> bytes:
    return end_txn_marker_batch(
        pid, 0, 0, commit=commit, base_offset=base, leader_epoch=1, timestamp=timestamp
    )


def _feed(scan: TransactionScan, batch: bytes) -> None:
    header = read_header(batch)
    scan.add(header, control_type(batch) if header.is_control else None)


def test_the_scan_finds_aborted_batches_and_the_first_unstable_offset() -> None:
    scan = TransactionScan(high_watermark=20)
    for batch in (
        _data(0, 1, txn=True),  # producer 1: aborted at 4
        _data(1),  # plain
        _data(2, 2, txn=True, count=2),  # producer 2: committed at 5
        _marker(4, 1, commit=False),
        _marker(5, 2, commit=True),
        _marker(6, 3, commit=False),  # a marker without data ends nothing
        _data(7, 1, txn=True),  # producer 1 again: aborted at 9
        _data(8, 3, txn=False),  # idempotent, not transactional
        _marker(9, 1, commit=False),
        _data(10, 2, txn=True),  # producer 2: its marker (21) is above the HW
        _marker(21, 2, commit=False),
        _data(22, 4, txn=True),  # producer 4: open at the end
    ):
        _feed(scan, batch)
    assert scan.aborted_below(100) == {0, 7}
    assert scan.aborted_below(7) == {0}
    # Producer 2's abort at 21 is not below the HW yet: its transaction is not decided.
    assert scan.first_unstable_offset == 10
    assert TransactionScan(high_watermark=0).first_unstable_offset is None


# -- the cleaner's rule ---------------------------------------------------------------------------


def test_markers_stay_while_their_transaction_has_data_then_until_their_horizon() -> None:
    now = WALL_MS + 50
    committed = _data(0, 1, txn=True, count=2)  # offsets 0-1
    commit = _marker(2, 1, commit=True)
    aborted = _data(3, 2, txn=True)
    abort = _marker(4, 2, commit=False)

    def run(cleaner: BatchCleaner, batches: list[bytes], last: int = -1) -> list[bytes | None]:
        out = []
        for i, batch in enumerate(batches):
            header = read_header(batch)
            is_last = i == len(batches) - 1 if last < 0 else i == last
            out.append(cleaner.clean(memoryview(batch), header, last_in_range=is_last))
        return out

    # Record 1 survives: the COMMIT marker is copied as it is; the aborted batch goes and its
    # ABORT marker gets a delete horizon (a control batch rebuilt with bit 6 and now + retention).
    cleaner = BatchCleaner([1], now, RETENTION_MS, aborted_batches={3})
    out = run(cleaner, [committed, commit, aborted, abort], last=9)
    kept_data, kept_commit, dropped, horizoned = out
    assert kept_data is not None
    assert kept_commit == commit
    assert dropped is None
    assert horizoned is not None
    header = read_header(horizoned)
    assert header.is_control
    assert header.has_delete_horizon
    assert header.base_timestamp == now + RETENTION_MS
    (record,) = iter_records(horizoned)
    assert record.timestamp == WALL_MS  # the marker's own time, under the horizon
    assert (header.base_offset, header.producer_id) == (4, 2)
    assert cleaner.stats.aborted_batches_dropped == 1
    assert cleaner.stats.marker_horizons_set == 1

    # A later pass where nothing of either transaction is left: the COMMIT marker now gets its
    # horizon, the ABORT marker keeps its own, and goes once it has passed, but never as the
    # last batch of the range.
    early = BatchCleaner([], now + RETENTION_MS - 1, RETENTION_MS)
    commit_out, abort_out = run(early, [commit, horizoned], last=9)
    assert commit_out is not None
    assert read_header(commit_out).has_delete_horizon
    assert abort_out == horizoned
    late = BatchCleaner([], now + RETENTION_MS, RETENTION_MS)
    assert run(late, [horizoned], last=9) == [None]
    assert late.stats.markers_dropped == 1
    assert run(BatchCleaner([], now + RETENTION_MS, RETENTION_MS), [horizoned]) == [horizoned]


def test_an_aborted_batch_ending_the_range_stays_whole_and_empty_batches_keep_markers() -> None:
    now = WALL_MS
    aborted = _data(0, 2, txn=True, count=3)
    cleaner = BatchCleaner([], now, RETENTION_MS, aborted_batches={0})
    assert cleaner.clean(memoryview(aborted), read_header(aborted), last_in_range=True) == aborted
    # A transactional batch left without records (a cleaner elsewhere emptied it) still opens a
    # transaction when the broker replays the log, so the marker ending it must stay.
    empty = build_batch(
        [], base_offset=5, producer_id=1, producer_epoch=0, base_sequence=0,
        is_transactional=True, last_offset_delta=1,
    )  # fmt: skip
    commit = _marker(7, 1, commit=True)
    cleaner = BatchCleaner([], now + 10 * RETENTION_MS, RETENTION_MS)
    assert cleaner.clean(memoryview(empty), read_header(empty), last_in_range=False) == empty
    assert cleaner.clean(memoryview(commit), read_header(commit), last_in_range=False) == commit


# -- whole passes over a partition written by the storage engine --------------------------------


def _pass(txns: TxnPartition, staging: Path, now: int) -> tuple[PartitionPlan, CleanedPartition]:
    cfg = config()
    plan = plan_partition(txns.directory, txns.high_watermark, cfg, now)
    survivors = survivors_by_scan(plan.directory, plan.sources, plan.aborted_batches)
    cleaned = write_cleaned_partition(
        plan.directory,
        plan.sources,
        survivors,
        staging,
        now_ms=now,
        delete_retention_ms=cfg.delete_retention_ms,
        log_config=cfg.log,
        aborted_batches=plan.aborted_batches,
    )
    return plan, cleaned


def _install(plan: PartitionPlan, cleaned: CleanedPartition) -> None:
    install_partition(
        plan.directory,
        cleaned.staging_dir,
        [s.base_offset for s in cleaned.segments],
        [s.base_offset for s in plan.sources],
    )


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_pass_removes_aborted_data_and_keeps_markers_index_entries_and_the_lso(
    tmp_path: Path, seed: int
) -> None:
    data_dir = tmp_path / "broker-0"
    txns = build_transactional_partition(data_dir, 0, seed)
    before = [r for h, r in read_partition(txns.directory) if not h.is_control]
    now = WALL_MS + 10_000
    plan, cleaned = _pass(txns, tmp_path / "staging", now)
    end = plan.clean_end_offset
    # The range stops before the open transaction (whether its records count is not known).
    assert plan.stop_kind == "open transaction", f"seed {seed}: {plan.stop_reason}"
    assert end <= txns.last_stable_offset, f"seed {seed}"
    # The survivors: the latest record per key among the committed and plain records below
    # the range end (an aborted record never hides an older committed one).
    survivors = survivors_by_scan(plan.directory, plan.sources, plan.aborted_batches)
    assert survivors == sorted(txn_survivors(txns, before, end)), f"seed {seed}"
    assert cleaned.stats.aborted_batches_dropped > 0, f"seed {seed}"
    assert cleaned.stats.txn_index_entries == len(
        [e for e in txns.aborted if e.last_offset < end]
    ), f"seed {seed}"
    _install(plan, cleaned)
    check_first_txn_pass(txns, before, end, f"seed {seed}")


def test_a_later_pass_drops_emptied_markers_with_their_index_entries(tmp_path: Path) -> None:
    seed = 2
    txns = build_transactional_partition(tmp_path / "broker-0", 0, seed)
    now = WALL_MS + 10_000
    plan, cleaned = _pass(txns, tmp_path / "pass1", now)
    _install(plan, cleaned)
    end = plan.clean_end_offset
    first_index = txn_index_entries(txns.directory)
    assert first_index[0], f"seed {seed}: no aborted transaction in the first segment"
    with_data = marker_transactions_with_data(txns.directory)
    tail = last_batch_below(txns.directory, end)
    # Before the horizon nothing changes; at it, every marker of a transaction without data
    # goes (but the range's last batch), and with it its .txnindex entry.
    plan, cleaned = _pass(txns, tmp_path / "pass2-early", now + RETENTION_MS - 1)
    assert cleaned.stats.markers_dropped == 0
    shutil.rmtree(tmp_path / "pass2-early")
    plan, cleaned = _pass(txns, tmp_path / "pass2", now + RETENTION_MS)
    assert plan.clean_end_offset == end
    _install(plan, cleaned)
    markers = {h.base_offset for h, _ in read_partition(txns.directory) if h.is_control}
    expected = {o for o, has in with_data.items() if has or o >= end or o in tail}
    assert markers == expected, f"seed {seed}"
    assert cleaned.stats.markers_dropped == len(with_data) - len(expected) > 0, f"seed {seed}"
    # Among them the first segment's: its old .txnindex named markers that are gone now.
    assert any(e.last_offset not in markers for e in first_index[0]), f"seed {seed}"
    check_txn_index_entries(txns, markers, f"seed {seed}")
    for clean in (True, False):
        log = reopen_txn_partition(txns, clean=clean)
        try:
            assert log.last_stable_offset == txns.last_stable_offset, f"seed {seed} {clean}"
            assert log.last_stable_offset < log.log_end_offset  # the open transaction
        finally:
            log.close()


def test_cleaned_stats_add_up() -> None:
    total = CleanStats()
    total.add(CleanStats(aborted_batches_dropped=2, markers_dropped=1, txn_index_entries=3))
    total.add(CleanStats(aborted_batches_dropped=1, marker_horizons_set=4))
    assert (
        total.aborted_batches_dropped,
        total.markers_dropped,
        total.marker_horizons_set,
        total.txn_index_entries,
    ) == (3, 1, 4, 3)
