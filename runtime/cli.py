"""The `ketch` command.

Subcommands are registered by the layer that implements them; a command of the DESIGN.md contract
that is not built yet is absent, and `ketch up` (the main job) says what it still needs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

EXIT_OK = 0
EXIT_USAGE = 2


def _cmd_up(args: argparse.Namespace) -> int:
    print(
        "ketch up: the local cluster cannot start yet. Storage, the wire protocol, networking "
        "and the broker's replication layer are built; it still needs the controller (broker "
        "registration, heartbeats, elections; issue 6) and the process wiring of `ketch up` "
        "(issue 7).",
        file=sys.stderr,
    )
    return EXIT_USAGE


def _cmd_dump_log(args: argparse.Namespace) -> int:
    from pathlib import Path

    from runtime.log.dump import dump_log_files

    return dump_log_files(
        [Path(p) for p in args.paths], sys.stdout, deep=args.deep, verify_index=args.verify_index
    )


def _add_dump_log(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dump = commands.add_parser(
        "dump-log", help="print and check segment files (.log, .index, .timeindex, or a dir)"
    )
    dump.add_argument("paths", nargs="+", metavar="PATH")
    dump.add_argument("--deep", action="store_true", help="print every record")
    dump.add_argument(
        "--verify-index", action="store_true", help="check index entries against the log"
    )
    dump.set_defaults(handler=_cmd_dump_log)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ketch", description="A Kafka-style log broker.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    up = commands.add_parser("up", help="run a local cluster in the foreground")
    up.add_argument("--brokers", type=int, default=3)
    up.add_argument("--data-dir", default="./data")
    up.add_argument("--port", type=int, default=9092)
    up.set_defaults(handler=_cmd_up)
    _add_dump_log(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
