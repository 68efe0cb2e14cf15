"""The bare msgpack echo server as a process of its own: the floor a broker in another process
is measured against.

    python -m bench.echo_process [--loop uvloop|asyncio]

It prints the port it listens on (127.0.0.1, chosen by the OS) as one line on stdout, then
echoes until killed. `echo_server_process()` starts it and yields the port; the caller's
`finally` kills it by PID.

Why a second floor: the in-process floor (bench/rpc.py `echo_floor`) has client and server on
one event loop, so a round trip costs no process wake-up; a broker started by
`ketch bench latency` is another process, and every round trip to it pays two wake-ups across
processes (on this 2-core machine, ~75 us against the in-process ~26 us). Ratios against this
floor measure what ketch adds, not what the operating system does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import select
import subprocess
import sys
from collections.abc import Iterator, Sequence

from bench.rpc import serve_echo
from runtime.net.tcp import new_event_loop

STARTUP_TIMEOUT_S = 30.0


def _announce(port: int) -> None:
    print(port, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.echo_process", description=__doc__)
    parser.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    args = parser.parse_args(argv)
    loop_factory = new_event_loop if args.loop == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve_echo(_announce))
    return 0


@contextlib.contextmanager
def echo_server_process(loop: str = "uvloop") -> Iterator[int]:
    """Start the echo server in a child process; yield its port; kill it (by PID) after."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.echo_process", "--loop", loop],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        readable, _, _ = select.select([process.stdout], [], [], STARTUP_TIMEOUT_S)
        line = process.stdout.readline() if readable else ""
        if not line.strip().isdigit():
            raise RuntimeError(f"the echo process did not announce a port: {line!r}")
        yield int(line)
    finally:
        process.kill()
        process.wait(timeout=STARTUP_TIMEOUT_S)
        if process.stdout is not None:
            process.stdout.close()


if __name__ == "__main__":
    sys.exit(main())
