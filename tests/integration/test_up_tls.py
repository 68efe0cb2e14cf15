"""`ketch up --tls` as a real process tree: it makes a CA and one certificate per node (keys mode
0600, the CA's key nowhere on disk), serves every listener over TLS, says so in its ready line
and records the truststore in cluster.json; ketch's own commands then create a topic, produce and
consume through it without a flag (from the directory holding ./data), and with
`--command-config` from anywhere; without TLS settings a command cannot reach the cluster.

Waits are bounded polls of processes on the wall clock; every process is killed by its PID (its
process group: the nodes run in sessions of their own) in `finally`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from cli.up.options import CONTROLLER_PORT_OFFSET, METRICS_PORT_OFFSET
from testkit.processes import free_ports

REPO: Final = Path(__file__).resolve().parents[2]
WAIT_S: Final = 60.0
COMMAND_TIMEOUT_S: Final = 60.0
CONFIG: Final = """\
"broker.heartbeat.interval.ms" = 100
"broker.session.timeout.ms" = 600
"""


def _free_base() -> tuple[int, int]:
    """(--port, --kafka-port) whose derived ports (port, +100, +200, +300; kafka) are free now."""
    for _ in range(50):
        port, kafka = free_ports(2)
        needed = [
            port + CONTROLLER_PORT_OFFSET,
            port + METRICS_PORT_OFFSET,
            port + METRICS_PORT_OFFSET + CONTROLLER_PORT_OFFSET,
        ]
        if all(p < 65_000 for p in needed) and kafka not in needed:
            return port, kafka
    raise AssertionError("no free port range found")


def _ketch(cwd: Path, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "KETCH_BOOTSTRAP"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *argv],
        cwd=cwd,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
        check=False,
    )


@pytest.fixture
def up(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, int]]:
    config = tmp_path / "ketch.toml"
    config.write_text(CONFIG)
    port, kafka = _free_base()
    output = tmp_path / "up.out"
    with output.open("ab") as out:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "cli.up.supervisor", "--tls", "--brokers", "1",
                "--data-dir", str(tmp_path / "data"), "--port", str(port),
                "--kafka-port", str(kafka), "--config", str(config),
            ],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    pids: set[int] = set()
    try:
        cluster_json = tmp_path / "data" / "cluster.json"
        deadline = time.monotonic() + WAIT_S
        while not cluster_json.exists():
            assert process.poll() is None, output.read_text()
            assert time.monotonic() < deadline, output.read_text()
            time.sleep(0.05)
        document = json.loads(cluster_json.read_text())
        pids |= {n["pid"] for n in [document["controller"], *document["brokers"]] if n["pid"]}
        yield process, tmp_path, port
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)


def test_ketch_up_tls_round_trip(up: tuple[subprocess.Popen[bytes], Path, int]) -> None:
    process, root, port = up
    data = root / "data"
    tls = data / "tls"
    ready = (root / "up.out").read_text()
    assert f"ready (TLS: every listener SSL, CA {tls / 'ca.pem'})" in ready, ready
    for node in ("controller", "broker-0"):
        assert (tls / f"{node}.pem").stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tls.iterdir()) == ["broker-0.pem", "ca.pem", "controller.pem"]
    assert b"PRIVATE KEY" not in (tls / "ca.pem").read_bytes()
    document = json.loads((data / "cluster.json").read_text())
    assert document["tls"] == {
        "security.protocol": "SSL",
        "ssl.truststore.location": str(tls / "ca.pem"),
    }

    # From the directory holding ./data: bootstrap and TLS both come from cluster.json.
    created = _ketch(root, "topic", "create", "secure", "--partitions", "1")
    assert created.returncode == 0, created.stderr
    produced = _ketch(root, "produce", "secure", stdin="one\ntwo\n")
    assert produced.returncode == 0, produced.stderr
    consumed = _ketch(
        root,
        "consume",
        "secure",
        "--from-beginning",
        "--max-messages",
        "2",
        "--timeout-ms",
        "20000",
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == ["one", "two"]

    # From elsewhere: the client properties file of Kafka's CLI tools.
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    properties = elsewhere / "client.properties"
    properties.write_text(
        "# Kafka client properties\n"
        "security.protocol=SSL\n"
        f"ssl.truststore.location={tls / 'ca.pem'}\n"
        "ssl.endpoint.identification.algorithm=https\n"
    )
    bootstrap = ["--bootstrap", f"127.0.0.1:{port}"]
    listed = _ketch(elsewhere, "topic", "list", *bootstrap, "--command-config", str(properties))
    assert listed.returncode == 0, listed.stderr
    assert "secure" in listed.stdout
    # Plaintext to a TLS listener: the handshake never happens, the command cannot reach it.
    plain = _ketch(elsewhere, "topic", "list", *bootstrap)
    assert plain.returncode == 1, plain.stdout
    bad = elsewhere / "bad.properties"
    bad.write_text("security.protocol=SSL\nssl.truststore.location=/nonexistent/ca.pem\n")
    refused = _ketch(elsewhere, "topic", "list", *bootstrap, "--command-config", str(bad))
    assert refused.returncode == 2
    assert "ssl.truststore.location: no such file: /nonexistent/ca.pem" in refused.stderr
    assert process.poll() is None
