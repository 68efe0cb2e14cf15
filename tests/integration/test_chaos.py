"""The chaos run (bench/chaos.py) in `make test`: 60 s of faults drawn from a fixed seed (one
that draws every kind of fault early: kill -9 of the controller and of brokers, a pause past the
session timeout, controlled shutdowns, one-way cuts and partitions) against a controller and
three brokers behind the proxies, while ketch's and librdkafka's idempotent acks=all producers
write and a consumer reads. Nothing acknowledged may be lost, nothing written twice, nothing
consumed may change afterwards, the cluster must recover from every fault and stop cleanly,
and `ketch verify` must find the data directories clean.

Bounded: the faults stop after 60 s, every recovery and read has its own bound (bench/chaos.py),
and the processes are killed by PID on the way out whatever happens."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Final

import pytest
from rich.console import Console

from bench.chaos import render, run_chaos
from bench.chaos_faults import Kind

pytestmark = pytest.mark.slow

SEED: Final = 10
SECONDS: Final = 60.0


@pytest.mark.timeout(480)
async def test_sixty_seconds_of_chaos_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    output = io.StringIO()
    console = Console(file=output, width=120)
    result = await run_chaos(SECONDS, SEED, tmp_path / "cluster", verify=True, console=console)
    console.print(render(result))
    print(output.getvalue())  # the faults as injected and the table, shown on failure or -s
    assert result.recovery_error == ""
    assert set(result.faults) == {kind.value for kind in Kind}, result.faults
    assert result.acknowledged["native"] > 1_000
    assert result.acknowledged["librdkafka"] > 1_000
    assert (result.lost, result.duplicated, result.diverged) == (0, 0, 0), result.examples
    assert result.consumed > 0
    assert set(result.exit_codes.values()) == {0}, result.exit_codes
    assert result.verify == "clean"
    assert result.ok
