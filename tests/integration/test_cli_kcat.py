"""`ketch produce` and `ketch consume` on par with kcat (issue 23), as real `ketch` processes
(`python -m cli.main`, the entry point's `main`) against a one-broker process cluster
(testkit/processes.py): keys, headers, a chosen partition and a compression codec going in;
--format and --json showing them coming out; --count/--size/--rate generating load; kcat's
--offset forms and --from-timestamp; two `consume --group` processes sharing a two-partition
topic with no record lost or read twice, and a later member resuming at the group's commits; and
a bad flag answered with consume's own usage.

On the wall clock: every wait is bounded (a command's own timeout, a bounded wait for a line of
its output, the harness's bounded polls), never a sleep. Each command runs in a session of its
own and is killed by its PID if it outlives its bound; the harness kills the nodes by PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Final

import pytest
import pytest_asyncio

from cli.bootstrap import BOOTSTRAP_ENV
from cli.produce import generated_value
from testkit.probes import create_topic, wait_fully_replicated
from testkit.processes import REPO, ProcessCluster, running_cluster
from tests.integration.cluster_properties import CLUSTER_PROPERTIES

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

WAIT_S: Final = 30.0
COMMAND_S: Final = 40.0  # a command's bound: start-up, a join, a delivery
ANNOUNCED: Final = re.compile(r"group 'readers' generation (\d+): reading (.*)$")


def _sigint_as_from_a_terminal() -> None:
    """SIGINT's default disposition in the child, as an interactive shell gives it: a suite run
    in the background inherits SIGINT ignored, and Python then installs no KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


async def start(argv: Sequence[str], cluster: ProcessCluster | None) -> asyncio.subprocess.Process:
    """`ketch ARGV [--bootstrap <the cluster's broker>]`, in a session of its own, without the
    caller's KETCH_BOOTSTRAP."""
    env = {k: v for k, v in os.environ.items() if k != BOOTSTRAP_ENV}
    bootstrap = [] if cluster is None else ["--bootstrap", str(cluster.addresses[0])]
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli.main",
        *argv,
        *bootstrap,
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_sigint_as_from_a_terminal,
    )


def kill(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


async def ketch(
    cluster: ProcessCluster | None, argv: Sequence[str], stdin: bytes = b""
) -> tuple[int, str, str]:
    """Run `ketch ARGV` to its end (a client command of `cluster`): (exit code, stdout,
    stderr)."""
    process = await start(argv, cluster)
    try:
        out, err = await asyncio.wait_for(process.communicate(stdin), COMMAND_S)
    finally:
        kill(process)
        await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


class Running:
    """A `ketch` process whose output lines are collected while it runs; `news` is set at each
    line (shared by processes whose output a wait looks at together)."""

    def __init__(self, process: asyncio.subprocess.Process, news: asyncio.Event) -> None:
        self.process = process
        self.out: list[str] = []
        self.err: list[str] = []
        self._news = news
        assert process.stdout is not None
        assert process.stderr is not None
        self._readers = [
            asyncio.ensure_future(self._collect(process.stdout, self.out)),
            asyncio.ensure_future(self._collect(process.stderr, self.err)),
        ]

    async def _collect(self, stream: asyncio.StreamReader, into: list[str]) -> None:
        while line := await stream.readline():
            into.append(line.decode().rstrip("\n"))
            self._news.set()

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        """Until `condition()` holds, re-checked at each new line; bounded by WAIT_S."""

        async def wait() -> None:
            while not condition():
                if self.process.returncode is not None and all(r.done() for r in self._readers):
                    raise AssertionError(f"{what}: the process ended first; stderr {self.err}")
                self._news.clear()
                await self._news.wait()

        try:
            await asyncio.wait_for(wait(), WAIT_S)
        except TimeoutError:
            raise AssertionError(f"{what}: not within {WAIT_S} s; stderr {self.err}") from None

    def generations(self) -> list[tuple[int, list[str]]]:
        """(generation, partitions) of each assignment announced on stderr."""
        found = []
        for line in self.err:
            match = ANNOUNCED.search(line)
            if match:
                found.append((int(match[1]), match[2].split(", ")))
        return found

    async def interrupt(self) -> int:
        """Ctrl-C, then the exit code (bounded; killed if it does not end)."""
        self.process.send_signal(signal.SIGINT)
        try:
            await asyncio.wait_for(asyncio.gather(*self._readers), COMMAND_S)
            return await asyncio.wait_for(self.process.wait(), COMMAND_S)
        finally:
            kill(self.process)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ProcessCluster]:
    root: Path = tmp_path_factory.mktemp("kcat")
    async with running_cluster(root, CLUSTER_PROPERTIES, brokers=1) as started:
        await started.wait_running([0], timeout_s=WAIT_S)
        yield started


async def new_topic(cluster: ProcessCluster, name: str, partitions: int) -> None:
    client = cluster.client()
    try:
        addresses = list(cluster.addresses.values())
        await create_topic(
            client, addresses, name, partitions=partitions, replication_factor=1, configs={}
        )
        await wait_fully_replicated(client, addresses, name, partitions, timeout_s=WAIT_S)
    finally:
        await client.close()


async def test_keys_headers_partition_and_codec_shown_by_format_and_json(
    cluster: ProcessCluster,
) -> None:
    await new_topic(cluster, "kv", 3)
    before_ms = int(time.time() * 1000)
    produce = ["produce", "kv", "-K", ":", "--partition", "2", "--header", "source=cli"]
    produce += ["--header", "trace", "--compression", "zstd", "--linger-ms", "0"]
    code, _, err = await ketch(cluster, produce, b"k1:v1\nk2:v 2\n")
    after_ms = int(time.time() * 1000)
    assert code == 0, err
    assert "2 of 2 record(s) acknowledged (acks=all)" in err

    consume = ["consume", "kv", "--from-beginning", "--max-messages", "2", "--timeout-ms", "20000"]
    code, out, err = await ketch(cluster, [*consume, "--format", "%t|%p|%o|%k|%s|%K|%S|%h|%T\\n"])
    assert code == 0, err
    rows = [line.split("|") for line in out.splitlines()]
    assert [row[:8] for row in rows] == [
        ["kv", "2", "0", "k1", "v1", "2", "2", "source=cli,trace=NULL"],
        ["kv", "2", "1", "k2", "v 2", "2", "3", "source=cli,trace=NULL"],
    ]
    assert all(before_ms <= int(row[8]) <= after_ms for row in rows), (before_ms, rows)

    code, out, err = await ketch(cluster, [*consume, "--json"])
    assert code == 0, err
    documents = [json.loads(line) for line in out.splitlines()]
    headers = [{"key": "source", "value": "cli"}, {"key": "trace", "value": None}]
    assert [(d["partition"], d["offset"], d["key"], d["value"]) for d in documents] == [
        (2, 0, "k1", "v1"),
        (2, 1, "k2", "v 2"),
    ]
    assert all(d["topic"] == "kv" and d["headers"] == headers for d in documents)
    assert [d["timestamp"] for d in documents] == [int(row[8]) for row in rows]

    # The batch on disk is zstd: the codec was the producer's, not a default.
    code, out, err = await ketch(None, ["dump-log", str(cluster.broker_dir(0) / "kv-2")])
    assert code == 0, err
    assert "compresscodec: zstd" in out


async def test_generated_load_and_kcats_offsets(cluster: ProcessCluster) -> None:
    await new_topic(cluster, "seq", 1)
    generate = ["produce", "seq", "--count", "10", "--size", "12", "--rate", "200", "--acks", "1"]
    code, _, err = await ketch(cluster, generate, b"stdin is not read\n")
    assert code == 0, err
    assert "10 of 10 record(s) acknowledged (acks=1)" in err
    values = [generated_value(i, 12).decode() for i in range(10)]

    async def consumed(*flags: str) -> list[str]:
        code, out, err = await ketch(cluster, ["consume", "seq", "--timeout-ms", "1500", *flags])
        assert code == 0, err
        return out.splitlines()

    assert await consumed("--offset", "-3") == values[7:]  # kcat -o -3: three before the end
    assert await consumed("--offset", "4", "--max-messages", "2") == values[4:6]
    assert await consumed("--from-timestamp", "2000-01-01T00:00:00Z", "--print-offsets") == [
        f"0\t{i}\t{v}" for i, v in enumerate(values)
    ]
    later = str(int(time.time() * 1000) + 60_000)
    assert await consumed("--from-timestamp", later) == []  # nothing at or after T: the end


async def test_two_group_members_share_a_topic_and_a_later_one_resumes(
    cluster: ProcessCluster,
) -> None:
    await new_topic(cluster, "shared", 2)
    member = ["consume", "shared", "--group", "readers", "--from-beginning", "-K", "="]
    member += ["--timeout-ms", "60000"]
    news = asyncio.Event()
    a = Running(await start(member, cluster), news)
    b: Running | None = None
    try:
        await a.until(lambda: len(a.generations()) == 1, "a joins")
        assert sorted(a.generations()[0][1]) == ["shared-0", "shared-1"]
        b = Running(await start(member, cluster), news)

        def split() -> bool:
            """a and b in the same generation, one partition each."""
            assert b is not None
            if not b.generations():
                return False
            a_generation, a_owns = a.generations()[-1]
            b_generation, b_owns = b.generations()[-1]
            return a_generation == b_generation and len(a_owns) == len(b_owns) == 1

        # b's join makes a rebalance, which a hears of in a heartbeat.
        await a.until(split, "a and b share the partitions")
        assert sorted(a.generations()[-1][1] + b.generations()[-1][1]) == ["shared-0", "shared-1"]

        lines = [f"k{i}=value-{i}" for i in range(100)]
        code, _, err = await ketch(
            cluster, ["produce", "shared", "-K", "="], "".join(f"{x}\n" for x in lines).encode()
        )
        assert code == 0, err
        await a.until(lambda: len(a.out) + len(b.out if b else []) >= 100, "all 100 printed")
        assert await a.interrupt() == 130
        assert await b.interrupt() == 130
        assert sorted(a.out + b.out) == sorted(lines)  # none lost, none printed twice
        assert a.out  # each had a partition, and the keys spread over both
        assert b.out
    finally:
        kill(a.process)
        if b is not None:
            kill(b.process)

    # A later member of the group starts at the commits, not at the beginning.
    later = [f"k{i}=later-{i}" for i in range(20)]
    code, _, err = await ketch(
        cluster, ["produce", "shared", "-K", "="], "".join(f"{x}\n" for x in later).encode()
    )
    assert code == 0, err
    resumed = [*member[:-1], "3000"]
    code, out, err = await ketch(cluster, resumed)
    assert code == 0, err
    assert sorted(out.splitlines()) == sorted(later)
    assert "Processed a total of 20 message(s)" in err


async def test_a_bad_flag_prints_consumes_own_usage(cluster: ProcessCluster) -> None:
    code, _, err = await ketch(cluster, ["consume", "shared", "--bogus"])
    assert code == 2
    assert err.startswith("usage: ketch consume"), err
    assert "ketch consume: error: unrecognized arguments: --bogus" in err
