"""`ketch cluster status`, and the `config` group (its `show` is cli/config_cmd.py's).

    ketch cluster status [--json] [--data-dir D] [--bootstrap HOST:PORT]

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
config show: cli/config_cmd.py (a running broker's settings, or a config file's, checked).

`register(subparsers)` adds both groups; `register_cluster_group` builds the `cluster` group
(`ketch` runs it for `ketch cluster ...`), with `status` and the other modules' `cluster`
commands (shutdown-broker, start-broker, health); `register_cluster_commands()` adds `status`
to a `cluster` group created elsewhere. Each
command owns its event loop and client (cli/common.py); nothing is shared, no locks.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from rich.table import Table

from cli import config_cmd
from cli.common import (
    EXIT_OK,
    BootstrapServers,
    CliError,
    SubParsers,
    add_bootstrap_flag,
    console,
    format_bootstrap,
    open_client,
    print_json,
    run_argv,
    run_async,
    set_command,
)
from client.errors import RequestTimeoutError
from node.layout import CLUSTER_JSON_NAME
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import DescribeClusterRequest, DescribeClusterResponse
from wire.topic import uuid_text

STATUS_PROG: Final = "ketch cluster status"

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
    cluster_extensions: Sequence[ClusterRegistrar] | None = None,
) -> None:
    """Add `cluster` (`register_cluster_group`) and `config show`."""
    register_cluster_group(subparsers, cluster_extensions)
    config_cmd.register(subparsers)


def register_cluster_group(
    subparsers: SubParsers[argparse.ArgumentParser],
    extensions: Sequence[ClusterRegistrar] | None = None,
) -> None:
    """Add `cluster` with `status`, then what each of `extensions` adds to the same group:
    by default cli/cluster_admin.py's shutdown-broker/start-broker and cli/health.py's health
    (imported here, when the group is built, so `ketch cluster` alone loads them)."""
    if extensions is None:
        from cli import cluster_admin, health

        extensions = (cluster_admin.register_cluster_commands, health.register_cluster_commands)
    cluster = subparsers.add_parser(
        "cluster",
        help="the cluster's controller and brokers",
        epilog=(
            "examples:\n"
            "  ketch cluster status --data-dir data\n"
            "  ketch cluster health\n"
            "  ketch cluster shutdown-broker 1\n"
            "  ketch cluster start-broker 1\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cluster_commands = cluster.add_subparsers(
        dest="cluster_command", required=True, metavar="ACTION"
    )
    register_cluster_commands(cluster_commands)
    for extend in extensions:
        extend(cluster_commands)


def register_cluster_commands(cluster_subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    status = cluster_subparsers.add_parser(
        "status",
        help="controller and brokers, with states",
        epilog=(
            "examples:\n"
            "  ketch cluster status --data-dir data  # with the controller's address\n"
            "  ketch cluster status --json\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
    bootstrap: BootstrapServers = args.bootstrap

    async def work() -> int:
        async with open_client(bootstrap, client_id="ketch-status") as client:
            try:
                response = await client.send_any(DescribeClusterRequest())
            except RequestTimeoutError:
                # The broker answers at once unless it is waiting for the controller.
                raise CliError(
                    f"the cluster at {format_bootstrap(bootstrap)} did not answer in time; "
                    "it may be unable to reach the controller"
                ) from None
        if not isinstance(response, DescribeClusterResponse):
            raise TypeError(f"DescribeCluster answered with {type(response).__name__}")
        if response.error_code != ErrorCode.NONE:
            code = ErrorCode.from_code(response.error_code)
            detail = response.error_message or code.name
            where = format_bootstrap(bootstrap)
            raise CliError(f"the cluster at {where} answered, but: {detail} ({code.name})")
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
