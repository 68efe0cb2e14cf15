"""The job of `ketch verify`: one Spark scan of every byte, then the checks on the driver.

The "ketch" data source's ``verify`` level reads and CRC-checks every byte of every segment in
parallel tasks and returns a small table (one lean row per batch, plus the index checks'
findings, which each task makes while it has the segment open). The driver collects that table
once, as Arrow (`split_scan` cuts it per replica), and `judge` runs the checks of
`offline.verify_checks` over it per replica (ordering, gaps, epochs, summaries, HW beyond the
log end, replica divergence ranges over each partition's ``[lo, hi)``, see `_bounds`) and of
`offline.verify_producer_checks` (idempotent producers' duplicates and epochs; their sequence
gaps are counted in the stats, not findings): judged as DataFrame window functions and joins,
the same checks cost several Spark jobs, ten times the scan. Compacted topics' record-level
comparison is a second Spark job, only when there are some. `run_verify` is the whole job; the
command line and the report's rendering are `offline.verify`, the driver's reading of the data
dirs `offline.verify_layout`.

The driver owns everything here; Spark runs the tasks: no shared mutable state, no locks.
"""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrameReader, SparkSession
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from offline import verify_checks as checks
from offline import verify_producer_checks as producer_checks
from offline.datasource import FORMAT, VERIFY_LEVEL
from offline.verify_checks import BatchRow, Checked, Finding, ReplicaSummary
from offline.verify_index_checks import IndexRow, index_readable_rows, segment_index_findings
from offline.verify_layout import Layout, Replica, read_layout
from offline.verify_producer_checks import SequenceGap
from wire.topic import TopicPartition

SCAN_TASK_MAX_BYTES: Final = 1 << 40  # no cap: the bytes are spread over one task per core
MAX_DIVERGENT_ROWS: Final = 10_000  # per comparison; a report past that says "truncated"
MAX_GAP_EXAMPLES: Final = 5  # sequence gaps are counted; the report shows the first few
_REPLICA_COLUMNS: Final = ("broker_dir", "topic", "partition")
_BATCH_ORDER: Final = (*_REPLICA_COLUMNS, "segment", "position")
_NO_BATCHES: Final[checks.Columns] = tuple([] for _ in BatchRow._fields)
ReplicaKey = tuple[str, str, int]  # (broker dir, topic, partition)
Summary = dict[ReplicaKey, ReplicaSummary]  # replicas with at least one valid batch
BrokersOf = dict[TopicPartition, list[str]]  # the log dirs holding each partition

BOUNDS_SCHEMA: Final = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("lo", LongType(), False),
        StructField("hi", LongType(), False),
        StructField("n_replicas", IntegerType(), False),
    ]
)


@dataclass
class VerifyReport:
    """What `run_verify` found: `ok` when there are no findings; `stats` as the report shows."""

    ok: bool
    findings: list[Finding] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


# -- the job --------------------------------------------------------------------------------------


@dataclass
class Scanned:
    """The verify level's table, split on the driver: batches per replica (file order), the raw
    index entries the tasks left to the driver, and the findings the tasks made."""

    batches: dict[ReplicaKey, checks.Columns] = field(default_factory=dict)
    entries: dict[tuple[str, str, int, int], list[IndexRow]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)


def split_scan(table: pa.Table) -> Scanned:
    """The batch rows sorted by Arrow and cut per replica into columns (lists): the checks take
    `plainly_clean` replicas as columns, and build `BatchRow`s only for the others."""
    out = Scanned()
    is_batch = pc.equal(table.column("row"), "batch")
    batches = table.filter(is_batch).sort_by([(name, "ascending") for name in _BATCH_ORDER])
    columns = [batches.column(name).to_pylist() for name in BatchRow._fields]
    at = 0
    keys = zip(*(batches.column(name).to_pylist() for name in _REPLICA_COLUMNS), strict=True)
    for key, run in itertools.groupby(keys):  # sorted: one run per replica
        count = len(list(run))
        out.batches[key] = tuple(column[at : at + count] for column in columns)
        at += count
    names = ("broker_dir", "topic", "partition", "segment", "row", "position", "base_offset",
             "last_offset", "slot", "timestamp", "reason", "detail")  # fmt: skip
    others = table.filter(pc.invert(is_batch))
    for (broker, topic, partition, segment, row, position, base, last, slot, timestamp, reason,
         detail) in zip(*(others.column(n).to_pylist() for n in names), strict=True):  # fmt: skip
        if row == "finding":
            offsets = None if base is None else (base, base if last is None else last)
            out.findings.append(
                Finding(reason, broker, topic, partition, segment, offsets, detail or "")
            )
        else:
            out.entries.setdefault((broker, topic, partition, segment), []).append(
                IndexRow(row, slot, base, position, timestamp, detail)
            )
    return out


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


def _bounds(layout: Layout, summary: Summary) -> list[tuple[str, int, int, int, int]]:
    """Per partition with several replicas: ``(topic, partition, lo, hi, replicas)``."""
    by_tp: dict[TopicPartition, list[Replica]] = {}
    for replica in layout.replicas:
        by_tp.setdefault(replica.tp, []).append(replica)
    bounds = []
    for tp, replicas in sorted(by_tp.items()):
        if len(replicas) < 2:
            continue
        los, his = [], []
        for replica in replicas:
            row = summary.get((replica.broker_dir, tp.topic, tp.partition))
            first = 0 if row is None else row.first_offset
            end = 0 if row is None else row.next_offset
            los.append(first)
            his.append(min(end, replica.limit, end if replica.hw is None else replica.hw))
        lo, hi = max(los), min(his)
        if lo < hi:
            bounds.append((tp.topic, tp.partition, lo, hi, len(replicas)))
    return bounds


def _majority(variants: dict[str, Any]) -> Any:
    counts = Counter(variants.values())
    (top, count), *rest = counts.most_common()
    return top if not rest or rest[0][1] < count else None


def _merge_ranges(
    hits: Iterable[tuple[str, str, int, int, int, str]],
) -> list[Finding]:
    """Consecutive divergent batches of one replica (in offset order) become one finding."""
    found: list[Finding] = []
    open_ranges: dict[tuple[str, str, int], list[Any]] = {}
    for broker_dir, topic, partition, first, last, detail in hits:
        key = (broker_dir, topic, partition)
        current = open_ranges.get(key)
        if current is not None and current[1] >= first - 1 and current[3] == detail:
            current[1] = max(current[1], last)
            continue
        if current is not None:
            found.append(_divergence(key, current))
        open_ranges[key] = [first, last, detail, detail]
    found.extend(_divergence(key, current) for key, current in open_ranges.items())
    return found


def _divergence(key: tuple[str, str, int], current: list[Any]) -> Finding:
    broker_dir, topic, partition = key
    first, last, detail, _ = current
    return Finding(
        "replica_divergence", broker_dir, topic, partition, None, (first, last),
        f"offsets {first}..{last}: {detail}",
    )  # fmt: skip


def _batch_divergences(rows: Sequence[Any], brokers_of: BrokersOf) -> list[Finding]:
    hits = []
    for row in rows:
        tp = TopicPartition(row["topic"], row["partition"])
        variants = {r["broker_dir"]: r["variant"] for r in row["replicas"]}
        majority = _majority(variants) if len(variants) == row["n_replicas"] else None
        if majority is None and len(variants) < row["n_replicas"]:
            majority = Counter(variants.values()).most_common(1)[0][0]
        for broker in brokers_of[tp]:
            mine = variants.get(broker)
            if mine is not None and mine == majority:
                continue
            if mine is None:
                detail = "batches missing here that the other replicas hold below the HW"
            elif majority is None:
                detail = "replicas disagree (no majority) on batch (last offset/epoch/size/crc)"
            else:
                detail = "batch differs from the other replicas (last offset/epoch/size/crc)"
            hits.append(
                (broker, tp.topic, tp.partition, row["base_offset"], row["last_offset"], detail)
            )
    hits.sort(key=lambda h: (h[0], h[1], h[2], h[3]))
    return _merge_ranges(hits)


def _key_divergences(rows: Sequence[Any], brokers_of: BrokersOf) -> list[Finding]:
    found = []
    for row in rows:
        tp = TopicPartition(row["topic"], row["partition"])
        states = {s["broker_dir"]: s for s in row["states"]}
        key = bytes(row["key"])
        described = ", ".join(
            f"{b}: {'absent' if b not in states else 'offset ' + str(states[b]['offset'])}"
            for b in brokers_of[tp]
        )
        offsets = [s["offset"] for s in states.values()]
        found.append(
            Finding(
                "replica_record_divergence", None, tp.topic, tp.partition, None,
                (min(offsets), max(offsets)),
                f"key {key!r}: latest record below the HW differs ({described})",
            )
        )  # fmt: skip
    return found


def run_verify(
    spark: SparkSession, data_dirs: Sequence[str], *, compacted_topics: Iterable[str] = ()
) -> VerifyReport:
    started = time.monotonic()
    layout = read_layout(data_dirs, compacted_topics)
    judged = judge(layout, _scan(spark, layout))
    findings = [*judged.findings, *_record_replica_findings(spark, layout, judged.bounds)]
    findings.sort(key=_finding_order)
    stats = _stats(layout, judged, findings, time.monotonic() - started)
    return VerifyReport(not findings, findings, stats)


@dataclass(frozen=True, slots=True)
class Judged:
    findings: list[Finding]
    summary: Summary
    bounds: list[tuple[str, int, int, int, int]]  # per replicated partition, see `_bounds`
    sequence_gaps: list[SequenceGap]  # not findings: `offline.verify_producer_checks` says why


def judge(layout: Layout, table: pa.Table) -> Judged:
    """Every check but the record-level one of compacted topics, over the verify level's
    table (`_scan`): pure, on the driver."""
    scanned = split_scan(table)
    checked, summary, found = _judge_replicas(layout, scanned)
    producer_found, gaps = _producer_checks(layout, scanned, checked)
    bounds = _bounds(layout, summary)
    findings = [
        *layout.findings,
        *scanned.findings,
        *found,
        *producer_found,
        *_hw_findings(layout, summary),
        *_batch_replica_findings(layout, scanned, checked, bounds),
    ]
    return Judged(findings, summary, bounds, gaps)


def _scan(spark: SparkSession, layout: Layout) -> pa.Table:
    """The one Spark job over every byte. A dir without a clean-shutdown marker has a limit
    per replica, which the tasks do not know, so its index entries come back raw."""
    paths = [str(b) for b in layout.broker_dirs]
    df = (
        _read(spark, VERIFY_LEVEL)
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
        columns = scanned.batches.get(key, _NO_BATCHES)
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
            columns = scanned.batches.get(key, _NO_BATCHES)
            if not producer_checks.has_producer_batches(columns) or (
                producer_checks.plainly_in_sequence(columns)
            ):
                continue
            batches = checks.rows_of(columns)
        replica_found, replica_gaps = producer_checks.producer_findings(key, batches)
        found.extend(replica_found)
        gaps.extend(replica_gaps)
    return found, gaps


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


def _read(spark: SparkSession, level: str) -> DataFrameReader:
    """A reader of `level` with at least one task per core."""
    return (
        spark.read.format(FORMAT)
        .option("level", level)
        .option("min_partitions", str(spark.sparkContext.defaultParallelism))
    )


def _brokers_of(layout: Layout) -> BrokersOf:
    brokers_of: BrokersOf = {}
    for replica in layout.replicas:
        brokers_of.setdefault(replica.tp, []).append(replica.broker_dir)
    return brokers_of


def _batch_replica_findings(
    layout: Layout,
    scanned: Scanned,
    checked: dict[ReplicaKey, list[Checked]],
    bounds: Sequence[tuple[str, int, int, int, int]],
) -> list[Finding]:
    """Byte-level comparison of the replicas of every topic that is not compacted: a list
    comparison when every replica is `plainly_clean`, else batch by batch."""
    brokers_of = _brokers_of(layout)
    limits = {(r.broker_dir, r.tp.topic, r.tp.partition): r.limit for r in layout.replicas}
    plain = [b for b in bounds if b[0] not in layout.compacted_topics]
    found: list[Finding] = []
    rows: list[Any] = []
    for topic, partition, lo, hi, n_replicas in plain:
        keys = [(b, topic, partition) for b in brokers_of[TopicPartition(topic, partition)]]
        if not any(k in checked for k in keys) and checks.clean_spans_equal(
            [scanned.batches.get(k, _NO_BATCHES) for k in keys], lo, hi
        ):
            continue
        for k in keys:
            if k not in checked:
                batches = checks.rows_of(scanned.batches.get(k, _NO_BATCHES))
                checked[k] = checks.checked_batches(batches, limits[k])
        replicas = [(k[0], checked[k]) for k in keys]
        budget = MAX_DIVERGENT_ROWS - len(rows)
        for row in checks.divergent_batches(replicas, lo, hi, budget) if budget > 0 else []:
            rows.append({**row, "topic": topic, "partition": partition, "n_replicas": n_replicas})
    found.extend(_batch_divergences(rows, brokers_of))
    if len(rows) >= MAX_DIVERGENT_ROWS:
        found.append(_truncated("replica_divergence"))
    return found


def _record_replica_findings(
    spark: SparkSession, layout: Layout, bounds: Sequence[tuple[str, int, int, int, int]]
) -> list[Finding]:
    """Record-level comparison of compacted topics' replicas: a Spark job over their records,
    run only when there are some."""
    compacted = [b for b in bounds if b[0] in layout.compacted_topics]
    if not compacted:
        return []
    dirs = [
        str(Path(r.broker_dir) / r.tp.dir_name)
        for r in layout.replicas
        if r.tp.topic in layout.compacted_topics
    ]
    records = _read(spark, "record").load(dirs)
    bounds_df = spark.createDataFrame(compacted, BOUNDS_SCHEMA)
    key_rows = checks.divergent_keys(records, bounds_df, MAX_DIVERGENT_ROWS).collect()
    found = _key_divergences(key_rows, _brokers_of(layout))
    if len(key_rows) >= MAX_DIVERGENT_ROWS:
        found.append(_truncated("replica_record_divergence"))
    return found


def _truncated(kind: str) -> Finding:
    return Finding(
        kind, None, None, None, None, None,
        f"more than {MAX_DIVERGENT_ROWS} divergent entries; the list above is cut there",
    )  # fmt: skip


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
        "elapsed_s": round(elapsed_s, 3),
    }
