"""How long a `ketch` command takes to start: the wall time of a whole process that builds its
parser and stops at `--help`, for a few commands, against the baseline of a bare interpreter
(`python -c pass`) measured in the same run (the machine is noisy). Issue 23 asks a simple
command (`topic list`) to start in under 0.3 s. Each figure is the median (and p90) of --runs
runs, interleaved so that a burst of noise touches every command alike.

Run: ``python -m bench.cli_startup [--runs 15] [--json FILE]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

COMMANDS: Final[dict[str, list[str]]] = {
    "python -c pass (baseline)": [sys.executable, "-c", "pass"],
    "ketch --help": [sys.executable, "-m", "cli.main", "--help"],
    "ketch topic list --help": [sys.executable, "-m", "cli.main", "topic", "list", "--help"],
    "ketch produce --help": [sys.executable, "-m", "cli.main", "produce", "t", "--help"],
    "ketch consume --help": [sys.executable, "-m", "cli.main", "consume", "t", "--help"],
    "ketch group list --help": [sys.executable, "-m", "cli.main", "group", "list", "--help"],
    "ketch cluster health --help": [
        sys.executable, "-m", "cli.main", "cluster", "health", "--help",
    ],
}  # fmt: skip
TARGET_S: Final = 0.3


def _time_once(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli_startup")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    samples: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for command in COMMANDS.values():  # one warm-up each: the page cache, .pyc files
        _time_once(command)
    for _ in range(args.runs):
        for name, command in COMMANDS.items():
            samples[name].append(_time_once(command))
    baseline = statistics.median(samples["python -c pass (baseline)"])
    figures = {}
    print(f"{'command':32} {'p50 s':>7} {'p90 s':>7} {'minus python':>13}")
    for name, times in samples.items():
        p50 = statistics.median(times)
        p90 = statistics.quantiles(times, n=10)[-1] if len(times) >= 2 else p50
        figures[name] = {"p50_s": round(p50, 4), "p90_s": round(p90, 4)}
        print(f"{name:32} {p50:7.3f} {p90:7.3f} {p50 - baseline:13.3f}")
    simple = figures["ketch topic list --help"]["p50_s"]
    verdict = "met" if simple < TARGET_S else "missed"
    print(f"topic list starts in {simple:.3f} s (target < {TARGET_S} s: {verdict})")
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": args.runs, "figures": figures}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
