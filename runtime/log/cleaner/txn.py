"""Transactions as compaction sees them (the offline Spark job and the brokers' live cleaner):
which batches were aborted, where the log stops being stable, and which transaction index
entries a cleaned segment keeps.

A partition's transactional batches belong to the transaction of their producer id that is open
when they are appended: the first transactional batch of a producer after its previous
COMMIT/ABORT marker (a control batch of that producer) opens one, the next marker ends it (the
broker's `runtime.log.producer_state` folds the log the same way). `TransactionScan` is fed every
batch header of a partition in log order while the offline plan reads them
(`offline.compact_plan`), and
the control record of each control batch (`control_type`, one small ``pread``), and answers:

* `aborted_below` — the base offsets of the data batches of transactions that an ABORT marker
  below the high watermark ended (the plan's ``aborted_batches``). Compaction removes them
  (Kafka's cleaner does; they were never visible to read_committed consumers) and keeps them
  out of the "latest record per key" computation, so an aborted record never hides an older
  committed one.
* `first_unstable_offset` — the first offset of the oldest transaction without a marker below
  the high watermark (open, or decided by a marker not yet replicated: Kafka's LSO). Nothing from
  there on may be cleaned: whether those records count is not known yet, so the cleanable range
  stops before the segment holding it, as Kafka's ``firstUncleanableDirtyOffset`` does.

The outcome comes from the markers in the log, not from the ``.txnindex`` files: the log is what
the broker replays when it rebuilds them, so a damaged index cannot make compaction keep aborted
records or drop committed ones. A cleaned segment's ``.txnindex`` (`source_index_entries`,
`index_entry_for`) keeps the original entries of the ABORT markers that stay in it.

The live cleaner in a broker (`runtime.log.cleaner.offset_map`) takes the aborted transactions
from the log's own transaction index instead, as Kafka's cleaner does: the broker maintains that
index and serves read_committed fetches from it, and it spares a scan beyond the cleaned range.

Memory: the base offsets of each open transaction's batches until its marker (then dropped, or
kept when it aborted), so of the order of the batches of aborted transactions. Each scan is
owned by the one plan that feeds it: no shared state, no locks.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

from runtime.log.producer_replay import control_marker
from runtime.log.producer_state import CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT
from runtime.log.segment import TXN_INDEX_SUFFIX, file_name_prefix
from runtime.log.transaction_index import AbortedTxn, TransactionIndex
from wire.records import BatchHeader, CorruptRecordError

MARKER_TYPES: Final = (CONTROL_TYPE_ABORT, CONTROL_TYPE_COMMIT)


def control_type(batch: bytes | bytearray | memoryview) -> int | None:
    """The control type of a control batch's record (0 ABORT, 1 COMMIT, ...); None for a batch
    without a record or one whose record does not read as a control record (it ends nothing,
    as for the broker's replay, `runtime.log.producer_replay`)."""
    try:
        kind, _ = control_marker(batch)
    except CorruptRecordError:
        return None
    return kind


def read_control_type(fd: int, position: int, size: int) -> int | None:
    """`control_type` of the batch of `size` bytes at `position` of the open file `fd`."""
    return control_type(os.pread(fd, size, position))


class TransactionScan:
    """Folds a partition's batches, in log order, into its transactions' outcomes (see the
    module docstring)."""

    def __init__(self, high_watermark: int) -> None:
        self._high_watermark = high_watermark
        self._open: dict[int, list[int]] = {}  # producer id -> its open transaction's batches
        self._aborted: list[int] = []
        self._unstable: int | None = None  # first offset of the oldest undecided transaction

    def add(self, header: BatchHeader, marker_type: int | None = None) -> None:
        """One batch; `marker_type` is the control type of a control batch's record."""
        producer_id = header.producer_id
        if producer_id < 0:
            return
        if not header.is_control:
            if header.is_transactional:
                self._open.setdefault(producer_id, []).append(header.base_offset)
            return
        if marker_type not in MARKER_TYPES:
            return
        batches = self._open.pop(producer_id, None)
        if batches is None:
            return  # a marker of a transaction without data (left by a cleaner, or empty)
        if header.base_offset >= self._high_watermark:
            # Decided, but the marker may still be truncated away (Kafka keeps such a
            # transaction in the LSO until its marker is below the HW).
            self._mark_unstable(batches[0])
        elif marker_type == CONTROL_TYPE_ABORT:
            self._aborted.extend(batches)

    def _mark_unstable(self, first_offset: int) -> None:
        if self._unstable is None or first_offset < self._unstable:
            self._unstable = first_offset

    @property
    def first_unstable_offset(self) -> int | None:
        firsts = [batches[0] for batches in self._open.values()]
        if self._unstable is not None:
            firsts.append(self._unstable)
        return min(firsts, default=None)

    def aborted_below(self, end_offset: int) -> frozenset[int]:
        """The base offsets of aborted transactions' batches below `end_offset`."""
        return frozenset(o for o in self._aborted if o < end_offset)


# -- the transaction index of cleaned segments ---------------------------------------------------


def source_index_entries(source_dir: Path, base_offsets: Iterable[int]) -> dict[int, AbortedTxn]:
    """The ``.txnindex`` entries of the segments `base_offsets` of `source_dir`, by last offset
    (the ABORT marker's). Raises CorruptIndexError for an index the broker would reject
    (`TransactionIndex.sanity_check`)."""
    entries: dict[int, AbortedTxn] = {}
    for base_offset in base_offsets:
        path = source_dir / f"{file_name_prefix(base_offset)}{TXN_INDEX_SUFFIX}"
        if not path.exists():
            continue  # the usual case: a segment without aborted transactions
        index = TransactionIndex(path, base_offset)
        try:
            index.sanity_check()
            entries.update((entry.last_offset, entry) for entry in index.iter_entries())
        finally:
            index.close()
    return entries


def index_entry_for(
    entries: Mapping[int, AbortedTxn], batch: bytes, header: BatchHeader
) -> AbortedTxn | None:
    """The original entry to keep for a control batch that stays in a cleaned segment: the one
    naming this batch's offset and producer, when the batch is an ABORT marker. An entry that
    does not name an ABORT marker of its producer (a damaged index) is not carried over: the
    cleaned index holds what the log says."""
    entry = entries.get(header.base_offset)
    if entry is None or entry.producer_id != header.producer_id or not header.is_control:
        return None
    return entry if control_type(batch) == CONTROL_TYPE_ABORT else None
