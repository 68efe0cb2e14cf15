"""What a `ketch` command imports before it runs (issue 23: every call cost ~0.75 s of start-up
when cli/main.py imported every command's module). Deterministic: the modules loaded, not the
time taken (bench/cli_startup.py measures that)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Heavy packages no simple client command needs: the nodes and their actors, the Kafka schemas
# (kio, and hypothesis which it pulls in), the benchmarks, Spark.
HEAVY = ("node.broker", "node.controller", "actors", "kio", "hypothesis", "bench", "offline")


def loaded_by(argv: list[str]) -> set[str]:
    """The modules `ketch ARGV` has loaded once its parser is built (`--help` stops it there)."""
    probe = (
        "import json, sys\n"
        "from cli import main\n"
        "try:\n"
        f"    main.main({argv!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write(json.dumps(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(done.stderr))


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY))


@pytest.mark.parametrize(
    "argv",
    [
        ["topic", "list", "--help"],
        ["produce", "t", "--help"],
        ["consume", "t", "--help"],
        ["cluster", "status", "--help"],
        ["group", "list", "--help"],
    ],
)
def test_a_client_command_loads_no_node_or_benchmark_code(argv: list[str]) -> None:
    assert heavy(loaded_by(argv)) == []


def test_the_command_list_loads_not_even_the_client() -> None:
    modules = loaded_by(["--help"])
    assert heavy(modules) == []
    assert "client.client" not in modules
    assert "wire.messages" not in modules
