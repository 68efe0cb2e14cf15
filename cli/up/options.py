"""`ketch up`'s command line and the ports it gives each node.

    ketch up [--brokers 3] [--data-dir ./data] [--port 9092] [--kafka-port 19092] [--config F]
             [--tls]

Broker i listens on 127.0.0.1:<port+i> (the native protocol) and on 127.0.0.1:<kafka-port+i>
(the Kafka wire protocol, for Kafka clients: `--kafka-listen`), the controller on
127.0.0.1:<port+100>; `--kafka-port -1` runs the brokers without Kafka listeners. Each node's
Prometheus endpoint is at port+200+i (the controller's at port+300). The nodes' directories and
command lines are node/layout.py's (the same the process test harness runs), with `--config F`
passed on, so one TOML file configures every node.

A cluster of one or two brokers also passes the lowered internal-topic replication of
`node.layout.sized_properties` as flags, except for the keys the config file sets (read here,
so a file that is not valid TOML is a usage error before anything starts).

`--tls` serves every listener (native, kafka, the controller's) over TLS: each node gets
`listener.security.protocol.map` = every listener SSL, its own keystore
(`<data-dir>/tls/<node>.pem`) and the cluster's CA as truststore (`<data-dir>/tls/ca.pem`), as
flags over the config file; the supervisor makes those files at start (cli/up/certificates.py).

Every node's configuration is checked here too (`config_problems`), before anything starts: each
node's command line is read as that node reads it (its parser and `effective_from_args`) and
checked with its role's check (node/config_check.py), the one the node runs at start. So a bad
value or an unknown name in the file is one usage error naming the file, the key, the value and
why, not a node that exits and is restarted.

Functions of the arguments and the config file: nothing here starts a process or touches the
data dir.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from node.layout import CONTROLLER_NODE, Layout, NodeSpec, broker_node, sized_properties
from runtime.config import ConfigError, Value, load_toml
from runtime.net.security_protocol import LISTENER_SECURITY_PROTOCOL_MAP_KEY
from runtime.net.transport import Address

HOST: Final = "127.0.0.1"
CONTROLLER_PORT_OFFSET: Final = 100
KAFKA_OFF: Final = -1  # `--kafka-port -1`: no Kafka-protocol listeners
# `--tls`'s files under the data dir (cli/up/certificates.py makes them).
TLS_DIR_NAME: Final = "tls"
CA_FILE_NAME: Final = "ca.pem"
# Each node's Prometheus endpoint (GET /metrics): broker i at port+200+i, the controller at
# port+300.
METRICS_PORT_OFFSET: Final = 200
# `ketch up --help`'s examples (both parsers: cli/main.py's subcommand and `main`'s own).
UP_EXAMPLES: Final = """examples:
  ketch up                      # 3 brokers at 9092-9094, data in ./data
  ketch up --brokers 1 --data-dir one --port 29092 --kafka-port 39092
  ketch up --kafka-port -1      # without the Kafka-protocol listeners
  ketch up --tls                # every listener over TLS (CA in ./data/tls)
"""
# Every listener a `ketch up --tls` cluster has, each served over TLS.
TLS_PROTOCOL_MAP: Final = "native:SSL,kafka:SSL,controller:SSL"


@dataclass(frozen=True, slots=True)
class UpOptions:
    brokers: int
    data_dir: Path
    port: int
    kafka_port: int  # the base port of the Kafka listeners, or KAFKA_OFF
    config: Path | None
    # The properties the config file sets: they win over what the cluster's size suggests.
    configured: frozenset[str] = frozenset()
    tls: bool = False  # every listener over TLS, with certificates made at start

    def bindings(self) -> list[tuple[int, str]]:
        """Every port the cluster's nodes bind, each with what binds it."""
        controller_metrics = self.port + METRICS_PORT_OFFSET + CONTROLLER_PORT_OFFSET
        used = [
            (self.port + CONTROLLER_PORT_OFFSET, "the controller"),
            (controller_metrics, "the controller's metrics"),
        ]
        for i in range(self.brokers):
            used.append((self.port + i, f"broker {i}"))
            used.append((self.port + METRICS_PORT_OFFSET + i, f"broker {i}'s metrics"))
            if self.kafka_port != KAFKA_OFF:
                used.append((self.kafka_port + i, f"broker {i}'s Kafka listener"))
        return used


def child_specs(options: UpOptions, layout: Layout) -> tuple[NodeSpec, list[NodeSpec]]:
    """The controller's and the brokers' command lines, on `ketch up`'s fixed ports."""
    controller_address = Address(HOST, options.port + CONTROLLER_PORT_OFFSET)
    metrics = options.port + METRICS_PORT_OFFSET
    # A cluster of one or two brokers lowers the internal topics' replication (Kafka's 3 would
    # keep __consumer_offsets from ever being created), unless the config file sets it.
    sized = {
        key: value
        for key, value in sized_properties(options.brokers).items()
        if key not in options.configured
    }
    controller = layout.controller_spec(
        controller_address,
        config=options.config,
        flags={
            **sized,
            "metrics.port": metrics + CONTROLLER_PORT_OFFSET,
            **tls_flags(options, layout, CONTROLLER_NODE),
        },
    )
    brokers = [
        layout.broker_spec(
            broker_id,
            Address(HOST, options.port + broker_id),
            controller_address,
            config=options.config,
            kafka_address=(
                None
                if options.kafka_port == KAFKA_OFF
                else Address(HOST, options.kafka_port + broker_id)
            ),
            flags={
                **sized,
                "metrics.port": metrics + broker_id,
                **tls_flags(options, layout, broker_node(broker_id)),
            },
        )
        for broker_id in range(options.brokers)
    ]
    return controller, brokers


def tls_flags(options: UpOptions, layout: Layout, node: str) -> dict[str, Value]:
    """With `--tls`: the node's TLS properties (module docstring); else none."""
    if not options.tls:
        return {}
    return {
        LISTENER_SECURITY_PROTOCOL_MAP_KEY: TLS_PROTOCOL_MAP,
        "ssl.keystore.location": str(keystore_path(layout, node)),
        "ssl.truststore.location": str(truststore_path(layout)),
    }


def truststore_path(layout: Layout) -> Path:
    return layout.root / TLS_DIR_NAME / CA_FILE_NAME


def keystore_path(layout: Layout, node: str) -> Path:
    return layout.root / TLS_DIR_NAME / f"{node}.pem"


def add_up_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    parser.add_argument("--data-dir", type=Path, default=Path("./data"), help="default ./data")
    parser.add_argument(
        "--port",
        type=int,
        default=9092,
        help="broker i listens on port+i, the controller on port+100",
    )
    parser.add_argument(
        "--kafka-port",
        type=int,
        default=19092,
        help="broker i's Kafka-protocol listener is on kafka-port+i (default 19092; -1: none)",
    )
    parser.add_argument("--config", type=Path, help="TOML file of Kafka properties for every node")
    parser.add_argument(
        "--tls",
        action="store_true",
        help="every listener over TLS, with a new CA and node certificates in DATA_DIR/tls",
    )


def options_from_args(args: argparse.Namespace) -> UpOptions | str:
    """The options, or the usage error to print."""
    if args.brokers < 1:
        return f"--brokers must be at least 1, got {args.brokers}"
    if args.brokers > CONTROLLER_PORT_OFFSET:
        return f"--brokers must be at most {CONTROLLER_PORT_OFFSET} (the controller is on port+100)"
    # The highest port is the controller's metrics endpoint.
    if args.port <= 0 or args.port + METRICS_PORT_OFFSET + CONTROLLER_PORT_OFFSET > 65_535:
        return f"--port out of range: {args.port}"
    if args.kafka_port != KAFKA_OFF and not 0 < args.kafka_port <= 65_536 - args.brokers:
        return f"--kafka-port out of range: {args.kafka_port} (-1 runs without Kafka listeners)"
    config: Path | None = args.config
    configured: frozenset[str] = frozenset()
    if config is not None:
        if not config.is_file():
            return f"config file not found: {config}"
        config = config.resolve()
        try:
            configured = frozenset(load_toml(config))
        except ConfigError as exc:
            return str(exc)
    options = UpOptions(
        args.brokers,
        args.data_dir.resolve(),
        args.port,
        args.kafka_port,
        config,
        configured,
        tls=bool(getattr(args, "tls", False)),
    )
    return _port_overlap(options) or "\n".join(config_problems(options)) or options


def config_problems(options: UpOptions) -> list[str]:
    """What the nodes would refuse in their configuration, one line per problem (a problem of
    the shared file is reported once, not once per broker); empty when every node accepts it."""
    # Imported here: every `ketch` command imports this module, only `ketch up` runs this.
    from node.broker import main as broker_main
    from node.config_check import Role, check
    from node.controller import main as controller_main

    # Checked without --tls's flags: the files they name are made only when the cluster starts
    # (the rest of the TLS settings are ketch up's own, right by construction).
    controller, brokers = child_specs(
        dataclasses.replace(options, tls=False), Layout(options.data_dir)
    )
    found: dict[str, None] = {}  # an ordered set
    for spec in (controller, *brokers):
        is_broker = spec.broker_id is not None
        module = broker_main if is_broker else controller_main
        role = Role.BROKER if is_broker else Role.CONTROLLER
        args = module.build_parser().parse_args(spec.args[1:])
        try:
            problems = [str(p) for p in check(module.effective_from_args(args), [role])]
        except ConfigError as exc:
            problems = [str(exc)]
        found.update(dict.fromkeys(problems))
    return list(found)


def _port_overlap(options: UpOptions) -> str | None:
    """The usage error when two nodes would bind one port (one of them would exit at start).
    With at most 100 brokers only a Kafka listener can overlap another node's port."""
    owners: dict[int, str] = {}
    for port, owner in options.bindings():
        if port in owners:
            return (
                f"--kafka-port {options.kafka_port} overlaps --port {options.port}: "
                f"{owners[port]} and {owner} would both bind port {port}"
            )
        owners[port] = owner
    return None
