"""`ketch compact` throughput (issue 24): MB/s of input at local[1] and local[2], and their
ratio; optionally the same for the code of another checkout (``--baseline TREE``, e.g. a
``git worktree`` of an older commit) on the same data in the same run, with its staged files
compared byte for byte.

Data: `bench.verify`'s generated cluster data dir (``--gb`` GiB of segment files over three
replicas, ``--partitions`` partitions, 20 000 keys per partition, so most records are obsolete);
only broker 0's log dir is compacted, staging only (nothing installed), with
cleanup.policy=compact given as an override.

Each (code, master) pair runs in a fresh process with its own SparkSession (``python -c``, with
PYTHONPATH and the working directory set to that code's tree, so the driver and Spark's Python
workers import that tree's `offline` package; each process prints the file it imported). Per
process: Python workers started by a trivial job (untimed), then ``--runs`` compactions with one
fixed ``now``, each timed by `run_compact` itself (planning to the staged result: what `ketch
compact` prints), the staging dir removed in between. Reported: the median and the min-max of
MB/s over the bytes of the segments cleaned; the local[2] / local[1] ratio of the medians.
The machine's cores are shared, so before each process the run also measures how many cores it
can have (`core_capacity`: one busy loop alone, then two at once); a local[2] / local[1] ratio
means little when that is near 1.

``python -m bench.compact [--gb 1.0] [--runs 3] [--baseline TREE] [--json FILE]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.table import Table

from bench.verify import GIB, MB, TOPIC, generate

MASTERS: Final = ("local[1]", "local[2]")

# Run in a child process against one code tree; argv[1] is a JSON object of its arguments. It
# uses only `run_compact` and `build_session`, which every tree measured has.
_CHILD: Final = """
import hashlib, json, shutil, sys
from pathlib import Path
import offline.compact
from offline.compact import run_compact
from offline.spark_session import build_session

args = json.loads(sys.argv[1])
staging = Path(args["staging"])
spark = build_session(args["master"], "bench compact " + args["master"])
try:
    spark.sparkContext.parallelize(range(8), 8).map(lambda x: x).collect()  # start workers
    elapsed, cleaned, digests = [], 0, {}
    for run in range(args["runs"]):
        shutil.rmtree(staging, ignore_errors=True)
        result = run_compact(
            spark, Path(args["data_dir"]), args["topic"], now_ms=args["now_ms"],
            staging_dir=staging, config_overrides={"cleanup.policy": "compact"},
        )
        elapsed.append(result.elapsed_s)
        cleaned = result.source_bytes
        if run == 0:
            digests = {
                str(p.relative_to(staging)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(staging.rglob("*")) if p.is_file()
            }
    shutil.rmtree(staging, ignore_errors=True)
finally:
    spark.stop()
print(json.dumps({"module": offline.compact.__file__, "elapsed_s": elapsed,
                  "cleaned_bytes": cleaned, "digests": digests}))
"""


def run_child(
    tree: Path, master: str, data_dir: Path, staging: Path, runs: int, now_ms: int
) -> Any:
    """One process's figures (see `_CHILD`)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    args = {
        "master": master,
        "data_dir": str(data_dir),
        "topic": TOPIC,
        "staging": str(staging),
        "runs": runs,
        "now_ms": now_ms,
    }
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(args)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tree} {master}: exit {done.returncode}\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _busy(n: int) -> float:
    started = time.perf_counter()
    total = 0
    for i in range(n):
        total += i
    assert total >= 0
    return time.perf_counter() - started


def core_capacity(n: int = 10_000_000) -> float:
    """Cores this run can have now: the time of one busy loop alone, twice, over the time of
    two at once (2.0 on two idle cores, 1.0 when only one core's worth is free)."""
    alone = _busy(n)
    with multiprocessing.Pool(2) as pool:
        started = time.perf_counter()
        pool.map(_busy, [n, n])
        both = time.perf_counter() - started
    return 2 * alone / both


def _mb_s(child: Any) -> list[float]:
    return [child["cleaned_bytes"] / MB / s for s in child["elapsed_s"]]


def _digest_of(digests: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--gb", type=float, default=1.0, help="GiB of segment files in all")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to generate (a temp dir)")
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to time")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the figures here")
    args = parser.parse_args(argv)
    console = Console()
    here = Path(__file__).resolve().parent.parent
    trees = {"this": here} | ({} if args.baseline is None else {"baseline": args.baseline})
    root = Path(tempfile.mkdtemp(prefix="ketch-bench-compact-", dir=args.dir))
    figures: dict[str, Any] = {}
    try:
        started = time.perf_counter()
        total = generate(root, int(args.gb * GIB), args.partitions)
        console.print(
            f"generated {total / MB:.0f} MB in {time.perf_counter() - started:.1f} s under "
            f"{root}; compacting broker-0 ({total / 3 / MB:.0f} MB)"
        )
        now_ms = time.time_ns() // 1_000_000
        for master in MASTERS:
            for name, tree in trees.items():
                capacity = core_capacity()
                child = run_child(
                    tree, master, root / "broker-0", root / "staging", args.runs, now_ms
                )
                child["core_capacity"] = capacity
                figures[f"{name} {master}"] = child
                console.print(
                    f"{name} {master}: {child['module']}: {child['elapsed_s']} "
                    f"({capacity:.2f} cores free before)"
                )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    table = Table(title=f"ketch compact, broker-0 of {total / MB:.0f} MB, staging only")
    columns = ("code", "master", "MB cleaned", "median MB/s", "min-max MB/s", "cores", "staged")
    for column in columns:
        table.add_column(column, justify="right" if column != "code" else "left")
    summary: dict[str, Any] = {"bytes": total, "runs": args.runs}
    for key, child in figures.items():
        rates = _mb_s(child)
        name, master = key.split(" ")
        table.add_row(
            name,
            master,
            f"{child['cleaned_bytes'] / MB:.0f}",
            f"{statistics.median(rates):.1f}",
            f"{min(rates):.1f}-{max(rates):.1f}",
            f"{child['core_capacity']:.2f}",
            _digest_of(child["digests"]),
        )
        summary[f"{name}_{master}_mb_s"] = [round(r, 1) for r in rates]
        summary[f"{name}_{master}_cores_free"] = round(child["core_capacity"], 2)
    console.print(table)
    for name in trees:
        one, two = (statistics.median(_mb_s(figures[f"{name} {m}"])) for m in MASTERS)
        summary[f"{name}_ratio"] = round(two / one, 2)
        console.print(f"{name}: local[2] / local[1] = {two / one:.2f}x")
    if args.baseline is not None:
        same = all(
            figures[f"this {m}"]["digests"] == figures[f"baseline {m}"]["digests"] for m in MASTERS
        )
        summary["staged_identical"] = same
        console.print(f"staged files identical to the baseline's: {same}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
