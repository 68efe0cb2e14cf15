"""The Dockerfile's stages and compose.yaml's document, loaded once per test module."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.docker.docker_files import (
    COMPOSE,
    DOCKERFILE,
    Stage,
    load_yaml,
    parse_dockerfile,
    stages,
)


@pytest.fixture(scope="module")
def dockerfile() -> dict[str, Stage]:
    return stages(parse_dockerfile(DOCKERFILE.read_text()))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = load_yaml(COMPOSE)
    assert isinstance(document, dict)
    return document
