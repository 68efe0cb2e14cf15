"""`ketch cluster status` and `ketch config show`.

    ketch cluster status [--json] [--data-dir D] [--bootstrap HOST:PORT]
    ketch config show [--config F] [--set KEY=VALUE ...]

cluster status sends DescribeCluster to the bootstrap broker, which forwards it to the
    controller (node/broker/lifecycle.py): the cluster id, the controller's id and epoch, every
    registered broker's address and state ("running", "shutting_down", "fenced") and the count
    of partitions without a leader. `--json` prints DESIGN.md's shape plus the cluster id
    {"cluster_id", "controller": {"id", "host", "port", "epoch"}, "brokers": [{"id", "host",
    "port", "state"}]}, brokers by id. DescribeCluster does not carry the controller's address
    (clients never talk to it), so host and port come from `<D>/cluster.json` when `--data-dir`
    names a `ketch up` data dir whose file lists the same controller id; otherwise they are null
    (JSON) or "unknown" (table): what is known, and nothing guessed. If the broker answers but
    the controller cannot be reached, that is said and the exit code is 1.
config show prints the effective node configuration: every property a broker or the
    controller reads (node.broker.config.known_properties(), the controller's
    ControllerConfig), with its value and its source (default, file, flag) as TOML that is
    itself a valid config file (runtime/config.py's render). Names that no node reads are
    warned about on stderr with the nearest known name; values a node would refuse, and an
    unreadable file, are usage errors (exit 2), as `ketch broker` treats them.

`register(subparsers, cluster_extensions)` adds both groups; other `cluster` commands
(shutdown-broker, start-broker) join the same `cluster` group through `cluster_extensions`, and
`register_cluster_commands()` adds `status` to a `cluster` group created elsewhere. Each
command owns its event loop and client (cli/common.py); nothing is shared, no locks.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from rich.table import Table

from actors.controller.messages import ControllerConfig
from cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    SubParsers,
    add_bootstrap_flag,
    console,
    error,
    open_client,
    print_json,
    run_argv,
    run_async,
    set_command,
)
from client.errors import RequestTimeoutError
from node.broker.config import BrokerConfig, known_properties, property_defaults
from node.layout import CLUSTER_JSON_NAME
from runtime.config import ConfigError, EffectiveConfig, Value, parse_override, resolve
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import DescribeClusterRequest, DescribeClusterResponse
from wire.topic import uuid_text

STATUS_PROG: Final = "ketch cluster status"
CONFIG_PROG: Final = "ketch config show"

if TYPE_CHECKING:  # argparse's action class cannot be subscripted at run time (Python 3.11)
    ClusterRegistrar = Callable[[SubParsers[argparse.ArgumentParser]], None]

# ControllerConfig's fields are the snake_case of Kafka's names, except this one.


@dataclass(frozen=True, slots=True)
class ControllerStatus:
    id: int
    host: str | None
    port: int | None
    epoch: int


@dataclass(frozen=True, slots=True)
class BrokerStatus:
    id: int
    host: str
    port: int
    state: str
    offline_log_dirs: tuple[str, ...] = ()  # failed log directories' ids, in Kafka's text form


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    cluster_id: str
    controller: ControllerStatus
    brokers: tuple[BrokerStatus, ...]
    offline_partitions: int

    def to_json(self) -> dict[str, object]:
        return {
            "cluster_id": self.cluster_id,
            "controller": dataclasses.asdict(self.controller),
            "brokers": [dataclasses.asdict(b) for b in self.brokers],
        }


# ---------------------------------------------------------------------------------------------
# argparse


def register(
    subparsers: SubParsers[argparse.ArgumentParser],
    cluster_extensions: Sequence[ClusterRegistrar] = (),
) -> None:
    """Add `cluster` (with `status`, then whatever each of `cluster_extensions` adds to the
    same group, e.g. cli.cluster_admin.register_cluster_commands) and `config show`."""
    cluster = subparsers.add_parser("cluster", help="the cluster's controller and brokers")
    cluster_commands = cluster.add_subparsers(
        dest="cluster_command", required=True, metavar="ACTION"
    )
    register_cluster_commands(cluster_commands)
    for extend in cluster_extensions:
        extend(cluster_commands)

    config = subparsers.add_parser("config", help="node configuration")
    config_commands = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    show = config_commands.add_parser(
        "show", help="print the effective configuration with each value's source"
    )
    show.add_argument("--config", type=Path, metavar="F", help="TOML file of Kafka properties")
    show.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a property, over the config file (repeatable)",
    )
    set_command(show, cmd_config_show)


def register_cluster_commands(cluster_subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    status = cluster_subparsers.add_parser("status", help="controller and brokers, with states")
    status.add_argument("--json", action="store_true", help="print JSON")
    status.add_argument(
        "--data-dir",
        type=Path,
        metavar="D",
        help=f"a `ketch up` data dir: the controller's address from {CLUSTER_JSON_NAME}",
    )
    add_bootstrap_flag(status)
    set_command(status, cmd_cluster_status)


def main(argv: Sequence[str]) -> int:
    """`ketch cluster status` / `ketch config show` without cli/main.py."""
    return run_argv("ketch", register, argv)


# ---------------------------------------------------------------------------------------------
# cluster status


def cmd_cluster_status(args: argparse.Namespace) -> int:
    bootstrap: Address = args.bootstrap

    async def work() -> int:
        async with open_client(bootstrap, client_id="ketch-status") as client:
            try:
                response = await client.send_any(DescribeClusterRequest())
            except RequestTimeoutError:
                # The broker answers at once unless it is waiting for the controller.
                raise CliError(
                    f"the broker at {bootstrap} did not answer in time; "
                    "it may be unable to reach the controller"
                ) from None
        if not isinstance(response, DescribeClusterResponse):
            raise TypeError(f"DescribeCluster answered with {type(response).__name__}")
        if response.error_code != ErrorCode.NONE:
            code = ErrorCode.from_code(response.error_code)
            detail = response.error_message or code.name
            raise CliError(f"the broker at {bootstrap} answered, but: {detail} ({code.name})")
        status = cluster_status(response, _controller_address(args.data_dir))
        if args.json:
            print_json(status.to_json())
        else:
            _print_status(status)
        return EXIT_OK

    return run_async(STATUS_PROG, bootstrap, work)


def cluster_status(
    response: DescribeClusterResponse, controller_addresses: Mapping[int, Address]
) -> ClusterStatus:
    """The status from a DescribeCluster answer; the controller's address if it is known."""
    address = controller_addresses.get(response.controller_id)
    return ClusterStatus(
        cluster_id=response.cluster_id,
        controller=ControllerStatus(
            id=response.controller_id,
            host=None if address is None else address.host,
            port=None if address is None else address.port,
            epoch=response.controller_epoch,
        ),
        brokers=tuple(
            BrokerStatus(
                b.broker_id,
                b.host,
                b.port,
                b.state,
                tuple(uuid_text(d) for d in b.offline_log_dirs),
            )
            for b in sorted(response.brokers, key=lambda b: b.broker_id)
        ),
        offline_partitions=response.offline_partitions,
    )


def _controller_address(data_dir: Path | None) -> dict[int, Address]:
    """controller id -> address from `<data_dir>/cluster.json` ({} without --data-dir)."""
    if data_dir is None:
        return {}
    path = data_dir / CLUSTER_JSON_NAME
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        controller = document["controller"]
        return {int(controller["id"]): Address(str(controller["host"]), int(controller["port"]))}
    except FileNotFoundError:
        raise CliError(
            f"no {CLUSTER_JSON_NAME} in {data_dir} (is it a `ketch up` data dir?)"
        ) from None
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CliError(f"{path} is not a cluster file: {exc}") from None


def _print_status(status: ClusterStatus) -> None:
    out = console()
    controller = status.controller
    where = (
        "address unknown (pass --data-dir of a `ketch up` cluster)"
        if controller.host is None
        else f"at {Address(controller.host, controller.port or 0)}"
    )
    out.print(f"Cluster {status.cluster_id}")
    out.print(f"Controller {controller.id} (epoch {controller.epoch}), {where}")
    table = Table("Broker", "Host", "Port", "State", "Offline log dirs")
    for broker in status.brokers:
        state = broker.state if broker.state == "running" else f"[bold]{broker.state}[/bold]"
        offline = ", ".join(broker.offline_log_dirs) or "-"
        table.add_row(str(broker.id), broker.host, str(broker.port), state, offline)
    out.print(table)
    out.print(f"Offline partitions: {status.offline_partitions}")


# ---------------------------------------------------------------------------------------------
# config show


def cmd_config_show(args: argparse.Namespace) -> int:
    try:
        flags: dict[str, Value] = dict(parse_override(text) for text in args.set)
        effective = resolve(defaults=node_property_defaults(), file=args.config, flags=flags)
        check_values(effective)
    except ConfigError as exc:
        error(CONFIG_PROG, str(exc))
        return EXIT_USAGE
    for message in effective.unknown(node_known_properties()):
        error(CONFIG_PROG, f"warning: {message}; no node reads it")
    if effective.file is not None:
        print(f"# effective configuration: defaults < {effective.file} < flags")
    else:
        print("# effective configuration: defaults < flags")
    sys.stdout.write(effective.render())
    return EXIT_OK


def node_property_defaults() -> dict[str, Value]:
    # Imported here: every `ketch` command imports this module, only `config show` needs these.
    from node.controller import main as controller_main

    # Keys both read (the heartbeat and session settings, the clients' timeouts) have the same
    # meaning in both; the broker's default is taken so a broker property shows what it uses.
    return {**controller_main.property_defaults(), **property_defaults()}


def node_known_properties() -> frozenset[str]:
    from node.controller import main as controller_main

    return known_properties() | controller_main.known_properties()


def check_values(effective: EffectiveConfig) -> None:
    """Refuse values the broker or the controller would refuse at start (ConfigError)."""
    explicit = effective.explicit()
    try:
        ControllerConfig.from_properties(explicit)
        # broker.id is required by a broker and given by its --id flag; any id checks the rest.
        BrokerConfig.from_properties({"broker.id": 0, **explicit})
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
