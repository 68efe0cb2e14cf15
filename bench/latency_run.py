"""Runs `ketch bench latency` (bench/latency.py has the command line and the scenario list).

One thread, one event loop per phase: `execute` runs the floors on fresh loops, then the
cluster scenarios on one more; the progress display and the results are only touched from that
thread, so nothing needs a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import platform
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from bench.latency import EXIT_FAILED, EXIT_OK, Plan
from bench.latency_cluster import in_process_cluster, process_cluster, process_commands_available
from bench.latency_report import ScenarioResult, print_table, write_json, write_plot
from bench.latency_scenarios import (
    E2E_FETCH_MAX_WAIT_MS,
    THROUGHPUT_BATCH_BYTES,
    THROUGHPUT_PARTITIONS,
    THROUGHPUT_PRODUCERS,
    Bench,
    Load,
    acks_name,
    e2e_scenario,
    produce_scenario,
    throughput_scenario,
)
from bench.rpc import Tally, echo_floor
from runtime.clock import SystemClock
from runtime.net.client import Client
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address

FLOOR_REQUESTS_PER_S: Final = 10_000  # floor requests per second of its share (~30 us each)
FLOOR_MIN_REQUESTS: Final = 500
FLOOR_WARMUP: Final = 200
TABLE_WIDTH: Final = 150
_TICK_S: Final = 0.1
EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT, as the shell reports a Ctrl-C


def execute(plan: Plan, *, json_path: Path | None, plot_path: Path | None) -> int:
    cluster_kind = _cluster_kind(plan)
    console = Console()
    if not console.is_terminal:
        console.width = TABLE_WIDTH  # rich assumes 80 columns for a file or pipe
    progress = Progress(
        TextColumn("{task.description:<22}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        auto_refresh=False,  # refreshed from the loop's ticker: no thread contending for the GIL
        transient=True,
    )
    config = _config(plan, cluster_kind)
    try:
        with progress:
            results = _floors(plan, progress)
            with asyncio.Runner(loop_factory=functools.partial(_new_loop, plan.loop)) as runner:
                cluster_results, facts = runner.run(_measure_cluster(plan, cluster_kind, progress))
    except KeyboardInterrupt:
        # The Runner cancelled the run; the cluster's exits have stopped its children.
        print("ketch bench latency: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # the benchmark could not run: say why, no traceback
        print(f"ketch bench latency: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    config.update(facts)
    results += cluster_results
    print_table(console, config, results)
    try:
        if json_path is not None:
            write_json(json_path, config, results)
        if plot_path is not None:
            title = f"ketch request latency ({config['mode']}, {config['cluster']}, {plan.loop})"
            logs = write_plot(plot_path, title, results)
            written = ", ".join(str(p) for p in logs)
            console.print(f"plot: {plot_path}; HdrHistogram logs: {written}")
    except OSError as exc:
        print(f"ketch bench latency: cannot write the results: {exc}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


def _new_loop(name: str) -> asyncio.AbstractEventLoop:
    if name == "uvloop":
        import uvloop

        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        return loop
    return asyncio.new_event_loop()


def _cluster_kind(plan: Plan) -> str:
    if plan.bootstrap is not None:
        return "external"
    if plan.in_process:
        return "in-process"
    if process_commands_available():
        return "processes"
    print(
        "ketch bench latency: `ketch controller`/`ketch broker` are not available; using the "
        "in-process cluster (--in-process): followers share the client's event loop",
        file=sys.stderr,
    )
    return "in-process"


def _config(plan: Plan, cluster_kind: str) -> dict[str, Any]:
    return {
        "acks": None if plan.acks is None else acks_name(plan.acks),
        "rate": plan.rate,
        "mode": "closed-loop" if plan.rate is None else f"open-loop {plan.rate}/s",
        "coordinated_omission_correction": (
            None if plan.rate is None else "latency from the intended send time"
        ),
        "duration_s": plan.duration_s,
        "scenario_duration_s": round(plan.share_s, 3),
        "warmup_s": round(plan.warmup_s, 3),
        "size_bytes": plan.size_bytes,
        "cluster": cluster_kind,
        "brokers": None if plan.bootstrap is not None else plan.brokers,
        "bootstrap": None
        if plan.bootstrap is None
        else [f"{a.host}:{a.port}" for a in plan.bootstrap],
        "loop": plan.loop,
        "floor_loops": [plan.loop, plan.other_loop],
        "producer_linger_ms": 0,
        "e2e_acks": "all",
        "e2e_fetch_max_wait_ms": E2E_FETCH_MAX_WAIT_MS,
        "throughput_producers": THROUGHPUT_PRODUCERS,
        "throughput_batch_bytes": THROUGHPUT_BATCH_BYTES,
        "throughput_partitions": THROUGHPUT_PARTITIONS,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def _floors(plan: Plan, progress: Progress) -> list[ScenarioResult]:
    """The bare echo on the run's loop and on the other one, each on a fresh loop."""
    requests = max(FLOOR_MIN_REQUESTS, round(plan.share_s / 2 * FLOOR_REQUESTS_PER_S))
    results = []
    for name, loop_name in (("floor", plan.loop), (f"floor_{plan.other_loop}", plan.other_loop)):
        task = progress.add_task(name, total=1)
        progress.refresh()
        serial = Tally()
        started_at = time.time()
        # A Runner, not a bare loop: on the way out it cancels and awaits the echo server's
        # connection handlers, which would otherwise leak their sockets.
        with asyncio.Runner(loop_factory=functools.partial(_new_loop, loop_name)) as runner:
            # echo_floor also runs a 64-in-flight pass into the second tally; unused here.
            runner.run(echo_floor(requests, FLOOR_WARMUP, serial, Tally()))
        progress.update(task, completed=1)
        progress.refresh()
        results.append(
            ScenarioResult(
                name,
                f"bare msgpack echo round trip, 127.0.0.1 TCP, 1 in flight, {loop_name}",
                serial.histogram,
                serial.elapsed_ns / 1e9,
                started_at,
            )
        )
    return results


@contextlib.asynccontextmanager
async def _cluster(
    plan: Plan, kind: str, transport: TcpTransport
) -> AsyncIterator[tuple[list[Address], int]]:
    """The brokers' addresses and how many brokers there are."""
    if plan.bootstrap is not None:
        client = Client(
            plan.bootstrap, transport=transport, clock=SystemClock(), client_id="bench-probe"
        )
        try:
            view = await client.refresh_metadata()
        finally:
            await client.close()
        yield plan.bootstrap, len(view.brokers)
        return
    start = in_process_cluster if kind == "in-process" else process_cluster
    min_isr = min(2, plan.brokers)
    async with start(plan.brokers, transport, min_isr) as addresses:
        yield addresses, plan.brokers


async def _measure_cluster(
    plan: Plan, kind: str, progress: Progress
) -> tuple[list[ScenarioResult], dict[str, Any]]:
    transport = TcpTransport()
    load = Load(plan.share_s, plan.warmup_s, plan.rate, plan.size_bytes)
    flat_out = Load(plan.share_s, plan.warmup_s, None, plan.size_bytes)
    scenarios: list[tuple[str, Callable[[Bench], Awaitable[ScenarioResult]]]] = [
        (f"produce acks={acks_name(a)}", functools.partial(produce_scenario, acks=a, load=load))
        for a in plan.produce_acks
    ]
    scenarios.append(("e2e", functools.partial(e2e_scenario, load=load)))
    scenarios += [
        (
            f"throughput acks={acks_name(a)}",
            functools.partial(throughput_scenario, acks=a, load=flat_out),
        )
        for a in plan.throughput_acks
    ]
    tasks = [progress.add_task(label, total=plan.share_s + plan.warmup_s) for label, _ in scenarios]
    starting = progress.add_task("starting cluster", total=None)
    progress.refresh()
    results: list[ScenarioResult] = []
    async with _cluster(plan, kind, transport) as (addresses, brokers):
        progress.update(starting, total=1, completed=1)
        rf = max(1, min(3, brokers))
        bench = Bench(addresses, transport, replication_factor=rf, min_insync_replicas=min(2, rf))
        for task, (_, scenario) in zip(tasks, scenarios, strict=True):
            async with _ticking(progress, task):
                results.append(await scenario(bench))
    return results, {"replication_factor": rf, "min_insync_replicas": min(2, rf)}


@contextlib.asynccontextmanager
async def _ticking(progress: Progress, task: TaskID) -> AsyncIterator[None]:
    """Advances `task` by wall time while the scenario runs (its own loop stays untouched)."""
    began = time.monotonic()

    async def tick() -> None:
        while True:
            progress.update(task, completed=time.monotonic() - began)
            progress.refresh()
            await asyncio.sleep(_TICK_S)

    ticker = asyncio.create_task(tick(), name="bench progress")
    try:
        yield
    finally:
        ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await ticker
        total = progress.tasks[task].total or 0.0
        progress.update(task, completed=total)
        progress.refresh()
