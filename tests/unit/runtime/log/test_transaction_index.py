"""The `.txnindex` file: Kafka's 34-byte aborted-transaction entries, their order, searches,
truncation and checks."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.log.errors import CorruptIndexError
from runtime.log.transaction_index import ENTRY_SIZE, AbortedTxn, TransactionIndex

BASE = 100
# version 0, producerId 0x0102030405060708, firstOffset 100, lastOffset 105, lastStableOffset 106,
# each big-endian, written out by hand from Kafka's layout.
GOLDEN_TXN = AbortedTxn(0x0102030405060708, 100, 105, 106)
GOLDEN_BYTES = bytes.fromhex(
    "0000"  # version
    "0102030405060708"  # producer id
    "0000000000000064"  # first offset 100
    "0000000000000069"  # last offset 105
    "000000000000006a"  # last stable offset 106
)


def index_path(directory: Path) -> Path:
    return directory / f"{BASE:020d}.txnindex"


def filled(directory: Path, entries: list[AbortedTxn]) -> TransactionIndex:
    index = TransactionIndex(index_path(directory), BASE)
    for entry in entries:
        index.append(entry)
    return index


# Four aborted transactions as a partition writes them (producer, first, last, LSO after it):
# producer 3's transaction, begun at 90 in an earlier segment, holds the LSO at 90 until it is
# aborted last.
TXNS = [
    AbortedTxn(1, 100, 110, 90),
    AbortedTxn(2, 105, 120, 90),
    AbortedTxn(5, 135, 140, 90),
    AbortedTxn(3, 90, 150, 151),
]


# -- format ---------------------------------------------------------------------------------------


def test_entry_bytes_are_kafkas_layout() -> None:
    assert ENTRY_SIZE == 34
    assert GOLDEN_TXN.encode() == GOLDEN_BYTES
    assert AbortedTxn.decode(GOLDEN_BYTES) == GOLDEN_TXN


def test_decode_refuses_other_lengths_and_versions() -> None:
    with pytest.raises(ValueError, match="34 bytes"):
        AbortedTxn.decode(GOLDEN_BYTES[:-1])
    with pytest.raises(ValueError, match="version 1"):
        AbortedTxn.decode(b"\x00\x01" + GOLDEN_BYTES[2:])


def test_file_is_created_with_the_first_entry(tmp_path: Path) -> None:
    index = TransactionIndex(index_path(tmp_path), BASE)
    assert not index.path.exists()
    assert index.collect_aborted(0, 1000) == ([], False)
    assert index.all_entries() == []
    index.flush()
    index.sanity_check()  # no file: an empty index
    assert index.dup_handle() is None
    assert not index.path.exists()
    index.append(GOLDEN_TXN)
    assert index.path.read_bytes() == GOLDEN_BYTES
    assert (index.entries, index.last_offset, index.size_bytes) == (1, 105, 34)
    index.close()


# -- append ---------------------------------------------------------------------------------------


def test_append_refuses_entries_out_of_order(tmp_path: Path) -> None:
    index = filled(tmp_path, TXNS[:2])
    for last in (120, 119):
        with pytest.raises(ValueError, match="not after"):
            index.append(AbortedTxn(9, 100, last, last + 1))
    with pytest.raises(ValueError, match="below the segment's base offset"):
        TransactionIndex(tmp_path / "other.txnindex", BASE).append(AbortedTxn(9, 90, 99, 100))
    assert index.all_entries() == TXNS[:2]
    assert index.path.stat().st_size == 2 * ENTRY_SIZE
    index.close()


def test_reopen_from_disk(tmp_path: Path) -> None:
    index = filled(tmp_path, TXNS)
    index.flush()
    index.close()
    reopened = TransactionIndex(index_path(tmp_path), BASE)
    assert reopened.all_entries() == TXNS
    assert (reopened.entries, reopened.last_offset) == (4, 150)
    reopened.sanity_check()
    with pytest.raises(ValueError, match="not after"):  # the order check survives the reopen
        reopened.append(AbortedTxn(5, 150, 150, 151))
    reopened.append(AbortedTxn(5, 155, 160, 161))
    assert reopened.all_entries()[-1] == AbortedTxn(5, 155, 160, 161)
    reopened.close()


def test_a_torn_last_entry_fails_the_check_and_the_next_append_overwrites_it(
    tmp_path: Path,
) -> None:
    filled(tmp_path, TXNS[:1]).close()
    path = index_path(tmp_path)
    with path.open("ab") as f:
        f.write(TXNS[1].encode()[:10])  # a crash in the middle of the second append
    index = TransactionIndex(path, BASE)
    assert (index.entries, index.last_offset) == (1, 110)
    with pytest.raises(CorruptIndexError, match="not a multiple"):
        index.sanity_check()
    index.append(TXNS[1])
    index.sanity_check()
    assert TransactionIndex(path, BASE).all_entries() == TXNS[:2]
    index.close()


# -- collect_aborted ------------------------------------------------------------------------------


def test_collect_returns_the_transactions_overlapping_the_range(tmp_path: Path) -> None:
    index = filled(tmp_path, TXNS)
    # Last offset >= fetch offset (110 counts), first offset < upper bound (135 does not).
    assert index.collect_aborted(110, 135) == ([TXNS[0], TXNS[1], TXNS[3]], True)
    assert index.collect_aborted(111, 136) == (TXNS[1:], True)
    assert index.collect_aborted(141, 1000) == ([TXNS[3]], False)
    assert index.collect_aborted(151, 1000) == ([], False)
    assert index.collect_aborted(100, 152) == (TXNS, False)
    index.close()


def test_collect_is_complete_at_the_first_entry_stable_past_the_bound(tmp_path: Path) -> None:
    # Entries a partition would not write (the third transaction was open while the first one's
    # LSO passed its start), to show where the search stops reading.
    entries = [
        AbortedTxn(1, 100, 110, 111),
        AbortedTxn(2, 105, 120, 121),
        AbortedTxn(3, 90, 130, 131),
    ]
    index = filled(tmp_path, entries)
    # The first entry's LSO 111 >= 111 ends the search there, as Kafka's does: the third entry
    # overlaps [100, 111) but is not read.
    assert index.collect_aborted(100, 111) == ([entries[0]], True)
    # An entry outside the fetched range decides completeness too (Kafka's rule).
    assert index.collect_aborted(125, 121) == ([], True)
    # 131 >= 125 at the third entry, after collecting all three.
    assert index.collect_aborted(100, 125) == (entries, True)
    # No entry is stable at 132 or later: the next segment must be asked.
    assert index.collect_aborted(100, 132) == (entries, False)
    # A realistic index: the LSO stays at 90 until the last abort, so a range ending at or
    # before 90 is complete at the first entry.
    realistic = TransactionIndex(tmp_path / "realistic.txnindex", BASE)
    for entry in TXNS:
        realistic.append(entry)
    assert realistic.collect_aborted(0, 90) == ([], True)
    # [0, 91) overlaps only producer 3's transaction, and its LSO 151 completes the search.
    assert realistic.collect_aborted(0, 91) == ([TXNS[3]], True)
    realistic.close()
    index.close()


def reference_collect(
    entries: list[AbortedTxn], fetch_offset: int, upper_bound: int
) -> tuple[list[AbortedTxn], bool]:
    """Kafka's TransactionIndex.collectAbortedTxns, written as a plain loop over a list."""
    found = []
    for entry in entries:
        if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
            found.append(entry)
        if entry.last_stable_offset >= upper_bound:
            return found, True
    return found, False


@st.composite
def aborted_txns(draw: st.DrawFn) -> list[AbortedTxn]:
    """Up to 300 entries (several read chunks) with increasing last offsets from BASE."""
    gaps = draw(st.lists(st.integers(1, 5), max_size=300))
    entries = []
    last = BASE - 1
    for i, gap in enumerate(gaps):
        last += gap
        first = last - draw(st.integers(0, 40))
        stable = last + 1 - draw(st.integers(0, 30))
        entries.append(AbortedTxn(i, first, last, stable))
    return entries


@settings(max_examples=60)
@given(entries=aborted_txns(), data=st.data())
def test_collect_and_truncate_match_the_reference(
    entries: list[AbortedTxn], data: st.DataObject
) -> None:
    top = entries[-1].last_offset + 10 if entries else BASE + 10
    with tempfile.TemporaryDirectory() as directory:
        index = filled(Path(directory), entries)
        try:
            for _ in range(5):
                fetch = data.draw(st.integers(BASE - 50, top), label="fetch offset")
                upper = data.draw(st.integers(BASE - 50, top), label="upper bound")
                expected = reference_collect(entries, fetch, upper)
                assert index.collect_aborted(fetch, upper) == expected
            cut = data.draw(st.integers(BASE - 1, top), label="truncate to")
            index.truncate_to(cut)
            kept = [e for e in entries if e.last_offset < cut]
            assert index.all_entries() == kept
            assert index.last_offset == (kept[-1].last_offset if kept else None)
            reopened = TransactionIndex(index.path, BASE)
            assert reopened.all_entries() == kept
            reopened.sanity_check()
            reopened.close()
        finally:
            index.close()


# -- truncate_to and reset ------------------------------------------------------------------------


def test_truncate_drops_entries_from_the_offset(tmp_path: Path) -> None:
    index = filled(tmp_path, TXNS)
    index.truncate_to(151)  # nothing at or after 151
    assert index.entries == 4
    index.truncate_to(140)  # the marker at 140 goes with its batch
    assert index.all_entries() == TXNS[:2]
    assert (index.last_offset, index.path.stat().st_size) == (120, 2 * ENTRY_SIZE)
    index.append(AbortedTxn(7, 125, 125, 126))  # a lower last offset than before is fine now
    index.truncate_to(0)
    assert (index.entries, index.last_offset, index.path.stat().st_size) == (0, None, 0)
    index.close()


def test_reset_empties_the_index(tmp_path: Path) -> None:
    index = filled(tmp_path, TXNS)
    index.reset()
    assert (index.entries, index.last_offset, index.path.read_bytes()) == (0, None, b"")
    assert index.collect_aborted(0, 1000) == ([], False)
    index.append(TXNS[0])
    assert TransactionIndex(index.path, BASE).all_entries() == TXNS[:1]
    index.close()
    never_written = TransactionIndex(tmp_path / "other.txnindex", BASE)
    never_written.reset()
    assert not never_written.path.exists()


# -- sanity checks --------------------------------------------------------------------------------


def write_raw(directory: Path, entries: list[AbortedTxn]) -> TransactionIndex:
    """Entries written as they are, bypassing `append`'s checks (a damaged file)."""
    path = index_path(directory)
    path.write_bytes(b"".join(e.encode() for e in entries))
    return TransactionIndex(path, BASE)


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ([TXNS[1], TXNS[0]], "not after the previous"),
        ([TXNS[0], TXNS[0]], "not after the previous"),
        ([AbortedTxn(1, 90, 99, 100)], "below the segment's base offset"),
        ([AbortedTxn(1, 111, 110, 111)], "after its end"),
    ],
)
def test_sanity_check_rejects_bad_entries(
    tmp_path: Path, entries: list[AbortedTxn], message: str
) -> None:
    index = write_raw(tmp_path, entries)
    with pytest.raises(CorruptIndexError, match=message):
        index.sanity_check()
    index.close()


def test_sanity_check_rejects_an_unknown_version(tmp_path: Path) -> None:
    index = write_raw(tmp_path, TXNS)
    fd = os.open(index.path, os.O_WRONLY)
    os.pwrite(fd, b"\x00\x01", 2 * ENTRY_SIZE)  # the third entry's version
    os.close(fd)
    with pytest.raises(CorruptIndexError, match="entry 2 has unknown version 1"):
        index.sanity_check()
    with pytest.raises(CorruptIndexError):
        index.collect_aborted(0, 1000)
    index.close()


def test_sanity_check_accepts_a_valid_file(tmp_path: Path) -> None:
    index = write_raw(tmp_path, TXNS)
    index.sanity_check()
    index.close()


# -- files ----------------------------------------------------------------------------------------


def test_rename_moves_the_file_and_keeps_the_handle(tmp_path: Path) -> None:
    index = filled(tmp_path, TXNS[:1])
    moved = tmp_path / "moved.txnindex.deleted"
    index.rename(moved)
    assert not index_path(tmp_path).exists()
    index.append(TXNS[1])
    index.flush()
    assert moved.read_bytes() == TXNS[0].encode() + TXNS[1].encode()
    index.delete()
    assert not moved.exists()
    empty = TransactionIndex(tmp_path / "none.txnindex", BASE)
    empty.rename(tmp_path / "none.txnindex.deleted")  # no file: only the name changes
    assert empty.path.name == "none.txnindex.deleted"
    assert not empty.path.exists()
    empty.delete()


def test_dup_handle_reaches_the_file(tmp_path: Path) -> None:
    index = filled(tmp_path, TXNS[:1])
    handle = index.dup_handle()
    assert handle is not None
    index.close()
    os.fsync(handle)  # the duplicate outlives the index's own handle
    assert os.fstat(handle).st_size == ENTRY_SIZE
    os.close(handle)


def test_reads_open_read_only_and_a_later_append_reopens(tmp_path: Path) -> None:
    """Reading needs no write access (`ketch dump-log` on a broker's files); the first append
    after a read replaces the read-only handle, and only a written index has one to fsync."""
    filled(tmp_path, TXNS[:1]).close()
    index = TransactionIndex(index_path(tmp_path), BASE)
    assert index.all_entries() == TXNS[:1]
    assert index.dup_handle() is None  # nothing written since opened: nothing to fsync
    index.flush()
    index.append(TXNS[1])
    handle = index.dup_handle()
    assert handle is not None
    os.close(handle)
    index.close()
    assert TransactionIndex(index_path(tmp_path), BASE).all_entries() == TXNS[:2]


def test_an_index_longer_than_one_read_chunk(tmp_path: Path) -> None:
    """250 entries take three reads of 120: searches and truncation cross the chunk edges."""
    entries = [AbortedTxn(i, BASE + 2 * i, BASE + 2 * i + 1, BASE) for i in range(250)]
    index = filled(tmp_path, entries)
    # Entry i spans [100 + 2i, 101 + 2i]; entries 119..121 sit around the first chunk's end.
    # [340, 342) overlaps only 120: 119 ends at 339, 121 starts at 342.
    assert index.collect_aborted(340, 342) == ([entries[120]], False)
    assert index.collect_aborted(339, 343) == (entries[119:122], False)
    index.truncate_to(BASE + 2 * 240 + 1)  # entry 240's marker
    assert index.all_entries() == entries[:240]
    index.close()
    reopened = TransactionIndex(index_path(tmp_path), BASE)
    assert (reopened.entries, reopened.last_offset) == (240, BASE + 2 * 239 + 1)
    reopened.sanity_check()
    reopened.close()
