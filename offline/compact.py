"""``ketch compact DATA_DIR --topic T``: offline log compaction of one topic with Spark.

Semantics (Kafka's log cleaner): for every key only the record with the highest offset stays;
offsets never change; only the cleanable prefix of each partition is rewritten (segments wholly
below the checkpointed high watermark, never the active segment, none with records newer than
``min.compaction.lag.ms``, none from the first transaction not decided below the HW on:
`offline.compact_plan`); a surviving tombstone gets a KIP-534 delete horizon (batch attribute
bit 6, the horizon ``now + delete.retention.ms`` in the batch's baseTimestamp field, record
timestamps re-based on it) in the pass that first keeps it, and a later pass at or after the
horizon drops it (`offline.compact_write` says exactly how); a record without a key in the
cleanable range is an error and nothing is written.

Transactions (Kafka's cleaner): the batches of aborted transactions are removed and never count
as a key's latest record; committed transactional records are compacted like any others; a
COMMIT/ABORT marker stays until no batch of its transaction is left and then for
``delete.retention.ms`` more (a delete horizon, as for tombstones); each cleaned segment gets a
``.txnindex`` with the original entries of the ABORT markers it keeps (`offline.compact_txn`,
`offline.compact_write`).

The job, per run:

1. Plan on the driver (file listing, batch headers, and the one record of each control batch):
   the source segments of every partition of the topic in DATA_DIR and the batches of its
   aborted transactions.
2. One Spark action. Read exactly the planned segment files at record level with the "ketch"
   data source; group by ``(partition, key)`` keeping the highest offset (control records and
   the plan's aborted batches excluded; a null key forms its own group, flagged); then group the
   survivors, plus one placeholder row per planned partition (so that a partition whose range
   holds no survivor is still written), by partition and, in one Spark task per partition
   (``applyInPandas``), write that partition's cleaned segments into the staging directory from
   the source files. Writing in tasks keeps the
   survivor offsets off the driver (they can be as many as the records) and cleans partitions in
   parallel; on a cluster the data dir and the staging dir must be on a shared file system.
   A task that finds a keyless record writes nothing and reports it; then the whole staging
   directory is removed and the run fails.
3. With ``--install``: the whole run holds the log dir's lock (a running broker holds it: the
   install is refused), and each partition's staged segments replace its old ones with the
   ``.cleaned`` -> ``.swap`` -> rename protocol of `offline.compact_install`, then
   ``cleaner-offset-checkpoint`` records where each cleaned range ends. Without it the staged
   segments stay in the staging directory (default: ``<DATA_DIR>.compact-staging/`` beside the
   data dir, never inside it, where a broker would take it for a partition).

Exit codes of `main`: 0 when the topic was compacted (staged, or installed) or there was nothing
to compact; 1 when compaction was refused (running broker, topic not compacted, record without
a key, damaged segment, unfinished swap); 2 on usage or runtime errors.

Running brokers compact their compacted topics themselves (`runtime.log.cleaner`, the same
per-partition rewrite this job's tasks run, `runtime.log.cleaner.write`); this job is for a
stopped broker's log dir or a copy of one.

Topic settings: Kafka's defaults, then the cluster controller's metadata log beside the data dir
(what a `ketch up` cluster's topics were created or altered with), then ``topic-configs.json``
in the data dir's parent, then ``--config k=v`` flags (cleanup.policy, min.compaction.lag.ms,
delete.retention.ms, segment.bytes, ...). The driver and each task own what they build; no state
is shared.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from offline.compact_install import (
    StepHook,
    hold_log_dir_lock,
    install_partition,
    update_cleaner_checkpoint,
)
from offline.compact_plan import (
    CompactConfig,
    CompactError,
    PartitionPlan,
    plan_topic,
    resolve_config,
)
from offline.compact_write import CleanStats, write_cleaned_partition
from runtime.log.segment import LOG_SUFFIX, file_name_prefix

if TYPE_CHECKING:
    import pandas as pd
    from pyspark.sql import SparkSession
    from rich.console import Console

STAGING_SUFFIX: Final = ".compact-staging"
_RESULT_SCHEMA: Final = (
    "partition int, error string, segments string, batches_in long, batches_out long, "
    "batches_rebuilt long, records_in long, records_out long, tombstones_dropped long, "
    "horizons_set long, bytes_in long, bytes_out long, aborted_batches_dropped long, "
    "markers_dropped long, marker_horizons_set long, txn_index_entries long"
)
_PLACEHOLDER_OFFSET: Final = -1  # the row that makes every planned partition a group
_STAT_FIELDS: Final = tuple(CleanStats.__slots__)


@dataclass(frozen=True, slots=True)
class PartitionResult:
    plan: PartitionPlan
    new_segments: tuple[tuple[int, int], ...]  # (base offset, size) of each cleaned segment
    stats: CleanStats

    @property
    def partition(self) -> int:
        return self.plan.partition


@dataclass(frozen=True, slots=True)
class CompactResult:
    data_dir: Path
    topic: str
    staging_dir: Path
    installed: bool
    config: CompactConfig
    plans: tuple[PartitionPlan, ...]
    partitions: tuple[PartitionResult, ...]  # the partitions that had something to clean
    elapsed_s: float
    stats: CleanStats = field(default_factory=CleanStats)

    @property
    def source_bytes(self) -> int:
        return sum(p.plan.source_bytes for p in self.partitions)


def default_staging_dir(data_dir: Path) -> Path:
    resolved = data_dir.resolve()
    return resolved.parent / f"{resolved.name}{STAGING_SUFFIX}"


def _segment_paths(plans: Sequence[PartitionPlan]) -> list[str]:
    return [
        str(plan.directory / f"{file_name_prefix(s.base_offset)}{LOG_SUFFIX}")
        for plan in plans
        for s in plan.sources
    ]


def _partition_writer(
    plans: Mapping[int, PartitionPlan], staging_dir: Path, config: CompactConfig, now_ms: int
) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The applyInPandas function: one call per partition with its survivor offsets."""

    def write(frame: pd.DataFrame) -> pd.DataFrame:
        import pandas as pd  # in the Python worker

        partition = int(frame["partition"].iloc[0])
        plan = plans[partition]
        row: dict[str, Any] = {"partition": partition, "error": None, "segments": "[]"}
        row.update(dict.fromkeys(_STAT_FIELDS, 0))
        keyless = frame[frame["keyless"]]
        if len(keyless):
            row["error"] = (
                f"{plan.tp}: {int(keyless['n'].sum())} record(s) without a key, the first at "
                f"offset {int(keyless['first'].min())}; a compacted topic needs a key on every "
                "record (nothing was written)"
            )
            return pd.DataFrame([row])
        offsets = frame["offset"]
        survivors = offsets[offsets != _PLACEHOLDER_OFFSET].sort_values().tolist()
        try:
            cleaned = write_cleaned_partition(
                plan.directory,
                plan.sources,
                survivors,
                staging_dir / plan.tp.dir_name,
                now_ms=now_ms,
                delete_retention_ms=config.delete_retention_ms,
                log_config=config.log,
                aborted_batches=plan.aborted_batches,
            )
        except CompactError as exc:
            row["error"] = f"{plan.tp}: {exc}"
            return pd.DataFrame([row])
        row["segments"] = json.dumps([[s.base_offset, s.size_bytes] for s in cleaned.segments])
        row.update({name: getattr(cleaned.stats, name) for name in _STAT_FIELDS})
        return pd.DataFrame([row])

    return write


def _spark_clean(
    spark: SparkSession,
    plans: Sequence[PartitionPlan],
    staging_dir: Path,
    config: CompactConfig,
    now_ms: int,
) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F  # Spark's own convention

    records = (
        spark.read.format("ketch")
        .option("level", "record")
        .load(_segment_paths(plans))
        .where(~F.col("is_control"))
    )
    aborted = [(p.partition, offset) for p in plans for offset in sorted(p.aborted_batches)]
    if aborted:
        # One row per aborted batch (the driver's scan found them): broadcast, so the records
        # are filtered where they are read, without a shuffle.
        aborted_df = spark.createDataFrame(aborted, "partition int, batch_base_offset long")
        records = records.join(
            F.broadcast(aborted_df), ["partition", "batch_base_offset"], "left_anti"
        )
    latest = records.groupBy("partition", "key").agg(
        F.max("offset").alias("offset"),
        F.min("offset").alias("first"),
        F.count(F.lit(1)).alias("n"),
    )
    placeholders = spark.createDataFrame(
        [(p.partition, _PLACEHOLDER_OFFSET, _PLACEHOLDER_OFFSET, 0, False) for p in plans],
        "partition int, offset long, first long, n long, keyless boolean",
    )
    survivors = latest.select(
        "partition", "offset", "first", "n", F.col("key").isNull().alias("keyless")
    ).unionByName(placeholders)
    writer = _partition_writer({p.partition: p for p in plans}, staging_dir, config, now_ms)
    rows = survivors.groupBy("partition").applyInPandas(writer, _RESULT_SCHEMA).collect()
    return [row.asDict() for row in rows]


def _result_of(plan: PartitionPlan, row: Mapping[str, Any]) -> PartitionResult:
    stats = CleanStats(**{name: int(row[name]) for name in _STAT_FIELDS})
    segments = tuple((int(base), int(size)) for base, size in json.loads(row["segments"]))
    return PartitionResult(plan, segments, stats)


def check_compactable(
    data_dir: Path,
    topic: str,
    config_overrides: Mapping[str, object] | None,
    *,
    install: bool,
) -> CompactConfig:
    """The topic's settings; CompactError when its policy is not compact or (for `install`)
    a broker holds the log dir."""
    config = resolve_config(data_dir, topic, config_overrides)
    if not config.compact:
        raise CompactError(
            f"topic {topic} has cleanup.policy={config.cleanup_policy}; compaction needs "
            f"compact (ketch topic alter {topic} --config cleanup.policy=compact on the cluster, "
            "or pass --config cleanup.policy=compact)"
        )
    if install:
        with hold_log_dir_lock(data_dir):
            pass
    return config


def run_compact(
    spark: SparkSession,
    data_dir: Path | str,
    topic: str,
    *,
    now_ms: int,
    staging_dir: Path | str | None = None,
    install: bool = False,
    config_overrides: Mapping[str, object] | None = None,
    step: StepHook | None = None,
) -> CompactResult:
    """Compact `topic` in the broker log dir `data_dir` (see the module docstring).

    Raises CompactError when compaction is refused; nothing is then installed, and what this
    run staged is removed. `step` is the install's crash-injection hook (tests).
    """
    started = time.perf_counter()
    data_dir = Path(data_dir)
    staging = Path(staging_dir) if staging_dir is not None else default_staging_dir(data_dir)
    config = check_compactable(data_dir, topic, config_overrides, install=False)
    with contextlib.ExitStack() as stack:
        if install:
            stack.enter_context(hold_log_dir_lock(data_dir))
        plans = plan_topic(data_dir, topic, config, now_ms)
        if not plans:
            hint = ""
            if any(data_dir.glob("broker-*")):
                hint = " (this looks like a cluster data dir: name one broker-<id> dir in it)"
            raise CompactError(f"{data_dir} holds no partition of topic {topic}{hint}")
        todo = [plan for plan in plans if plan.sources]
        _remove_staged(staging, todo)  # leftovers of an earlier run that was not installed
        try:
            rows = _spark_clean(spark, todo, staging, config, now_ms) if todo else []
        except BaseException:
            _remove_staged(staging, todo)
            raise
        errors = sorted(str(row["error"]) for row in rows if row["error"])
        if errors:
            _remove_staged(staging, todo)
            raise CompactError("; ".join(errors))
        by_partition = {int(row["partition"]): row for row in rows}
        results = tuple(
            _result_of(plan, by_partition[plan.partition])
            for plan in todo
            if plan.partition in by_partition
        )
        if install:
            _install_all(data_dir, staging, results, step)
    total = CleanStats()
    for result in results:
        total.add(result.stats)
    return CompactResult(
        data_dir,
        topic,
        staging,
        install,
        config,
        tuple(plans),
        results,
        time.perf_counter() - started,
        total,
    )


def _install_all(
    data_dir: Path, staging: Path, results: Sequence[PartitionResult], step: StepHook | None
) -> None:
    kwargs: dict[str, StepHook] = {} if step is None else {"step": step}
    for result in results:
        plan = result.plan
        install_partition(
            plan.directory,
            staging / plan.tp.dir_name,
            [base for base, _ in result.new_segments],
            [s.base_offset for s in plan.sources],
            **kwargs,
        )
    update_cleaner_checkpoint(
        data_dir, {r.plan.tp: r.plan.clean_end_offset for r in results}, **kwargs
    )
    _remove_staged(staging, [r.plan for r in results])


def _remove_staged(staging: Path, plans: Sequence[PartitionPlan]) -> None:
    """Remove this run's partition dirs from the staging dir, and the staging dir when that
    leaves it empty (it may be a directory the user named, holding other things)."""
    for plan in plans:
        shutil.rmtree(staging / plan.tp.dir_name, ignore_errors=True)
    with contextlib.suppress(OSError):
        staging.rmdir()  # only succeeds when empty


# -- command line -------------------------------------------------------------------------------


def _key_values(pairs: Sequence[str], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CompactUsageError(f"{flag} expects k=v, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


class CompactUsageError(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ketch compact",
        # Line breaks of its own: the raw formatter (for the examples) does not wrap it.
        description="Compact one topic of a broker log dir offline with Spark (latest record\n"
        "per key wins, offsets unchanged).",
        epilog=(
            "examples (the policy as --config: compact does not ask the cluster for it):\n"
            "  ketch compact data/broker-0 --topic prices --config cleanup.policy=compact\n"
            "  ketch compact data/broker-0 --topic prices --config cleanup.policy=compact \\\n"
            "      --install                     # broker 0 stopped (shutdown-broker 0)\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("data_dir", type=Path, help="one broker log dir (holding <topic>-<p>)")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--master", default="local[2]", help="Spark master URL")
    parser.add_argument(
        "--install",
        action="store_true",
        help="install the cleaned segments into DATA_DIR (the broker must be stopped)",
    )
    parser.add_argument("--staging-dir", type=Path, default=None)
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="K=V",
        help="topic setting (cleanup.policy, min.compaction.lag.ms, delete.retention.ms, ...)",
    )
    parser.add_argument("--conf", action="append", default=[], metavar="K=V", help="Spark setting")
    parser.add_argument("--driver-memory", default=None, help="Spark driver memory, e.g. 4g")
    parser.add_argument("--json", type=Path, default=None, help="write a JSON summary here")
    return parser


def summary_json(result: CompactResult) -> dict[str, Any]:
    return {
        "data_dir": str(result.data_dir),
        "topic": result.topic,
        "installed": result.installed,
        "staging_dir": None if result.installed else str(result.staging_dir),
        "elapsed_s": round(result.elapsed_s, 3),
        "partitions": [
            {
                "partition": plan.partition,
                "cleaned_segments": len(plan.sources),
                "clean_end_offset": plan.clean_end_offset if plan.sources else None,
                "stop_reason": plan.stop_reason,
                **{
                    name: getattr(r.stats, name)
                    for r in result.partitions
                    if r.partition == plan.partition
                    for name in _STAT_FIELDS
                },
            }
            for plan in result.plans
        ],
    }


def _print_summary(result: CompactResult, console: Console | None = None) -> None:
    """One row per partition that fits 80 columns: the segments cleaned of all, the offset
    cleaned to, records and bytes as "before→after" (bytes in kB/MB/GB), and where the
    cleaning stopped."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"ketch compact {result.topic} ({result.data_dir})", box=box.SIMPLE_HEAD)
    for column in ("part", "segs", "clean to", "records", "bytes"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("stops at")
    done = {r.partition: r for r in result.partitions}
    for plan in result.plans:
        r = done.get(plan.partition)
        s = r.stats if r is not None else CleanStats()
        table.add_row(
            str(plan.partition),
            f"{len(plan.sources)}/{plan.total_segments}",
            str(plan.clean_end_offset) if plan.sources else "-",
            f"{s.records_in}→{s.records_out}",
            f"{_size(s.bytes_in)}→{_size(s.bytes_out)}",
            plan.stop_kind,
        )
    console = console or Console()
    console.print(table)
    mb_s = result.source_bytes / 1e6 / result.elapsed_s if result.elapsed_s else 0.0
    where = "installed" if result.installed else f"staged in {result.staging_dir}"
    console.print(
        f"{_size(result.stats.bytes_in)} -> {_size(result.stats.bytes_out)} "
        f"({result.stats.bytes_in} -> {result.stats.bytes_out} bytes), {where}, "
        f"{result.elapsed_s:.1f} s ({mb_s:.1f} MB/s)"
    )


def _size(n: int) -> str:
    """Bytes for a person: B below 1 kB, else kB/MB/GB with one decimal (powers of 1000)."""
    if n < 1_000:
        return f"{n} B"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    raise AssertionError(n)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: usage errors exit 2, --help exits 0
        return int(exc.code or 0)
    try:
        topic_config = _key_values(args.config, "--config")
        spark_conf = _key_values(args.conf, "--conf")
    except CompactUsageError as exc:
        print(f"ketch compact: {exc}", file=sys.stderr)
        return 2
    if not args.data_dir.is_dir():
        print(f"ketch compact: {args.data_dir} is not a directory", file=sys.stderr)
        return 2
    try:
        # Refusals that need no Spark come before the JVM starts (run_compact repeats them).
        check_compactable(args.data_dir, args.topic, topic_config, install=args.install)
    except CompactError as exc:
        print(f"ketch compact: refused: {exc}", file=sys.stderr)
        return 1
    from rich.console import Console

    from offline.spark_session import build_session

    # A spinner on stderr while Spark works (a terminal only: rich draws nothing elsewhere).
    working = Console(stderr=True).status(
        f"compacting {args.topic} in {args.data_dir} with Spark ({args.master})"
    )
    try:
        with working:
            spark = build_session(
                args.master, "ketch compact", spark_conf, driver_memory=args.driver_memory
            )
            try:
                result = run_compact(
                    spark,
                    args.data_dir,
                    args.topic,
                    now_ms=time.time_ns() // 1_000_000,
                    staging_dir=args.staging_dir,
                    install=args.install,
                    config_overrides=topic_config,
                )
            finally:
                spark.stop()
    except CompactError as exc:
        print(f"ketch compact: refused: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # a runtime failure (Spark, I/O): reported, exit 2
        print(f"ketch compact: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    _print_summary(result)
    if args.json is not None:
        args.json.write_text(json.dumps(summary_json(result), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
