"""A segment's `.txnindex` goes wherever its other files go: suffix changes, truncation,
deletion, recovery, flushes; and loading a partition directory treats it as an index file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.errors import CorruptIndexError
from runtime.log.recovery import LoadedSegments, load_segments
from runtime.log.segment import DELETED_SUFFIX, SWAP_SUFFIX, LogSegment
from runtime.log.transaction_index import AbortedTxn, TransactionIndex
from wire.batch_builder import build_batch

from .helpers import WALL_MS

CONFIG = LogConfig(segment_bytes=10_000, index_interval_bytes=100)


def batch_at(base_offset: int, count: int = 5) -> bytes:
    records = [(b"k%d" % (base_offset + i), b"v" * 40) for i in range(count)]
    return build_batch(records, base_offset=base_offset, base_timestamp=WALL_MS + base_offset)


def segment_with(
    directory: Path,
    clock: ManualClock,
    base: int,
    batches: int,
    txns: list[AbortedTxn],
    *,
    suffix: str = "",
) -> LogSegment:
    """A segment of `batches` 5-record batches from `base`, with `txns` in its txn index."""
    directory.mkdir(parents=True, exist_ok=True)
    segment = LogSegment(directory, base, CONFIG, clock, suffix=suffix)
    for i in range(batches):
        first = base + 5 * i
        data = batch_at(first)
        segment.append(first + 4, WALL_MS + first, first, [data], len(data))
    for txn in txns:
        segment.txn_index.append(txn)
    return segment


def txn_path(directory: Path, base: int, suffix: str = "") -> Path:
    return directory / f"{base:020d}.txnindex{suffix}"


# Markers of aborted transactions at 4, 14 and 19 (last offsets of batches; the tests only
# need the offsets).
TXNS = [AbortedTxn(1, 0, 4, 5), AbortedTxn(2, 5, 14, 15), AbortedTxn(3, 15, 19, 20)]


# -- the segment's file operations ---------------------------------------------------------------


def test_no_file_without_an_aborted_transaction(tmp_path: Path, clock: ManualClock) -> None:
    segment = segment_with(tmp_path, clock, 0, 4, [])
    segment.flush()
    segment.close()
    assert not txn_path(tmp_path, 0).exists()
    reopened = LogSegment(tmp_path, 0, CONFIG, clock)
    reopened.sanity_check()  # a missing .txnindex is an empty one
    reopened.close()


def test_txn_index_follows_suffix_changes_and_deletion(tmp_path: Path, clock: ManualClock) -> None:
    segment = segment_with(tmp_path, clock, 0, 4, TXNS)
    segment.close_handles()
    segment.change_suffix("", DELETED_SUFFIX)
    assert not txn_path(tmp_path, 0).exists()
    assert TransactionIndex(txn_path(tmp_path, 0, DELETED_SUFFIX), 0).all_entries() == TXNS
    assert segment.txn_index.path == txn_path(tmp_path, 0, DELETED_SUFFIX)
    segment.delete_files()
    assert list(tmp_path.iterdir()) == []


def test_swap_segment_drops_its_swap_suffix_with_its_txn_index(
    tmp_path: Path, clock: ManualClock
) -> None:
    segment = segment_with(tmp_path, clock, 0, 4, TXNS[:1], suffix=SWAP_SUFFIX)
    assert txn_path(tmp_path, 0, SWAP_SUFFIX).exists()
    segment.change_suffix(SWAP_SUFFIX, "")
    segment.txn_index.append(TXNS[1])  # the open handle follows the rename
    segment.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000000.index",
        "00000000000000000000.log",
        "00000000000000000000.timeindex",
        "00000000000000000000.txnindex",
    ]
    assert TransactionIndex(txn_path(tmp_path, 0), 0).all_entries() == TXNS[:2]


def test_truncation_drops_aborted_transactions_from_the_offset(
    tmp_path: Path, clock: ManualClock
) -> None:
    segment = segment_with(tmp_path, clock, 0, 4, TXNS)
    segment.truncate_to(15)  # the batch 15..19 and the marker at 19 go
    assert segment.read_next_offset() == 15
    assert segment.txn_index.all_entries() == TXNS[:2]
    segment.truncate_to(5)
    assert segment.txn_index.all_entries() == TXNS[:1]
    segment.close()
    assert TransactionIndex(txn_path(tmp_path, 0), 0).all_entries() == TXNS[:1]


def test_recover_empties_the_txn_index(tmp_path: Path, clock: ManualClock) -> None:
    segment = segment_with(tmp_path, clock, 0, 4, TXNS)
    result = segment.recover()
    assert result.reason is None
    assert segment.txn_index.all_entries() == []
    segment.sanity_check()
    segment.txn_index.append(TXNS[0])  # the log's replay appends them again
    segment.close()
    assert TransactionIndex(txn_path(tmp_path, 0), 0).all_entries() == TXNS[:1]


def test_sanity_check_covers_the_txn_index(tmp_path: Path, clock: ManualClock) -> None:
    segment_with(tmp_path, clock, 0, 4, TXNS).close()
    with txn_path(tmp_path, 0).open("ab") as f:
        f.write(b"\x00" * 7)  # a torn entry
    segment = LogSegment(tmp_path, 0, CONFIG, clock)
    with pytest.raises(CorruptIndexError, match="txnindex"):
        segment.sanity_check()
    segment.close()


def test_flushes_include_the_txn_index_once_written(tmp_path: Path, clock: ManualClock) -> None:
    segment = segment_with(tmp_path, clock, 0, 4, [])
    handles = segment.prepare_flush()
    assert len(handles) == 3  # .log, .index, .timeindex
    for handle in handles:
        os.close(handle)
    segment.txn_index.append(TXNS[0])
    handles = segment.prepare_flush()
    assert len(handles) == 4
    assert os.fstat(handles[-1]).st_ino == txn_path(tmp_path, 0).stat().st_ino
    for handle in handles:
        os.close(handle)
    segment.flush()
    segment.close()
    assert segment.txn_index.dup_handle() is None  # close released the txn index's handle


# -- loading a partition directory ----------------------------------------------------------------


def load(
    directory: Path, clock: ManualClock, *, clean: bool, recovery_point: int
) -> LoadedSegments:
    return load_segments(
        directory,
        CONFIG,
        clock,
        log_start_offset=0,
        recovery_point=recovery_point,
        had_clean_shutdown=clean,
        epoch_cache=None,
    )


def close_all(loaded: LoadedSegments) -> None:
    for segment in loaded.segments:
        segment.close()


def two_segments(directory: Path, clock: ManualClock) -> None:
    """Segments at 0 (offsets 0..19, aborts at 4 and 14) and 20 (20..39, an abort at 24)."""
    segment_with(directory, clock, 0, 4, TXNS[:2]).close()
    segment_with(directory, clock, 20, 4, [AbortedTxn(4, 20, 24, 25)]).close()


def test_loading_removes_stray_txn_index_files(tmp_path: Path, clock: ManualClock) -> None:
    two_segments(tmp_path, clock)
    stray = [
        "00000000000000000777.txnindex",  # no .log
        "00000000000000000020.txnindex.deleted",
        "00000000000000000040.txnindex.cleaned",
    ]
    for name in stray:
        (tmp_path / name).write_bytes(TXNS[0].encode())
    loaded = load(tmp_path, clock, clean=True, recovery_point=40)
    assert set(loaded.report.removed_files) == set(stray)
    assert loaded.report.txn_index_reset_from is None
    assert [s.txn_index.entries for s in loaded.segments] == [2, 1]
    close_all(loaded)


def test_a_corrupt_txn_index_is_rebuilt_on_load(tmp_path: Path, clock: ManualClock) -> None:
    two_segments(tmp_path, clock)
    with txn_path(tmp_path, 20).open("ab") as f:
        f.write(b"\x00\x01")
    loaded = load(tmp_path, clock, clean=True, recovery_point=40)
    assert loaded.report.rebuilt_indexes == (20,)
    assert loaded.report.txn_index_reset_from == 20
    assert [s.txn_index.entries for s in loaded.segments] == [2, 0]
    close_all(loaded)


def test_recovery_after_a_crash_reports_where_txn_indexes_were_reset(
    tmp_path: Path, clock: ManualClock
) -> None:
    two_segments(tmp_path, clock)
    loaded = load(tmp_path, clock, clean=False, recovery_point=25)
    assert loaded.report.segments_recovered == 1
    assert loaded.report.txn_index_reset_from == 20
    assert [s.txn_index.entries for s in loaded.segments] == [2, 0]
    close_all(loaded)


def test_a_completed_swap_replaces_the_old_txn_indexes(tmp_path: Path, clock: ManualClock) -> None:
    two_segments(tmp_path, clock)
    # A compaction output replacing both segments, whose aborted data was removed: it has no
    # transaction index, so the old one at the same base offset must not stay.
    segment_with(tmp_path, clock, 0, 8, [], suffix=SWAP_SUFFIX).close()
    loaded = load(tmp_path, clock, clean=True, recovery_point=40)
    assert loaded.report.swaps_completed == (0,)
    assert "00000000000000000000.txnindex" in loaded.report.removed_files
    assert "00000000000000000020.txnindex" in loaded.report.removed_files
    assert [s.base_offset for s in loaded.segments] == [0]
    assert loaded.segments[0].txn_index.entries == 0
    assert not txn_path(tmp_path, 0).exists()
    close_all(loaded)


def test_a_swapped_txn_index_is_installed(tmp_path: Path, clock: ManualClock) -> None:
    two_segments(tmp_path, clock)
    segment_with(tmp_path, clock, 0, 8, [AbortedTxn(4, 20, 24, 25)], suffix=SWAP_SUFFIX).close()
    loaded = load(tmp_path, clock, clean=True, recovery_point=40)
    assert loaded.segments[0].txn_index.all_entries() == [AbortedTxn(4, 20, 24, 25)]
    assert not list(tmp_path.glob("*.swap"))
    close_all(loaded)
