"""The EOS application as a process of its own: a consume-transform-produce loop (eos_loop.py's
for librdkafka, test_transactions_eos_clients.py's for aiokafka and kafka-python) run as
`python -m MODULE [CLIENT] SPEC`, so that the test bounds it by its PID. A client call can wait
without a bound whatever its timeout says (librdkafka's send_offsets_to_transaction once the
group coordinator's broker was killed, eos_loop.py says when; kafka-python's transactional calls
take no timeout); in a thread of the test's event loop such a call turned a failure into a hang,
as the loop's shutdown joins every thread of its executor. A process is killed at its deadline
instead, and the test fails with the loop's own account of what it did.

The child (`child_main`) runs the loop with a `Journal`: one JSON object a line, appended and
flushed as the loop goes (what it consumed, the offsets it sent, what it committed or aborted,
every error), so that it survives a kill -9. At the spec's `pause_at` transaction (records
written, offsets sent, not committed) it prints MID_TRANSACTION and waits (bounded) for GO_ON on
its stdin: meanwhile the test kills a broker, or the application itself. Its stderr (tracebacks,
the clients' debug logs, a stack dump if it outlives its run's bound) goes to a log file beside
the journal.

The parent (`App`, `running_app`) starts the child, follows that protocol, reads the result
(the journal's "done" event) and kills the child by PID on every way out. Every wait is bounded
by the child's deadline; a failure's message holds the journal and the log's tail.

Ownership: an App belongs to the test task that started it; the journal is written by the
child alone (its loop's thread, or the thread of its pause, one at a time) and read by the
parent only once the child has ended or been killed. `in_daemon_thread` is for the test's own
short client calls (fill the input, read the output): each is bounded, and one stuck anyway
fails its test on time and is left behind, not joined.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import json
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

WAIT_S: Final = 30.0  # a bound on each client call of a loop, and on a pause
RUN_S: Final = 60.0  # a run's bound in the child (a failover and a session timeout included)
# DUMP_S past RUN_S the child dumps its threads' stacks to its log (a call that ignored its own
# timeout shows there), and EXIT_S after that the parent kills it.
DUMP_S: Final = 5.0
EXIT_S: Final = 10.0
MID_TRANSACTION: Final = "mid-transaction"  # the child's line: paused inside a transaction
GO_ON: Final = "go-on"  # the parent's line: the pause is over
JOURNAL_LINES: Final = 80  # of a failure's message, the last ones
LOG_LINES: Final = 60

# The checkout: the child runs there, so `-m tests.integration...` finds this code.
REPO: Final = Path(__file__).resolve().parents[2]

T = TypeVar("T")
Between = Callable[[int, Any], None]  # runs inside transaction i, before its commit


@dataclass(frozen=True, slots=True)
class LoopSpec:
    """One run of the application: `expected` input records to commit, the journal's path (its
    stderr log beside it), and the transaction to pause in, if any. `flush_at_pause` is
    librdkafka's: its loop does not wait for its records before a pause unless told (the other
    clients' loops always do)."""

    bootstrap: str
    expected: int
    journal: str
    pause_at: int | None = None
    flush_at_pause: bool = False

    def argv(self) -> list[str]:
        return [json.dumps(asdict(self))]

    @classmethod
    def parse(cls, argv: list[str]) -> LoopSpec:
        [text] = argv
        fields = json.loads(text)
        pause_at = fields["pause_at"]
        return cls(
            bootstrap=str(fields["bootstrap"]),
            expected=int(fields["expected"]),
            journal=str(fields["journal"]),
            pause_at=None if pause_at is None else int(pause_at),
            flush_at_pause=bool(fields["flush_at_pause"]),
        )

    @property
    def log(self) -> Path:
        return Path(self.journal).with_suffix(".log")


# -- the child -----------------------------------------------------------------------------------


class Journal:
    """The child's account of its run, one JSON object a line, each flushed to the file as it
    is written (a kill -9 loses none of them)."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())
        self._started = time.monotonic()

    def event(self, event: str, **fields: object) -> None:
        elapsed_s = round(time.monotonic() - self._started, 3)
        self._file.write(json.dumps({"t_s": elapsed_s, "event": event, **fields}) + "\n")
        self._file.flush()

    def batch(self, transaction: int, records: list[tuple[int, int]]) -> None:
        """The records (partition, offset) a transaction consumed, as offset ranges."""
        ranges: dict[int, list[int]] = {}
        for partition, offset in records:
            low, high = ranges.get(partition, [offset, offset])
            ranges[partition] = [min(low, offset), max(high, offset)]
        self.event("consumed", transaction=transaction, count=len(records), ranges=ranges)

    def error(self, what: str, error: object) -> None:
        self.event("error", what=what, error=repr(error))

    def close(self) -> None:
        self._file.close()


def pause(journal: Journal, transaction: int) -> None:
    """Say the transaction is open, and wait (bounded) for the parent to say go on."""
    journal.event("paused", transaction=transaction)
    print(MID_TRANSACTION, flush=True)
    ready, _, _ = select.select([sys.stdin], [], [], WAIT_S)
    line = sys.stdin.readline().strip() if ready else "(nothing)"
    assert line == GO_ON, f"the test never let the loop go on: {line!r}"
    journal.event("resumed", transaction=transaction)


def pausing(spec: LoopSpec, journal: Journal) -> Between:
    """The `between` of a run: the pause at spec.pause_at, nothing in other transactions."""

    def between(transaction: int, _producer: Any) -> None:
        if transaction == spec.pause_at:
            pause(journal, transaction)

    return between


def child_main(run: Callable[[LoopSpec, Journal], int], argv: list[str]) -> None:
    """The child's body: `run(spec, journal)`, the transactions it committed, journaled as
    "done"; an exception is journaled as "failed" (the last error) and ends the process with
    its traceback."""
    spec = LoopSpec.parse(argv)
    faulthandler.dump_traceback_later(RUN_S + DUMP_S, exit=False)
    journal = Journal(spec.journal)
    try:
        journal.event("started", pid=os.getpid(), spec=asdict(spec))
        try:
            transactions = run(spec, journal)
        except BaseException as exc:
            journal.event("failed", error=repr(exc), traceback=traceback.format_exc(limit=8))
            raise
        journal.event("done", transactions=transactions)
    finally:
        journal.close()
        faulthandler.cancel_dump_traceback_later()


# -- the parent ----------------------------------------------------------------------------------


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return "(none)"
    return "\n".join(text.splitlines()[-lines:])


def journal_events(path: Path) -> list[dict[str, Any]]:
    """The journal's events; a line cut short by a kill is left out."""
    events = []
    with contextlib.suppress(FileNotFoundError), path.open(encoding="utf-8") as journal:
        for line in journal:
            with contextlib.suppress(json.JSONDecodeError):
                events.append(json.loads(line))
    return events


class App:
    """One child process running `spec`; killed by PID on the way out of `running_app`."""

    def __init__(
        self, process: asyncio.subprocess.Process, argv: list[str], spec: LoopSpec
    ) -> None:
        self.process = process
        self.argv = argv
        self.spec = spec
        self.deadline = time.monotonic() + RUN_S + DUMP_S + EXIT_S

    def _remaining_s(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    async def mid_transaction(self) -> None:
        """Until the child says it is paused in spec.pause_at; a failure with the child's
        account if it ended or ran out of time first."""
        assert self.process.stdout is not None
        try:
            line = await asyncio.wait_for(self.process.stdout.readline(), self._remaining_s())
        except TimeoutError:
            await self.kill()
            raise AssertionError(self.diagnostics("never paused: killed at its deadline")) from None
        if line.decode(errors="replace").strip() != MID_TRANSACTION:
            with contextlib.suppress(TimeoutError):  # its exit code, when it ended
                await asyncio.wait_for(self.process.wait(), min(EXIT_S, self._remaining_s()))
            raise AssertionError(self.diagnostics(f"never paused (said {line!r})"))

    async def go_on(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{GO_ON}\n".encode())
        await asyncio.wait_for(self.process.stdin.drain(), self._remaining_s())

    async def result(self) -> int:
        """The transactions the child committed, once it has exited with 0 having journaled
        them; otherwise (an exit code, or its deadline: then it is killed) a failure with its
        account."""
        try:
            code = await asyncio.wait_for(self.process.wait(), self._remaining_s())
        except TimeoutError:
            await self.kill()
            raise AssertionError(self.diagnostics("still running at its deadline")) from None
        done = [e for e in journal_events(Path(self.spec.journal)) if e["event"] == "done"]
        if code != 0 or not done:
            raise AssertionError(self.diagnostics("failed"))
        return int(done[-1]["transactions"])

    async def kill(self) -> None:
        """kill -9 by PID, then reap it (a killed process is reaped at once)."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
        await asyncio.wait_for(self.process.wait(), EXIT_S)

    def diagnostics(self, what: str) -> str:
        journal = Path(self.spec.journal)
        events = "\n".join(json.dumps(e) for e in journal_events(journal)[-JOURNAL_LINES:])
        return (
            f"the application {what}: exit code {self.process.returncode}\n"
            f"command: {' '.join(self.argv)}\n"
            f"-- journal {journal} (last {JOURNAL_LINES} events) --\n{events or '(empty)'}\n"
            f"-- log {self.spec.log} (last {LOG_LINES} lines) --\n{_tail(self.spec.log, LOG_LINES)}"
        )


@contextlib.asynccontextmanager
async def running_app(module_args: list[str], spec: LoopSpec) -> AsyncIterator[App]:
    """`python -m *module_args SPEC` started; killed by PID on the way out whatever happens."""
    argv = [sys.executable, "-m", *module_args, *spec.argv()]
    with spec.log.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=REPO, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=log,
        )  # fmt: skip
    app = App(process, argv, spec)
    try:
        yield app
    finally:
        await app.kill()


async def run_app(module_args: list[str], spec: LoopSpec) -> int:
    """A run to its end (spec without a pause): the transactions it committed."""
    async with running_app(module_args, spec) as app:
        return await app.result()


async def kill_mid_transaction(module_args: list[str], spec: LoopSpec) -> None:
    """A run killed with kill -9 once it is paused inside spec.pause_at."""
    assert spec.pause_at is not None, spec
    async with running_app(module_args, spec) as app:
        await app.mid_transaction()
        await app.kill()


async def in_daemon_thread(function: Callable[[], T], timeout_s: float) -> T:
    """`function()` in a daemon thread, awaited for at most `timeout_s`. Not the event loop's
    executor: a call stuck there would hang the loop's shutdown (it joins its threads); a daemon
    thread is left behind instead."""
    loop = asyncio.get_running_loop()
    outcome: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if outcome.done():
            return
        if error is not None:
            outcome.set_exception(error)
        else:
            outcome.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, error = function(), None
        except BaseException as exc:  # handed to the awaiting task
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="eos-client-call", daemon=True).start()
    return await asyncio.wait_for(outcome, timeout_s)
