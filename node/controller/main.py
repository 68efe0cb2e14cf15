"""`ketch controller`: the controller process.

    ketch controller --data-dir D --listen HOST:PORT
                     [--config F] [--secret-file F] [--set KEY=VALUE ...]

`--data-dir` is the controller's metadata directory (its durable metadata log and snapshots,
locked while the process runs); in the layout `ketch up` creates it is `<cluster dir>/controller/`,
next to `<cluster dir>/cluster.secret`. `--listen` is where brokers register, heartbeat and
forward their clients' topic requests.

Configuration (runtime/config.py): Kafka property names from the TOML file, then `--set` on top,
read by the controller's components (node/controller/config.py lists them). Every property is
checked before anything starts (node/config_check.py): a name no node reads (a broker's name is
fine: one file may configure the controller and the brokers alike, `ketch up --config`), a value
of the wrong type or out of range; one line per problem naming the file or flag, the key, the
value and why.

Exit codes: 0 after SIGTERM / SIGINT and a clean stop; 1 when the node cannot start (port taken,
metadata directory locked by another controller) or when its metadata log fails while running
(ControllerNode.failed: the process exits so that a restart replays what is really on disk);
2 for a command line argparse refuses; EXIT_CONFIG (78) for a configuration it refuses or a
missing cluster secret (node/process.py has the secret lookup and the run loop, shared with
`ketch broker`).

Ownership: `main` owns the event loop and the node; see node/process.py for the signals.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from actors.controller.channel import ChannelConfig
from actors.controller.messages import ControllerConfig
from actors.metadata_cache import DEFAULT_LISTENER
from node.config_check import Role, raise_problems
from node.controller.config import (
    channel_config,
    controller_config_defaults,
    controller_configs,
    known_properties,
    property_defaults,
)
from node.controller.node import ControllerNode
from node.process import (
    add_node_arguments,
    node_main,
    overrides,
    parse_address,
    read_secret,
    serve,
)
from runtime.clock import SystemClock
from runtime.config import EffectiveConfig, resolve
from runtime.net.server import ServerConfig
from runtime.net.tls import CONTROLLER_LISTENER, ListenerTls
from runtime.net.transport import Address

# Re-exported: where the controller's properties were read before node/controller/config.py.
__all__ = [
    "ControllerSettings",
    "build_parser",
    "channel_config",
    "controller_config_defaults",
    "effective_from_args",
    "known_properties",
    "main",
    "property_defaults",
    "settings_from_args",
]

log = logging.getLogger("ketch.controller")


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    config: ControllerConfig
    server: ServerConfig
    channels: ChannelConfig
    metrics_port: int
    listen: Address
    metadata_dir: Path
    effective: EffectiveConfig
    secret: bytes
    secret_file: Path
    source_host: str | None = None  # connections.source.host (None: the kernel chooses)
    # TLS per listener name (runtime/net/tls.py); a name left out is plaintext.
    listener_tls: Mapping[str, ListenerTls] = field(default_factory=dict)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ketch controller",
        description="Run the ketch controller.",
        epilog=(
            "examples (`ketch up`'s controller by hand, once `ketch up` is stopped):\n"
            "  ketch controller --data-dir data/controller --listen 127.0.0.1:9192\n"
            "  ketch controller --data-dir data/controller --listen 127.0.0.1:9192 \\\n"
            "      --set metrics.port=9392          # with its Prometheus endpoint\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--data-dir", type=Path, required=True, help="the controller's metadata directory"
    )
    parser.add_argument(
        "--listen", required=True, metavar="HOST:PORT", help="where brokers reach the controller"
    )
    add_node_arguments(parser)
    return parser


def settings_from_args(args: argparse.Namespace) -> ControllerSettings:
    """The controller's configuration and credential; raises ConfigError for anything unusable
    (ConfigProblems, one per problem, for the properties)."""
    listen = parse_address(args.listen)
    effective = effective_from_args(args)
    raise_problems(effective, [Role.CONTROLLER])
    configs = controller_configs(effective.explicit())  # checked: it builds
    secret_file, secret = read_secret(args.secret_file, args.data_dir)
    return ControllerSettings(
        config=configs.config,
        server=configs.server,
        channels=configs.channels,
        metrics_port=configs.metrics_port,
        listen=listen,
        metadata_dir=args.data_dir,
        effective=effective,
        secret=secret,
        secret_file=secret_file,
        source_host=configs.source_host,
        listener_tls=configs.listener_tls,
    )


def effective_from_args(args: argparse.Namespace) -> EffectiveConfig:
    """The properties the controller runs with, the file's under `--set`'s (unchecked:
    node/config_check.py checks them); ConfigError for an unreadable file or a malformed flag."""
    return resolve(defaults=property_defaults(), file=args.config, flags=overrides(args))


async def serve_controller(settings: ControllerSettings) -> int:
    """Run the controller until a signal (exit 0) or a metadata log failure (exit 1)."""
    plain = ListenerTls(None, None)
    served = settings.listener_tls.get(CONTROLLER_LISTENER, plain)
    brokers = settings.listener_tls.get(DEFAULT_LISTENER, plain)
    node = ControllerNode(
        settings.config,
        settings.metadata_dir,
        transport=served.transport(source_host=settings.source_host),
        broker_transport=brokers.transport(source_host=settings.source_host),
        clock=SystemClock(),
        cluster_secret=settings.secret,
        listen=settings.listen,
        server_config=settings.server,
        channel_config=settings.channels,
        metrics_port=settings.metrics_port,
    )
    changed = {
        field.name: getattr(settings.config, field.name)
        for field in dataclasses.fields(settings.config)
        if getattr(settings.config, field.name) != field.default
    }

    def started() -> None:
        log.info(
            "controller %d: listening at %s, metadata in %s, settings %s",
            settings.config.controller_id,
            node.address,
            settings.metadata_dir,
            changed or "all default",
        )

    name = f"controller {settings.config.controller_id}"
    return await serve(node, name=name, failed=node.failed, started=started)


def main(argv: Sequence[str] | None = None) -> int:
    return node_main(
        argv,
        command="controller",
        parser=build_parser(),
        settings_from_args=settings_from_args,
        serve_node=serve_controller,
    )


if __name__ == "__main__":
    sys.exit(main())
