"""The `ketch` command.

Subcommands are registered by the layer that implements them (each module's `register`).

Two kinds of subcommand:
* argparse subcommands (`up`, `topic`, `group`, `produce`, `consume`, `cluster`, `config`,
  `bench`, `dump-log`): a registrar in `_REGISTRARS` adds the parser and sets `handler`;
* pass-throughs (`broker`, `controller`): a process with its own parser and `main(argv)` in its
  module; `_PASS_THROUGH` names the module, and everything after the command word goes to that
  `main` untouched, so `ketch broker --help` is the broker's own help. They still appear in
  `build_parser()` (with the module's parser as their parser) so `ketch --help` lists them and
  a caller can parse a full command line to check it.

A new command is one entry in one of the two tables.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import Final, Protocol, cast

from bench import latency as bench_latency
from cli import cluster_admin as cli_cluster_admin
from cli import data as cli_data
from cli import group as cli_group
from cli import health as cli_health
from cli import status as cli_status
from cli import topic as cli_topic
from cli.common import CommandParser
from cli.up import supervisor as up

EXIT_OK = 0
EXIT_USAGE = 2


def _cmd_dump_log(args: argparse.Namespace) -> int:
    from pathlib import Path

    from runtime.log.dump import dump_log_files

    return dump_log_files(
        [Path(p) for p in args.paths], sys.stdout, deep=args.deep, verify_index=args.verify_index
    )


def _add_dump_log(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dump = commands.add_parser(
        "dump-log",
        help=(
            "print and check segment files (.log, .index, .timeindex, .txnindex, .snapshot, "
            "or a dir)"
        ),
    )
    dump.add_argument("paths", nargs="+", metavar="PATH")
    dump.add_argument("--deep", action="store_true", help="print every record")
    dump.add_argument(
        "--verify-index", action="store_true", help="check index entries against the log"
    )
    dump.set_defaults(handler=_cmd_dump_log)


class _ProcessModule(Protocol):
    def build_parser(self) -> argparse.ArgumentParser: ...

    def main(self, argv: Sequence[str] | None = None) -> int: ...


# A registrar may return what it added (cli/status.py returns its group).
Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], object]

_REGISTRARS: Final[tuple[Registrar, ...]] = (
    up.register,
    cli_topic.register,
    cli_group.register,
    cli_data.register,
    functools.partial(
        cli_status.register,
        cluster_extensions=[
            cli_cluster_admin.register_cluster_commands,
            cli_health.register_cluster_commands,
        ],
    ),
    bench_latency.register,
    _add_dump_log,
)
# command -> (module with build_parser() and main(argv), help)
_PASS_THROUGH: Final[dict[str, tuple[str, str]]] = {
    "broker": ("node.broker.main", "run one broker (its own flags: ketch broker --help)"),
    "controller": (
        "node.controller.main",
        "run the controller (its own flags: ketch controller --help)",
    ),
    "verify": ("offline.verify", "check a cluster's log dirs with Spark (ketch verify --help)"),
    "compact": ("offline.compact", "compact a topic offline with Spark (ketch compact --help)"),
}


def _process_module(command: str) -> _ProcessModule:
    # Imported on use: `ketch broker` loads only the broker's module, the other commands neither.
    module: _ProcessModule = importlib.import_module(_PASS_THROUGH[command][0])
    return module


def build_parser(*, node_flags: bool = True) -> argparse.ArgumentParser:
    """The whole `ketch` parser. With node_flags=False the pass-throughs are only listed (for
    `ketch --help`), which spares the other commands a second of importing the nodes."""
    parser = argparse.ArgumentParser(prog="ketch", description="A Kafka-style log broker.")
    # Typed as the registrars take it: a CommandParser is an ArgumentParser.
    commands = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(
            dest="command", required=True, metavar="COMMAND", parser_class=CommandParser
        ),
    )
    for register in _REGISTRARS:
        register(commands)
    for command, (_, help_text) in _PASS_THROUGH.items():
        if node_flags:
            own = _process_module(command).build_parser()
            commands.add_parser(command, help=help_text, parents=[own], add_help=False)
        else:
            commands.add_parser(command, help=help_text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0] in _PASS_THROUGH:
        return _process_module(words[0]).main(words[1:])
    args = build_parser(node_flags=False).parse_args(words)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
