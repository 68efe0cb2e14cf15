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
2. One Spark action: the plans, largest first, as an RDD of one element per Spark partition,
   mapped by `offline.compact_task.PartitionTask`, so each topic partition is cleaned in one
   task with the brokers' own cleaner code: its key -> latest offset map (keys and offsets read
   only, digests held, bounded as Kafka's dedupe buffer: a partition with more keys than that is
   cleaned up to the last whole segment that fits, its summary row says "offset map", and the
   next run goes on), then its cleaned segments written into the staging directory from the
   source files. Spark only spreads partitions over executors (the largest start first, so the
   last task to finish is a small one) and collects each task's small outcome; no record and
   no survivor offset reaches the driver. On a cluster the data dir and the staging dir must be
   on a shared file system. A task that finds a record without a key or a damaged batch writes
   nothing and reports it; then the whole staging directory is removed and the run fails.
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
offset map and rewrite this job's tasks run); this job is for a stopped broker's log dir or a
copy of one.

Topic settings: Kafka's defaults, then the cluster controller's metadata log beside the data dir
(what a `ketch up` cluster's topics were created or altered with), then ``topic-configs.json``
in the data dir's parent, then ``--config k=v`` flags (cleanup.policy, min.compaction.lag.ms,
delete.retention.ms, segment.bytes, ...). The driver and each task own what they build; no state
is shared.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
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
from offline.compact_task import DEFAULT_MAX_MAP_ENTRIES, PartitionOutcome, PartitionTask
from offline.compact_write import CleanStats

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from rich.console import Console

STAGING_SUFFIX: Final = ".compact-staging"
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


def _spark_clean(
    spark: SparkSession, plans: Sequence[PartitionPlan], task: PartitionTask
) -> list[PartitionOutcome]:
    """Run `task` over `plans`, one Spark task per plan (see the module docstring)."""
    ordered = sorted(plans, key=lambda plan: plan.source_bytes, reverse=True)
    outcomes: list[PartitionOutcome] = (
        spark.sparkContext.parallelize(ordered, len(ordered)).map(task).collect()
    )
    return outcomes


def _result_of(plan: PartitionPlan, outcome: PartitionOutcome) -> PartitionResult:
    """The result of a partition's task, with the plan cut where the task's map was full."""
    if outcome.sources_taken < len(plan.sources):
        plan = _cut_short(plan, outcome)
    return PartitionResult(plan, outcome.segments, outcome.stats)


def _cut_short(plan: PartitionPlan, outcome: PartitionOutcome) -> PartitionPlan:
    stop = plan.sources[outcome.sources_taken]
    return dataclasses.replace(
        plan,
        sources=plan.sources[: outcome.sources_taken],
        stop_reason=(
            f"segment {stop.base_offset} would overfill the offset map "
            f"({outcome.map_entries} keys mapped before it)"
        ),
        stop_kind="offset map",
        aborted_batches=outcome.aborted_batches,
    )


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
    max_map_entries: int = DEFAULT_MAX_MAP_ENTRIES,
) -> CompactResult:
    """Compact `topic` in the broker log dir `data_dir` (see the module docstring).

    Raises CompactError when compaction is refused; nothing is then installed, and what this
    run staged is removed. `step` is the install's crash-injection hook (tests);
    `max_map_entries` bounds each partition's key map (`offline.compact_task`).
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
        task = PartitionTask(staging, config, now_ms, max_map_entries)
        try:
            outcomes = _spark_clean(spark, todo, task) if todo else []
        except BaseException:
            _remove_staged(staging, todo)
            raise
        errors = sorted(o.error for o in outcomes if o.error is not None)
        if errors:
            _remove_staged(staging, todo)
            raise CompactError("; ".join(errors))
        by_partition = {o.partition: o for o in outcomes}
        results = tuple(
            _result_of(plan, by_partition[plan.partition])
            for plan in todo
            if plan.partition in by_partition
        )
        # A map that was full before a whole segment ended leaves nothing to install there.
        _remove_staged(staging, [r.plan for r in results if not r.plan.sources])
        results = tuple(r for r in results if r.plan.sources)
        cut = {r.partition: r.plan for r in results}
        plans = [cut.get(plan.partition, plan) for plan in plans]
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
