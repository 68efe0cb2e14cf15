"""The on-disk layout of a local cluster and its nodes' command lines (DESIGN.md, "Command line
contract"): what `ketch up` (cli/up/) and the process harness (testkit/processes.py) both lay out
and run, so the two cannot drift apart.

    <root>/cluster.secret     the cluster credential: created once, mode 600, never rewritten
    <root>/controller/        the controller's metadata log
    <root>/broker-<id>/       broker <id>'s log dir
    <root>/logs/<node>.log    each child's stdout and stderr, appended across restarts
    <root>/cluster.json       the running cluster (`ketch up` writes it once every broker has
                              registered, rewrites it when a pid changes and removes it when it
                              ends); a broker's "kafka_port" is its Kafka-protocol listener's
                              port, null when the brokers run without them

`ketch up` adds its control socket (`<root>/up.sock`, cli/up/control.py); the harness adds the
TOML config file every node reads.

Each node is `python -m cli.main controller|broker ...` (`NodeSpec.argv`): the secret from
`--secret-file`, the shared TOML file from `--config`, per-node properties as `--set K=V`.
The node processes find the secret beside their own directory when `--secret-file` is absent
(node/process.py); the command lines name it anyway, so a node never depends on that fallback.

Ownership: only the process that lays out the cluster (the supervisor, or the harness on its
event loop) writes these files; the children only read the secret, so nothing here needs a lock.
cluster.json is replaced atomically (write to a temporary name, then rename) so a reader never
sees half a document. Nothing here imports cli/ or testkit/: both import this.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from node.process import SECRET_FILE_NAME
from runtime.config import Value
from runtime.net.transport import Address

CLUSTER_JSON_NAME: Final = "cluster.json"
CONTROLLER_NODE: Final = "controller"
# The module each child runs with `python -m`; its `controller` and `broker` subcommands are
# DESIGN.md's `ketch controller` / `ketch broker`. A name, not an import: node/ sits below cli/.
CHILD_MODULE: Final = "cli.main"
# 32 random bytes, stored hex-encoded: the nodes strip surrounding whitespace from the file, so
# raw bytes that happen to begin or end with a whitespace byte would silently shorten the key.
_SECRET_RANDOM_BYTES: Final = 32


def broker_node(broker_id: int) -> str:
    return f"broker-{broker_id}"


def sized_properties(brokers: int) -> dict[str, Value]:
    """The internal topics' replication settings a cluster of `brokers` brokers needs: Kafka's
    defaults (3 replicas, a transaction log min ISR of 2) refuse to create `__consumer_offsets`
    and `__transaction_state` on fewer brokers, so a smaller local cluster lowers them to its
    size, as Kafka's single-node example configuration does. Empty from three brokers up."""
    if brokers >= 3:
        return {}
    return {
        "offsets.topic.replication.factor": brokers,
        "transaction.state.log.replication.factor": brokers,
        "transaction.state.log.min.isr": min(2, brokers),
    }


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node process: its name ("controller" or "broker-<id>": its log file's name and a
    report's label), where it listens, and its `ketch` subcommand with flags (`args`)."""

    node: str
    broker_id: int | None
    address: Address
    args: tuple[str, ...]
    log_file: Path
    kafka_address: Address | None = None  # a broker's Kafka-protocol listener, when it has one

    @property
    def argv(self) -> tuple[str, ...]:
        """The whole command line, with this interpreter (a virtualenv's children stay in it)."""
        return (sys.executable, "-m", CHILD_MODULE, *self.args)


@dataclass(frozen=True, slots=True)
class Layout:
    root: Path

    @property
    def secret_file(self) -> Path:
        return self.root / SECRET_FILE_NAME

    @property
    def controller_dir(self) -> Path:
        return self.root / CONTROLLER_NODE

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def cluster_json(self) -> Path:
        return self.root / CLUSTER_JSON_NAME

    def broker_dir(self, broker_id: int) -> Path:
        return self.root / broker_node(broker_id)

    def log_file(self, node: str) -> Path:
        return self.logs_dir / f"{node}.log"

    def prepare(self, broker_ids: range) -> None:
        """Create what is missing; keep what exists (a second `ketch up` recovers the cluster)."""
        for directory in (self.root, self.controller_dir, self.logs_dir):
            directory.mkdir(parents=True, exist_ok=True)
        for broker_id in broker_ids:
            self.broker_dir(broker_id).mkdir(exist_ok=True)
        create_secret(self.secret_file)

    # -- command lines --------------------------------------------------------------------------

    def controller_spec(
        self, address: Address, *, config: Path | None, flags: Mapping[str, Value] | None = None
    ) -> NodeSpec:
        """`ketch controller` on `address`; `flags` become `--set K=V` (over `config`)."""
        args = (
            "controller",
            "--data-dir", str(self.controller_dir),
            "--listen", str(address),
            *self._common(config, flags),
        )  # fmt: skip
        return NodeSpec(CONTROLLER_NODE, None, address, args, self.log_file(CONTROLLER_NODE))

    def broker_spec(
        self,
        broker_id: int,
        address: Address,
        controller: Address,
        *,
        config: Path | None,
        kafka_address: Address | None = None,
        flags: Mapping[str, Value] | None = None,
    ) -> NodeSpec:
        """`ketch broker` `broker_id` on `address` (and the Kafka protocol on `kafka_address`),
        registering with the controller at `controller`."""
        kafka = () if kafka_address is None else ("--kafka-listen", str(kafka_address))
        args = (
            "broker",
            "--id", str(broker_id),
            "--data-dir", str(self.broker_dir(broker_id)),
            "--listen", str(address),
            *kafka,
            "--controller", str(controller),
            *self._common(config, flags),
        )  # fmt: skip
        node = broker_node(broker_id)
        return NodeSpec(node, broker_id, address, args, self.log_file(node), kafka_address)

    def _common(self, config: Path | None, flags: Mapping[str, Value] | None) -> tuple[str, ...]:
        common: tuple[str, ...] = ("--secret-file", str(self.secret_file))
        if config is not None:
            common += ("--config", str(config))
        for name, value in (flags or {}).items():
            common += ("--set", f"{name}={value}")
        return common


def create_secret(path: Path) -> bool:
    """Create the credential file once with mode 600; False when it already exists.

    O_EXCL makes "exists" and "create" one step, and the mode is set at creation, so the secret
    is never readable by others, not even for a moment.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as file:
        file.write(secrets.token_hex(_SECRET_RANDOM_BYTES) + "\n")
    return True


# -- cluster.json --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """One node of cluster.json; pid None while the node is down (stopped by shutdown-broker or
    waiting to be restarted); kafka_port None for the controller and for a broker without a
    Kafka-protocol listener."""

    node_id: int
    pid: int | None
    host: str
    port: int
    kafka_port: int | None = None


def cluster_document(
    controller: NodeEntry, brokers: list[NodeEntry], layout: Layout
) -> dict[str, object]:
    return {
        "controller": {
            "id": controller.node_id,
            "pid": controller.pid,
            "host": controller.host,
            "port": controller.port,
        },
        "brokers": [
            {
                "id": b.node_id,
                "pid": b.pid,
                "host": b.host,
                "port": b.port,
                "kafka_port": b.kafka_port,
                "data_dir": str(layout.broker_dir(b.node_id)),
            }
            for b in brokers
        ],
    }


def write_json_atomically(path: Path, document: object) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document, indent=2) + "\n")
    temporary.replace(path)
