"""The `ketch` command.

Subcommands are registered by the layer that implements them (each module's `register`).

Two kinds of subcommand:
* argparse subcommands (`up`, `topic`, `group`, `produce`, `consume`, `cluster`, `config`,
  `bench`, `dump-log`, `spark`): `_COMMANDS` names each one's help line and its registrar,
  which adds the parser and sets `handler`; only the registrar of the command being run is
  imported (the others are listed by their help line), so a command starts without loading the
  rest;
* pass-throughs (`broker`, `controller`): a process with its own parser and `main(argv)` in its
  module; `_PASS_THROUGH` names the module, and everything after the command word goes to that
  `main` untouched, so `ketch broker --help` is the broker's own help. They still appear in
  `build_parser()` (with the module's parser as their parser) so `ketch --help` lists them and
  a caller can parse a full command line to check it.

A new command is one entry in one of the two tables.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Protocol, cast

from cli.parsing import CommandParser

EXIT_OK = 0
EXIT_USAGE = 2


def _cmd_dump_log(args: argparse.Namespace) -> int:
    from pathlib import Path

    from runtime.log.dump import dump_log_files

    return dump_log_files(
        [Path(p) for p in args.paths], sys.stdout, deep=args.deep, verify_index=args.verify_index
    )


def add_dump_log(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    dump = commands.add_parser(
        "dump-log",
        help=(
            "print and check segment files (.log, .index, .timeindex, .txnindex, .snapshot, "
            "or a dir)"
        ),
        epilog=(
            "examples:\n"
            "  ketch dump-log data/broker-0/orders-0          # every file of a partition\n"
            "  ketch dump-log data/broker-0/orders-0 --deep --verify-index\n"
            "  ketch dump-log data/broker-0/orders-0/00000000000000000000.log --deep\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
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


@dataclass(frozen=True, slots=True)
class _Command:
    """A top-level command: its help line for `ketch --help`, and where its parser is built
    ("module:function", imported only when the command runs or the whole parser is built)."""

    help: str
    registrar: str

    def register(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        module, _, function = self.registrar.partition(":")
        registrar: Registrar = getattr(importlib.import_module(module), function)
        registrar(commands)


# Each command's module is imported only when that command runs: importing them all (the client,
# the group protocol's kio schemas, the benchmarks, the node configs) cost every `ketch` call
# about 0.75 s before it did anything.
_COMMANDS: Final[dict[str, _Command]] = {
    "up": _Command("run a local cluster in the foreground", "cli.up.supervisor:register"),
    "topic": _Command("create, list, describe, alter and delete topics", "cli.topic:register"),
    "group": _Command(
        "list, describe and delete consumer groups; reset their offsets", "cli.group:register"
    ),
    "produce": _Command(
        "write lines from stdin (or generated records) to a topic", "cli.produce:register"
    ),
    "consume": _Command(
        "print a topic's records (kcat-style formats, consumer groups)", "cli.consume:register"
    ),
    "cluster": _Command(
        "the cluster's controller and brokers", "cli.status:register_cluster_group"
    ),
    "config": _Command("node configuration", "cli.config_cmd:register"),
    "acl": _Command("add, list and remove ACLs (kafka-acls)", "cli.acl:register"),
    "user": _Command("create, delete and list SCRAM users (SASL)", "cli.user:register"),
    "quota": _Command("set, list and remove client quotas (byte rates)", "cli.quota:register"),
    "bench": _Command("benchmarks", "bench.latency:register"),
    "dump-log": _Command(
        "print and check segment files (.log, .index, .timeindex, .txnindex, .snapshot, or a dir)",
        "cli.main:add_dump_log",
    ),
    "spark": _Command(
        "a local Spark standalone cluster for verify and compact", "cli.spark_cluster:register"
    ),
}


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


def build_parser(*, node_flags: bool = True, only: str | None = None) -> argparse.ArgumentParser:
    """The `ketch` parser. With `only`, just that command is built (every other is listed with
    its help line), so a command imports only its own modules. With node_flags=False the
    pass-throughs are only listed, which spares the other commands a second of importing the
    nodes."""
    parser = argparse.ArgumentParser(prog="ketch", description="A Kafka-style log broker.")
    # Typed as the registrars take it: a CommandParser is an ArgumentParser.
    commands = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(
            dest="command", required=True, metavar="COMMAND", parser_class=CommandParser
        ),
    )
    for name, command in _COMMANDS.items():
        if only is None or only == name:
            command.register(commands)
        else:
            commands.add_parser(name, help=command.help)
    for name, (_, help_text) in _PASS_THROUGH.items():
        if node_flags:
            own = _process_module(name).build_parser()
            commands.add_parser(name, help=help_text, parents=[own], add_help=False)
        else:
            commands.add_parser(name, help=help_text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0] in _PASS_THROUGH:
        return _process_module(words[0]).main(words[1:])
    # `ketch --help`, no command or an unknown one: only the list of commands is built.
    only = words[0] if words and words[0] in _COMMANDS else ""
    args = build_parser(node_flags=False, only=only).parse_args(words)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
