"""`ketch verify`'s check of transaction markers against the transaction indexes, per replica:
pure functions.

What the log keeps (`runtime.log.log`, `runtime.log.transaction_index`, as Kafka's): a producer's
transactional batches belong to its open transaction, which the producer's next COMMIT or ABORT
marker (a control batch of that producer whose record says which) ends. For every aborted
transaction the segment holding its ABORT marker has an entry in its ``.txnindex`` (producer id,
first offset, last offset = the marker's, last stable offset), from which a read_committed fetch
learns which records to drop. A missing entry hands aborted records to read_committed consumers
as committed ones; a wrong one can hide committed records or point readers nowhere.

Inputs: a replica's batches (`BatchRow`s in file order, with the transactional flag and a
control batch's control type, read by the scan task) below its limit, and its ``.txnindex``
entries (`TxnEntryRow`, sent raw by the scan tasks: they are judged against the whole
partition).

Findings (they make verify fail):

* ``txn_index_file`` — a ``.txnindex`` the broker's sanity check rejects (length not whole
  entries, unknown version, last offsets not increasing or below the segment's base offset, a
  first offset after its last); its entries are not judged.
* ``txn_index_missing`` — an ABORT marker whose transaction still has data in the log (a
  transactional batch of the producer after that producer's previous marker) without an entry
  at the marker's offset in its own segment's ``.txnindex``. Offsets: the transaction's first
  remaining batch to the marker.
* ``txn_index_mismatch`` — an entry that does not name an ABORT marker of its producer at its
  last offset in the same segment (no batch starts there, another producer's batch, a COMMIT
  marker or a data batch, the marker lies in another segment), or whose first offset lies after
  the first remaining batch of that transaction (read_committed readers would take that batch
  as committed). Offsets: the entry's.

Not findings: an ABORT marker of a transaction without data needs no entry (a cleaner removed
the data; Kafka's cleaner drops the entry with it, ``ketch compact`` keeps it while the marker
stays: both pass), and a transaction still open at the end of the log (transactional batches of
a producer with no marker after them) is legal, its coordinator ends it later: `OpenTxn`, which
the report counts apart.

Limits. In a dir without the clean-shutdown marker only what lies below the recovery point is
judged, and the segment holding it, like every later one, is recovered at the next start, which
rebuilds its ``.txnindex``: neither its markers nor its entries are judged. An invalid batch
(reported by its own kind) may have been anyone's: after one, every producer's open transaction
is forgotten, so a damaged marker cannot make a later one look wrong, and an entry naming it is
not judged.

For the record-level comparison of compacted topics' replicas, `aborted_batches` names each
replica's batches of aborted transactions: a cleaner removes them, so a compacted replica and one
not compacted yet legitimately differ there, and neither counts them as a key's latest record.

Memory: per producer, the first offset of its open transaction; the replica's entries by
(segment, last offset) and its batches by base offset. Pure functions over values they are
given: nothing shared, no locks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from offline.verify_checks import NO_LIMIT, BatchRow, Columns, Finding
from runtime.log.producer_state import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT

_IS_CONTROL, _IS_TRANSACTIONAL = map(BatchRow._fields.index, ("is_control", "is_transactional"))
_MARKERS: Final = (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT)
_NOTHING_JUDGED: Final = -1  # a segment bound below every segment


class TxnEntryRow(NamedTuple):
    """One ``.txnindex`` entry of a replica's segment; slot -1 with `problem` when the file is
    rejected (then the other fields are None)."""

    segment: int
    slot: int
    producer_id: int | None
    first_offset: int | None
    last_offset: int | None
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class OpenTxn:
    """A transaction without a marker at the end of a replica's (judged) log."""

    broker_dir: str
    topic: str
    partition: int
    producer_id: int
    first_offset: int  # its first remaining batch's


def has_transactions(columns: Columns) -> bool:
    """Whether a replica's columns hold a transactional or control batch (in C); a replica
    without one and without ``.txnindex`` entries has nothing to judge here."""
    return True in columns[_IS_TRANSACTIONAL] or True in columns[_IS_CONTROL]


def txn_findings(
    key: tuple[str, str, int],
    batches: Iterable[BatchRow],
    entries: Sequence[TxnEntryRow],
    limit: int = NO_LIMIT,
) -> tuple[list[Finding], list[OpenTxn]]:
    """The findings and the open transactions of one replica (module docstring)."""
    batches = list(batches)
    judged_below = _judged_below(batches, entries, limit)
    found: list[Finding] = []
    by_marker: dict[tuple[int, int], TxnEntryRow] = {}
    for entry in entries:
        if entry.segment >= judged_below:
            continue
        if entry.slot < 0 or entry.last_offset is None:
            found.append(_finding(key, "txn_index_file", entry.segment, None, entry.problem or ""))
        else:
            by_marker[(entry.segment, entry.last_offset)] = entry
    at_offset: dict[int, BatchRow] = {}
    damaged: set[int] = set()  # base offsets of invalid batches (reported by their own kind)
    first_of: dict[int, int] = {}  # ABORT marker offset -> its transaction's first batch
    open_txns: dict[int, int] = {}  # producer id -> first offset of its open transaction
    for b in batches:
        if b.reason is not None:
            open_txns.clear()  # see "Limits"
            if b.base_offset is not None:
                damaged.add(b.base_offset)
            continue
        assert b.base_offset is not None
        at_offset[b.base_offset] = b
        pid = b.producer_id
        if pid is None or pid < 0:
            continue
        if not b.is_control:
            if b.is_transactional:
                open_txns.setdefault(pid, b.base_offset)
            continue
        if b.control_type not in _MARKERS:
            continue
        first = open_txns.pop(pid, None)
        if b.control_type != CONTROL_TYPE_ABORT or first is None:
            continue
        first_of[b.base_offset] = first
        if b.segment < judged_below and (b.segment, b.base_offset) not in by_marker:
            found.append(
                _finding(
                    key, "txn_index_missing", b.segment, (first, b.base_offset),
                    f"the ABORT marker of producer {pid} at offset {b.base_offset} ends a "
                    f"transaction with data from offset {first}, but segment {b.segment}'s "
                    ".txnindex has no entry for it: read_committed consumers would read the "
                    "aborted records",
                )
            )  # fmt: skip
    for entry in by_marker.values():
        assert entry.last_offset is not None
        if entry.last_offset in damaged:
            continue
        problem = _entry_problem(entry, at_offset.get(entry.last_offset), first_of)
        if problem is not None:
            first = entry.first_offset if entry.first_offset is not None else entry.last_offset
            found.append(
                _finding(
                    key, "txn_index_mismatch", entry.segment, (first, entry.last_offset),
                    f"entry {entry.slot} of segment {entry.segment}'s .txnindex (producer "
                    f"{entry.producer_id}, offsets {first}..{entry.last_offset}): {problem}",
                )
            )  # fmt: skip
    broker_dir, topic, partition = key
    opened = [OpenTxn(broker_dir, topic, partition, pid, first) for pid, first in open_txns.items()]
    return found, opened


def _judged_below(batches: Sequence[BatchRow], entries: Sequence[TxnEntryRow], limit: int) -> int:
    """The base offset from which segments are not judged: the segment holding the limit (see
    "Limits"), or none."""
    if limit == NO_LIMIT:
        return NO_LIMIT
    segments = {b.segment for b in batches} | {e.segment for e in entries}
    return max((s for s in segments if s <= limit), default=_NOTHING_JUDGED)


def _entry_problem(
    entry: TxnEntryRow, batch: BatchRow | None, first_of: dict[int, int]
) -> str | None:
    """What is wrong with an entry, None when it names its ABORT marker."""
    last = entry.last_offset
    if batch is None:
        return f"no valid batch starts at its last offset {last}"
    if batch.segment != entry.segment:
        return f"the batch at its last offset {last} lies in segment {batch.segment}"
    if not batch.is_control:
        return f"offset {last} holds a data batch, not an ABORT marker"
    if batch.control_type != CONTROL_TYPE_ABORT:
        what = "a COMMIT marker" if batch.control_type == CONTROL_TYPE_COMMIT else "no marker"
        return f"offset {last} holds {what}, not an ABORT marker"
    if batch.producer_id != entry.producer_id:
        return f"the ABORT marker at offset {last} is producer {batch.producer_id}'s"
    first = first_of.get(last) if last is not None else None
    if first is not None and entry.first_offset is not None and entry.first_offset > first:
        return (
            f"the transaction's first batch is at offset {first}, before the entry's first "
            "offset: read_committed consumers would read it as committed"
        )
    return None


def _finding(
    key: tuple[str, str, int],
    kind: str,
    segment: int,
    offsets: tuple[int, int] | None,
    detail: str,
) -> Finding:
    broker_dir, topic, partition = key
    return Finding(kind, broker_dir, topic, partition, segment, offsets, detail)


def aborted_batches(batches: Iterable[BatchRow]) -> list[tuple[int, int]]:
    """``(base offset, ABORT marker offset)`` of each data batch of an aborted transaction among
    a replica's batches (file order; after an invalid batch, as in `txn_findings`, the open
    transactions are forgotten)."""
    found: list[tuple[int, int]] = []
    open_txns: dict[int, list[int]] = {}
    for b in batches:
        if b.reason is not None:
            open_txns.clear()
            continue
        pid = b.producer_id
        if pid is None or pid < 0:
            continue
        assert b.base_offset is not None
        if not b.is_control:
            if b.is_transactional:
                open_txns.setdefault(pid, []).append(b.base_offset)
            continue
        if b.control_type not in _MARKERS:
            continue
        ended = open_txns.pop(pid, [])
        if b.control_type == CONTROL_TYPE_ABORT:
            found.extend((base, b.base_offset) for base in ended)
    return found
