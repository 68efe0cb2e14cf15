"""`ketch broker`: one broker process.

    ketch broker --id N --data-dir D --listen HOST:PORT --controller HOST:PORT
                 [--kafka-listen HOST:PORT] [--config F] [--secret-file F] [--set KEY=VALUE ...]

Configuration (runtime/config.py): Kafka property names from the TOML file `--config`, then the
flags on top — `--id` is broker.id, `--data-dir` log.dirs, `--listen` the native listener's entry
in `listeners`, `--kafka-listen` the kafka listener's entry (the Kafka wire protocol, for Kafka
clients), `--controller` controller.address, and each `--set KEY=VALUE` any property. The two
listener flags replace only their own entry: another entry of a `listeners` value from the file
or `--set` (say, `kafka://0.0.0.0:19092`) stays. Where a listener is reached from outside (a
container, NAT) `--set advertised.listeners=kafka://HOST:PORT` names the address the broker
registers instead of the bound one (node/broker/config.py). Every property is checked before
anything starts (node/config_check.py): a name no node reads (a typo would otherwise leave a
default in force silently; the controller's names are fine, since one file may configure the
controller and the brokers alike, `ketch up --config`), a value of the wrong type or out of
range. Each problem is one line naming the file or flag, the key, the value and why, and the
exit code is EXIT_CONFIG (78).

`--data-dir` is this broker's log directory. In the layout `ketch up` creates it is
`<cluster dir>/broker-<id>/`, next to `<cluster dir>/cluster.secret` (DESIGN.md). The cluster
credential is read from `--secret-file`, else `D/cluster.secret`, else `D/../cluster.secret`;
without one the broker cannot talk to the controller, so that is a configuration error too.
Surrounding whitespace of the secret file is not part of the secret (a file written by `echo` or
`openssl rand -hex` ends in a newline).

The process runs the node on uvloop with the system clock and TCP. SIGTERM or SIGINT starts
the clean stop: controlled shutdown (leadership moves away first), then the node's clean
shutdown, which leaves the clean-shutdown marker in the log dir; the exit code is then 0. A
second signal while stopping is logged and otherwise ignored, so the shutdown is not cut short.
Exit 1 when the node cannot start (port taken, log dir locked or unreadable); EXIT_CONFIG when
the controller refuses the broker as one of another cluster (INCONSISTENT_CLUSTER_ID: its
cluster.id or its log dirs name another cluster, which a restart cannot change). Logs go to
stderr.
The secret lookup, the flags shared with `ketch controller` and the signal-driven run loop are
node/process.py's.

Ownership: `main` owns the event loop and the node; the signal handlers only set an event the
serving coroutine waits on, on the loop thread.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from node.broker.config import (
    KAFKA_LISTENER,
    LISTENERS_KEY,
    NATIVE_LISTENER,
    BrokerConfig,
    format_listeners,
    parse_listeners,
    property_defaults,
)
from node.broker.node import BrokerNode
from node.config_check import Role, raise_problems
from node.process import (
    add_node_arguments,
    node_main,
    overrides,
    parse_address,
    read_secret,
    serve,
)
from runtime.clock import SystemClock
from runtime.config import EffectiveConfig, Setting, Source, resolve
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address

__all__ = [
    "NATIVE_LISTENER",
    "BrokerSettings",
    "build_parser",
    "effective_from_args",
    "main",
    "read_secret",
    "settings_from_args",
    "with_listener_flags",
]

log = logging.getLogger("ketch.broker")


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    config: BrokerConfig
    effective: EffectiveConfig
    secret: bytes
    secret_file: Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ketch broker",
        description="Run one ketch broker.",
        epilog=(
            "examples (beside `ketch up`'s ./data, whose cluster.secret they use):\n"
            "  ketch broker --id 3 --data-dir data/broker-3 --listen 127.0.0.1:9095 \\\n"
            "      --controller 127.0.0.1:9192     # a fourth broker joins the cluster\n"
            "  ketch broker --id 3 --data-dir data/broker-3 --listen 127.0.0.1:9095 \\\n"
            "      --controller 127.0.0.1:9192 --kafka-listen 127.0.0.1:19095  # and Kafka's\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--id", type=int, required=True, help="broker.id")
    parser.add_argument("--data-dir", type=Path, required=True, help="this broker's log dir")
    parser.add_argument("--listen", required=True, metavar="HOST:PORT", help="native listener")
    parser.add_argument("--controller", required=True, metavar="HOST:PORT")
    parser.add_argument(
        "--kafka-listen", metavar="HOST:PORT", help="Kafka-protocol listener (default: none)"
    )
    add_node_arguments(parser)
    return parser


def settings_from_args(args: argparse.Namespace) -> BrokerSettings:
    """The broker's configuration and credential; raises ConfigError for anything unusable
    (ConfigProblems, one per problem, for the properties)."""
    effective = effective_from_args(args)
    raise_problems(effective, [Role.BROKER])
    config = BrokerConfig.from_properties(effective.explicit())  # checked: it builds
    secret_file, secret = read_secret(args.secret_file, args.data_dir)
    return BrokerSettings(config, effective, secret, secret_file)


def effective_from_args(args: argparse.Namespace) -> EffectiveConfig:
    """The properties the broker runs with: the file, `--set`, then the dedicated flags
    (unchecked: node/config_check.py checks them); ConfigError for an unreadable file or a
    malformed flag."""
    listen = parse_address(args.listen)
    kafka_listen = None if args.kafka_listen is None else parse_address(args.kafka_listen)
    controller = parse_address(args.controller)
    flags = overrides(args)
    flags.update(
        {
            "broker.id": args.id,
            "log.dirs": str(args.data_dir),
            "controller.address": str(controller),
        }
    )
    return with_listener_flags(
        resolve(defaults=property_defaults(), file=args.config, flags=flags), listen, kafka_listen
    )


def with_listener_flags(
    effective: EffectiveConfig, listen: Address, kafka_listen: Address | None
) -> EffectiveConfig:
    """`listeners` with the native entry from `--listen` and the kafka entry from
    `--kafka-listen` (when given) over the file's or `--set`'s value, whose other entries stay."""
    if effective.source(LISTENERS_KEY) in (Source.FILE, Source.FLAG):
        try:
            listeners = parse_listeners(str(effective.settings[LISTENERS_KEY].value))
        except ValueError:
            # Left as it is: the check reports it, naming the file or flag it came from.
            return effective
    else:
        listeners = {}  # the default names only the native listener, which --listen sets
    listeners.pop(NATIVE_LISTENER, None)
    merged = {NATIVE_LISTENER: listen, **listeners}  # native first: the order a reader expects
    if kafka_listen is not None:
        merged[KAFKA_LISTENER] = kafka_listen
    settings = dict(effective.settings)
    settings[LISTENERS_KEY] = Setting(LISTENERS_KEY, format_listeners(merged), Source.FLAG)
    return EffectiveConfig(dict(sorted(settings.items())), effective.file)


async def serve_broker(settings: BrokerSettings) -> int:
    """Run the broker until SIGTERM / SIGINT, then stop it cleanly."""
    source = settings.config.connections_source_host
    node = BrokerNode(
        settings.config,
        transport=TcpTransport(source_host=source),
        clock=SystemClock(),
        cluster_secret=settings.secret,
        # TLS where listener.security.protocol.map says so (runtime/net/tls.py).
        listener_transports={
            name: tls.transport(source_host=source)
            for name, tls in settings.config.listener_tls.items()
        },
    )

    def started() -> None:
        # The node logs the Kafka listener's bound address itself, when it has one.
        log.info(
            "broker %d: native listener %s, controller %s, log dirs %s",
            node.broker_id,
            node.address,
            node.controller,
            ",".join(settings.config.log.log_dirs),
        )

    return await serve(
        node,
        name=f"broker {node.broker_id}",
        failed=node.failed,
        started=started,
        refused=lambda: node.refused,
    )


def main(argv: Sequence[str] | None = None) -> int:
    return node_main(
        argv,
        command="broker",
        parser=build_parser(),
        settings_from_args=settings_from_args,
        serve_node=serve_broker,
    )


if __name__ == "__main__":
    sys.exit(main())
