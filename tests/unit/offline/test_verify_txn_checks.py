"""`ketch verify`'s check of transaction markers against the ``.txnindex`` files, on hand-made
rows: a consistent log (open transactions only counted), each finding kind, what compaction
leaves (markers without data, with or without entries), the limit of a dir without a clean
shutdown, and damaged batches. The whole path (scan task, driver) runs in test_verify_checks.py
and tests/spark/test_verify.py over a corrupted copy."""

from __future__ import annotations

from offline.verify_checks import NO_LIMIT, BatchRow, Finding
from offline.verify_txn_checks import (
    OpenTxn,
    TxnEntryRow,
    aborted_batches,
    has_transactions,
    txn_findings,
)
from runtime.log.producer_state import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT

KEY = ("/d/broker-0", "t", 0)
ABORT, COMMIT = CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT


def _data(segment: int, base: int, pid: int = -1, *, last: int | None = None) -> BatchRow:
    """A data batch; transactional when it has a producer id."""
    return BatchRow(
        segment, base * 100, base, base if last is None else last, 1, 100, 7, None, pid,
        0 if pid >= 0 else -1, 0 if pid >= 0 else -1, False, pid >= 0, None,
    )  # fmt: skip


def _marker(segment: int, base: int, pid: int, kind: int | None) -> BatchRow:
    return BatchRow(segment, base * 100, base, base, 1, 80, 7, None, pid, 0, -1, True, True, kind)


def _entry(segment: int, slot: int, pid: int, first: int, last: int) -> TxnEntryRow:
    return TxnEntryRow(segment, slot, pid, first, last)


def _kinds(found: list[Finding]) -> list[tuple[str, int | None, tuple[int, int] | None]]:
    return sorted((f.kind, f.segment, f.offsets) for f in found)


# Producer 1 aborts 0-1 at 3 (segment 0); producer 2 commits 2 at 4; producer 1 aborts 6 at 7
# (segment 5); producer 2 writes 8 and stays open.
LOG = [
    _data(0, 0, 1, last=1),
    _data(0, 2, 2),
    _marker(0, 3, 1, ABORT),
    _marker(0, 4, 2, COMMIT),
    _data(5, 5),
    _data(5, 6, 1),
    _marker(5, 7, 1, ABORT),
    _data(5, 8, 2),
]
ENTRIES = [_entry(0, 0, 1, 0, 3), _entry(5, 0, 1, 6, 7)]


def test_a_consistent_log_has_no_findings_and_its_open_transactions_are_counted() -> None:
    found, opened = txn_findings(KEY, LOG, ENTRIES)
    assert found == []
    assert opened == [OpenTxn("/d/broker-0", "t", 0, 2, 8)]


def test_each_mismatch_between_markers_and_entries_is_found() -> None:
    # The second entry is gone: its ABORT marker's transaction has data at 6.
    found, _ = txn_findings(KEY, LOG, ENTRIES[:1])
    assert _kinds(found) == [("txn_index_missing", 5, (6, 7))]
    cases = {
        "holds a COMMIT marker": _entry(0, 1, 2, 2, 4),
        "is producer 1's": _entry(5, 0, 2, 6, 7),
        "lies in segment 5": _entry(0, 1, 1, 6, 7),  # in segment 0's index; the marker is in 5
        "before the entry's first offset": _entry(5, 0, 1, 7, 7),
        "holds a data batch": _entry(5, 0, 2, 8, 8),
        "no valid batch starts": _entry(5, 0, 1, 9, 9),
    }
    for problem, entry in cases.items():
        entries = [ENTRIES[0], entry] if entry.segment == 5 else [*ENTRIES, entry]
        found, _ = txn_findings(KEY, LOG, entries)
        mismatches = [f for f in found if f.kind == "txn_index_mismatch"]
        assert len(mismatches) == 1, (problem, found)
        assert problem in mismatches[0].detail, (problem, mismatches[0].detail)
        assert mismatches[0].offsets == (entry.first_offset, entry.last_offset)
        # Where a wrong entry took the place of the one naming the marker at 7, that marker
        # lacks its entry too.
        replaced = entry.segment == 5 and entry.last_offset != 7
        others = {f.kind for f in found} - {"txn_index_mismatch"}
        assert others == ({"txn_index_missing"} if replaced else set()), problem
    rejected = TxnEntryRow(5, -1, None, None, None, "x.txnindex: length 30 is not a multiple")
    found, _ = txn_findings(KEY, LOG, [ENTRIES[0], rejected])
    assert _kinds(found) == [("txn_index_file", 5, None), ("txn_index_missing", 5, (6, 7))]


def test_markers_of_transactions_without_data_need_no_entry() -> None:
    # A compacted log: producer 1's aborted data is gone; its markers stay a while, with their
    # entries (ketch's cleaner) or without (Kafka's): both pass.
    compacted = [b for b in LOG if not (b.producer_id == 1 and not b.is_control)]
    for entries in (ENTRIES, []):
        found, _ = txn_findings(KEY, compacted, entries)
        assert found == []


def test_only_segments_below_the_one_holding_the_limit_are_judged() -> None:
    # A dir without a clean shutdown, recovery point 6: segment 5 is recovered (its .txnindex
    # rebuilt) at the next start, so its missing entry is not judged; segment 0's is.
    below = [b for b in LOG if b.base_offset is not None and b.base_offset < 6]
    found, _ = txn_findings(KEY, below, [], limit=6)
    assert _kinds(found) == [("txn_index_missing", 0, (0, 3))]
    assert txn_findings(KEY, LOG, [], limit=0)[0] == []
    assert txn_findings(KEY, LOG, ENTRIES[:1], limit=NO_LIMIT)[0] != []


def test_a_damaged_batch_forgets_open_transactions_and_its_entry_is_not_judged() -> None:
    damaged = _marker(0, 3, 1, None)._replace(reason="crc_mismatch: ...", control_type=None)
    log = [LOG[0], LOG[1], damaged, *LOG[3:]]
    # Without the damaged marker, producer 1's data at 0-1 would run into its next ABORT at 7
    # and make segment 5's entry (first offset 6) look wrong; and segment 0's entry names the
    # damaged batch.
    found, opened = txn_findings(KEY, log, ENTRIES)
    assert found == []
    assert [t.producer_id for t in opened] == [2]


def test_only_replicas_with_transactional_or_control_batches_need_rows() -> None:
    plain = tuple(list(column) for column in zip(*[_data(0, 0), _data(0, 1)], strict=True))
    assert not has_transactions(plain)
    mixed = tuple(list(column) for column in zip(*LOG, strict=True))
    assert has_transactions(mixed)


def test_aborted_batches_are_named_with_their_markers_for_the_record_comparison() -> None:
    # Producer 1's batches 0-1 and 6 were aborted (markers at 3 and 7); producer 2's commit and
    # open transaction are not, nor the plain batch.
    assert aborted_batches(LOG) == [(0, 3), (6, 7)]
    damaged = LOG[2]._replace(reason="crc_mismatch: ...")
    assert aborted_batches([*LOG[:2], damaged, *LOG[3:]]) == [(6, 7)]
