"""Where a client command finds the cluster: its bootstrap servers, as Kafka's
`bootstrap.servers` (DESIGN.md, "Command line contract").

In order, the first that is set wins:

1. `--bootstrap HOST:PORT[,HOST:PORT...]` (parsed by `bootstrap_arg`; a bad address is
   argparse's usage error, exit 2, naming the address);
2. the `KETCH_BOOTSTRAP` environment variable, in the same form;
3. the brokers of the running `ketch up` cluster, from `<data-dir>/cluster.json`
   (node/layout.py documents the file): the command's `--data-dir` when it has one, else
   `./data`, `ketch up`'s default. Brokers that are up (a pid) come first;
4. `127.0.0.1:9092`, broker 0 of a default `ketch up`.

The client tries every address of the list (client/client.py), so one broker down (killed, or
restarting under `ketch up`) does not stop a command. Steps 2 to 4 depend on flags parsed
after `--bootstrap` (`--data-dir`), so they run once parsing is done (`resolve_bootstrap`,
called by cli/common.py's `set_command` wrapper), not as argparse's default.

Pure functions of their arguments, the environment and one file read: no state is kept.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final, TypeAlias

from runtime.net.transport import Address

BootstrapServers: TypeAlias = Sequence[Address]
"""The addresses a command starts from (Kafka's bootstrap.servers), in the order to try."""

BOOTSTRAP_ENV: Final = "KETCH_BOOTSTRAP"
DEFAULT_DATA_DIR: Final = Path("data")  # `ketch up`'s default --data-dir, relative to the cwd
DEFAULT_BOOTSTRAP: Final = "127.0.0.1:9092"
BOOTSTRAP_METAVAR: Final = "HOST:PORT[,HOST:PORT...]"


def parse_bootstrap(text: str) -> tuple[Address, ...]:
    """`HOST:PORT[,HOST:PORT...]` as addresses, duplicates dropped (first kept); raises
    ValueError naming the bad address."""
    if not text.strip():
        raise ValueError(f"no address given (expected {BOOTSTRAP_METAVAR})")
    addresses: dict[Address, None] = {}  # a dict as an ordered set
    for part in text.split(","):
        if not part.strip():
            raise ValueError(f"empty address in {text!r} (expected {BOOTSTRAP_METAVAR})")
        try:
            addresses[Address.parse(part)] = None
        except ValueError:
            raise ValueError(f"bad address {part.strip()!r}: expected HOST:PORT") from None
    return tuple(addresses)


def bootstrap_arg(text: str) -> tuple[Address, ...]:
    """argparse `type=` for `--bootstrap`: a bad list is a usage error (exit 2)."""
    try:
        return parse_bootstrap(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def format_bootstrap(servers: BootstrapServers) -> str:
    """The list as a user typed it: `A:1,B:2`."""
    return ",".join(str(a) for a in servers)


def cluster_json_brokers(data_dir: Path) -> tuple[Address, ...] | None:
    """The native listeners of the brokers in `<data_dir>/cluster.json`, brokers that are up
    first; None when there is no such file (no `ketch up` cluster running there). Raises
    ValueError for a file that cannot be read or is not a cluster file."""
    # Imported here: only a command without --bootstrap or KETCH_BOOTSTRAP reads the file, and
    # node/ costs a simple command tens of milliseconds of start-up.
    from node.layout import Layout

    path = Layout(data_dir).cluster_json
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    up: list[Address] = []
    down: list[Address] = []
    try:
        for broker in document["brokers"]:
            address = Address(str(broker["host"]), int(broker["port"]))
            (up if broker.get("pid") is not None else down).append(address)
    except KeyError as exc:
        raise ValueError(f"{path} lacks the {exc.args[0]!r} field `ketch up` writes") from None
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"{path} is not laid out as `ketch up` writes it") from None
    if not up and not down:
        raise ValueError(f"{path} lists no brokers")
    return tuple(dict.fromkeys([*up, *down]))


def default_bootstrap(
    *, data_dir: Path | None = None, environ: Mapping[str, str] | None = None
) -> tuple[Address, ...]:
    """Steps 2 to 4 of the module docstring; raises ValueError naming the variable or the file
    when one is set but unusable (a typo must not silently reach another cluster)."""
    env = os.environ if environ is None else environ
    from_env = env.get(BOOTSTRAP_ENV, "")
    if from_env.strip():
        try:
            return parse_bootstrap(from_env)
        except ValueError as exc:
            raise ValueError(f"{BOOTSTRAP_ENV}={from_env!r}: {exc}") from None
    brokers = cluster_json_brokers(DEFAULT_DATA_DIR if data_dir is None else data_dir)
    if brokers is not None:
        return brokers
    return parse_bootstrap(DEFAULT_BOOTSTRAP)


def resolve_bootstrap(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Fill in `args.bootstrap` when `--bootstrap` was not given (it parses to None), from the
    command's `--data-dir` if it has one; an unusable default is `parser`'s usage error."""
    if getattr(args, "bootstrap", ()) is not None:
        return  # given on the command line, or a command without the flag
    data_dir = getattr(args, "data_dir", None)
    try:
        args.bootstrap = default_bootstrap(
            data_dir=Path(data_dir) if isinstance(data_dir, str | Path) else None
        )
    except ValueError as exc:
        parser.error(f"{exc}; pass --bootstrap {BOOTSTRAP_METAVAR}")  # exits 2
