"""`ketch verify DATA_DIR...`: check every segment, index and replica of a cluster's data dirs.

Each DATA_DIR is a cluster data dir (its ``broker-<id>/`` log dirs) or one broker log dir. The
driver reads the small files (checkpoints, leader-epoch-checkpoints, topic configs, the
clean-shutdown marker); one Spark job reads and CRC-checks every byte of every segment, and the
driver judges the small table it returns (`offline.verify_job` says how, and why so). Compacted
topics' record-level comparison is a second Spark job, only when there are some.

* Compacted topics: ``cleanup.policy`` containing ``compact`` in ``topic-configs.json`` of the
  DATA_DIR or of a log dir's parent (``{"<topic>": {"cleanup.policy": "compact", ...}, ...}``),
  or ``--compacted-topic T``. Their offset gaps are legitimate and their replicas are compared
  record by record (the latest record per key below the smallest HW, aborted transactions'
  records left out: a cleaner removes them from one replica before another), not byte by byte.
* Live or crashed brokers: a log dir without ``.kafka_cleanshutdown`` is checked only below each
  log's recovery point (what was fsynced; the rest may be mid-write), its HW checkpoint is not
  compared with the log end, and the report says so (``stats["partial_dirs"]``).
* Replicas: the same topic-partition in several log dirs; compared over ``[lo, hi)`` where lo is
  the largest first offset among them (retention may have removed more on one) and hi the
  smallest of their HWs, log ends and limits.
* Idempotent producers (`offline.verify_producer_checks`), per replica in log order: a batch
  written twice (same producer id, epoch and sequence range: ``duplicate_sequence``) and a
  producer epoch going back (``producer_epoch_decreasing``) are findings. A sequence gap within
  one producer epoch is not: compaction, retention and a producer whose state expired leave
  them, so they are counted (``stats["sequence_gaps"]``, per replica) with the first few as
  examples (``stats["sequence_gap_examples"]``) and do not change the exit code.
* Transactions (`offline.verify_txn_checks`), per replica: an ABORT marker of a transaction
  whose data is present without its ``.txnindex`` entry in the marker's segment
  (``txn_index_missing``), an entry that does not name an ABORT marker of its producer at its
  last offset (``txn_index_mismatch``) and a ``.txnindex`` the broker would reject
  (``txn_index_file``) are findings. A transaction still open at the end of the log is legal:
  counted (``stats["open_transactions"]``) with the first few as examples.

By role: `offline.verify_layout` reads the small files on the driver; `offline.verify_job` runs
the scan and judges its table (cut by `offline.verify_scan`, with `offline.verify_checks`,
`offline.verify_index_checks`, `offline.verify_producer_checks`, `offline.verify_txn_checks`
and `offline.verify_replicas`); this module is the command line and the report.

Exit codes: 0 clean, 1 findings, 2 usage or runtime errors. The driver owns everything here;
Spark runs the tasks: no shared mutable state, no locks.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from offline.verify_checks import Finding
from offline.verify_job import VerifyReport, run_verify

if TYPE_CHECKING:
    from rich.console import Console

EXIT_CLEAN: Final = 0
EXIT_FINDINGS: Final = 1
EXIT_ERROR: Final = 2

__all__ = ["build_parser", "main", "report_json"]


def report_json(report: VerifyReport) -> dict[str, Any]:
    """DESIGN.md's shape: ``{"ok", "findings": [{"kind", "broker_dir", "topic", "partition",
    "segment", "offsets", "detail"}], "stats"}``; offsets is ``[first, last]`` or null."""
    findings = []
    for finding in report.findings:
        row = asdict(finding)
        row["offsets"] = None if finding.offsets is None else list(finding.offsets)
        findings.append(row)
    return {"ok": report.ok, "findings": findings, "stats": report.stats}


# -- command line ---------------------------------------------------------------------------------


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit; the caller maps this to 2
        raise _UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ketch verify",
        description="check the segments, indexes and replicas of data dirs",
        epilog=(
            "examples:\n"
            "  ketch verify data                 # exit 0 clean, 1 problems found\n"
            "  ketch verify data --json report.json --compacted-topic prices\n"
            "  ketch verify data/broker-0 --driver-memory 2g     # one broker's log dir\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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


def _print_summary(report: VerifyReport, console: Console | None = None) -> None:
    """The human summary: a stats line, notes, then the findings. Findings are printed as
    blocks (a heading of where, the detail indented beneath it) rather than a table: six
    columns left a terminal of 80 columns a detail column a dozen characters wide."""
    from rich.console import Console
    from rich.padding import Padding
    from rich.text import Text

    console = console or Console()
    stats = report.stats
    console.print(
        f"verified {stats['replicas']} replicas of {stats['partitions']} partitions in "
        f"{stats['broker_dirs']} log dirs: {stats['batches']} batches, {stats['bytes']} bytes, "
        f"{stats['elapsed_s']} s"
    )
    if stats["partial_dirs"]:
        console.print(f"[yellow]{stats['partial_note']}: {', '.join(stats['partial_dirs'])}")
    if stats["sequence_gaps"]:
        console.print(_gaps_line(stats["sequence_gaps"], stats["sequence_gap_examples"]))
    if stats["open_transactions"]:
        console.print(
            _open_txns_line(stats["open_transactions"], stats["open_transaction_examples"])
        )
    if report.ok:
        console.print("[green]OK: no problems found")
        return
    kinds = Counter(f.kind for f in report.findings)
    counted = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
    console.print(f"[red]{len(report.findings)} problem(s)[/red]: {counted}", highlight=False)
    for number, finding in enumerate(report.findings, 1):
        where = _where(finding)
        heading = f"{number}. [bold]{finding.kind}[/bold]" + (f" {where}" if where else "")
        console.print(heading, highlight=False)
        console.print(Padding(Text(finding.detail), (0, 0, 0, 3)))


def _where(finding: Finding) -> str:
    """The finding's place in one phrase: log dir, partition, segment, offsets."""
    parts = []
    if finding.broker_dir:
        parts.append(Path(finding.broker_dir).name)
    if finding.topic is not None:
        parts.append(f"{finding.topic}-{finding.partition}")
    if finding.segment is not None:
        parts.append(f"segment {finding.segment}")
    if finding.offsets is not None:
        parts.append(f"offsets {finding.offsets[0]}..{finding.offsets[1]}")
    return " · ".join(parts)


def _gaps_line(count: int, examples: list[dict[str, Any]]) -> str:
    shown = "; ".join(
        f"{Path(g['broker_dir']).name} {g['topic']}-{g['partition']} producer "
        f"{g['producer_id']} epoch {g['producer_epoch']}: sequence {g['base_sequence']} at "
        f"offset {g['offset']}, expected {g['expected_sequence']}"
        for g in examples
    )
    return (
        f"{count} idempotent producer sequence gap(s), not problems (compaction, retention or "
        f"expired producer state leave them); first: {shown}"
    )


def _open_txns_line(count: int, examples: list[dict[str, Any]]) -> str:
    shown = "; ".join(
        f"{Path(t['broker_dir']).name} {t['topic']}-{t['partition']} producer "
        f"{t['producer_id']} from offset {t['first_offset']}"
        for t in examples
    )
    return (
        f"{count} transaction(s) open at the end of the log, not problems (the coordinator "
        f"ends them later); first: {shown}"
    )


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
    from rich.console import Console

    from offline.spark_session import build_session

    # A spinner on stderr while Spark works (a terminal only: rich draws nothing elsewhere).
    dirs = ", ".join(str(d) for d in args.data_dirs)
    try:
        with Console(stderr=True).status(f"verifying {dirs} with Spark ({args.master})"):
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
