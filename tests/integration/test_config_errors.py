"""A configuration the nodes refuse, through the command line as a user meets it (issue 23):
`ketch broker` and `ketch controller` as real processes exit EXIT_CONFIG (78) with one line per
problem and start nothing; `ketch up` checks the file before it starts a node (exit 2), and when
a node exits 78 anyway (here a broker whose log dir belongs to another cluster, which the
controller refuses with INCONSISTENT_CLUSTER_ID) it does not restart it: it prints why and the
node's last log lines, stops the controller and exits 78 at once. Then `ketch config show`
without flags against a running (in-process) cluster: DescribeConfigs of a broker.

Every wait is bounded (a subprocess timeout); `ketch up`'s processes are killed by their PIDs
in `finally` whatever happens (its children also get SIGTERM when it dies: PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import pytest

from cli import config_cmd
from node.process import EXIT_CONFIG
from runtime.clock import SystemClock
from runtime.log.meta_properties import MetaProperties, random_directory_id
from runtime.net.tcp import TcpTransport
from testkit.cluster import tcp_cluster

REPO: Final = Path(__file__).resolve().parents[2]
TIMEOUT_S: Final = 60.0
SECRET: Final = "config-errors-test-secret-0123456789"
# `ketch up` binds port+0 (broker 0), +100 (the controller), +200 and +300 (their metrics).
UP_OFFSETS: Final = (0, 100, 200, 300)


def ketch(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`ketch ARGV...` as the entry point runs it, to its exit (bounded)."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *argv],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@pytest.fixture
def node_dir(tmp_path: Path) -> Path:
    """A `ketch up`-style directory with a cluster secret, as the node commands expect."""
    secret = tmp_path / "cluster.secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    return tmp_path


def broker_argv(node_dir: Path, *extra: str) -> list[str]:
    return [
        "broker", "--id", "0", "--data-dir", str(node_dir / "broker-0"),
        "--listen", "127.0.0.1:0", "--controller", "127.0.0.1:1", *extra,
    ]  # fmt: skip


def test_broker_refuses_a_bad_value_and_an_unknown_key(node_dir: Path) -> None:
    flagged = ketch(*broker_argv(node_dir, "--set", "min.insync.replicas=abc"), cwd=node_dir)
    assert flagged.returncode == EXIT_CONFIG, flagged.stderr
    assert flagged.stderr == "ketch broker: --set min.insync.replicas=abc: not an integer\n"
    (node_dir / "ketch.toml").write_text(
        '"min.insync.replicas" = 0\n"replica.lag.time.max" = 10000\n'
        '"metadata.snapshot.records" = 100\n'  # the controller's: fine in the shared file
    )
    filed = ketch(*broker_argv(node_dir, "--config", "ketch.toml"), cwd=node_dir)
    assert filed.returncode == EXIT_CONFIG, filed.stderr
    assert filed.stderr.splitlines() == [
        'ketch broker: ketch.toml: "replica.lag.time.max" = 10000: unknown property '
        '(did you mean "replica.lag.time.max.ms"?)',
        'ketch broker: ketch.toml: "min.insync.replicas" = 0: must be >= 1',
    ]
    assert not (node_dir / "broker-0").exists()  # nothing started


def test_controller_refuses_a_bad_value_and_an_unknown_key(node_dir: Path) -> None:
    (node_dir / "ketch.toml").write_text(
        '"num.partition" = 3\n"unclean.leader.election.enable" = "maybe"\n'
        '"replica.lag.time.max.ms" = 10000\n'  # a broker's: fine in the shared file
    )
    argv = ["controller", "--data-dir", str(node_dir / "controller"), "--listen", "127.0.0.1:0"]
    result = ketch(*argv, "--config", "ketch.toml", cwd=node_dir)
    assert result.returncode == EXIT_CONFIG, result.stderr
    assert result.stderr.splitlines() == [
        'ketch controller: ketch.toml: "num.partition" = 3: unknown property '
        '(did you mean "num.partitions"?)',
        'ketch controller: ketch.toml: "unclean.leader.election.enable" = "maybe": '
        "not true or false",
    ]
    assert not (node_dir / "controller").exists()


def test_up_checks_the_file_before_starting_anything(tmp_path: Path) -> None:
    (tmp_path / "ketch.toml").write_text('"min.insync.replicas" = "abc"\n')
    data_dir = tmp_path / "data"
    result = ketch(
        "up", "--brokers", "1", "--data-dir", str(data_dir), "--config", "ketch.toml",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    config = tmp_path / "ketch.toml"
    assert result.stderr == f'ketch up: {config}: "min.insync.replicas" = "abc": not an integer\n'
    assert not data_dir.exists()  # no node, no layout


def up_base_port() -> int:
    """A port from the OS whose `ketch up` offsets are free too (bounded retries: another process
    may hold one of them)."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = int(probe.getsockname()[1])
        if base + max(UP_OFFSETS) > 65_535:
            continue
        held = []
        try:
            for offset in UP_OFFSETS:
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", base + offset))
            return base
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise AssertionError("no free port range for ketch up")


def kill_reported_pids(output: str) -> None:
    """SIGKILL every process group `ketch up` reported ("(pid N)"), in case one outlived it."""
    for pid in {int(p) for p in re.findall(r"\(pid (\d+)\)", output)}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def test_up_stops_at_once_when_a_broker_exits_with_a_configuration_error(tmp_path: Path) -> None:
    data_dir = tmp_path / "d"
    # Broker 0's log dir belongs to another cluster: the new controller refuses it
    # (INCONSISTENT_CLUSTER_ID), and so it would at every restart.
    (data_dir / "broker-0").mkdir(parents=True)
    foreign = MetaProperties(0, random_directory_id(), "AAAAAAAAAAAAAAAAAAAAAA")
    (data_dir / "broker-0" / "meta.properties").write_text(foreign.render(time.time()))
    argv = [
        sys.executable, "-m", "cli.up.supervisor", "--brokers", "1", "--data-dir", str(data_dir),
        "--port", str(up_base_port()), "--kafka-port", "-1",
    ]  # fmt: skip
    up = subprocess.Popen(
        argv,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output = ""
    started = time.monotonic()
    try:
        output, _ = up.communicate(timeout=TIMEOUT_S)
    finally:
        if up.poll() is None:
            up.kill()
            output += up.communicate()[0]
        kill_reported_pids(output)
    elapsed_s = time.monotonic() - started
    assert up.returncode == EXIT_CONFIG, output
    assert "broker-0 refused its configuration (exit code 78)" in output
    assert "INCONSISTENT_CLUSTER_ID" in output
    log_file = data_dir / "logs" / "broker-0.log"
    assert f"lines of {log_file}:" in output
    assert "broker 0 serving at 127.0.0.1:" in output  # one of the log lines it printed
    assert "restarting in" not in output
    assert "ketch up: stopping controller" in output
    assert output.endswith("ketch up: stopped\n")
    starts = log_file.read_text().count("--- ketch up: starting broker-0")
    assert starts == 1, f"broker-0 was started {starts} times"
    # Far below the restart loop it replaces (18 restarts in 40 s); generous for a loaded box.
    assert elapsed_s < 30, f"ketch up took {elapsed_s:.1f} s to give up"


async def test_config_show_asks_a_running_broker(capsys: pytest.CaptureFixture[str]) -> None:
    properties = {"min.insync.replicas": 2, "log.retention.hours": 1}
    async with tcp_cluster(
        2, properties=properties, transport=TcpTransport(), clock=SystemClock()
    ) as cluster:
        bootstrap = str(cluster.addresses[1])
        show = ["config", "show", "--bootstrap", bootstrap]
        # The command runs its own event loop: on a thread, while this loop serves.
        code = await asyncio.to_thread(config_cmd.main, [*show, "--json"])
        assert code == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["broker"] == 0  # the lowest id, whichever broker answered first
        configs = {c["name"]: (c["value"], c["source"]) for c in shown["configs"]}
        assert configs["broker.id"] == ("0", "STATIC_BROKER_CONFIG")
        assert configs["min.insync.replicas"] == ("2", "STATIC_BROKER_CONFIG")
        assert configs["log.retention.ms"] == ("3600000", "STATIC_BROKER_CONFIG")
        assert configs["log.segment.bytes"][1] == "DEFAULT_CONFIG"
        assert await asyncio.to_thread(config_cmd.main, [*show, "--broker", "1"]) == 0
        table = capsys.readouterr().out
        assert table.startswith(f"Broker 1 at {cluster.addresses[1]}: ")
        assert re.search(r"broker\.id +1 +STATIC_BROKER_CONFIG", table), table
        assert await asyncio.to_thread(config_cmd.main, [*show, "--broker", "7"]) == 1
        assert "no broker 7 in the cluster's metadata (brokers: 0, 1)" in (capsys.readouterr().err)
