"""`ketch ARGV` as a child process against a process cluster, for the tests that drive the real
command line: its exit code and output, bounded in time, killed by PID if it hangs. Without the
caller's KETCH_BOOTSTRAP, and with `--bootstrap` at the cluster's broker 0."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import Final

from testkit.processes import REPO, ProcessCluster

COMMAND_TIMEOUT_S: Final = 30.0


async def ketch(cluster: ProcessCluster, *argv: str) -> tuple[int, str, str]:
    """`ketch ARGV --bootstrap <broker 0>` as a process: (exit code, stdout, stderr)."""
    env = {k: v for k, v in os.environ.items() if k != "KETCH_BOOTSTRAP"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli.main",
        *argv,
        "--bootstrap",
        str(cluster.addresses[0]),
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), COMMAND_TIMEOUT_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGKILL)
        await process.wait()
        raise AssertionError(
            f"`ketch {' '.join(argv)}` did not end in {COMMAND_TIMEOUT_S} s"
        ) from None
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()
