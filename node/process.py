"""What the node processes (`ketch broker`, `ketch controller`) share: the configuration and
credential flags, the secret file, logging, and the signal-driven run loop.

    parser = argparse.ArgumentParser(...)
    add_node_arguments(parser)                      # --config, --secret-file, --set K=V
    args = parse_args(parser, argv)                 # an int is argparse's exit code
    flags = overrides(args)                         # the --set pairs, for config.resolve
    secret_file, secret = read_secret(args.secret_file, data_dir)
    return run(serve(node, name="broker 0", failed=None))

The secret. Control-plane requests need the cluster credential (DESIGN.md), so a node without
one cannot work: it is read from `--secret-file`, else `<data dir>/cluster.secret`, else
`<data dir>/../cluster.secret` (the `ketch up` layout: one secret beside the node directories).
Surrounding whitespace is not part of it (a file written by `echo` or `openssl rand -hex` ends
in a newline). A secret shorter than runtime.net.auth.MIN_SECRET_BYTES is refused; one readable
by others than its owner is used with a warning.

Exit codes. 0 after a signal and a clean stop; 1 for a failure a restart may cure (see the run
loop); 2 for a command line argparse refuses; EXIT_CONFIG (78, sysexits' EX_CONFIG) for a
configuration the node refuses: a property no node knows or with a bad value (node/config_check.py
checks them all before anything starts and prints one line per problem, `ketch broker: <file>:
"key" = value: reason`), an unreadable config file, no usable cluster secret, or a node the
cluster refuses for its configuration (a broker of another cluster, INCONSISTENT_CLUSTER_ID).
Restarting such a node cannot help, so a supervisor stops restarting it on that code
(cli/up/supervisor.py does).

The run loop. `serve` starts the node, then waits for SIGTERM / SIGINT or for the node's
`failed` event (a fatal error inside it, e.g. the controller's metadata log). A signal stops the
node cleanly and exits 0; a failure stops what is left of it and exits 1, so a supervisor
(`ketch up`, compose's `restart`) restarts the process and the restart replays what is really on
disk, unless `refused` gives a reason: the node was refused for its configuration, and it exits
EXIT_CONFIG. A second signal while stopping is logged and otherwise ignored, so the clean stop
is not cut short. A node that cannot start (port taken, directory locked) exits 1.

Ownership: `run` owns the event loop; the signal handlers run on the loop thread and only set an
event the serving coroutine waits on, so nothing here needs a lock.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

from runtime.config import ConfigError, Value, parse_override
from runtime.net import auth
from runtime.net.tcp import new_event_loop
from runtime.net.transport import Address

log = logging.getLogger("ketch.process")
S = TypeVar("S", bound="NodeSettings")

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
# sysexits.h's EX_CONFIG: the node refuses its configuration, and a restart would refuse it again.
EXIT_CONFIG: Final = 78
SECRET_FILE_NAME: Final = "cluster.secret"
# In the log line of a node the cluster refused for its configuration (see `serve`).
_REFUSED_MARK: Final = "configuration refused:"
_SIGNALS: Final = (signal.SIGTERM, signal.SIGINT)


class Node(Protocol):
    """What `serve` needs of a node: a start that undoes itself when it fails, and a stop."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags every node process takes besides its own."""
    parser.add_argument("--config", type=Path, help="TOML file of Kafka properties")
    parser.add_argument("--secret-file", type=Path, help="the cluster credential")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a property, over the config file (repeatable)",
    )


def parse_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> argparse.Namespace | int:
    """The parsed flags, or the exit code when argparse has printed a usage error or --help."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE


def overrides(args: argparse.Namespace) -> dict[str, Value]:
    """The `--set KEY=VALUE` pairs (values stay text; the components parse them)."""
    texts: list[str] = args.set
    return dict(parse_override(text) for text in texts)


def parse_address(text: str) -> Address:
    try:
        return Address.parse(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def read_secret(secret_file: Path | None, data_dir: Path) -> tuple[Path, bytes]:
    """Where the cluster credential was found and what it is; ConfigError when there is none."""
    candidates = (
        [secret_file]
        if secret_file is not None
        else [data_dir / SECRET_FILE_NAME, data_dir.parent / SECRET_FILE_NAME]
    )
    for path in candidates:
        try:
            secret = path.read_bytes().strip()
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ConfigError(f"cannot read the cluster secret {path}: {exc.strerror}") from None
        if len(secret) < auth.MIN_SECRET_BYTES:
            raise ConfigError(
                f"the cluster secret in {path} is shorter than {auth.MIN_SECRET_BYTES} bytes"
            )
        if path.stat().st_mode & 0o077:
            log.warning("%s is readable by others than its owner (expected mode 600)", path)
        return path, secret
    tried = ", ".join(str(p) for p in candidates)
    raise ConfigError(f"no cluster secret: none of {tried} exists (use --secret-file)")


def configure_logging() -> None:
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


async def serve(
    node: Node,
    *,
    name: str,
    failed: asyncio.Event | None = None,
    started: Callable[[], None] | None = None,
    refused: Callable[[], str | None] | None = None,
) -> int:
    """Run `node` until SIGTERM / SIGINT (then stop it cleanly: exit 0) or until `failed` is
    set (then stop what is left: exit 1, or EXIT_CONFIG when `refused` gives the reason the
    node was refused for its configuration). `started` runs once the node is up (to log where
    it listens: a port 0 is only known then)."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    def on_signal(signum: int) -> None:
        if stopping.is_set():
            log.info("%s while stopping: still stopping", signal.Signals(signum).name)
            return
        log.info("%s: stopping %s cleanly", signal.Signals(signum).name, name)
        stopping.set()

    for signum in _SIGNALS:
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        try:
            await node.start()
        except Exception:
            # The node has undone its start; the traceback says why (port, lock, disk, ...).
            log.exception("%s cannot start", name)
            return EXIT_FAILED
        if started is not None:
            started()
        code = await _wait_then_stop(node, name, stopping, failed)
    finally:
        for signum in _SIGNALS:
            loop.remove_signal_handler(signum)
    reason = None if code != EXIT_FAILED or refused is None else refused()
    if reason is None:
        return code
    log.critical("%s: %s %s", name, _REFUSED_MARK, reason)
    return EXIT_CONFIG


async def _wait_then_stop(
    node: Node, name: str, stopping: asyncio.Event, failed: asyncio.Event | None
) -> int:
    waiters = [asyncio.ensure_future(stopping.wait())]
    if failed is not None:
        waiters.append(asyncio.ensure_future(failed.wait()))
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
    # A failure wins over a signal that came with it: the exit code must say the node failed.
    has_failed = failed is not None and failed.is_set()
    if has_failed:
        log.critical("%s failed: stopping", name)
    await node.stop()
    return EXIT_FAILED if has_failed else EXIT_OK


class NodeSettings(Protocol):
    """What `node_main` reads of a node's settings besides serving them."""

    @property
    def secret_file(self) -> Path: ...


def node_main(
    argv: Sequence[str] | None,
    *,
    command: str,
    parser: argparse.ArgumentParser,
    settings_from_args: Callable[[argparse.Namespace], S],
    serve_node: Callable[[S], Coroutine[Any, Any, int]],
) -> int:
    """The whole `main` of a node command: parse (argparse's usage error: exit 2), resolve and
    check the settings (a configuration the node refuses, or no secret: one line per problem,
    exit EXIT_CONFIG), then serve until a signal."""
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    configure_logging()
    try:
        settings = settings_from_args(args)
    except ConfigError as exc:
        for line in str(exc).splitlines():
            print(f"{config_error_prefix(command)}{line}", file=sys.stderr)
        return EXIT_CONFIG
    log.info("cluster secret from %s", settings.secret_file)
    return run(serve_node(settings))


def config_error_prefix(command: str) -> str:
    """What begins each line `ketch <command>` prints for a configuration it refuses."""
    return f"ketch {command}: "


def config_error_lines(lines: Sequence[str], command: str) -> list[str]:
    """The lines of a node's output (its log) that say why it refused its configuration:
    `node_main`'s own, and `serve`'s when the cluster refused the node."""
    prefix = config_error_prefix(command)
    return [line for line in lines if line.startswith(prefix) or _REFUSED_MARK in line]


def run(main: Coroutine[Any, Any, int]) -> int:
    """Run a node's main coroutine on a fresh uvloop event loop; its result is the exit code."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)
