"""`ketch cluster shutdown-broker ID [--data-dir D]` and `... start-broker ID [--data-dir D]`.

Both talk to the `ketch up` supervisor of the data dir D (default ./data, as `ketch up`'s) over
its control socket `D/up.sock` (cli/up/control.py explains the channel and why).
`shutdown-broker` returns once the broker has finished its controlled shutdown and exited; the
supervisor then keeps it down (no restart) until `start-broker`, which returns once the broker
has registered with the controller again.

Exit codes: 0 done (also when the broker already was in the asked state); 1 no `ketch up`
cluster is running at D, or the action failed; 2 an unknown broker id or bad arguments.

Registration: `register_cluster_commands(cluster_subparsers)` adds the two commands under the
`cluster` subparser (where `ketch cluster status` lives; cli/main.py joins them). Each
command is one blocking round trip in its own process: no state, no lock.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from cli.up.control import (
    EXIT_FAILED,
    SHUTDOWN_BROKER,
    START_BROKER,
    ControlRequest,
    NoSupervisorError,
    call,
)

SubParsers = argparse._SubParsersAction  # the type argparse gives `add_subparsers()`

DEFAULT_DATA_DIR: Final = Path("./data")


def register_cluster_commands(cluster_subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    """Add shutdown-broker and start-broker under an existing `ketch cluster` parser."""
    for name, help_text, examples in (
        (
            SHUTDOWN_BROKER,
            "controlled shutdown of one broker of the `ketch up` cluster",
            "  ketch cluster shutdown-broker 1       # down until start-broker 1\n"
            "  ketch cluster shutdown-broker 2 --data-dir data\n",
        ),
        (
            START_BROKER,
            "start a broker stopped with shutdown-broker again",
            "  ketch cluster start-broker 1\n  ketch cluster start-broker 2 --data-dir data\n",
        ),
    ):
        parser = cluster_subparsers.add_parser(
            name,
            help=help_text,
            epilog=f"examples:\n{examples}",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        parser.add_argument("broker_id", type=int, metavar="ID", help="the broker's id")
        parser.add_argument(
            "--data-dir",
            type=Path,
            default=DEFAULT_DATA_DIR,
            help="the `ketch up` cluster's data dir (default ./data)",
        )
        command = _command_for(name)
        # cli.py dispatches on `handler`, the command modules' brief on `func`: either works.
        parser.set_defaults(func=command, handler=command)


def _command_for(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        return control_broker(name, args.broker_id, args.data_dir)

    return run


def control_broker(command: str, broker_id: int, data_dir: Path) -> int:
    prog = f"ketch cluster {command}"
    try:
        reply = call(data_dir, ControlRequest(command, broker_id))
    except NoSupervisorError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except (OSError, ValueError) as exc:
        print(
            f"{prog}: no answer from the `ketch up` cluster at {data_dir}: {exc}", file=sys.stderr
        )
        return EXIT_FAILED
    if reply.ok:
        print(reply.message)
    else:
        print(f"{prog}: {reply.message}", file=sys.stderr)
    return reply.exit_code
