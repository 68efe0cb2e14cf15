"""The job of `ketch verify`: one Spark scan of every byte, then the checks on the driver.

The "ketch" data source's ``verify`` level reads and CRC-checks every byte of every segment in
parallel tasks and returns a small table (one lean row per batch, plus the index checks'
findings, which each task makes while it has the segment open). The driver collects that table
once, as Arrow (`offline.verify_scan.split_scan` cuts it per replica), and `judge` runs the
checks of `offline.verify_checks` over it per replica (ordering, gaps, epochs, summaries, HW
beyond the log end), of `offline.verify_producer_checks` (idempotent producers' duplicates and
epochs; their sequence gaps are counted in the stats, not findings), of
`offline.verify_txn_checks` (transaction markers against the ``.txnindex`` files; open
transactions are counted, not findings) and the comparison of each partition's replicas
(`offline.verify_replicas`): judged as DataFrame window functions and joins, the same checks
cost several Spark jobs, ten times the scan. Compacted topics' record-level comparison is a
second Spark job, only when there are some. `run_verify` is the whole job; the command line and
the report's rendering are `offline.verify`, the driver's reading of the data dirs
`offline.verify_layout`.

The driver owns everything here; Spark runs the tasks: no shared mutable state, no locks.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import pyarrow as pa
from pyspark.sql import SparkSession

from offline import verify_checks as checks
from offline import verify_producer_checks as producer_checks
from offline import verify_txn_checks as txn_checks
from offline.datasource import VERIFY_LEVEL
from offline.verify_checks import BatchRow, Checked, Finding
from offline.verify_index_checks import index_readable_rows, segment_index_findings
from offline.verify_layout import Layout, Replica, read_layout
from offline.verify_producer_checks import SequenceGap
from offline.verify_replicas import (
    Bounds,
    Summary,
    batch_replica_findings,
    record_replica_findings,
    replica_bounds,
)
from offline.verify_scan import NO_BATCHES, ReplicaKey, Scanned, reader, split_scan
from offline.verify_txn_checks import OpenTxn

SCAN_TASK_MAX_BYTES: Final = 1 << 40  # no cap: the bytes are spread over one task per core
MAX_GAP_EXAMPLES: Final = 5  # sequence gaps are counted; the report shows the first few
MAX_OPEN_TXN_EXAMPLES: Final = 5  # open transactions likewise


@dataclass
class VerifyReport:
    """What `run_verify` found: `ok` when there are no findings; `stats` as the report shows."""

    ok: bool
    findings: list[Finding] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


# -- the job --------------------------------------------------------------------------------------


def _hw_findings(layout: Layout, summary: Summary) -> list[Finding]:
    found = []
    for replica in layout.replicas:
        if replica.hw is None or not replica.clean:
            continue
        row = summary.get((replica.broker_dir, replica.tp.topic, replica.tp.partition))
        # A log without batches ends at its start offset (HW 0 on a new, empty log is fine).
        next_offset = replica.log_start if row is None else row.next_offset
        if replica.hw > next_offset:
            end = f"log end offset {next_offset}"
            found.append(
                Finding(
                    "hw_beyond_log_end", replica.broker_dir, replica.tp.topic,
                    replica.tp.partition, None, (replica.hw, replica.hw),
                    f"replication-offset-checkpoint says HW {replica.hw}, the log has {end}",
                )
            )  # fmt: skip
    return found


def run_verify(
    spark: SparkSession, data_dirs: Sequence[str], *, compacted_topics: Iterable[str] = ()
) -> VerifyReport:
    started = time.monotonic()
    layout = read_layout(data_dirs, compacted_topics)
    judged = judge(layout, _scan(spark, layout))
    record_found = record_replica_findings(spark, layout, judged.bounds, judged.aborted)
    findings = [*judged.findings, *record_found]
    findings.sort(key=_finding_order)
    stats = _stats(layout, judged, findings, time.monotonic() - started)
    return VerifyReport(not findings, findings, stats)


@dataclass(frozen=True, slots=True)
class Judged:
    findings: list[Finding]
    summary: Summary
    bounds: Bounds  # per replicated partition, see `replica_bounds`
    sequence_gaps: list[SequenceGap]  # not findings: `offline.verify_producer_checks` says why
    open_transactions: list[OpenTxn]  # not findings: `offline.verify_txn_checks` says why
    # Compacted topics' replicas: (batch base offset, ABORT marker offset) of aborted batches,
    # which the record-level comparison leaves out.
    aborted: dict[ReplicaKey, list[tuple[int, int]]]


def judge(layout: Layout, table: pa.Table) -> Judged:
    """Every check but the record-level one of compacted topics, over the verify level's
    table (`_scan`): pure, on the driver."""
    scanned = split_scan(table)
    checked, summary, found = _judge_replicas(layout, scanned)
    producer_found, gaps = _producer_checks(layout, scanned, checked)
    txn_found, open_txns, aborted = _txn_checks(layout, scanned, checked)
    bounds = replica_bounds(layout, summary)
    findings = [
        *layout.findings,
        *scanned.findings,
        *found,
        *producer_found,
        *txn_found,
        *_hw_findings(layout, summary),
        *batch_replica_findings(layout, scanned, checked, bounds),
    ]
    return Judged(findings, summary, bounds, gaps, open_txns, aborted)


def _scan(spark: SparkSession, layout: Layout) -> pa.Table:
    """The one Spark job over every byte. A dir without a clean-shutdown marker has a limit
    per replica, which the tasks do not know, so its index entries come back raw."""
    paths = [str(b) for b in layout.broker_dirs]
    df = (
        reader(spark, VERIFY_LEVEL)
        .option("raw_index_dirs", json.dumps(layout.partial_dirs))
        # One task per core: each Python data source task costs ~0.1 s to start, and the scan
        # of a task is even work (bytes), so more tasks only add that cost.
        .option("max_partition_bytes", str(SCAN_TASK_MAX_BYTES))
        .load(paths)
    )
    table: pa.Table = df.toArrow()
    return table


def _judge_replicas(
    layout: Layout, scanned: Scanned
) -> tuple[dict[ReplicaKey, list[Checked]], Summary, list[Finding]]:
    """The per-replica checks. Returns the judged batches of every replica that was not
    `plainly_clean` (the others need no per-batch objects unless their replicas diverge)."""
    epochs: dict[ReplicaKey, list[tuple[int, int]]] = {}
    for broker_dir, topic, partition, epoch, start in layout.epochs:
        epochs.setdefault((broker_dir, topic, partition), []).append((epoch, start))
    entries_of: dict[ReplicaKey, list[int]] = {}
    for broker_dir, topic, partition, segment in scanned.entries:
        entries_of.setdefault((broker_dir, topic, partition), []).append(segment)
    all_checked: dict[ReplicaKey, list[Checked]] = {}
    summary: Summary = {}
    found: list[Finding] = []
    for replica in layout.replicas:
        key = (replica.broker_dir, replica.tp.topic, replica.tp.partition)
        columns = scanned.batches.get(key, NO_BATCHES)
        mine = epochs.get(key, [])
        if key not in entries_of and checks.plainly_clean(
            columns, replica.compacted, replica.limit, mine
        ):
            row = checks.clean_summary(columns)
        else:
            checked = checks.checked_batches(checks.rows_of(columns), replica.limit)
            all_checked[key] = checked
            found.extend(_replica_checks(key, replica, checked, mine))
            found.extend(_raw_index_checks(key, replica, checked, scanned, entries_of))
            row = checks.replica_summary(checked)
        if row is not None:
            summary[key] = row
    return all_checked, summary, found


def _replica_checks(
    key: ReplicaKey, replica: Replica, checked: list[Checked], epochs: list[tuple[int, int]]
) -> list[Finding]:
    return [
        *checks.invalid_batch_findings(key, checked),
        *checks.ordering_findings(key, checked, replica.compacted),
        *checks.segment_base_findings(key, checked, replica.compacted),
        *checks.epoch_checkpoint_findings(key, checked, epochs),
    ]


def _producer_checks(
    layout: Layout, scanned: Scanned, checked: dict[ReplicaKey, list[Checked]]
) -> tuple[list[Finding], list[SequenceGap]]:
    """Idempotent producers' batches per replica, over the batches the other checks judged: a
    `plainly_clean` replica's columns become rows only when its producers' sequences are not
    plainly in order (`plainly_in_sequence`)."""
    found: list[Finding] = []
    gaps: list[SequenceGap] = []
    for replica in layout.replicas:
        key = (replica.broker_dir, replica.tp.topic, replica.tp.partition)
        mine = checked.get(key)
        if mine is not None:
            batches = [c.batch for c in mine]
        else:
            columns = scanned.batches.get(key, NO_BATCHES)
            if not producer_checks.has_producer_batches(columns) or (
                producer_checks.plainly_in_sequence(columns)
            ):
                continue
            batches = checks.rows_of(columns)
        replica_found, replica_gaps = producer_checks.producer_findings(key, batches)
        found.extend(replica_found)
        gaps.extend(replica_gaps)
    return found, gaps


def _txn_checks(
    layout: Layout, scanned: Scanned, checked: dict[ReplicaKey, list[Checked]]
) -> tuple[list[Finding], list[OpenTxn], dict[ReplicaKey, list[tuple[int, int]]]]:
    """Transaction markers against the ``.txnindex`` entries, per replica, over the batches the
    other checks judged, and the aborted batches of compacted topics' replicas; a
    `plainly_clean` replica without transactional or control batches and without entries
    (most) costs two list searches in C."""
    found: list[Finding] = []
    open_txns: list[OpenTxn] = []
    aborted: dict[ReplicaKey, list[tuple[int, int]]] = {}
    for replica in layout.replicas:
        key = (replica.broker_dir, replica.tp.topic, replica.tp.partition)
        entries = scanned.txn_entries.get(key, [])
        mine = checked.get(key)
        if mine is not None:
            batches = [c.batch for c in mine]
        else:
            columns = scanned.batches.get(key, NO_BATCHES)
            if not entries and not txn_checks.has_transactions(columns):
                continue
            batches = checks.rows_of(columns)
        replica_found, replica_open = txn_checks.txn_findings(key, batches, entries, replica.limit)
        found.extend(replica_found)
        open_txns.extend(replica_open)
        if replica.compacted:
            aborted[key] = txn_checks.aborted_batches(batches)
    return found, open_txns, aborted


def _raw_index_checks(
    key: ReplicaKey,
    replica: Replica,
    checked: list[Checked],
    scanned: Scanned,
    entries_of: dict[ReplicaKey, list[int]],
) -> list[Finding]:
    """Index entries the tasks sent raw (a partial dir, a segment split over tasks)."""
    by_segment: dict[int, list[BatchRow]] = {}
    for c in checked:
        by_segment.setdefault(c.batch.segment, []).append(c.batch)
    found: list[Finding] = []
    for segment in entries_of.get(key, []):
        batches = index_readable_rows(by_segment.get(segment, []))
        entries = scanned.entries[(*key, segment)]
        found.extend(segment_index_findings((*key, segment), batches, entries, replica.limit))
    return found


def _finding_order(f: Finding) -> tuple[Any, ...]:
    return (
        f.topic or "", f.partition if f.partition is not None else -1, f.broker_dir or "",
        f.offsets or (-1, -1), f.kind, f.detail,
    )  # fmt: skip


def _stats(
    layout: Layout,
    judged: Judged,
    findings: Sequence[Finding],
    elapsed_s: float,
) -> dict[str, Any]:
    summary = judged.summary
    return {
        "broker_dirs": len(layout.broker_dirs),
        "partitions": len({r.tp for r in layout.replicas}),
        "replicas": len(layout.replicas),
        "batches": sum(row.batches for row in summary.values()),
        "bytes": sum(row.bytes for row in summary.values()),
        "compacted_topics": sorted(layout.compacted_topics),
        "partial_dirs": layout.partial_dirs,
        "partial_note": (
            "no clean-shutdown marker: checked only below each log's recovery point"
            if layout.partial_dirs
            else None
        ),
        "findings_by_kind": dict(sorted(Counter(f.kind for f in findings).items())),
        # Not findings (`offline.verify_producer_checks` says why): counted per replica.
        "sequence_gaps": len(judged.sequence_gaps),
        "sequence_gap_examples": [asdict(g) for g in judged.sequence_gaps[:MAX_GAP_EXAMPLES]],
        # Legal (`offline.verify_txn_checks`): counted per replica, the first few shown.
        "open_transactions": len(judged.open_transactions),
        "open_transaction_examples": [
            asdict(t) for t in judged.open_transactions[:MAX_OPEN_TXN_EXAMPLES]
        ],
        "elapsed_s": round(elapsed_s, 3),
    }
