"""README.md's "Using it" commands, word for word and in their order, against `ketch up`.

The commands are read from the README's first code block after "## Using it", so the README
cannot drift from what works. `ketch up` runs in a temporary directory (the "other terminal"'s
working directory) with its data in `./data`, on a free port range rather than 9092 (a test
never takes fixed ports); the commands find the brokers as a user's do, through
`data/cluster.json`. Each line runs in bash with the virtualenv's `ketch` first on PATH and must
exit 0 within a bounded time. Where the README's order depends on the cluster having settled (a
new topic's replicas joining the ISR before `cluster health`), the test waits for that with a
bounded poll first, as a user would wait to see it. The outputs that say the commands did what
their comments promise are checked.

Children are started in their own process group and killed by PID whatever happens.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

pytestmark = pytest.mark.slow

REPO: Final = Path(__file__).resolve().parents[2]
BIN: Final = Path(sys.executable).parent
BROKERS: Final = 3
COMMAND_TIMEOUT_S: Final = 120.0
WAIT_S: Final = 60.0
# ketch up's port layout (cli/up/options.py): brokers at port+i, the controller at port+100,
# metrics at port+200+i and port+300, Kafka listeners at kafka_port+i.
_OFFSETS: Final = (*range(BROKERS), 100, *range(200, 200 + BROKERS), 300)


def readme_commands() -> list[str]:
    """The command lines of the first code block under "## Using it" (comments dropped)."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Using it", 1)[1]
    block = section.split("```", 2)[1]
    lines = []
    for line in block.splitlines():
        # A comment starts at "#" after at least two spaces (a `#` inside quotes has none).
        command = re.split(r"\s{2,}#", line, maxsplit=1)[0].strip()
        if command:
            lines.append(command)
    return lines


def free_port_layout() -> tuple[int, int]:
    """A base port and a Kafka base port with every port ketch up binds free right now."""
    seed = time.time_ns()
    rng = random.Random(seed)
    for _ in range(200):
        base, kafka = rng.randrange(20_000, 29_000), rng.randrange(30_000, 32_000)
        ports = [base + o for o in _OFFSETS] + [kafka + i for i in range(BROKERS)]
        sockets = []
        try:
            for port in ports:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base, kafka
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise AssertionError(f"no free port range found (seed {seed})")


class Up:
    """`ketch up` in `cwd`, and every pid it reported in cluster.json."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.output = cwd / "up.out"
        self.process: subprocess.Popen[bytes] | None = None
        self.pids: set[int] = set()

    def start(self) -> None:
        port, kafka_port = free_port_layout()
        with self.output.open("ab") as out:
            self.process = subprocess.Popen(
                [str(BIN / "ketch"), "up", "--port", str(port), "--kafka-port", str(kafka_port)],
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + WAIT_S
        cluster_json = self.cwd / "data" / "cluster.json"
        while not cluster_json.exists():
            assert self.process.poll() is None, f"ketch up exited:\n{self.log()}"
            assert time.monotonic() < deadline, f"cluster.json not written:\n{self.log()}"
            time.sleep(0.05)
        self.remember_pids()

    def remember_pids(self) -> None:
        cluster_json = self.cwd / "data" / "cluster.json"
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
            document = json.loads(cluster_json.read_text())
            for node in [document["controller"], *document["brokers"]]:
                if node.get("pid") is not None:
                    self.pids.add(node["pid"])

    def log(self) -> str:
        return self.output.read_text(errors="replace")[-6_000:]

    def kill(self) -> None:
        self.remember_pids()
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        for pid in self.pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


@pytest.fixture
def up(tmp_path: Path) -> Iterator[Up]:
    running = Up(tmp_path)
    try:
        running.start()
        yield running
    finally:
        running.kill()


def run(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("KETCH_BOOTSTRAP", None)  # the brokers come from ./data/cluster.json, as a user's
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


def wait_healthy(cwd: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while (answer := run("ketch cluster health", cwd)).returncode != 0:
        assert time.monotonic() < deadline, f"not healthy within {WAIT_S} s:\n{answer.stdout}"
        time.sleep(0.2)


def test_the_readme_commands_work_word_for_word(up: Up) -> None:
    commands = readme_commands()
    assert commands[0].startswith("ketch topic create orders"), commands
    outputs: dict[str, str] = {}
    for command in commands:
        if command == "ketch cluster health":
            wait_healthy(up.cwd)
        done = run(command, up.cwd)
        assert done.returncode == 0, (
            f"{command!r} exited {done.returncode}\nstdout:\n{done.stdout}\n"
            f"stderr:\n{done.stderr}\nketch up:\n{up.log()}"
        )
        outputs[command] = done.stdout
        up.remember_pids()  # start-broker gives broker 1 a new pid

    def output_of(prefix: str) -> str:
        [out] = [text for command, text in outputs.items() if command.startswith(prefix)]
        return out

    # The two records, keyed and with their header, in kcat's format...
    formatted = output_of("ketch consume orders --from-beginning --max-messages 2 --format")
    assert re.search(r"^\d:\d+ k1=hello source=readme$", formatted, re.M), formatted
    assert re.search(r"^\d:\d+ k2=world source=readme$", formatted, re.M), formatted
    # ... and as JSON, read by the group (which then has committed offsets to describe).
    records = [json.loads(line) for line in output_of("ketch consume orders --group").splitlines()]
    assert sorted((r["key"], r["value"]) for r in records) == [("k1", "hello"), ("k2", "world")]
    described = json.loads(output_of("ketch topic describe orders --json"))
    assert len(described["partitions"]) == 3
    assert sum(p["high_watermark"] for p in described["partitions"]) == 1_002  # 2 + 1000 made
    assert "my-group" in output_of("ketch group list")
    assert json.loads((up.cwd / "out.json").read_text())  # the benchmark's figures
    assert (up.cwd / "out.png").stat().st_size > 0
