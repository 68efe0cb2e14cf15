"""`ketch verify DATA_DIR...`: check every segment, index and replica of a cluster's data dirs.

Each DATA_DIR is a cluster data dir (its ``broker-<id>/`` log dirs) or one broker log dir. The
driver reads the small files (checkpoints, leader-epoch-checkpoints, topic configs, the
clean-shutdown marker); Spark scans every batch of every segment with the "ketch" data source and
runs the checks of `offline.verify_checks` as DataFrame operations; the findings come back to the
driver, which adds the checks over per-replica summaries (HW beyond the log end, replica
divergence ranges) and writes the report.

* Compacted topics: ``cleanup.policy`` containing ``compact`` in ``topic-configs.json`` of the
  DATA_DIR or of a log dir's parent (``{"<topic>": {"cleanup.policy": "compact", ...}, ...}``),
  or ``--compacted-topic T``. Their
  offset gaps are legitimate and their replicas are compared record by record (the latest record
  per key below the smallest HW), not byte by byte.
* Live or crashed brokers: a log dir without ``.kafka_cleanshutdown`` is checked only below each
  log's recovery point (what was fsynced; the rest may be mid-write), its HW checkpoint is not
  compared with the log end, and the report says so (``stats["partial_dirs"]``).
* Replicas: the same topic-partition in several log dirs; compared over ``[lo, hi)`` where lo is
  the largest first offset among them (retention may have removed more on one) and hi the
  smallest of their HWs, log ends and limits.

Exit codes: 0 clean, 1 findings, 2 usage or runtime errors. The driver owns everything here;
Spark runs the tasks: no shared mutable state, no locks.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from offline import verify_checks as checks
from offline.datasource import (
    FORMAT,
    LEADER_EPOCH_SCHEMA,
    broker_dirs_of,
    partition_dirs_of,
    read_leader_epochs,
)
from runtime.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from runtime.log.errors import CorruptCheckpointError
from runtime.log.manager import CLEAN_SHUTDOWN_FILE
from runtime.log.partition_dir import TopicPartition

EXIT_CLEAN: Final = 0
EXIT_FINDINGS: Final = 1
EXIT_ERROR: Final = 2
TOPIC_CONFIGS_FILE: Final = "topic-configs.json"
MAX_DIVERGENT_ROWS: Final = 10_000  # per comparison; a report past that says "truncated"
Summary = dict[tuple[str, str, int], Any]  # (broker dir, topic, partition) -> summary row
BrokersOf = dict[TopicPartition, list[str]]  # the log dirs holding each partition

REPLICA_SCHEMA: Final = StructType(
    [
        StructField("broker_dir", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("limit", LongType(), False),
        StructField("compacted", BooleanType(), False),
        StructField("hw", LongType(), True),
    ]
)
BOUNDS_SCHEMA: Final = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("lo", LongType(), False),
        StructField("hi", LongType(), False),
        StructField("n_replicas", IntegerType(), False),
    ]
)


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    broker_dir: str | None
    topic: str | None
    partition: int | None
    segment: int | None
    offsets: tuple[int, int] | None  # first and last offset concerned, inclusive
    detail: str


@dataclass
class VerifyReport:
    ok: bool
    findings: list[Finding] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)


def report_json(report: VerifyReport) -> dict[str, Any]:
    """DESIGN.md's shape: ``{"ok", "findings": [{"kind", "broker_dir", "topic", "partition",
    "segment", "offsets", "detail"}], "stats"}``; offsets is ``[first, last]`` or null."""
    findings = []
    for finding in report.findings:
        row = asdict(finding)
        row["offsets"] = None if finding.offsets is None else list(finding.offsets)
        findings.append(row)
    return {"ok": report.ok, "findings": findings, "stats": report.stats}


# -- the driver's view of the layout ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Replica:
    broker_dir: str
    tp: TopicPartition
    limit: int  # offsets at or above are not checked
    compacted: bool
    hw: int | None
    clean: bool
    log_start: int  # from log-start-offset-checkpoint (0 when absent): an empty log ends there


@dataclass
class Layout:
    broker_dirs: list[Path]
    replicas: list[Replica]
    epochs: list[tuple[str, str, int, int, int]]
    compacted_topics: set[str]
    partial_dirs: list[str]
    findings: list[Finding]


def read_topic_configs(data_dir: Path) -> dict[str, dict[str, Any]]:
    path = data_dir / TOPIC_CONFIGS_FILE
    if not path.exists():
        return {}
    loaded = json.loads(path.read_text())
    if not isinstance(loaded, dict) or not all(isinstance(v, dict) for v in loaded.values()):
        raise ValueError(f"{path}: expected {{topic: {{config: value}}}}")
    return loaded


def _checkpoint(path: Path, findings: list[Finding]) -> dict[TopicPartition, int]:
    try:
        return OffsetCheckpointFile(path).read()
    except CorruptCheckpointError as exc:
        findings.append(
            Finding("checkpoint_unreadable", str(path.parent), None, None, None, None, str(exc))
        )
        return {}


def read_layout(data_dirs: Sequence[str], extra_compacted: Iterable[str] = ()) -> Layout:
    compacted = set(extra_compacted)
    findings: list[Finding] = []
    brokers: list[Path] = []
    config_dirs: list[Path] = []
    for data_dir in data_dirs:
        found = broker_dirs_of(data_dir)
        brokers.extend(found)
        # The cluster data dir holds the file; a broker log dir given alone finds its parent's.
        config_dirs.extend({Path(data_dir).resolve(), *(b.parent for b in found)})
    for config_dir in sorted(set(config_dirs)):
        for topic, config in read_topic_configs(config_dir).items():
            if "compact" in str(config.get("cleanup.policy", "")):
                compacted.add(topic)
    replicas: list[Replica] = []
    epochs: list[tuple[str, str, int, int, int]] = []
    partial: list[str] = []
    for broker in brokers:
        clean = (broker / CLEAN_SHUTDOWN_FILE).exists()
        if not clean:
            partial.append(str(broker))
        hws = _checkpoint(broker / REPLICATION_OFFSET_CHECKPOINT, findings)
        recovery_points = _checkpoint(broker / RECOVERY_POINT_CHECKPOINT, findings)
        log_starts = _checkpoint(broker / LOG_START_OFFSET_CHECKPOINT, findings)
        for partition_dir in partition_dirs_of(broker):
            tp = TopicPartition.from_dir_name(partition_dir.name)
            limit = checks.NO_LIMIT if clean else recovery_points.get(tp, 0)
            replicas.append(
                Replica(
                    str(broker),
                    tp,
                    limit,
                    tp.topic in compacted,
                    hws.get(tp),
                    clean,
                    log_starts.get(tp, 0),
                )
            )
            try:
                for epoch, start in read_leader_epochs(partition_dir):
                    epochs.append((str(broker), tp.topic, tp.partition, epoch, start))
            except CorruptCheckpointError as exc:
                findings.append(
                    Finding(
                        "checkpoint_unreadable", str(broker), tp.topic, tp.partition, None, None,
                        str(exc),
                    )
                )  # fmt: skip
    return Layout(brokers, replicas, epochs, compacted, partial, findings)


# -- the job --------------------------------------------------------------------------------------


def _findings_from_rows(rows: Iterable[Any]) -> list[Finding]:
    found = []
    for row in rows:
        first, last = row["first_offset"], row["last_offset"]
        offsets = None if first is None else (first, last if last is not None else first)
        found.append(
            Finding(
                row["kind"], row["broker_dir"], row["topic"], row["partition"], row["segment"],
                offsets, row["detail"],
            )
        )  # fmt: skip
    return found


def _hw_findings(layout: Layout, summary: Summary) -> list[Finding]:
    found = []
    for replica in layout.replicas:
        if replica.hw is None or not replica.clean:
            continue
        row = summary.get((replica.broker_dir, replica.tp.topic, replica.tp.partition))
        # A log without batches ends at its start offset (HW 0 on a new, empty log is fine).
        next_offset = replica.log_start if row is None else row["next_offset"]
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
            first = 0 if row is None else row["first_offset"]
            end = 0 if row is None else row["next_offset"]
            los.append(first)
            his.append(min(end, replica.limit, end if replica.hw is None else replica.hw))
        lo, hi = max(los), min(his)
        if lo < hi:
            bounds.append((tp.topic, tp.partition, lo, hi, len(replicas)))
    return bounds


def _majority(variants: dict[str, str]) -> str | None:
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
    findings = list(layout.findings)
    paths = [str(b) for b in layout.broker_dirs]
    replicas_df = spark.createDataFrame(
        [
            (r.broker_dir, r.tp.topic, r.tp.partition, r.limit, r.compacted, r.hw)
            for r in layout.replicas
        ],
        REPLICA_SCHEMA,
    )
    # Each read of a Python data source pays for starting Python tasks, so each level is
    # scanned once and cached; every check below then runs inside the JVM.
    batches = _read(spark, "batch", paths)
    checked = checks.checked_batches(batches, replicas_df).cache()
    index = _read(spark, "index", paths).cache()
    try:
        summary = {
            (row["broker_dir"], row["topic"], row["partition"]): row
            for row in checks.replica_summary(checked).collect()
        }
        epochs_df = spark.createDataFrame(layout.epochs, LEADER_EPOCH_SCHEMA)
        spark_findings = (
            checks.invalid_batch_findings(checked)
            .unionByName(checks.ordering_findings(checked))
            .unionByName(checks.segment_base_findings(checked))
            .unionByName(checks.epoch_checkpoint_findings(checked, epochs_df))
            .unionByName(checks.index_findings(index, checked, replicas_df))
        )
        findings.extend(_findings_from_rows(spark_findings.collect()))
        findings.extend(_hw_findings(layout, summary))
        findings.extend(_replica_findings(spark, layout, checked, summary))
    finally:
        checked.unpersist()
        index.unpersist()
    findings.sort(key=_finding_order)
    stats = _stats(layout, summary, findings, time.monotonic() - started)
    return VerifyReport(not findings, findings, stats)


def _read(spark: SparkSession, level: str, paths: list[str]) -> DataFrame:
    return (
        spark.read.format(FORMAT)
        .option("level", level)
        .option("min_partitions", str(spark.sparkContext.defaultParallelism))
        .load(paths)
    )


def _replica_findings(
    spark: SparkSession,
    layout: Layout,
    checked: DataFrame,
    summary: Summary,
) -> list[Finding]:
    bounds = _bounds(layout, summary)
    brokers_of: BrokersOf = {}
    for replica in layout.replicas:
        brokers_of.setdefault(replica.tp, []).append(replica.broker_dir)
    plain = [b for b in bounds if b[0] not in layout.compacted_topics]
    compacted = [b for b in bounds if b[0] in layout.compacted_topics]
    found: list[Finding] = []
    if plain:
        bounds_df = spark.createDataFrame(plain, BOUNDS_SCHEMA)
        rows = checks.divergent_batches(checked, bounds_df, MAX_DIVERGENT_ROWS).collect()
        found.extend(_batch_divergences(rows, brokers_of))
        if len(rows) >= MAX_DIVERGENT_ROWS:
            found.append(_truncated("replica_divergence"))
    if compacted:
        dirs = [
            str(Path(r.broker_dir) / r.tp.dir_name)
            for r in layout.replicas
            if r.tp.topic in layout.compacted_topics
        ]
        records = _read(spark, "record", dirs)
        bounds_df = spark.createDataFrame(compacted, BOUNDS_SCHEMA)
        rows = checks.divergent_keys(records, bounds_df, MAX_DIVERGENT_ROWS).collect()
        found.extend(_key_divergences(rows, brokers_of))
        if len(rows) >= MAX_DIVERGENT_ROWS:
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
    summary: Summary,
    findings: Sequence[Finding],
    elapsed_s: float,
) -> dict[str, Any]:
    return {
        "broker_dirs": len(layout.broker_dirs),
        "partitions": len({r.tp for r in layout.replicas}),
        "replicas": len(layout.replicas),
        "batches": sum(int(row["batches"]) for row in summary.values()),
        "bytes": sum(int(row["bytes"] or 0) for row in summary.values()),
        "compacted_topics": sorted(layout.compacted_topics),
        "partial_dirs": layout.partial_dirs,
        "partial_note": (
            "no clean-shutdown marker: checked only below each log's recovery point"
            if layout.partial_dirs
            else None
        ),
        "findings_by_kind": dict(sorted(Counter(f.kind for f in findings).items())),
        "elapsed_s": round(elapsed_s, 3),
    }


# -- command line ---------------------------------------------------------------------------------


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit; the caller maps this to 2
        raise _UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ketch verify", description="check the segments, indexes and replicas of data dirs"
    )
    parser.add_argument("data_dirs", nargs="+", metavar="DATA_DIR")
    parser.add_argument("--master", default="local[2]", help="Spark master URL (local[2])")
    parser.add_argument("--json", metavar="REPORT", help="write the JSON report to this file")
    parser.add_argument("--conf", action="append", default=[], metavar="K=V", help="Spark conf")
    parser.add_argument("--driver-memory", metavar="M", help="Spark driver memory, e.g. 2g")
    parser.add_argument(
        "--compacted-topic", action="append", default=[], metavar="T",
        help="treat topic T as compacted (besides topic-configs.json)",
    )  # fmt: skip
    return parser


def _print_summary(report: VerifyReport) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    stats = report.stats
    console.print(
        f"verified {stats['replicas']} replicas of {stats['partitions']} partitions in "
        f"{stats['broker_dirs']} log dirs: {stats['batches']} batches, {stats['bytes']} bytes, "
        f"{stats['elapsed_s']} s"
    )
    if stats["partial_dirs"]:
        console.print(f"[yellow]{stats['partial_note']}: {', '.join(stats['partial_dirs'])}")
    if report.ok:
        console.print("[green]OK: no problems found")
        return
    table = Table(title=f"{len(report.findings)} problem(s)")
    for column in ("kind", "broker dir", "partition", "segment", "offsets", "detail"):
        table.add_column(column)
    for f in report.findings:
        table.add_row(
            f.kind,
            Path(f.broker_dir).name if f.broker_dir else "",
            f"{f.topic}-{f.partition}" if f.topic is not None else "",
            "" if f.segment is None else str(f.segment),
            "" if f.offsets is None else f"{f.offsets[0]}..{f.offsets[1]}",
            f.detail,
        )
    console.print(table)


def main(argv: list[str]) -> int:
    """``ketch verify``; returns the exit code (0 clean, 1 findings, 2 usage/runtime error)."""
    try:
        args = build_parser().parse_args(argv)
        conf = dict(_split_conf(item) for item in args.conf)
    except _UsageError as exc:
        print(f"ketch verify: {exc}", file=sys.stderr)
        return EXIT_ERROR
    for data_dir in args.data_dirs:
        if not Path(data_dir).is_dir():
            print(f"ketch verify: {data_dir}: no such directory", file=sys.stderr)
            return EXIT_ERROR
    from offline.spark_session import build_session

    try:
        spark = build_session(
            args.master, "ketch-verify", conf=conf, driver_memory=args.driver_memory
        )
        try:
            report = run_verify(spark, args.data_dirs, compacted_topics=args.compacted_topic)
        finally:
            spark.stop()
    except Exception as exc:  # a runtime failure is exit 2 with its reason, not a traceback
        print(f"ketch verify: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    _print_summary(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report_json(report), indent=2) + "\n")
    return EXIT_CLEAN if report.ok else EXIT_FINDINGS


def _split_conf(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise _UsageError(f"--conf expects KEY=VALUE, got {item!r}")
    return key.strip(), value.strip()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
