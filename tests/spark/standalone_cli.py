"""The `ketch` command line as the standalone-cluster tests drive it: `ketch spark up` for the
session's cluster (`conftest.standalone`) and `ketch verify|compact --master spark://...` runs,
each in its own process.

Why processes: the jobs on the cluster need a driver of their own, and Spark allows one
SparkContext per process, which in pytest's process is the shared local[2] session the other
Spark tests use (and these tests compare against). Stopping and recreating it would cost a
session start each way and break tests that hold it; a `ketch` process is what a user runs
anyway, so the documented command lines are what is tested. The processes run this
interpreter (the editable install makes `cli` and `offline` importable from any directory).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

# Small JVMs: other test processes share the machine's 2 cores and memory.
SMALL_JOB: Final = ("--conf", "spark.executor.memory=512m", "--driver-memory", "512m")
_JOB_TIMEOUT_S: Final = 300.0
_STOP_TIMEOUT_S: Final = 60.0


def _env() -> dict[str, str]:
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}


def run_ketch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`ketch ARGS` in a new process; its output is kept for the failure message."""
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=_JOB_TIMEOUT_S,
        check=False,
    )


def described(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"


@dataclass(frozen=True, slots=True)
class SparkUp:
    """A running `ketch spark up` and the URLs it printed."""

    process: subprocess.Popen[str]
    master_url: str
    webui_url: str
    work_dir: Path

    @classmethod
    def start(cls, work_dir: Path, workers: int) -> SparkUp:
        command = [sys.executable, "-m", "cli.main", "spark", "up", "--workers", str(workers)]
        command += ["--memory", "1g", "--work-dir", str(work_dir)]
        with (work_dir / "spark-up.err").open("w") as err:  # the child keeps its own copy
            process = subprocess.Popen(
                command,
                cwd=work_dir,
                env=_env(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        assert process.stdout is not None
        # Bounded: the command gives up after its own start-up timeout, closing stdout.
        master_url = process.stdout.readline().strip()
        webui_url = process.stdout.readline().strip()
        if not master_url.startswith("spark://") or not webui_url.startswith("http://"):
            process.kill()
            process.wait()
            why = (work_dir / "spark-up.err").read_text()
            raise AssertionError(f"ketch spark up printed {master_url!r}, {webui_url!r}: {why}")
        return cls(process, master_url, webui_url, work_dir)

    def master_json(self) -> dict[str, Any]:
        # Direct: never through an http_proxy from the environment.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(f"{self.webui_url}/json/", timeout=5) as response:
            state: dict[str, Any] = json.load(response)
            return state

    def app_id(self, name: str) -> str:
        """The id of the one finished application called `name` (it ran on this cluster)."""
        apps = [a for a in self.master_json()["completedapps"] if a["name"] == name]
        assert len(apps) == 1, f"finished apps: {self.master_json()['completedapps']}"
        assert apps[0]["state"] == "FINISHED", apps[0]
        app_id: str = apps[0]["id"]
        return app_id

    def executor_workers(self, app_id: str) -> list[str]:
        """The workers that ran an executor of the app: each keeps a dir named after it."""
        return sorted(d.name for d in self.work_dir.glob("worker-*") if (d / app_id).is_dir())

    def stop(self) -> int:
        """Ctrl-C, as a person stops it; the exit code."""
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=_STOP_TIMEOUT_S)
        finally:
            if self.process.stdout is not None:
                self.process.stdout.close()

    def answers(self) -> bool:
        try:
            self.master_json()
        except (urllib.error.URLError, OSError):
            return False
        return True

    def daemons_left(self) -> list[int]:
        """Pids of processes still naming the work dir on their command line (the workers
        pass it as --work-dir, the executors inherit it); Linux's /proc."""
        needle = str(self.work_dir).encode()
        left = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            with contextlib.suppress(OSError):
                if needle in cmdline.read_bytes():
                    left.append(int(cmdline.parent.name))
        return left
