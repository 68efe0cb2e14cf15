"""`ketch broker`: one broker process.

    ketch broker --id N --data-dir D --listen HOST:PORT --controller HOST:PORT
                 [--config F] [--secret-file F] [--set KEY=VALUE ...]

Configuration (runtime/config.py): Kafka property names from the TOML file `--config`, then the
flags on top — `--id` is broker.id, `--data-dir` log.dirs, `--listen` the native listener,
`--controller` controller.address, and each `--set KEY=VALUE` any property. A property name the
broker does not read is logged as a warning with the nearest known name (a typo would otherwise
leave a default in force silently); it is not an error, because one file may configure the
controller and the brokers alike (`ketch up --config`), as Kafka warns and goes on.

`--data-dir` is this broker's log directory. In the layout `ketch up` creates it is
`<cluster dir>/broker-<id>/`, next to `<cluster dir>/cluster.secret` (DESIGN.md). The cluster
credential is read from `--secret-file`, else `D/cluster.secret`, else `D/../cluster.secret`;
without one the broker cannot talk to the controller, so that is a usage error (exit 2), as is
a bad config. Surrounding whitespace of the secret file is not part of the secret (a file
written by `echo` or `openssl rand -hex` ends in a newline).

The process runs the node on uvloop with the system clock and TCP. SIGTERM or SIGINT starts
the clean stop: controlled shutdown (leadership moves away first), then the node's clean
shutdown, which leaves the clean-shutdown marker in the log dir; the exit code is then 0. A
second signal while stopping is logged and otherwise ignored, so the shutdown is not cut short.
Exit 1 when the node cannot start (port taken, log dir locked or unreadable). Logs go to stderr.

Ownership: `main` owns the event loop and the node; the signal handlers only set an event the
serving coroutine waits on, on the loop thread.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from runtime.broker_config import BrokerConfig, known_properties, property_defaults
from runtime.clock import SystemClock
from runtime.config import ConfigError, EffectiveConfig, Value, parse_override, resolve
from runtime.net import auth
from runtime.net.tcp import TcpTransport, new_event_loop
from runtime.net.transport import Address
from runtime.node import BrokerNode

log = logging.getLogger("ketch.broker")

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
SECRET_FILE_NAME: Final = "cluster.secret"
NATIVE_LISTENER: Final = "native"


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    config: BrokerConfig
    effective: EffectiveConfig
    secret: bytes
    secret_file: Path
    unknown: tuple[str, ...] = ()  # one message per property name the broker does not read


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ketch broker", description="Run one ketch broker.")
    parser.add_argument("--id", type=int, required=True, help="broker.id")
    parser.add_argument("--data-dir", type=Path, required=True, help="this broker's log dir")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT", help="native listener")
    parser.add_argument("--controller", required=True, metavar="HOST:PORT")
    parser.add_argument("--config", type=Path, help="TOML file of Kafka properties")
    parser.add_argument("--secret-file", type=Path, help="the cluster credential")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a property, over the config file (repeatable)",
    )
    return parser


def settings_from_args(args: argparse.Namespace) -> BrokerSettings:
    """The broker's configuration and credential; raises ConfigError for anything unusable."""
    try:
        listen = Address.parse(args.listen)
        controller = Address.parse(args.controller)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    flags: dict[str, Value] = dict(parse_override(text) for text in args.set)
    flags.update(
        {
            "broker.id": args.id,
            "log.dirs": str(args.data_dir),
            "listeners": f"{NATIVE_LISTENER}://{listen}",
            "controller.address": str(controller),
        }
    )
    effective = resolve(defaults=property_defaults(), file=args.config, flags=flags)
    unknown = tuple(effective.unknown(known_properties()))
    try:
        config = BrokerConfig.from_properties(effective.explicit())
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    secret_file, secret = read_secret(args.secret_file, args.data_dir)
    return BrokerSettings(config, effective, secret, secret_file, unknown)


def read_secret(secret_file: Path | None, data_dir: Path) -> tuple[Path, bytes]:
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


async def serve(settings: BrokerSettings) -> int:
    """Run the node until SIGTERM / SIGINT, then stop it cleanly."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()

    def on_signal(signum: int) -> None:
        if stopping.is_set():
            log.info("%s while stopping: still stopping", signal.Signals(signum).name)
            return
        log.info("%s: controlled shutdown, then clean stop", signal.Signals(signum).name)
        stopping.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        node = BrokerNode(
            settings.config,
            transport=TcpTransport(),
            clock=SystemClock(),
            cluster_secret=settings.secret,
        )
        try:
            await node.start()
        except Exception:
            # Port taken, log dir locked or unreadable, ...: the node has undone its start.
            log.exception("broker %d cannot start", settings.config.broker_id)
            return EXIT_FAILED
        log.info(
            "broker %d: native listener %s, controller %s, log dirs %s",
            node.broker_id,
            node.address,
            node.controller,
            ",".join(settings.config.log.log_dirs),
        )
        await stopping.wait()
        await node.stop()
        return EXIT_OK
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse has printed the usage error (or --help)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = settings_from_args(args)
    except ConfigError as exc:
        print(f"ketch broker: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for message in settings.unknown:
        log.warning("%s: ignored", message)
    log.info("cluster secret from %s", settings.secret_file)
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(serve(settings))


if __name__ == "__main__":
    sys.exit(main())
