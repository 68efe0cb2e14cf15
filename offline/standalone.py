"""A Spark standalone cluster on 127.0.0.1 — a master and N workers — for `ketch verify` and
`ketch compact` to run on by master URL (``--master spark://127.0.0.1:PORT``), as they would on a
real cluster: the driver in the `ketch` process (client mode), executors in their own JVMs
launched by the workers, Python workers running the driver's interpreter.

Built from pyspark's own distribution (``<pyspark>/bin/spark-class``
``org.apache.spark.deploy.master.Master`` / ``org.apache.spark.deploy.worker.Worker``), so the
cluster is exactly the driver's Spark version and needs nothing but Java besides the venv.

Ports, chosen so a collision cannot go unnoticed:

* workers get ``--port 0 --webui-port 0``: the OS picks at bind time (no window for another
  process to take them), and each worker tells the master its address when it registers;
* the master's RPC and web UI ports must be known before it starts (the workers and the caller
  need them): each is a port the OS just gave a socket bound to 127.0.0.1:0, closed and passed
  on. Another process could take it in between, so the master runs with
  ``spark.port.maxRetries=0`` (Spark would otherwise quietly bind the next port up, and the
  URL we hand out would name someone else's): a taken port kills the master, and the start is
  retried with fresh ports, a bounded number of times.

Readiness is the master's own word: its web UI's JSON (``http://127.0.0.1:WEBUI/json/``) polled
until it says ALIVE with N workers ALIVE, within a timeout; a daemon that exits meanwhile ends
the wait at once with its log's tail. Each daemon runs in its own process group (executors a
worker launches join the worker's group), so `StandaloneCluster.stop` signals whole groups:
SIGTERM, then SIGKILL to what is left after the timeout. Daemon logs and the workers' work dirs
(executor logs, per-application scratch) live under one work dir, removed on stop when this
module created it.

The `StandaloneCluster` object owns the daemon processes; one thread (the caller's) drives it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final

MASTER_CLASS: Final = "org.apache.spark.deploy.master.Master"
WORKER_CLASS: Final = "org.apache.spark.deploy.worker.Worker"
HOST: Final = "127.0.0.1"
DEFAULT_DAEMON_MEMORY: Final = "256m"  # the master's and each worker's own heap (Spark: 1g)
_POLL_INTERVAL_S: Final = 0.2
_HTTP_TIMEOUT_S: Final = 2.0
_LOG_TAIL_LINES: Final = 25
# The master is on 127.0.0.1: never through an http_proxy from the environment.
_DIRECT: Final = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# Log lines that say a port was taken under us (the master then exits; see the docstring).
_BIND_FAILURES: Final = ("BindException", "Address already in use", "Failed to bind")

__all__ = [
    "HOST",
    "JavaNotFoundError",
    "StandaloneCluster",
    "StandaloneError",
    "WorkerStatus",
    "find_java",
    "pyspark_home",
    "start_standalone",
]


class StandaloneError(RuntimeError):
    """The cluster could not start, or a daemon of it died."""


class JavaNotFoundError(StandaloneError):
    pass


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """One worker as the master's JSON reports it."""

    worker_id: str
    host: str
    port: int
    cores: int
    memory_mb: int
    state: str  # ALIVE, DEAD, DECOMMISSIONED, UNKNOWN

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> WorkerStatus:
        return cls(
            str(row["id"]),
            str(row["host"]),
            int(row["port"]),
            int(row["cores"]),
            int(row["memory"]),
            str(row["state"]),
        )


@dataclass(frozen=True, slots=True)
class _Daemon:
    name: str  # "master", "worker-0", ...
    process: subprocess.Popen[bytes]
    log_path: Path

    def exited(self) -> bool:
        return self.process.poll() is not None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def death_error(self) -> StandaloneError:
        return StandaloneError(
            f"Spark {self.name} (pid {self.process.pid}) exited with code "
            f"{self.process.returncode}; the end of {self.log_path}:\n{self.log_tail()}"
        )


def pyspark_home() -> Path:
    """The Spark distribution inside the installed pyspark (its jars and ``bin/``): the driver's
    own version, which the daemons must match."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").is_file():
        raise StandaloneError(f"{home} has no bin/spark-class: is pyspark fully installed?")
    return home


def find_java(environ: Mapping[str, str] | None = None) -> Path:
    """The java binary spark-class will run: ``$JAVA_HOME/bin/java``, else ``java`` on PATH."""
    env = os.environ if environ is None else environ
    java_home = env.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if not os.access(java, os.X_OK):
            raise JavaNotFoundError(
                f"JAVA_HOME={java_home} has no executable bin/java; Spark needs Java 17 or 21"
            )
        return java
    found = shutil.which("java", path=env.get("PATH"))
    if found is None:
        raise JavaNotFoundError(
            "no java on PATH and JAVA_HOME is not set; Spark needs Java 17 or 21 "
            "(e.g. apt-get install openjdk-17-jre-headless)"
        )
    return Path(found)


def _free_port() -> int:
    """A port the OS just handed out on 127.0.0.1 (see the module docstring for the race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


class StandaloneCluster:
    """A running master and its workers; `stop` (or leaving the `with` block) ends them."""

    def __init__(
        self,
        master_port: int,
        webui_port: int,
        work_dir: Path,
        daemons: Sequence[_Daemon],
        *,
        owns_work_dir: bool,
    ) -> None:
        self.master_port: Final = master_port
        self.webui_port: Final = webui_port
        self.master_url: Final = f"spark://{HOST}:{master_port}"
        self.webui_url: Final = f"http://{HOST}:{webui_port}"
        self.work_dir: Final = work_dir
        self._daemons = tuple(daemons)
        self._owns_work_dir = owns_work_dir
        self._stopped = False

    @property
    def pids(self) -> dict[str, int]:
        return {d.name: d.process.pid for d in self._daemons}

    def master_json(self) -> dict[str, Any]:
        """The master's state (``/json/``): its status, workers, running and finished apps."""
        with _DIRECT.open(f"{self.webui_url}/json/", timeout=_HTTP_TIMEOUT_S) as rsp:
            state: dict[str, Any] = json.load(rsp)
            return state

    def workers(self) -> list[WorkerStatus]:
        return [WorkerStatus.from_json(row) for row in self.master_json().get("workers", [])]

    def check_alive(self) -> None:
        """Raise StandaloneError (with the daemon's log tail) if any daemon has exited."""
        for daemon in self._daemons:
            if daemon.exited():
                raise daemon.death_error()

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until a daemon exits (StandaloneError) or `timeout_s` passes (returns): what
        `ketch spark up` does in the foreground until Ctrl-C."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        master = self._daemons[0].process
        while deadline is None or time.monotonic() < deadline:
            self.check_alive()
            # Waiting on the master wakes us the moment it dies; the workers are checked on
            # each round.
            with contextlib.suppress(subprocess.TimeoutExpired):
                master.wait(timeout=1.0)

    def _await_ready(self, workers: int, timeout_s: float) -> None:
        """Poll the master's JSON until it and `workers` workers are ALIVE (bounded)."""
        deadline = time.monotonic() + timeout_s
        last = "no answer from the master's web UI yet"
        while True:
            self.check_alive()
            try:
                state = self.master_json()
            except (OSError, urllib.error.URLError, ValueError) as exc:
                last = f"master web UI: {exc}"
            else:
                alive = sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")
                if state.get("status") == "ALIVE" and alive >= workers:
                    return
                last = f"master {state.get('status')}, {alive} of {workers} workers ALIVE"
            if time.monotonic() >= deadline:
                tails = "\n".join(f"--- {d.name}:\n{d.log_tail(10)}" for d in self._daemons)
                raise StandaloneError(
                    f"Spark standalone cluster not ready after {timeout_s:.0f} s ({last})\n{tails}"
                )
            # A bounded poll interval, spent waiting on the master so its death wakes us.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._daemons[0].process.wait(timeout=_POLL_INTERVAL_S)

    def stop(self, timeout_s: float = 15.0) -> None:
        """Stop the workers (and their executors), then the master: SIGTERM to each process
        group, SIGKILL to any still running at the timeout. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        # Workers first, so none is left trying to reach a master that is gone.
        ordered = [*self._daemons[1:], self._daemons[0]]
        for daemon in ordered:
            _signal_group(daemon.process, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for daemon in ordered:
            try:
                daemon.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(daemon.process, signal.SIGKILL)
                daemon.process.wait()
            # The group may outlive its leader (an executor a worker launched): end it too.
            _signal_group(daemon.process, signal.SIGKILL)
        if self._owns_work_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> StandaloneCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    # Each daemon leads its own session (start_new_session), so its pid is its group id.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def _daemon_env(
    spark_home: Path, daemon_memory: str, conf_dir: Path, local_dir: Path
) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "SPARK_HOME": str(spark_home),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_DAEMON_MEMORY": daemon_memory,
            # An empty conf dir: no spark-env.sh or spark-defaults.conf of the user's changes
            # the ports or memory chosen here.
            "SPARK_CONF_DIR": str(conf_dir),
            # The executors' scratch (shuffle files, spills) under the work dir too, so `stop`
            # leaves nothing behind in /tmp.
            "SPARK_LOCAL_DIRS": str(local_dir),
            # See the module docstring: a taken master port must fail, not move.
            "SPARK_MASTER_OPTS": "-Dspark.port.maxRetries=0",
            # The executors' Python workers run the driver's interpreter anyway (PySpark sends
            # its path with each task); the same default for anything started here.
            "PYSPARK_PYTHON": env.get("PYSPARK_PYTHON", sys.executable),
        }
    )
    return env


def _spawn(
    name: str, spark_home: Path, args: Sequence[str], env: Mapping[str, str], work_dir: Path
) -> _Daemon:
    log_path = work_dir / f"{name}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(spark_home / "bin" / "spark-class"), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=work_dir,  # never a dir whose stray .py files would shadow modules
            start_new_session=True,
        )
    return _Daemon(name, process, log_path)


def start_standalone(
    workers: int = 2,
    *,
    cores: int = 1,
    memory: str = "1g",
    work_dir: Path | None = None,
    daemon_memory: str = DEFAULT_DAEMON_MEMORY,
    timeout_s: float = 90.0,
    attempts: int = 3,
    spark_home: Path | None = None,
) -> StandaloneCluster:
    """Start a master and `workers` workers (each offering `cores` cores and `memory` to
    executors) on 127.0.0.1, and return once the master reports them all ALIVE.

    `work_dir` holds the daemons' logs and the workers' dirs (default: a new temporary dir,
    removed by `stop`). Raises JavaNotFoundError without Java, StandaloneError when a daemon dies
    or the cluster is not ready within `timeout_s` (the daemons are stopped then).
    """
    if workers < 1 or cores < 1:
        raise ValueError(f"need at least one worker and one core, got {workers} and {cores}")
    home = spark_home if spark_home is not None else pyspark_home()
    find_java()
    owns = work_dir is None
    root = Path(tempfile.mkdtemp(prefix="ketch-spark-")) if work_dir is None else work_dir
    root.mkdir(parents=True, exist_ok=True)
    conf_dir = root / "conf"
    conf_dir.mkdir(exist_ok=True)
    local_dir = root / "local"
    local_dir.mkdir(exist_ok=True)
    env = _daemon_env(home, daemon_memory, conf_dir, local_dir)
    try:
        for attempt in range(1, attempts + 1):
            cluster = _start_master(home, env, root)
            try:
                # Workers started before the master listens back off ~10 s before retrying
                # to register: start them once the master answers.
                cluster._await_ready(0, timeout_s)
                cluster = _start_workers(cluster, home, env, workers, cores, memory)
                cluster._await_ready(workers, timeout_s)
            except StandaloneError:
                master = cluster._daemons[0]
                # Judged before stop(), which ends the master too.
                port_taken = master.exited() and any(m in master.log_tail() for m in _BIND_FAILURES)
                cluster.stop()
                if port_taken and attempt < attempts:
                    continue  # another process took a port between our check and the bind
                raise
            except BaseException:  # Ctrl-C while starting: nothing may outlive us
                cluster.stop()
                raise
            cluster._owns_work_dir = owns
            return cluster
    except BaseException:
        if owns:
            shutil.rmtree(root, ignore_errors=True)
        raise
    raise AssertionError("unreachable: the last attempt returns or raises")


def _start_master(home: Path, env: Mapping[str, str], root: Path) -> StandaloneCluster:
    master_port, webui_port = _free_port(), _free_port()
    while webui_port == master_port:  # two calls may hand out the same free port
        webui_port = _free_port()
    args = [MASTER_CLASS, "--host", HOST, "--port", str(master_port)]
    master = _spawn("master", home, [*args, "--webui-port", str(webui_port)], env, root)
    return StandaloneCluster(master_port, webui_port, root, [master], owns_work_dir=False)


def _start_workers(
    cluster: StandaloneCluster,
    home: Path,
    env: Mapping[str, str],
    workers: int,
    cores: int,
    memory: str,
) -> StandaloneCluster:
    """The cluster with `workers` more daemons registering with its master (not yet ALIVE)."""
    daemons = list(cluster._daemons)
    try:
        for i in range(workers):
            worker_dir = cluster.work_dir / f"worker-{i}"
            worker_dir.mkdir(exist_ok=True)
            args = [WORKER_CLASS, "--host", HOST, "--port", "0", "--webui-port", "0"]
            args += ["--cores", str(cores), "--memory", memory, "--work-dir", str(worker_dir)]
            name = f"worker-{i}"
            daemons.append(_spawn(name, home, [*args, cluster.master_url], env, worker_dir))
    finally:
        # Everything spawned so far belongs to the returned cluster (stopped on failure).
        grown = StandaloneCluster(
            cluster.master_port, cluster.webui_port, cluster.work_dir, daemons, owns_work_dir=False
        )
        if len(daemons) < workers + 1:
            grown.stop()
    return grown
