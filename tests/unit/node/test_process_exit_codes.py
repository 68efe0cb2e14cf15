"""node/process.py's exit codes for a configuration: EXIT_CONFIG when the settings are refused
before anything starts (one line per problem) and when the cluster refuses the running node for
its configuration (`serve`'s `refused`); the lines a supervisor picks out of the node's log."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from node import process
from node.broker import main as broker_main

WAIT_S = 10.0


@dataclass
class FakeNode:
    events: list[str] = field(default_factory=list)

    async def start(self) -> None:
        self.events.append("start")

    async def stop(self) -> None:
        self.events.append("stop")


async def serve_until_failed(refused: str | None) -> tuple[int, FakeNode]:
    node = FakeNode()
    failed = asyncio.Event()
    serving = asyncio.ensure_future(
        process.serve(node, name="fake", failed=failed, refused=lambda: refused)
    )
    for _ in range(100):  # bounded: until the node has started
        if node.events:
            break
        await asyncio.sleep(0)
    failed.set()
    return await asyncio.wait_for(serving, WAIT_S), node


async def test_a_node_refused_for_its_configuration_exits_with_the_config_code(
    caplog: pytest.LogCaptureFixture,
) -> None:
    code, node = await serve_until_failed("of another cluster (INCONSISTENT_CLUSTER_ID)")
    assert code == process.EXIT_CONFIG == 78
    assert node.events == ["start", "stop"]
    refusal = [r.getMessage() for r in caplog.records if "configuration refused" in r.getMessage()]
    assert refusal == ["fake: configuration refused: of another cluster (INCONSISTENT_CLUSTER_ID)"]


async def test_a_failure_without_a_refusal_still_exits_1() -> None:
    code, _ = await serve_until_failed(None)
    assert code == process.EXIT_FAILED


def test_every_problem_is_one_line_and_the_exit_code_is_78(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "ketch.toml"
    config.write_text('"min.insync.replicas" = "abc"\n"log.segmnt.bytes" = 5\n')
    code = broker_main.main(
        [
            "--id", "0", "--data-dir", str(tmp_path / "broker-0"), "--listen", "127.0.0.1:0",
            "--controller", "127.0.0.1:1", "--config", str(config),
            "--set", "replica.lag.time.max.ms=0",
        ]
    )  # fmt: skip
    assert code == process.EXIT_CONFIG
    assert capsys.readouterr().err.splitlines() == [
        f'ketch broker: {config}: "log.segmnt.bytes" = 5: unknown property '
        '(did you mean "log.segment.bytes"?)',
        f'ketch broker: {config}: "min.insync.replicas" = "abc": not an integer',
        "ketch broker: --set replica.lag.time.max.ms=0: must be >= 2",
    ]
    assert not (tmp_path / "broker-0").exists()  # nothing started


def test_the_lines_that_say_why_are_found_in_a_log() -> None:
    log = [
        "2026-01-01 00:00:00,000 INFO ketch.process: cluster secret from x",
        'ketch broker: ketch.toml: "a.b" = 1: unknown property',
        "2026-01-01 00:00:00,100 CRITICAL ketch.process: broker 0: configuration refused: why",
        "ketch controller: not this node's",
    ]
    assert process.config_error_lines(log, "broker") == log[1:3]
