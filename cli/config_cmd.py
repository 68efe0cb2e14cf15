"""`ketch config show`: the settings a running cluster's broker uses, or those a config file gives.

    ketch config show [--broker ID] [--json] [--bootstrap HOST:PORT[,HOST:PORT...]]
    ketch config show --config F [--set KEY=VALUE ...]

Without `--config` or `--set` it asks the running cluster: DescribeConfigs of a broker's BROKER
resource (node/broker/describe_configs.py), sent to that broker (`--broker ID`; by default the
lowest id the cluster's metadata lists). Every property the broker reads is printed with the
value it runs with and Kafka's config source: STATIC_BROKER_CONFIG for what its config file or
flags set, DEFAULT_CONFIG for the rest. `--json` prints {"broker", "configs": [{"name", "value",
"source", "read_only"}]}, configs by name.

With `--config F` and/or `--set KEY=VALUE` it works offline on what a node would read: every
property a broker or the controller reads, with its value and its source (default, file, flag),
as TOML that is itself a valid config file (runtime/config.py's render). The check is the one the
nodes and `ketch up` run before they start (node/config_check.py, for both roles): a name no
node reads, or a value a node would refuse, is printed as the node would print it and exits 2,
without a listing.

Exit codes as every client command's (cli/common.py): 0, 1 when the cluster cannot be reached or
refuses, 2 for bad arguments or a configuration with problems. Each run owns its event loop and
client; nothing is shared.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

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
from runtime.config import ConfigError, Value, parse_override, resolve
from wire.errors import ErrorCode
from wire.messages import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
)
from wire.messages.admin import RESOURCE_BROKER

if TYPE_CHECKING:
    from client.client import Client

PROG: Final = "ketch config show"

# Kafka's DescribeConfigsResponse.ConfigSource, by id.
CONFIG_SOURCE_NAMES: Final[Mapping[int, str]] = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}


@dataclass(frozen=True, slots=True)
class BrokerSetting:
    name: str
    value: str | None
    source: str
    read_only: bool


@dataclass(frozen=True, slots=True)
class BrokerSettings:
    """One broker's answer to DescribeConfigs of its BROKER resource."""

    broker_id: int
    address: str
    settings: tuple[BrokerSetting, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "broker": self.broker_id,
            "configs": [
                {"name": s.name, "value": s.value, "source": s.source, "read_only": s.read_only}
                for s in self.settings
            ],
        }


def register(subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    """Add `config show`."""
    config = subparsers.add_parser(
        "config",
        help="node configuration",
        epilog=(
            "examples:\n"
            "  ketch config show\n"
            "  ketch config show --set min.insync.replicas=2 > ketch.toml\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    config_commands = config.add_subparsers(dest="config_command", required=True, metavar="ACTION")
    show = config_commands.add_parser(
        "show",
        help="a running broker's settings, or a config file's, with where each came from",
        description=(
            "Without --config/--set: a running broker's settings (DescribeConfigs).\n"
            "With them: what a node would read from the file and flags, checked as a node\n"
            "checks it before it starts."
        ),
        epilog=(
            "examples:\n"
            "  ketch config show                  # a running broker's settings\n"
            "  ketch config show --broker 1 --json\n"
            "  ketch config show --set min.insync.replicas=2 > ketch.toml  # a config file\n"
            "  ketch config show --config ketch.toml   # checked as a node checks it\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument("--config", type=Path, metavar="F", help="TOML file of Kafka properties")
    show.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a property, over the config file (repeatable)",
    )
    show.add_argument(
        "--broker", type=int, metavar="ID", help="the broker to ask (default: the lowest id)"
    )
    show.add_argument("--json", action="store_true", help="print JSON (a running cluster only)")
    add_bootstrap_flag(show)
    set_command(show, cmd_config_show)


def main(argv: Sequence[str]) -> int:
    """`ketch config show` without cli/main.py."""
    return run_argv("ketch", register, argv)


def cmd_config_show(args: argparse.Namespace) -> int:
    if args.config is not None or args.set:
        if args.broker is not None or args.json:
            error(PROG, "--broker and --json ask a running cluster; --config and --set do not")
            return EXIT_USAGE
        return show_offline(args.config, args.set)
    return show_running(args)


# ---------------------------------------------------------------------------------------------
# A running cluster


def show_running(args: argparse.Namespace) -> int:
    async def work() -> int:
        async with open_client(args.bootstrap, client_id="ketch-config") as client:
            found = await describe_broker(client, args.broker)
        if args.json:
            print_json(found.to_json())
        else:
            _print_settings(found)
        return EXIT_OK

    return run_async(PROG, args.bootstrap, work)


async def describe_broker(client: Client, broker_id: int | None) -> BrokerSettings:
    """DescribeConfigs of broker `broker_id`'s BROKER resource (None: the lowest id)."""
    view = await client.refresh_metadata()
    if not view.brokers:
        raise CliError("the cluster lists no brokers yet")
    if broker_id is None:
        broker_id = min(view.brokers)
    elif broker_id not in view.brokers:
        listed = ", ".join(str(i) for i in sorted(view.brokers))
        raise CliError(f"no broker {broker_id} in the cluster's metadata (brokers: {listed})")
    request = DescribeConfigsRequest(
        resources=[
            DescribeConfigsResource(resource_type=RESOURCE_BROKER, resource_name=str(broker_id))
        ]
    )
    response = await client.send(broker_id, request)
    if not isinstance(response, DescribeConfigsResponse) or len(response.results) != 1:
        raise CliError(f"broker {broker_id} answered DescribeConfigs with {response!r}")
    result = response.results[0]
    if result.error_code != ErrorCode.NONE:
        code = ErrorCode.from_code(result.error_code)
        detail = result.error_message or code.name
        raise CliError(f"broker {broker_id} refused DescribeConfigs: {detail} ({code.name})")
    settings = tuple(
        BrokerSetting(
            c.name,
            c.value,
            CONFIG_SOURCE_NAMES.get(c.config_source, str(c.config_source)),
            c.read_only,
        )
        for c in sorted(result.configs, key=lambda c: c.name)
    )
    return BrokerSettings(broker_id, str(view.brokers[broker_id].address), settings)


def _print_settings(found: BrokerSettings) -> None:
    from rich.table import Table

    out = console()
    out.print(f"Broker {found.broker_id} at {found.address}: {len(found.settings)} settings")
    table = Table("Property", "Value", "Source", box=None, pad_edge=False)
    for setting in found.settings:
        value = "" if setting.value is None else setting.value
        table.add_row(setting.name, value, setting.source)
    out.print(table)


# ---------------------------------------------------------------------------------------------
# A config file, offline


def show_offline(config: Path | None, overrides: Sequence[str]) -> int:
    # Imported here: only this form needs the nodes' configuration classes.
    from node.config_check import Role, check

    try:
        flags: dict[str, Value] = dict(parse_override(text) for text in overrides)
        effective = resolve(defaults=node_property_defaults(), file=config, flags=flags)
    except ConfigError as exc:
        error(PROG, str(exc))
        return EXIT_USAGE
    problems = check(effective, [Role.BROKER, Role.CONTROLLER])
    for problem in problems:
        error(PROG, str(problem))
    if problems:
        return EXIT_USAGE
    if effective.file is not None:
        print(f"# effective configuration: defaults < {effective.file} < flags")
    else:
        print("# effective configuration: defaults < flags")
    sys.stdout.write(effective.render())
    return EXIT_OK


def node_property_defaults() -> dict[str, Value]:
    """Every property a broker or the controller reads, with its default."""
    from node.broker.config import property_defaults as broker_defaults
    from node.controller.config import property_defaults as controller_defaults

    # Keys both read (the heartbeat and session settings, the clients' timeouts) have the same
    # meaning in both; the broker's default is taken so a broker property shows what it uses.
    return {**controller_defaults(), **broker_defaults()}
