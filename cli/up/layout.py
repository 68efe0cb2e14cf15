"""The on-disk layout of a `ketch up` cluster (DESIGN.md, "Command line contract").

    <data-dir>/cluster.secret     the cluster credential: created once, mode 600, never rewritten
    <data-dir>/controller/        the controller's metadata log
    <data-dir>/broker-<id>/       broker <id>'s log dir
    <data-dir>/logs/<node>.log    each child's stdout and stderr, appended across restarts
    <data-dir>/cluster.json       the running cluster (written once every broker has registered,
                                  rewritten when a pid changes, removed when `ketch up` ends);
                                  a broker's "kafka_port" is its Kafka-protocol listener's port,
                                  null when `ketch up --kafka-port -1` runs without them
    <data-dir>/up.sock            the supervisor's control socket (cli/up/control.py)

Only the supervisor process writes these files (and only from its event loop); the children only
read the secret, so nothing here needs a lock. cluster.json is replaced atomically (write to a
temporary name, then rename) so a reader never sees half a document.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Final

SECRET_FILE_NAME: Final = "cluster.secret"
CLUSTER_JSON_NAME: Final = "cluster.json"
SOCKET_NAME: Final = "up.sock"
CONTROLLER_NODE: Final = "controller"
# 32 random bytes, stored hex-encoded: the nodes strip surrounding whitespace from the file, so
# raw bytes that happen to begin or end with a whitespace byte would silently shorten the key.
_SECRET_RANDOM_BYTES: Final = 32


def broker_node(broker_id: int) -> str:
    return f"broker-{broker_id}"


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

    @property
    def socket_path(self) -> Path:
        return self.root / SOCKET_NAME

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
