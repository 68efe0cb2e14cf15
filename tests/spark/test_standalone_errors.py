"""`offline.standalone`'s failures, with stand-in daemons (shell scripts in a fake Spark home and
a fake JAVA_HOME), so no JVM starts: no Java is a clear error before anything is spawned; a
daemon that exits is reported with its log's tail; a master that lost its port to another
process is retried with fresh ports, a bounded number of times; a daemon that never gets ready
is killed at the timeout with its whole process group. Nothing is left behind in any case."""

from __future__ import annotations

import stat
import tempfile
from pathlib import Path

import pytest

from offline.standalone import JavaNotFoundError, StandaloneError, start_standalone


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def fake_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "jdk"
    _script(home / "bin" / "java", "exit 0")
    monkeypatch.setenv("JAVA_HOME", str(home))
    # Temporary work dirs land here, so the tests can see that none is left behind.
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return temp


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphaned child of the script is reaped by init, in its own
    time); Linux's /proc."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat_line.rsplit(")", 1)[1].split()[0] != "Z"


def _spark_home(tmp_path: Path, body: str) -> Path:
    home = tmp_path / "spark"
    _script(home / "bin" / "spark-class", body)
    return home


def test_no_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spark_home = _spark_home(tmp_path, f"touch {tmp_path}/spawned")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(JavaNotFoundError, match="no java on PATH"):
        start_standalone(1, spark_home=spark_home)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(JavaNotFoundError, match="has no executable bin/java"):
        start_standalone(1, spark_home=spark_home)
    assert not (tmp_path / "spawned").exists()


def test_a_daemon_that_exits_is_reported_with_its_log(fake_java: Path, tmp_path: Path) -> None:
    spark_home = _spark_home(
        tmp_path, 'echo "starting $1"; echo "Error: no such class" >&2; exit 3'
    )
    with pytest.raises(StandaloneError) as raised:
        start_standalone(1, spark_home=spark_home, timeout_s=30)
    message = str(raised.value)
    assert "Spark master" in message
    assert "exited with code 3" in message
    assert "starting org.apache.spark.deploy.master.Master" in message
    assert "Error: no such class" in message
    assert list(fake_java.iterdir()) == []  # its temporary work dir is removed


def test_a_master_port_taken_meanwhile_is_retried_with_new_ports(
    fake_java: Path, tmp_path: Path
) -> None:
    calls = tmp_path / "calls"
    spark_home = _spark_home(
        tmp_path,
        f'echo "$@" >> {calls}; echo "java.net.BindException: Address already in use" >&2; exit 1',
    )
    with pytest.raises(StandaloneError, match="BindException"):
        start_standalone(1, spark_home=spark_home, timeout_s=30, attempts=3)
    lines = calls.read_text().splitlines()
    assert len(lines) == 3  # every attempt, then the error; no worker was started
    assert all(line.split()[0] == "org.apache.spark.deploy.master.Master" for line in lines)
    ports = [tuple(line.split()[4::2]) for line in lines]  # (--port P, --webui-port W)
    assert all(len(set(pair)) == 2 for pair in ports), ports
    assert list(fake_java.iterdir()) == []


def test_a_daemon_never_ready_is_killed_at_the_timeout(fake_java: Path, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    # The script and a child of it: the whole process group must go.
    spark_home = _spark_home(tmp_path, f"sleep 600 & echo $! >> {pids}; echo $$ >> {pids}; wait")
    with pytest.raises(StandaloneError, match="not ready after"):
        start_standalone(1, spark_home=spark_home, timeout_s=0.5)
    started = [int(pid) for pid in pids.read_text().split()]
    assert len(started) == 2
    assert [pid for pid in started if _running(pid)] == []
    assert list(fake_java.iterdir()) == []
