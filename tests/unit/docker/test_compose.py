"""docker/compose.yaml, checked without a Docker engine or compose plugin (none runs where the
tests run):

* against the Compose Specification's JSON schema (the copy vendored in the check-jsonschema
  package, validated with jsonschema);
* against the cluster it must describe: every `ketch` command line parses with the real parsers
  and resolves to a configuration, addresses agree between nodes, volumes and health checks are
  in place;
* its cluster-secret init code, run here against a real directory.

The models are in tests/unit/docker/docker_files.py. A missing tool fails its test: nothing is
skipped.
"""

from __future__ import annotations

import json
import stat
import tomllib
from pathlib import Path
from typing import Any

from node.broker import main as broker_main
from node.broker.config import KAFKA_LISTENER
from node.controller import main as controller_main
from node.process import read_secret
from runtime.net.transport import Address
from tests.unit.docker.docker_files import (
    BROKERS,
    COMPOSE,
    DOCKERFILE,
    METRICS_PORT,
    NODES,
    ROOT,
    SECRET_SERVICE,
    make_secret,
    option,
    parse,
    schema_errors,
    volume_mounts,
)

# -- compose.yaml against the specification ---------------------------------------------------


def test_compose_file_matches_the_compose_specification(compose: dict[str, Any]) -> None:
    assert schema_errors(compose) == []


def test_the_schema_check_catches_mistakes(compose: dict[str, Any]) -> None:
    broken = json.loads(json.dumps(compose))
    broker = broken["services"]["broker-0"]
    broker["depends_on"]["controller"]["condition"] = "service_healty"
    broker["restart_policy"] = "always"  # a deploy-section key at the service level
    errors = schema_errors(broken)
    assert any("service_healty" in error for error in errors), errors
    assert any("restart_policy" in error for error in errors), errors


# -- compose.yaml: the cluster it describes ---------------------------------------------------


def test_services_and_volumes(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {SECRET_SERVICE, *NODES, "cli"}
    assert services["cli"]["profiles"] == ["tools"], "the client starts only on demand"
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name, service in services.items():
        assert service["image"] == f"ketch:{version}", name
        build = service["build"]
        assert (COMPOSE.parent / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
        assert build["target"] == "runtime", name
    used = {source for s in services.values() for source, _ in volume_mounts(s).values()}
    assert used == set(compose["volumes"]), "every named volume is declared and used"


def test_nodes_restart_stop_gracefully_and_check_health(compose: dict[str, Any]) -> None:
    for name in NODES:
        service = compose["services"][name]
        assert service["restart"] == "unless-stopped", name
        assert service["hostname"] == name, name
        # The test itself is the image's HEALTHCHECK; compose tunes only its timing.
        health = service["healthcheck"]
        assert "test" not in health, name
        assert not health.get("disable", False), name
        assert {"interval", "timeout", "retries", "start_period"} <= set(health), name
        assert int(service["stop_grace_period"].rstrip("s")) >= 30, name


def test_start_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services[SECRET_SERVICE]["restart"] == "no"
    for name in NODES:
        assert services[name]["depends_on"][SECRET_SERVICE] == {
            "condition": "service_completed_successfully"
        }, name
    for name in BROKERS:
        assert services[name]["depends_on"]["controller"] == {"condition": "service_healthy"}
    assert "controller" not in services["controller"]["depends_on"]


def test_each_node_keeps_its_data_in_its_own_volume(compose: dict[str, Any]) -> None:
    volumes = {}
    for name in NODES:
        service = compose["services"][name]
        mounts = volume_mounts(service)
        data_dir = option(service["command"], "--data-dir")
        secret_file = Path(option(service["command"], "--secret-file"))
        assert mounts[data_dir] == (f"{name}-data", False), name
        assert mounts[str(secret_file.parent)] == (SECRET_SERVICE, True), name
        volumes[name] = mounts[data_dir][0]
    assert len(set(volumes.values())) == len(NODES)


def test_node_commands_parse_and_resolve(compose: dict[str, Any], tmp_path: Path) -> None:
    """Each broker's command line through `ketch broker`'s own parser and configuration, with
    the container paths mapped into a temporary directory (the secret made by the init code)."""
    services = compose["services"]
    secret_file = make_secret(compose, tmp_path / "secret")
    controller_listen = option(services["controller"]["command"], "--listen")
    ids = []
    for name in BROKERS:
        command = services[name]["command"]
        assert command[0] == "broker"
        args = parse(broker_main.build_parser(), command[1:])
        args.data_dir, args.secret_file = tmp_path / name, secret_file
        settings = broker_main.settings_from_args(args)
        config = settings.config
        # The native listener advertises where it binds: it must be its service name.
        native = config.listeners[broker_main.NATIVE_LISTENER]
        assert str(native) == f"{name}:9092"
        assert config.advertised(broker_main.NATIVE_LISTENER, native) == native
        assert str(config.controller_address) == controller_listen == "controller:9093"
        assert config.metrics_port == METRICS_PORT
        ids.append(config.broker_id)
    assert ids == [0, 1, 2]


def test_kafka_listeners_are_published_where_they_are_advertised(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """Broker i's Kafka listener binds every container interface on 19092, the host publishes
    it on its loopback at 19092 + i, and the broker advertises that very address, so a Kafka
    client on the host can follow the metadata to every broker; the addresses are distinct."""
    secret_file = make_secret(compose, tmp_path / "secret")
    advertised = []
    for broker_id, name in enumerate(BROKERS):
        service = compose["services"][name]
        args = parse(broker_main.build_parser(), service["command"][1:])
        args.data_dir, args.secret_file = tmp_path / name, secret_file
        config = broker_main.settings_from_args(args).config
        bound = config.kafka_listen_address
        assert bound == Address("0.0.0.0", 19092), name
        address = config.advertised(KAFKA_LISTENER, bound)
        assert address == Address("localhost", 19092 + broker_id), name
        [published] = service["ports"]
        host_ip, host_port, container_port = published.split(":")
        assert (host_ip, int(host_port), int(container_port)) == (
            "127.0.0.1", address.port, bound.port,
        ), name  # fmt: skip
        advertised.append(address)
    assert len(set(advertised)) == len(BROKERS)
    for name in ("controller", SECRET_SERVICE, "cli"):
        assert "ports" not in compose["services"][name], f"{name} publishes nothing"


def test_controller_command_parses_and_resolves(compose: dict[str, Any], tmp_path: Path) -> None:
    command = compose["services"]["controller"]["command"]
    assert command[0] == "controller"
    args = parse(controller_main.build_parser(), command[1:])
    args.data_dir, args.secret_file = tmp_path / "controller", make_secret(compose, tmp_path)
    settings = controller_main.settings_from_args(args)
    assert str(settings.listen) == "controller:9093"
    assert settings.metrics_port == METRICS_PORT


def test_every_command_parses_with_the_ketch_command(compose: dict[str, Any]) -> None:
    """What the containers really run: the image's entrypoint `ketch` with the command."""
    from cli import main as cli

    for name, service in compose["services"].items():
        if name == SECRET_SERVICE:  # runs python, not ketch
            continue
        parse(cli.build_parser(), service["command"])


# -- the cluster-secret init -------------------------------------------------------------------


def test_secret_is_made_once_private_and_usable(compose: dict[str, Any], tmp_path: Path) -> None:
    path = make_secret(compose, tmp_path)
    first = path.read_bytes()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert make_secret(compose, tmp_path) == path
    assert path.read_bytes() == first, "a rerun must keep the existing secret"
    assert [p.name for p in tmp_path.iterdir()] == [path.name], "no temporary file is left"
    found, secret = read_secret(path, tmp_path)
    assert found == path
    assert len(secret) == 64
