"""Models of docker/Dockerfile and docker/compose.yaml for the tests beside this module.

The Dockerfile as Docker reads it (continued lines joined, comments dropped) and resolves it
(stages, global ARGs in FROM lines, what a final image inherits from the stage it is built
FROM); compose.yaml as compose reads it (YAML 1.2), its Compose Specification schema, the
options of the node command lines it holds, and its cluster-secret init code run here against a
real directory. Pure functions and frozen values; the fixtures that load the two files are in
conftest.py.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[3]
DOCKERFILE = ROOT / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / "docker" / "Dockerfile.dockerignore"
COMPOSE = ROOT / "docker" / "compose.yaml"

NODE_UID = "10001"
BROKERS = ("broker-0", "broker-1", "broker-2")
NODES = ("controller", *BROKERS)
SECRET_SERVICE = "cluster-secret"
METRICS_PORT = 9100


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


# -- compose model ---------------------------------------------------------------------------


def load_yaml(path: Path) -> Any:
    # YAML 1.2, as compose reads it (no `yes`/`no` booleans), and duplicate keys are errors.
    return YAML(typ="safe", pure=True).load(path.read_text())


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
