"""`ketch bench latency --protocol kafka --peer-cmd CMD`: another Kafka-compatible broker, started
by the benchmark and measured in the same run as ketch, scenario by scenario.

CMD is a shell command template with placeholders, filled by the benchmark:

* `{port}` (required): the port the peer's Kafka listener must take on 127.0.0.1. It and the
  next PORT_SPAN - 1 ports were free when chosen, so a multi-broker peer may use port+i;
  the benchmark bootstraps from 127.0.0.1:{port} and learns the rest from Metadata.
* `{dir}`: a fresh, empty scratch directory (the peer's data), removed afterwards.
* `{native_port}`: a base port for a peer that needs other ports too. Free when chosen are
  base+0..7, +100..107, +200..207 and +300..307: exactly what `ketch up --port` takes (broker i
  at port+i, the controller at port+100, metrics at port+200+i and port+300).

A second ketch as the peer (what the tests run):

    ketch bench latency --protocol kafka --peer-cmd \\
        'ketch up --brokers 3 --port {native_port} --kafka-port {port} --data-dir {dir}'

(or `python -m cli.main up ...` when `ketch` is not on PATH). An Apache Kafka in KRaft mode
would be started by a script that formats {dir} and writes a server.properties with
`listeners=PLAINTEXT://127.0.0.1:{port}`; anything works that serves Kafka clients on {port}.

Lifecycle: the command runs under `/bin/sh -c` in its own process group (its own session), with
stdout and stderr in `<scratch>/peer.log` (its tail is shown if it fails). The peer is ready when
a Metadata request through the Kafka client succeeds, bounded by READY_TIMEOUT_S; then the
benchmark waits (at most SETTLE_S) until Metadata lists `want_brokers` brokers or the count stops
changing, since a multi-broker peer's first broker answers before the others registered. At the
end the group gets SIGTERM (`ketch up` then stops its nodes in order; they run in a session of
their own, and PR_SET_PDEATHSIG stops them should `ketch up` die) and, after STOP_TIMEOUT_S,
SIGKILL, by process-group id. Owned by the coroutine that entered `peer_broker` (it alone starts,
polls and stops the process), so no lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import socket
import string
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

LOCALHOST: Final = "127.0.0.1"
PLACEHOLDERS: Final = frozenset({"port", "dir", "native_port"})
PORT_SPAN: Final = 8
NATIVE_OFFSETS: Final = tuple(base + i for base in (0, 100, 200, 300) for i in range(PORT_SPAN))
READY_TIMEOUT_S: Final = 90.0
SETTLE_S: Final = 10.0
STOP_TIMEOUT_S: Final = 60.0
PROBE_TIMEOUT_S: Final = 5.0
_POLL_S: Final = 0.2
_PORT_ATTEMPTS: Final = 200
_LOG_TAIL_CHARS: Final = 3_000

Probe = Callable[[str], Awaitable[int]]
"""A Metadata request through a Kafka client: bootstrap -> how many brokers it lists."""


class PeerError(Exception):
    """The peer did not start, or did not answer Metadata in time."""


@dataclass(frozen=True, slots=True)
class Peer:
    command: str  # the template, filled
    bootstrap: str
    brokers: int  # in Metadata when the benchmark began
    pid: int


def template_problem(template: str) -> str | None:
    """What is wrong with a --peer-cmd template, or None."""
    try:
        fields = {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}
    except ValueError as exc:
        return f"--peer-cmd is not a valid template: {exc}"
    if unknown := fields - PLACEHOLDERS:
        return (
            f"--peer-cmd has unknown placeholders {sorted(unknown)}; known: {sorted(PLACEHOLDERS)}"
        )
    if "port" not in fields:
        return "--peer-cmd must contain {port}: the Kafka port the peer listens on"
    return None


def free_base_port(offsets: Iterable[int]) -> int:
    """A port p with p+offset free for every offset: each candidate (an ephemeral port the
    kernel picked) is checked by binding all of its ports at once, released on return. (Another
    process could take one before the peer binds it; a peer that loses that race fails to start
    and the benchmark says so.)"""
    wanted = sorted(set(offsets))
    for _ in range(_PORT_ATTEMPTS):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((LOCALHOST, 0))
            base: int = probe.getsockname()[1]
        if base + wanted[-1] > 65_535:
            continue
        with contextlib.ExitStack() as held:
            try:
                for offset in wanted:
                    sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                    sock.bind((LOCALHOST, base + offset))
            except OSError:
                continue
            return base
    raise PeerError(f"no free port range for the peer after {_PORT_ATTEMPTS} attempts")


@contextlib.asynccontextmanager
async def peer_broker(template: str, probe: Probe, *, want_brokers: int) -> AsyncIterator[Peer]:
    problem = template_problem(template)
    assert problem is None, problem  # checked with the arguments
    scratch = Path(tempfile.mkdtemp(prefix="ketch-bench-peer-"))
    try:
        data = scratch / "data"
        data.mkdir()
        port = free_base_port(range(PORT_SPAN))
        command = template.format(
            port=port,
            dir=shlex.quote(str(data)),
            native_port=free_base_port(NATIVE_OFFSETS),
        )
        log = scratch / "peer.log"
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_shell(
                command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,  # its own process group: stopped as a whole, by id
            )
        try:
            bootstrap = f"{LOCALHOST}:{port}"
            brokers = await _wait_ready(process, bootstrap, probe, want_brokers, log)
            yield Peer(command, bootstrap, brokers, process.pid)
        finally:
            await _stop(process)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _tail(log: Path) -> str:
    try:
        return log.read_text(errors="replace")[-_LOG_TAIL_CHARS:]
    except OSError:
        return "(no log)"


async def _accepts(port: int) -> bool:
    """Whether something accepts TCP connections on the port (before a client is pointed at
    it: librdkafka and aiokafka log every refused connection)."""
    try:
        _reader, writer = await asyncio.wait_for(
            asyncio.open_connection(LOCALHOST, port), PROBE_TIMEOUT_S
        )
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


async def _wait_ready(
    process: asyncio.subprocess.Process, bootstrap: str, probe: Probe, want: int, log: Path
) -> int:
    port = int(bootstrap.rpartition(":")[2])
    deadline = time.monotonic() + READY_TIMEOUT_S
    brokers = 0
    while brokers == 0:
        if process.returncode is not None:
            raise PeerError(f"the peer exited with {process.returncode}:\n{_tail(log)}")
        if time.monotonic() > deadline:
            raise PeerError(
                f"the peer did not answer Metadata on {bootstrap} within "
                f"{READY_TIMEOUT_S:.0f} s:\n{_tail(log)}"
            )
        if await _accepts(port):
            with contextlib.suppress(Exception):  # any client failure: not ready yet
                brokers = await asyncio.wait_for(probe(bootstrap), PROBE_TIMEOUT_S)
        if brokers == 0:
            await asyncio.sleep(_POLL_S)
    settle_until = time.monotonic() + SETTLE_S
    changed_at = time.monotonic()
    while brokers < want and time.monotonic() < settle_until:
        await asyncio.sleep(_POLL_S)
        with contextlib.suppress(Exception):
            now = await asyncio.wait_for(probe(bootstrap), PROBE_TIMEOUT_S)
            if now != brokers:
                brokers, changed_at = now, time.monotonic()
        if time.monotonic() - changed_at > SETTLE_S / 2:
            break  # stable below `want`: a peer with fewer brokers
    return brokers


async def _stop(process: asyncio.subprocess.Process) -> None:
    """SIGTERM to the peer's process group, SIGKILL after STOP_TIMEOUT_S (the group id is the
    shell's pid: start_new_session made it a group leader)."""
    group = process.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
    # The shell may be gone before a process it started has finished its clean stop: wait for
    # the whole group, then kill what is left of it.
    # (No event announces another session's process exiting: polling is the only way.)
    while _group_alive(group) and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(_POLL_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, signal.SIGKILL)
    await process.wait()


def _group_alive(group: int) -> bool:
    """Whether a live (not zombie) process is in the group. Zombies count for killpg(group, 0),
    and an orphan's zombie lasts until init reaps it, which not every container's init does:
    on Linux /proc tells them apart."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue  # exited meanwhile
        if len(fields) > 2 and int(fields[2]) == group and fields[0] != "Z":
            return True
    return False
