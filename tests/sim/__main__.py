"""`python -m tests.sim --seeds N --from S`: run N seeded whole-cluster simulations (issue 20)
and print each failure (its seed, its violations, the trace of faults and outcomes leading to
them) and a summary. Exit status 1 if any seed failed.

The runner pins PYTHONHASHSEED (re-executing itself when it is not set) so a seed printed here
replays in any other process: string hashing decides the iteration order of sets of names.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile
from pathlib import Path

from runtime.reinjected import KNOWN, reinjected
from testkit.sim.checkers import format_violations
from testkit.sim.faults import KINDS, OPTIONAL_KINDS
from testkit.sim.simulation import Result, Settings, run_seed, summarize

HASH_SEED = "0"


def report(result: Result, *, trace_lines: int, replay_args: str = "") -> str:
    lines = [
        f"seed {result.seed} FAILED ({len(result.violations)} violations, "
        f"replay: python -m tests.sim --seeds 1 --from {result.seed}{replay_args})",
        format_violations(result.violations),
        f"last {trace_lines} trace lines:",
        *result.notes[-trace_lines:],
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__)
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds (default 100)")
    parser.add_argument("--from", dest="first", type=int, default=0, help="the first seed")
    parser.add_argument("--fault-ms", type=int, default=Settings().fault_ms)
    parser.add_argument("--trace-lines", type=int, default=40)
    parser.add_argument("--dir", type=Path, default=None, help="where runs keep their files")
    parser.add_argument("--verbose", action="store_true", help="log warnings from the nodes")
    parser.add_argument(
        "--reinject",
        choices=sorted(KNOWN),
        default=None,
        help="turn a known, fixed bug back on (runtime/reinjected.py): watch the checkers fail",
    )
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help="the fault kinds to draw from, comma-separated (default: all of KINDS; also "
        f"{', '.join(OPTIONAL_KINDS)})",
    )
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.fault_ms < 0:
        parser.error("--seeds must be at least 1 and --fault-ms not negative")
    kinds = tuple(kind for kind in args.kinds.split(",") if kind)
    unknown = sorted(set(kinds) - set(KINDS) - set(OPTIONAL_KINDS))
    if unknown or not kinds:
        parser.error(
            f"--kinds: unknown {unknown or 'none given'}; known: {', '.join(KINDS)}, "
            f"{', '.join(OPTIONAL_KINDS)}"
        )
    if args.verbose:
        logging.basicConfig(level=logging.WARNING)
    else:
        logging.disable(logging.CRITICAL)  # the nodes' errors under faults are expected noise
    settings = Settings(fault_ms=args.fault_ms, kinds=kinds)
    extra = "".join(
        [
            f" --fault-ms {args.fault_ms}" if args.fault_ms != Settings().fault_ms else "",
            f" --kinds {','.join(kinds)}" if kinds != KINDS else "",
            f" --reinject {args.reinject}" if args.reinject else "",
        ]
    )
    results = []
    with tempfile.TemporaryDirectory(prefix="ketch-sim-") as scratch:
        base = args.dir or Path(scratch)
        for seed in range(args.first, args.first + args.seeds):
            with reinjected(args.reinject) if args.reinject else contextlib.nullcontext():
                result = run_seed(seed, base, settings)
            results.append(result)
            if not result.ok:
                print(report(result, trace_lines=args.trace_lines, replay_args=extra), flush=True)
    print(summarize(r.figures() for r in results))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:
        os.environ["PYTHONHASHSEED"] = HASH_SEED
        os.execv(sys.executable, [sys.executable, "-m", "tests.sim", *sys.argv[1:]])
    sys.exit(main())
