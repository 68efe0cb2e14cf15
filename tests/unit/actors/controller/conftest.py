"""Fixtures of the controller actor tests: a started `ControllerHarness` (manual clock, real
metadata log, recording channels), stopped at the end."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.unit.actors.controller.harness import ControllerHarness


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[ControllerHarness]:
    h = ControllerHarness(tmp_path / "controller")
    await h.start()
    yield h
    await h.stop()
