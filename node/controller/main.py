"""`ketch controller`: the controller process.

    ketch controller --data-dir D --listen HOST:PORT
                     [--config F] [--secret-file F] [--set KEY=VALUE ...]

`--data-dir` is the controller's metadata directory (its durable metadata log and snapshots,
locked while the process runs); in the layout `ketch up` creates it is `<cluster dir>/controller/`,
next to `<cluster dir>/cluster.secret`. `--listen` is where brokers register, heartbeat and
forward their clients' topic requests.

Configuration (runtime/config.py): Kafka property names from the TOML file, then `--set` on top.
The controller reads node.id, cluster.id, broker.session.timeout.ms, broker.heartbeat.interval.ms,
unclean.leader.election.enable, auto.leader.rebalance.enable, leader.imbalance.*, num.partitions,
default.replication.factor, metadata.snapshot.records (actors/controller/messages.py); the
listener's socket.request.max.bytes, max.connections, connections.max.idle.ms,
queued.max.requests, server.shutdown.timeout.ms; its channels' request.timeout.ms,
socket.connection.setup.timeout.ms, retry.backoff(.max).ms, reconnect.backoff(.max).ms;
connections.source.host (the IP address its connections to the brokers bind to; unset, the
kernel chooses: runtime/net/tcp.py); and metrics.port. Other names are logged as warnings with
the nearest known name, not refused: one file may configure the controller and the brokers
alike (`ketch up --config`).

Exit codes: 0 after SIGTERM / SIGINT and a clean stop; 1 when the node cannot start (port taken,
metadata directory locked by another controller) or when its metadata log fails while running
(ControllerNode.failed: the process exits so that a restart replays what is really on disk);
2 for a usage error, a bad config or a missing cluster secret (node/process.py has the
secret lookup and the run loop, shared with `ketch broker`).

Ownership: `main` owns the event loop and the node; see node/process.py for the signals.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from actors.controller.channel import ChannelConfig
from actors.controller.messages import ControllerConfig
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
from runtime.config import ConfigError, EffectiveConfig, Value, resolve
from runtime.metrics.registry import METRICS_DISABLED, METRICS_PORT_KEY, metrics_port
from runtime.net.server import ServerConfig
from runtime.net.tcp import SOURCE_HOST_KEY, TcpTransport, source_host
from runtime.net.transport import Address
from runtime.properties import (
    config_from_properties,
    defaults_by_property,
    int_property,
    property_names,
)

log = logging.getLogger("ketch.controller")

_KEYS_WITHOUT_DEFAULT: Final = frozenset({"cluster.id", SOURCE_HOST_KEY})


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
    unknown: tuple[str, ...] = ()  # one message per property name the controller does not read
    source_host: str | None = None  # connections.source.host (None: the kernel chooses)


def controller_config_defaults() -> dict[str, Value]:
    """ControllerConfig's properties with their defaults (cluster.id has none)."""
    return _values(defaults_by_property(ControllerConfig()))


def property_defaults() -> dict[str, Value]:
    """Every property the controller process reads, with the default its component applies."""
    defaults = controller_config_defaults()
    defaults.update(_values(defaults_by_property(ChannelConfig())))
    defaults.update(_values(defaults_by_property(ServerConfig())))
    defaults[METRICS_PORT_KEY] = METRICS_DISABLED
    return defaults


def _values(defaults: Mapping[str, object]) -> dict[str, Value]:
    """The defaults a config listing can show: None (no default) is left out."""
    shown: dict[str, Value] = {}
    for key, value in defaults.items():
        if value is None:
            continue
        assert isinstance(value, bool | int | float | str), (key, value)
        shown[key] = value
    return shown


def known_properties() -> frozenset[str]:
    return frozenset(property_defaults()) | _KEYS_WITHOUT_DEFAULT


def channel_config(properties: Mapping[str, object]) -> ChannelConfig:
    """The channels' settings; a timeout or backoff below 1 ms would spin the sender."""
    for (key,) in property_names(ChannelConfig).values():
        if int_property(properties, key, 1) < 1:
            raise ValueError(f"{key} must be >= 1: {properties[key]!r}")
    return config_from_properties(ChannelConfig, properties)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ketch controller", description="Run the ketch controller."
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
    """The controller's configuration and credential; raises ConfigError for anything unusable."""
    listen = parse_address(args.listen)
    effective = resolve(defaults=property_defaults(), file=args.config, flags=overrides(args))
    unknown = tuple(effective.unknown(known_properties()))
    properties = effective.explicit()
    try:
        config = ControllerConfig.from_properties(properties)
        server = ServerConfig.from_properties(properties)
        channels = channel_config(properties)
        port = metrics_port(properties)
        source = source_host(properties)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    secret_file, secret = read_secret(args.secret_file, args.data_dir)
    return ControllerSettings(
        config=config,
        server=server,
        channels=channels,
        metrics_port=port,
        listen=listen,
        metadata_dir=args.data_dir,
        effective=effective,
        secret=secret,
        secret_file=secret_file,
        unknown=unknown,
        source_host=source,
    )


async def serve_controller(settings: ControllerSettings) -> int:
    """Run the controller until a signal (exit 0) or a metadata log failure (exit 1)."""
    node = ControllerNode(
        settings.config,
        settings.metadata_dir,
        transport=TcpTransport(source_host=settings.source_host),
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
