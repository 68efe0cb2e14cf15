"""`ketch spark up`: a Spark standalone cluster (a master and N workers on 127.0.0.1, from
pyspark's own distribution: `offline.standalone`) in the foreground until Ctrl-C, for
`ketch verify` and `ketch compact` to run on by master URL:

    ketch spark up [--workers N] [--cores C] [--memory M] [--work-dir DIR]
    ketch verify data --master spark://127.0.0.1:PORT       # in another terminal

It prints the master URL (and then the master's web UI URL) on stdout once every worker is
ALIVE, and stops the daemons (and the executors they launched) on Ctrl-C (SIGINT) or SIGTERM; a
daemon that dies ends the command with its log's tail.
The command's one thread owns the cluster.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Final

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    spark = commands.add_parser(
        "spark",
        help="a local Spark standalone cluster for verify and compact",
        epilog=(
            "examples:\n"
            "  ketch spark up                          # Ctrl-C stops it\n"
            "  ketch spark up --workers 3 --cores 2\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = spark.add_subparsers(dest="spark_command", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up",
        help="run a Spark master and workers on 127.0.0.1 until Ctrl-C",
        description=(
            "Start a Spark standalone master and workers on 127.0.0.1 (pyspark's own Spark,\n"
            "Java 17 or 21 needed), print the master URL, and stop them all on Ctrl-C.\n"
            "Then, in another terminal: ketch verify data --master spark://127.0.0.1:PORT"
        ),
        epilog=(
            "examples:\n"
            "  ketch spark up                          # 2 workers, 1 core and 1g each\n"
            "  ketch spark up --workers 3 --memory 2g\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    up.add_argument("--workers", type=_positive, default=2, metavar="N", help="workers (2)")
    up.add_argument("--cores", type=_positive, default=1, metavar="C", help="cores per worker (1)")
    up.add_argument(
        "--memory", default="1g", metavar="M", help="executor memory per worker, e.g. 2g (1g)"
    )
    up.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="daemon logs and worker dirs (default: a temporary dir, removed on exit)",
    )
    up.add_argument(
        "--timeout-s", type=float, default=90.0, metavar="S", help="start-up timeout (90)"
    )
    up.set_defaults(handler=run_up)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _stop_on_signal(signum: int, frame: FrameType | None) -> None:
    # SIGTERM (a supervisor, `kill`) ends the command as Ctrl-C does: the cluster is stopped.
    raise KeyboardInterrupt


def run_up(args: argparse.Namespace) -> int:
    from offline.standalone import StandaloneError, start_standalone

    signal.signal(signal.SIGTERM, _stop_on_signal)
    # A shell starts `cmd &` with SIGINT ignored, which Python keeps: Ctrl-C's signal must stop
    # the cluster wherever the command was started from.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    print(
        f"starting a Spark master and {args.workers} worker(s) on 127.0.0.1...",
        file=sys.stderr,
        flush=True,
    )
    try:
        cluster = start_standalone(
            args.workers,
            cores=args.cores,
            memory=args.memory,
            work_dir=args.work_dir,
            timeout_s=args.timeout_s,
        )
    except StandaloneError as exc:
        print(f"ketch spark up: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_OK  # start_standalone stopped what it had started
    try:
        # For scripts, stdout holds just the master URL and then the master's web UI (its
        # /json/ is the cluster's state); the rest, on stderr, is for a person.
        print(cluster.master_url, cluster.webui_url, sep="\n", flush=True)
        print(
            f"{args.workers} worker(s) ALIVE, {args.cores} core(s) and {args.memory} each; "
            f"master {cluster.master_url}, web UI {cluster.webui_url}; "
            f"logs in {cluster.work_dir}\n"
            f"  ketch verify DATA_DIR --master {cluster.master_url}\n"
            f"  ketch compact BROKER_DIR --topic T --master {cluster.master_url}\n"
            "Ctrl-C to stop.",
            file=sys.stderr,
            flush=True,
        )
        cluster.wait()
    except KeyboardInterrupt:
        return EXIT_OK
    except StandaloneError as exc:
        print(f"ketch spark up: {exc}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        cluster.stop()
        print("Spark cluster stopped", file=sys.stderr, flush=True)
    return EXIT_OK
