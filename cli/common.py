"""What every client command of `ketch` shares: the `--bootstrap` flag (where its default comes
from: cli/bootstrap.py), the client it builds, the mapping from errors to messages and exit
codes, and the rich console output.

Exit codes (DESIGN.md, "Command line contract"): 0 success; 1 the command ran and failed (the
cluster cannot be reached, an unknown topic, a broker refused the request); 2 bad arguments
(argparse's own code, also used for an unusable config file). A client command never shows a
traceback for one of these expected failures: `run_async()` turns the client's typed errors
(`client.errors`, `wire.errors.KafkaError`) and `CliError` into one line on stderr
and the exit code. Any other exception is a bug and keeps its traceback.

Each command runs one short-lived event loop of its own (`run_async`) with the system clock and
TCP; the loop, the client and everything they own end before the command returns, so nothing
here is shared between threads or commands and nothing needs a lock.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import ssl
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final, Protocol, TextIO, TypeVar, cast

from rich.console import Console

from cli.bootstrap import (
    BOOTSTRAP_METAVAR,
    DEFAULT_BOOTSTRAP,
    BootstrapServers,
    bootstrap_arg,
    format_bootstrap,
    resolve_bootstrap,
)
from cli.client_sasl import client_authenticator, client_sasl_scope, command_sasl
from cli.client_tls import (
    add_command_config_flag,
    client_tls_scope,
    client_transport,
    command_ssl_context,
)
from cli.parsing import CommandParser
from cli.reasons import describe_error
from client.client import Client
from client.config import ClientConfig
from client.errors import ClientError
from runtime.clock import SystemClock
from runtime.net.tcp import new_event_loop
from runtime.net.transport import Address
from wire.errors import ErrorCode, KafkaError
from wire.messages import MetadataRequest, MetadataRequestTopic, MetadataResponse

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_INTERRUPTED: Final = 130  # the shell's code for a command ended by Ctrl-C (128 + SIGINT)

# Re-exported: the command modules take what they share from here.
__all__ = ["DEFAULT_BOOTSTRAP", "BootstrapServers", "describe_error", "format_bootstrap"]

# A command line tool should say "cannot reach" within seconds, not after Kafka's 30 s
# request timeout; a refused connection fails at once anyway, this bounds a silent host.
CLI_CLIENT_CONFIG: Final = ClientConfig(
    request_timeout_ms=15_000,
    socket_connection_setup_timeout_ms=5_000,
    delivery_timeout_ms=30_000,
)
# With no broker reachable, how long a command keeps trying its bootstrap list (each address
# after its reconnect backoff) before "cannot reach": long enough for `ketch up` to restart a
# broker (0.5 s, then the node's start-up), short enough that a user with no cluster running
# hears so within seconds. Within the request timeout, as Kafka's clients bound it.
CLI_REACH_TIMEOUT_MS: Final = 5_000

Command = Callable[[argparse.Namespace], int]
SubParsers = argparse._SubParsersAction  # the type argparse gives `add_subparsers()`


class CliError(Exception):
    """An expected failure of a command: printed as one line, exits with `exit_code`."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class UnknownTopicError(CliError):
    def __init__(self, topic: str) -> None:
        super().__init__(f"unknown topic {topic!r}")
        self.topic = topic


# ---------------------------------------------------------------------------------------------
# Argument parsing


def address_arg(text: str) -> Address:
    """argparse `type=` for HOST:PORT: a bad address is a usage error (exit 2)."""
    try:
        return Address.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_int_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def add_bootstrap_flag(parser: argparse.ArgumentParser) -> None:
    """`--bootstrap HOST:PORT[,HOST:PORT...]`; without it `args.bootstrap` is filled in once
    parsing is done (cli/bootstrap.py), so register the command with `set_command`. With it
    comes `--command-config FILE`, the client's TLS settings (cli/client_tls.py) and SASL login
    (cli/client_sasl.py)."""
    add_command_config_flag(parser)
    parser.add_argument(
        "--bootstrap",
        type=bootstrap_arg,
        default=None,
        metavar=BOOTSTRAP_METAVAR,
        help=(
            "brokers to start from, as Kafka's bootstrap.servers (default: $KETCH_BOOTSTRAP, "
            f"else the `ketch up` cluster in ./data/cluster.json, else {DEFAULT_BOOTSTRAP})"
        ),
    )


def add_query_command(
    actions: SubParsers[argparse.ArgumentParser],
    name: str,
    help_text: str,
    command: Command,
    *,
    positional: tuple[str, str] | None = None,
) -> argparse.ArgumentParser:
    """A read-only subcommand (`list`, `describe NAME`): its positional (dest, metavar) if any,
    `--json` and `--bootstrap`."""
    parser = actions.add_parser(name, help=help_text)
    if positional is not None:
        parser.add_argument(positional[0], metavar=positional[1])
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_bootstrap_flag(parser)
    set_command(parser, command)
    return parser


def set_command(parser: argparse.ArgumentParser, command: Command) -> None:
    """Make `command` the function the `ketch` entry point calls for this subparser.

    The brief for the command modules dispatches on `func`; cli/main.py as it stands
    dispatches on `handler`. Setting both lets either wiring call the command unchanged.
    The function set first fills in a default `--bootstrap` (cli/bootstrap.py): that default
    depends on `--data-dir` and the environment, known only once parsing is done, and a bad one
    is this subparser's usage error. `inspect.unwrap()` gives `command` back.
    """

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        try:
            resolve_bootstrap(parser, args)
        except SystemExit as exc:  # parser.error(): the usage is printed, the code returned
            return exc.code if isinstance(exc.code, int) else EXIT_USAGE
        try:
            context = _command_ssl_context(args)
            login = command_sasl(getattr(args, "command_config", None))
        except ValueError as exc:
            error(parser.prog, str(exc))
            return EXIT_USAGE
        with client_tls_scope(context), client_sasl_scope(login):
            return command(args)

    parser.set_defaults(func=run, handler=run)


def run_argv(
    prog: str,
    register: Callable[[SubParsers[argparse.ArgumentParser]], object],
    argv: Sequence[str],
) -> int:
    """Parse `argv` with the subcommands `register` adds and run the chosen one.

    The per-module `main(argv)` functions use this so a command can be run (and tested)
    without cli/main.py; argparse's exit (usage error 2, --help 0) becomes the return value.
    """
    parser = argparse.ArgumentParser(prog=prog)
    commands = cast(
        "SubParsers[argparse.ArgumentParser]",
        parser.add_subparsers(
            dest="command", required=True, metavar="COMMAND", parser_class=CommandParser
        ),
    )
    register(commands)
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    command: Command = args.func
    return command(args)


# ---------------------------------------------------------------------------------------------
# Running a command


def run_async(
    prog: str, bootstrap: BootstrapServers | None, work: Callable[[], Awaitable[int]]
) -> int:
    """Run `work()` on a fresh event loop; expected failures become a message and an exit code.

    `bootstrap` (when the command talks to a cluster) names the addresses in "cannot reach".
    """

    async def guarded() -> int:  # Runner.run takes a coroutine; `work()` is any awaitable
        return await work()

    try:
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            return runner.run(guarded())
    except KeyboardInterrupt:
        error(prog, "interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`ketch consume ... | head`): not a failure of this command.
        _silence_stdout()
        return EXIT_OK
    except CliError as exc:
        error(prog, str(exc))
        return exc.exit_code
    except (ClientError, KafkaError, OSError) as exc:
        error(prog, describe_error(exc, bootstrap))
        return EXIT_FAILED


class JsonShaped(Protocol):
    def to_json(self) -> dict[str, object]: ...


J = TypeVar("J", bound=JsonShaped)


def run_query(
    prog: str,
    args: argparse.Namespace,
    fetch: Callable[[Client], Awaitable[J]],
    show: Callable[[J], None],
) -> int:
    """A read-only command: `fetch` what it shows through a client of `args.bootstrap`, then
    print it as JSON (`args.json`) or with `show`."""
    bootstrap: BootstrapServers = args.bootstrap

    async def work() -> int:
        async with open_client(bootstrap) as client:
            found = await fetch(client)
        if args.json:
            print_json(found.to_json())
        else:
            show(found)
        return EXIT_OK

    return run_async(prog, bootstrap, work)


def _command_ssl_context(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The command's client TLS (cli/client_tls.py); None for a command without a cluster."""
    bootstrap = getattr(args, "bootstrap", None)
    if bootstrap is None:
        return None
    data_dir = getattr(args, "data_dir", None)
    return command_ssl_context(
        getattr(args, "command_config", None),
        bootstrap,
        Path(data_dir) if isinstance(data_dir, str | Path) else None,
    )


def error(prog: str, message: str) -> None:
    print(f"{prog}: {message}", file=sys.stderr, flush=True)


def _silence_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush does
    not raise again (the documented recipe in Python's `signal` docs)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's capture): nothing will be flushed to a pipe
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


@asynccontextmanager
async def open_client(
    bootstrap: BootstrapServers, *, client_id: str = "ketch-cli", credential: bytes | None = None
) -> AsyncIterator[Client]:
    """A client of the cluster reached through any address of `bootstrap`, closed on exit.
    `credential`: the cluster secret to prove instead of a SASL login (cli/admin_login.py)."""
    authenticator = client_authenticator()  # a SASL login when --command-config says so
    client = Client(
        bootstrap,
        transport=client_transport(),  # TLS when --command-config or cluster.json says so
        clock=SystemClock(),
        client_id=client_id,
        config=CLI_CLIENT_CONFIG,
        reach_timeout_ms=CLI_REACH_TIMEOUT_MS,
        authenticator=authenticator,
        credential=credential if authenticator is None else None,
    )
    try:
        yield client
    finally:
        await client.close()


async def fetch_metadata(client: Client, topics: Sequence[str] | None) -> MetadataResponse:
    """One Metadata request to any reachable broker (`topics` None: every topic).

    Not the client's cached, retried lookup: a command shows what the cluster says now, and an
    unknown topic must fail at once rather than be retried as if it were still being created.
    """
    request = MetadataRequest(
        topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
        allow_auto_topic_creation=False,
    )
    response = await client.send_any(request)
    if not isinstance(response, MetadataResponse):
        raise TypeError(f"Metadata answered with {type(response).__name__}")
    if response.error_code != ErrorCode.NONE:
        raise KafkaError(response.error_code, "metadata request")
    return response


# ---------------------------------------------------------------------------------------------
# Output


def console(file: TextIO | None = None) -> Console:
    """A rich console on the *current* stdout (tests swap it), without colour codes when it
    is not a terminal, and without wrapping tables into unreadable slivers in a pipe."""
    out = sys.stdout if file is None else file
    width = None if out.isatty() else 120
    return Console(file=out, width=width, highlight=False, soft_wrap=False)


def print_json(document: object) -> None:
    print(json.dumps(document, indent=2, sort_keys=False))


def join_ids(ids: Sequence[int]) -> str:
    return ",".join(str(i) for i in ids) if ids else "-"
