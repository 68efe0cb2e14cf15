"""Runs `ketch bench latency` (bench/latency.py has the command line and the scenario list).

One thread, one event loop per phase: `execute` runs the floors on fresh loops, then the
cluster scenarios on one more; the progress display and the results are only touched from that
thread, so nothing needs a lock. (With --protocol kafka, confluent-kafka's poller threads only
post their reports to that loop: bench/latency_kafka_clients.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import platform
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from bench.echo_process import echo_server_process
from bench.latency import EXIT_FAILED, EXIT_OK, Plan
from bench.latency_cluster import (
    in_process_cluster,
    kafka_process_cluster,
    process_cluster,
)
from bench.latency_report import (
    PROCESS_FLOOR,
    PeerReport,
    ScenarioResult,
    print_peer_table,
    print_table,
    write_json,
    write_plot,
)
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
from client.client import Client
from runtime.clock import SystemClock
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address

if TYPE_CHECKING:
    from bench.latency_kafka_scenarios import KafkaBench

FLOOR_REQUESTS_PER_S: Final = 10_000  # floor requests per second of its share (~30 us each)
FLOOR_MIN_REQUESTS: Final = 500
FLOOR_WARMUP: Final = 200
TABLE_WIDTH: Final = 150
_TICK_S: Final = 0.1
EXIT_INTERRUPTED: Final = 130  # 128 + SIGINT, as the shell reports a Ctrl-C
KAFKA_METADATA_TIMEOUT_S: Final = 30.0
_KAFKA_METADATA_POLL_S: Final = 0.1


@dataclasses.dataclass(frozen=True, slots=True)
class Measured:
    """What the cluster phase produced: ketch's results, facts for the config, the peer's."""

    results: list[ScenarioResult]
    facts: dict[str, Any]
    peer: PeerReport | None = None


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
    try:
        config = _config(plan, cluster_kind)  # with kafka: imports the clients, may fail
        with progress:
            results = _floors(plan, progress)
            with asyncio.Runner(loop_factory=functools.partial(_new_loop, plan.loop)) as runner:
                measure = _measure_kafka if plan.kafka else _measure_cluster
                measured = runner.run(measure(plan, cluster_kind, progress))
    except KeyboardInterrupt:
        # The Runner cancelled the run; the cluster's exits have stopped its children.
        print("ketch bench latency: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # the benchmark could not run: say why, no traceback
        print(f"ketch bench latency: failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    config.update(measured.facts)
    results += measured.results
    print_table(console, config, results)
    if measured.peer is not None:
        print_peer_table(console, results, measured.peer)
    try:
        if json_path is not None:
            write_json(json_path, config, results, measured.peer)
        if plot_path is not None:
            title = f"ketch request latency ({config['mode']}, {config['cluster']}, {plan.loop})"
            plotted = list(results)
            if measured.peer is not None:
                plotted += [
                    dataclasses.replace(r, name=f"peer-{r.name}") for r in measured.peer.results
                ]
            logs = write_plot(plot_path, title, plotted)
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
    return "processes"


def _config(plan: Plan, cluster_kind: str) -> dict[str, Any]:
    config = _common_config(plan, cluster_kind)
    if plan.kafka:
        from bench.latency_kafka_clients import client
        from bench.latency_kafka_scenarios import THROUGHPUT_BATCHING

        config["kafka_clients"] = {
            name: client(name).settings(E2E_FETCH_MAX_WAIT_MS, THROUGHPUT_BATCHING)
            for name in plan.kafka_clients
        }
        config["peer_cmd"] = plan.peer_cmd
    return config


def _common_config(plan: Plan, cluster_kind: str) -> dict[str, Any]:
    return {
        "protocol": plan.protocol,
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
    # The same echo with its server in a process of its own, as the brokers are (unless
    # --in-process): the round trip then pays the wake-ups across processes too.
    task = progress.add_task(PROCESS_FLOOR, total=1)
    progress.refresh()
    serial = Tally()
    started_at = time.time()
    loop_factory = functools.partial(_new_loop, plan.loop)
    with echo_server_process(plan.loop) as port, asyncio.Runner(loop_factory=loop_factory) as run:
        run.run(echo_floor(requests, FLOOR_WARMUP, serial, Tally(), port=port))
    progress.update(task, completed=1)
    progress.refresh()
    results.append(
        ScenarioResult(
            PROCESS_FLOOR,
            f"the floor with the echo server in another process, {plan.loop}",
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


async def _measure_cluster(plan: Plan, kind: str, progress: Progress) -> Measured:
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
    return Measured(results, {"replication_factor": rf, "min_insync_replicas": min(2, rf)})


KafkaScenario = Callable[["KafkaBench"], Awaitable[ScenarioResult]]


def _kafka_scenarios(plan: Plan) -> list[tuple[str, KafkaScenario]]:
    """(base name, scenario) in the native order; each runs per client, per target."""
    from bench.latency_kafka_scenarios import (
        acks_suffix,
        e2e_scenario,
        produce_scenario,
        throughput_scenario,
    )

    load = Load(plan.share_s, plan.warmup_s, plan.rate, plan.size_bytes)
    flat_out = Load(plan.share_s, plan.warmup_s, None, plan.size_bytes)
    scenarios: list[tuple[str, KafkaScenario]] = [
        (f"produce_acks{acks_suffix(a)}", functools.partial(produce_scenario, acks=a, load=load))
        for a in plan.produce_acks
    ]
    scenarios.append(("e2e", functools.partial(e2e_scenario, load=load)))
    scenarios += [
        (
            f"throughput_acks{acks_suffix(a)}",
            functools.partial(throughput_scenario, acks=a, load=flat_out),
        )
        for a in plan.throughput_acks
    ]
    return scenarios


@contextlib.asynccontextmanager
async def _kafka_cluster(plan: Plan, kind: str) -> AsyncIterator[tuple[str, int | None]]:
    """ketch's Kafka bootstrap (`host:port,...`), and how many brokers were started (None: an
    external cluster, counted through Metadata)."""
    if plan.bootstrap is not None:
        yield ",".join(str(a) for a in plan.bootstrap), None
        return
    assert kind == "processes", kind
    async with kafka_process_cluster(
        plan.brokers, TcpTransport(), min(2, plan.brokers)
    ) as addresses:
        yield ",".join(str(a) for a in addresses), plan.brokers


async def _kafka_brokers(probe: Callable[[str], Awaitable[int]], bootstrap: str, want: int) -> int:
    """Brokers listed in Metadata through the client, once it lists `want` (at least one when
    want is 0: an external cluster), bounded by KAFKA_METADATA_TIMEOUT_S."""
    deadline = time.monotonic() + KAFKA_METADATA_TIMEOUT_S
    while True:
        try:
            brokers = await probe(bootstrap)
        except Exception as exc:  # not answering yet
            brokers, failure = 0, f"{type(exc).__name__}: {exc}"
        else:
            failure = f"{brokers} broker(s) listed, {want} expected"
        if brokers >= max(1, want):
            return brokers
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"Kafka Metadata from {bootstrap} not complete within "
                f"{KAFKA_METADATA_TIMEOUT_S:.0f} s: {failure}"
            )
        await asyncio.sleep(_KAFKA_METADATA_POLL_S)


async def _measure_kafka(plan: Plan, kind: str, progress: Progress) -> Measured:
    """Each scenario per client, against ketch and (with --peer-cmd) then against the peer."""
    from bench.latency_kafka_clients import client
    from bench.latency_kafka_peer import peer_broker
    from bench.latency_kafka_scenarios import KafkaBench, KafkaTarget, scenario_name

    clients = [client(name) for name in plan.kafka_clients]
    labels = ["ketch"] if plan.peer_cmd is None else ["ketch", "peer"]
    runs = [
        (base, scenario, kafka_client, label)
        for base, scenario in _kafka_scenarios(plan)
        for kafka_client in clients
        for label in labels
    ]
    tasks = [
        progress.add_task(
            f"{scenario_name(base, c.name)}{'' if label == 'ketch' else ' peer'}",
            total=plan.share_s + plan.warmup_s,
        )
        for base, _, c, label in runs
    ]
    starting = progress.add_task("starting cluster", total=None)
    progress.refresh()
    probe = clients[0].broker_count
    run_id = f"{os.getpid()}-{time.time_ns() % 1_000_000_000}"
    results: dict[str, list[ScenarioResult]] = {label: [] for label in labels}
    async with (
        _kafka_cluster(plan, kind) as (bootstrap, started),
        contextlib.AsyncExitStack() as stack,
    ):
        brokers = await _kafka_brokers(probe, bootstrap, started or 0)
        rf = max(1, min(3, brokers))
        targets = {"ketch": KafkaTarget("ketch", bootstrap, rf, min(2, rf))}
        peer = None
        if plan.peer_cmd is not None:
            progress.update(starting, description="starting peer")
            progress.refresh()
            peer = await stack.enter_async_context(
                peer_broker(plan.peer_cmd, probe, want_brokers=brokers)
            )
            peer_rf = max(1, min(3, peer.brokers))
            targets["peer"] = KafkaTarget("peer", peer.bootstrap, peer_rf, min(2, peer_rf))
            if peer_rf != rf:
                print(
                    f"ketch bench latency: warning: the peer lists {peer.brokers} broker(s): "
                    f"RF {peer_rf} there, {rf} on ketch; its ratios compare unequal replication",
                    file=sys.stderr,
                )
        progress.update(starting, total=1, completed=1)
        try:
            for task, (_, scenario, kafka_client, label) in zip(tasks, runs, strict=True):
                async with _ticking(progress, task):
                    bench = KafkaBench(targets[label], kafka_client, run_id)
                    results[label].append(await scenario(bench))
        finally:
            for kafka_client in clients:
                kafka_client.release()
    facts: dict[str, Any] = {
        "replication_factor": rf,
        "min_insync_replicas": min(2, rf),
        "kafka_bootstrap": bootstrap,
    }
    report = None
    if peer is not None:
        target = targets["peer"]
        report = PeerReport(
            peer.command,
            peer.bootstrap,
            peer.brokers,
            target.replication_factor,
            target.min_insync_replicas,
            results["peer"],
        )
    return Measured(results["ketch"], facts, report)


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
