"""`ketch` client commands as real processes against a three-broker process cluster
(testkit/processes.py) whose broker 0 is killed: with a `--bootstrap` list that starts with the
dead broker, `ketch produce`, `ketch consume` and `ketch topic describe` still work through the
other two (issue 23: they used to fail at once with "cannot reach the cluster"). With every
broker down, a command keeps trying for CLI_REACH_TIMEOUT_MS, then names the whole list and
exits 1.

Which address a client tries first is covered by tests/unit/client/test_client_reach.py; here
the dead broker is also still in the metadata the commands fetch (until the controller fences
it) and leads partitions until they move, so each command meets it on the way.

One scenario, in order, on the wall clock: the waits are the commands' own bounded timeouts
and the harness's bounded polls, never sleeps. Each command runs in a session of its own and
is killed by its PID if it outlives its bound; the harness kills the nodes by PID at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import pytest

from cli.bootstrap import BOOTSTRAP_ENV
from cli.common import CLI_REACH_TIMEOUT_MS
from testkit.probes import create_topic, wait_fully_replicated
from testkit.processes import REPO, ProcessCluster, running_cluster
from tests.integration.cluster_properties import PROPERTIES

pytestmark = pytest.mark.slow

TOPIC: Final = "orders"
PARTITIONS: Final = 3
RECORDS: Final = [f"record-{i}" for i in range(6)]
WAIT_S: Final = 30.0
# A command's bound: the producer's delivery timeout (30 s) covers a leader moving off the dead
# broker; the interpreter's start-up adds about a second.
COMMAND_S: Final = 45.0


async def ketch(
    argv: Sequence[str], stdin: bytes = b"", *, timeout_s: float = COMMAND_S
) -> tuple[int, str, str]:
    """`python -m cli.main ARGV` in this checkout, without KETCH_BOOTSTRAP from the caller;
    (exit code, stdout, stderr). Killed by its PID (its whole session) past `timeout_s`."""
    env = {k: v for k, v in os.environ.items() if k != BOOTSTRAP_ENV}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli.main",
        *argv,
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin), timeout_s)
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def bootstrap_list(cluster: ProcessCluster) -> str:
    """Every broker, broker 0 (the one killed) first."""
    return ",".join(str(cluster.addresses[b]) for b in sorted(cluster.addresses))


async def prepare_topic(cluster: ProcessCluster) -> None:
    client = cluster.client()
    try:
        addresses = list(cluster.addresses.values())
        configs = {"min.insync.replicas": "2"}
        await create_topic(
            client, addresses, TOPIC, partitions=PARTITIONS, replication_factor=3, configs=configs
        )
        await wait_fully_replicated(client, addresses, TOPIC, PARTITIONS, timeout_s=WAIT_S)
    finally:
        await client.close()


async def test_commands_work_through_the_live_brokers_then_say_none_is_reachable(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path, PROPERTIES, brokers=3) as cluster:
        await prepare_topic(cluster)
        bootstrap = bootstrap_list(cluster)
        assert bootstrap.startswith(f"{cluster.addresses[0]},")
        await cluster.broker(0).kill()

        lines = "".join(f"{r}\n" for r in RECORDS).encode()
        code, _, err = await ketch(["produce", TOPIC, "--bootstrap", bootstrap], lines)
        assert code == 0, err
        assert f"{len(RECORDS)} of {len(RECORDS)} record(s) acknowledged (acks=all)" in err

        consume = ["consume", TOPIC, "--from-beginning", "--max-messages", str(len(RECORDS))]
        code, out, err = await ketch([*consume, "--timeout-ms", "20000", "--bootstrap", bootstrap])
        assert code == 0, err
        assert sorted(out.splitlines()) == RECORDS

        describe = ["topic", "describe", TOPIC, "--json", "--bootstrap", bootstrap]
        code, out, err = await ketch(describe)
        assert code == 0, err
        partitions = json.loads(out)["partitions"]
        assert len(partitions) == PARTITIONS
        # Broker 0 was fenced long before (its session is 600 ms): its leaderships moved.
        assert all(p["leader"] in (1, 2) for p in partitions), partitions

        await cluster.broker(1).kill()
        await cluster.broker(2).kill()
        started = time.monotonic()
        code, _, err = await ketch(["topic", "list", "--bootstrap", bootstrap])
        elapsed_s = time.monotonic() - started
        assert code == 1, err
        assert f"cannot reach the cluster at {bootstrap}: connection refused" in err
        assert "Traceback" not in err
        # It kept trying its list (each address after its reconnect backoff) rather than give
        # up at the first refusal (milliseconds), and not for much longer than the reach
        # timeout. Not its exact length: the client stops once the next backoff would pass its
        # deadline, so it may end a backoff early (CI saw 4.96 s of 5).
        timeout_s = CLI_REACH_TIMEOUT_MS / 1000
        assert timeout_s / 2 <= elapsed_s < timeout_s + 10
