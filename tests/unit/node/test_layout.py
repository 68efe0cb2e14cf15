"""node/layout.py: the cluster directory (the secret created once, mode 600), cluster.json, and the
node command lines `ketch up` and testkit's process cluster both run, which the node mains must
accept as they are."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

from node.broker import main as broker_main
from node.controller import main as controller_main
from node.layout import CHILD_MODULE, Layout, NodeEntry, cluster_document
from runtime.net.auth import MIN_SECRET_BYTES
from runtime.net.transport import Address

CONTROLLER = Address("127.0.0.1", 9192)


def test_layout_creates_the_secret_once_with_mode_600(tmp_path: Path) -> None:
    layout = Layout(tmp_path / "d")
    layout.prepare(range(2))
    secret = layout.secret_file.read_bytes()
    assert stat.S_IMODE(layout.secret_file.stat().st_mode) == 0o600
    assert len(secret.strip()) >= MIN_SECRET_BYTES
    assert [p.name for p in sorted(layout.root.iterdir())] == [
        "broker-0", "broker-1", "cluster.secret", "controller", "logs",
    ]  # fmt: skip
    layout.prepare(range(3))  # a second `ketch up`, with one broker more
    assert layout.secret_file.read_bytes() == secret
    assert layout.broker_dir(2).is_dir()


def test_cluster_json_names_each_brokers_kafka_port() -> None:
    layout = Layout(Path("/d"))
    controller = NodeEntry(3, 100, "127.0.0.1", 9192)
    brokers = [NodeEntry(0, 101, "127.0.0.1", 9092, 19092), NodeEntry(1, None, "127.0.0.1", 9093)]
    document = cluster_document(controller, brokers, layout)
    assert document["controller"] == {"id": 3, "pid": 100, "host": "127.0.0.1", "port": 9192}
    assert document["brokers"] == [
        {
            "id": 0, "pid": 101, "host": "127.0.0.1", "port": 9092, "kafka_port": 19092,
            "data_dir": "/d/broker-0",
        },
        {
            "id": 1, "pid": None, "host": "127.0.0.1", "port": 9093, "kafka_port": None,
            "data_dir": "/d/broker-1",
        },
    ]  # fmt: skip


def test_the_controller_command_line_is_what_ketch_controller_accepts(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.prepare(range(1))
    config = tmp_path / "ketch.toml"
    config.write_text('"broker.session.timeout.ms" = 700\n"metrics.port" = 1\n')
    spec = layout.controller_spec(CONTROLLER, config=config, flags={"metrics.port": 9400})
    assert spec.argv == (sys.executable, "-m", CHILD_MODULE, *spec.args)
    assert (spec.node, spec.broker_id, spec.address) == ("controller", None, CONTROLLER)
    assert spec.log_file == tmp_path / "logs" / "controller.log"
    assert spec.args[0] == "controller"
    args = controller_main.build_parser().parse_args(spec.args[1:])
    settings = controller_main.settings_from_args(args)
    assert settings.listen == CONTROLLER
    assert settings.metadata_dir == layout.controller_dir
    assert settings.secret_file == layout.secret_file
    assert settings.config.broker_session_timeout_ms == 700  # from the file
    assert settings.metrics_port == 9400  # the flag wins over the file


def test_a_broker_command_line_is_what_ketch_broker_accepts(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.prepare(range(3))
    native, kafka = Address("127.0.0.1", 9094), Address("127.0.0.1", 19094)
    spec = layout.broker_spec(
        2, native, CONTROLLER, config=None, kafka_address=kafka, flags={"min.insync.replicas": 2}
    )
    assert (spec.node, spec.broker_id, spec.address, spec.kafka_address) == (
        "broker-2", 2, native, kafka,
    )  # fmt: skip
    assert spec.log_file == tmp_path / "logs" / "broker-2.log"
    assert spec.args[0] == "broker"
    assert "--config" not in spec.args
    args = broker_main.build_parser().parse_args(spec.args[1:])
    settings = broker_main.settings_from_args(args)
    assert settings.config.listen_address == native
    assert settings.config.kafka_listen_address == kafka
    assert settings.secret_file == layout.secret_file
    assert settings.effective.explicit()["min.insync.replicas"] == "2"
    plain = layout.broker_spec(0, native, CONTROLLER, config=None)
    assert plain.kafka_address is None
    assert "--kafka-listen" not in plain.args
