"""Producer throughput (issue 21): MB/s of ketch's native producer against librdkafka's, into
the same one-broker cluster in the same run.

    python -m bench.native_producer [--runs N] [--mib M] [--sizes 1024,100]
                                    [--batch-sizes 16384,1000000] [--data-dir DIR]
                                    [--only ketch] [--json FILE]

The cluster is bench/latency_cluster.py's process cluster (a controller and one broker as child
processes, testkit/processes.py, with the benchmark's teardown settings) with its Kafka listener
on, so both clients reach the same broker process: ketch's producer on the native msgpack
listener, confluent-kafka (librdkafka) on the Kafka one. Each client gets its own topic per
batch size and record size (one partition, RF 1), so neither appends behind the other's log.

Both producers run with the same settings: acks=all (with RF 1 the leader's append),
idempotence on (ketch's default with acks=all; librdkafka's is off, so it is turned on),
linger.ms=5, five requests in flight per connection, no compression, a 32 MiB buffer
(buffer.memory; librdkafka's queue.buffering.max.kbytes), and batch.size from `--batch-sizes`:
by default Kafka's 16384 (ketch's default too) and librdkafka's own default, 1000000, with which
it reaches its best figures (ketch's max.request.size stays Kafka's 1 MiB, so one such batch
fills a request). The broker's work is per request, so at 16 KiB the broker, not the client,
bounds both.

A run sends `--mib` MiB of records of one size (null key, the same value every time) as fast as
the client takes them, then flushes: MB/s (10^6 bytes of values per second) is the values'
bytes over the time from the first send to the last acknowledgement. ketch's producer runs on
this process's event loop (uvloop) and resolves one future per record; librdkafka runs in a
thread calling `produce()` in a loop and `poll(0)` to serve its queue, with delivery reports
for failures only (its cheapest setting: the bar is its best). Each run also reports this
process's CPU time per record: the client's own work (the broker is another process), which
the machine's other load disturbs less than the wall clock. Every figure is the median of
`--runs` runs, after one small warm-up run per client and size (connections, metadata,
producer id); runs alternate between the clients, so a drift of the machine affects both. At
the end each topic's high watermark must equal the records sent to it: a figure for records
that were not all written is not reported. The broker's CPU time per record (from /proc, on
Linux) is reported too: on a machine with few cores the broker and the client compete, and
the two listeners' costs differ.

The broker's data directory is in memory (/dev/shm) where the machine has one (`--data-dir`
otherwise): a run writes gigabytes, and once the kernel starts writing them back to disk the
broker slows down at moments neither client chooses, which measures the disk, not the clients.

Owned by the coroutine that runs it: the cluster, clients and topics live and die with one
`_measure` call; the librdkafka thread touches only its own producer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import confluent_kafka

from bench.latency_cluster import BENCH_OFFSETS_PARTITIONS, TEARDOWN_PROPERTIES
from client.client import Client
from client.config import ACKS_ALL, ClientConfig, ProducerConfig
from client.list_offsets import list_offsets
from client.producer import Producer, RecordMetadata
from runtime.clock import SystemClock
from runtime.config import Value
from runtime.net.tcp import TcpTransport, new_event_loop
from runtime.net.transport import Address
from testkit.probes import create_topic
from testkit.processes import ProcessCluster, running_cluster
from wire.topic import TopicPartition

CLIENTS: Final = ("ketch", "librdkafka")
DEFAULT_SIZES: Final = (1024, 100)
DEFAULT_BATCH_SIZES: Final = (16_384, 1_000_000)
DEFAULT_RUNS: Final = 5
DEFAULT_MIB: Final = 64.0
WARMUP_RECORDS: Final = 2_000
LINGER_MS: Final = 5
BUFFER_MEMORY: Final = 32 * 1024 * 1024
MAX_IN_FLIGHT: Final = 5
# How often (records) the librdkafka loop serves delivery reports, and how long it lets
# librdkafka's threads drain a full queue before trying again.
POLL_EVERY: Final = 1_000
CHECK_EVERY: Final = 1_000  # records; see _ketch_run
QUEUE_FULL_POLL_S: Final = 0.0005
FLUSH_TIMEOUT_S: Final = 120.0
TOPIC_TIMEOUT_MS: Final = 30_000
LATEST_TIMESTAMP: Final = -1


@dataclass(frozen=True, slots=True)
class Plan:
    runs: int
    mib: float
    sizes: Sequence[int]
    batch_sizes: Sequence[int]
    clients: Sequence[str]
    data_dir: Path | None


@dataclass(slots=True)
class Series:
    """One client's runs at one batch size and record size."""

    client: str
    batch_size: int
    size: int
    topic: str
    mb_per_s: list[float] = field(default_factory=list)
    # This process's CPU time per record: the client's own work (ketch's event loop, or
    # librdkafka's threads and the calling thread).
    cpu_us_per_record: list[float] = field(default_factory=list)
    # The broker process's CPU time per record (its listener for this client's protocol).
    broker_cpu_us_per_record: list[float] = field(default_factory=list)
    records_sent: int = 0


def _process_cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) a process used so far, from /proc (NaN where there is
    none)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError, TypeError):
        return float("nan")
    # utime and stime are fields 14 and 15 of proc(5); fields[0] here is field 3 (state).
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(slots=True)
class Timing:
    """Wall time, this process's CPU time and the broker's CPU time of one run."""

    broker_pid: int | None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    broker_cpu_s: float = 0.0

    @classmethod
    def start(cls, broker_pid: int | None) -> Timing:
        timing = cls(broker_pid)
        timing.wall_s = -time.perf_counter()
        timing.cpu_s = -time.process_time()
        timing.broker_cpu_s = -_process_cpu_s(broker_pid)
        return timing

    def stop(self) -> None:
        self.wall_s += time.perf_counter()
        self.cpu_s += time.process_time()
        self.broker_cpu_s += _process_cpu_s(self.broker_pid)


def _key(client: str, batch_size: int, size: int) -> str:
    return f"{client}_b{batch_size}_{size}"


# -- ketch ----------------------------------------------------------------------------------------


def _ketch_producer(address: Address, batch_size: int) -> Producer:
    client = Client(
        [address],
        transport=TcpTransport(),
        clock=SystemClock(),
        config=ClientConfig(max_in_flight_requests_per_connection=MAX_IN_FLIGHT),
    )
    config = ProducerConfig(acks=ACKS_ALL, linger_ms=LINGER_MS, batch_size=batch_size)
    return Producer(client, config=config, owns_client=True, buffer_memory=BUFFER_MEMORY)


async def _ketch_run(
    producer: Producer, topic: str, value: bytes, count: int, broker_pid: int | None
) -> Timing:
    """Send `count` records and wait for them all, timed from the first send to the end.

    Like librdkafka's loop (reports for failures only), the loop keeps no record's future but
    every `CHECK_EVERY`-th, checked at the end; the topic's high watermark checks the rest (a
    failed future that nobody reads is also logged by asyncio). Holding them all would time
    the garbage collector walking the benchmark's own list.
    """
    sampled: list[asyncio.Future[RecordMetadata]] = []
    send = producer.send
    timing = Timing.start(broker_pid)
    for index in range(count):
        future = await send(topic, None, value)
        if index % CHECK_EVERY == 0:
            sampled.append(future)
    await producer.flush()
    timing.stop()
    for future in sampled:
        future.result()
    return timing


# -- librdkafka -----------------------------------------------------------------------------------


def _librdkafka_producer(
    bootstrap: str, batch_size: int, errors: list[str]
) -> confluent_kafka.Producer:
    def delivered(error: confluent_kafka.KafkaError | None, _: object) -> None:
        if error is not None:
            errors.append(str(error))

    return confluent_kafka.Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "ketch-bench-native-producer",
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": LINGER_MS,
            "batch.size": batch_size,
            "max.in.flight.requests.per.connection": MAX_IN_FLIGHT,
            "queue.buffering.max.kbytes": BUFFER_MEMORY // 1024,
            "compression.type": "none",
            # asyncio sets TCP_NODELAY on ketch's sockets; librdkafka does not by default.
            "socket.nagle.disable": True,
            "delivery.report.only.error": True,
            "on_delivery": delivered,
        }
    )


def _librdkafka_run(
    producer: confluent_kafka.Producer,
    topic: str,
    value: bytes,
    count: int,
    broker_pid: int | None,
    errors: list[str],
) -> Timing:
    """On a worker thread: as `_ketch_run`, through librdkafka."""
    produce = producer.produce
    timing = Timing.start(broker_pid)
    for index in range(count):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                producer.poll(QUEUE_FULL_POLL_S)
        if index % POLL_EVERY == 0:
            producer.poll(0)
    left = producer.flush(FLUSH_TIMEOUT_S)
    timing.stop()
    if left or errors:
        raise RuntimeError(f"librdkafka: {left} records unflushed, errors: {errors[:3]}")
    return timing


# -- the run --------------------------------------------------------------------------------------


async def _create_topics(cluster: ProcessCluster, plan: Plan) -> dict[str, Series]:
    series: dict[str, Series] = {}
    admin = cluster.client()
    try:
        for batch_size in plan.batch_sizes:
            for size in plan.sizes:
                for name in plan.clients:
                    topic = f"bench-producer-{name}-b{batch_size}-{size}"
                    await create_topic(
                        admin,
                        cluster.addresses.values(),
                        topic,
                        partitions=1,
                        replication_factor=1,
                        configs={},
                    )
                    await admin.leader_for(TopicPartition(topic, 0), timeout_ms=TOPIC_TIMEOUT_MS)
                    series[_key(name, batch_size, size)] = Series(name, batch_size, size, topic)
    finally:
        await admin.close()
    return series


async def _check_written(address: Address, series: Sequence[Series]) -> None:
    client = Client([address], transport=TcpTransport(), clock=SystemClock())
    try:
        wanted = {TopicPartition(s.topic, 0): LATEST_TIMESTAMP for s in series}
        ends = await list_offsets(client, wanted, replica_id=-1, timeout_ms=TOPIC_TIMEOUT_MS)
    finally:
        await client.close()
    for s in series:
        end = ends[TopicPartition(s.topic, 0)].offset
        if end != s.records_sent:
            raise RuntimeError(f"{s.topic}: high watermark {end}, {s.records_sent} records sent")


async def _measure(plan: Plan) -> dict[str, Any]:
    settings: dict[str, Value] = {
        "min.insync.replicas": 1,
        **TEARDOWN_PROPERTIES,
        "offsets.topic.num.partitions": BENCH_OFFSETS_PARTITIONS,
    }
    with tempfile.TemporaryDirectory(prefix="ketch-bench-producer-", dir=plan.data_dir) as tmp:
        async with running_cluster(Path(tmp), settings, brokers=1, kafka=True) as cluster:
            series = await _create_topics(cluster, plan)
            for batch_size in plan.batch_sizes:
                await _measure_batch_size(cluster, plan, batch_size, series)
            written = [s for s in series.values() if s.records_sent]
            await _check_written(cluster.addresses[0], written)
            await cluster.stop()
    return _figures(series, plan)


async def _measure_batch_size(
    cluster: ProcessCluster, plan: Plan, batch_size: int, series: dict[str, Series]
) -> None:
    """Every run of one batch size, with one producer of each client."""
    producer = _ketch_producer(cluster.addresses[0], batch_size)
    errors: list[str] = []
    rdkafka = _librdkafka_producer(cluster.kafka_bootstrap(), batch_size, errors)

    broker_pid = cluster.broker(0).pid

    async def one(name: str, s: Series, value: bytes, count: int) -> Timing:
        if name == "ketch":
            timing = await _ketch_run(producer, s.topic, value, count, broker_pid)
        else:
            timing = await asyncio.to_thread(
                _librdkafka_run, rdkafka, s.topic, value, count, broker_pid, errors
            )
        s.records_sent += count
        return timing

    try:
        for size in plan.sizes:
            value = b"v" * size
            count = max(1, round(plan.mib * 1024 * 1024 / size))
            for name in plan.clients:
                await one(name, series[_key(name, batch_size, size)], value, WARMUP_RECORDS)
            for _ in range(plan.runs):
                for name in plan.clients:
                    s = series[_key(name, batch_size, size)]
                    timing = await one(name, s, value, count)
                    s.mb_per_s.append(len(value) * count / timing.wall_s / 1e6)
                    s.cpu_us_per_record.append(timing.cpu_s / count * 1e6)
                    s.broker_cpu_us_per_record.append(timing.broker_cpu_s / count * 1e6)
                    print(
                        f"  batch.size {batch_size:>7} {name:10} {size:5} B: "
                        f"{s.mb_per_s[-1]:7.1f} MB/s, CPU per record: client "
                        f"{s.cpu_us_per_record[-1]:5.2f} us, broker "
                        f"{s.broker_cpu_us_per_record[-1]:5.2f} us",
                        flush=True,
                    )
    finally:
        await producer.close()
        # librdkafka's handle (its threads and connections) goes with its last reference,
        # when this returns: before the cluster stops under it.
        await asyncio.to_thread(rdkafka.flush, FLUSH_TIMEOUT_S)


def _figures(series: dict[str, Series], plan: Plan) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "runs": plan.runs,
        "mib_per_run": plan.mib,
        "librdkafka_version": confluent_kafka.libversion()[0],
    }
    for key, s in series.items():
        if s.mb_per_s:
            figures[f"{key}_mb_per_s"] = round(statistics.median(s.mb_per_s), 1)
            figures[f"{key}_runs_mb_per_s"] = [round(x, 1) for x in s.mb_per_s]
            figures[f"{key}_cpu_us_per_record"] = round(statistics.median(s.cpu_us_per_record), 2)
            figures[f"{key}_broker_cpu_us_per_record"] = round(
                statistics.median(s.broker_cpu_us_per_record), 2
            )
    for batch_size in plan.batch_sizes:
        for size in plan.sizes:
            ketch = figures.get(f"{_key('ketch', batch_size, size)}_mb_per_s")
            rdkafka = figures.get(f"{_key('librdkafka', batch_size, size)}_mb_per_s")
            if ketch and rdkafka:
                ratio = round(rdkafka / ketch, 2)
                figures[f"ratio_b{batch_size}_{size}"] = ratio
                if size == 1024:
                    figures[f"target_b{batch_size}_1kib_within_2x_met"] = ratio <= 2.0
    return figures


def _print_table(figures: dict[str, Any], plan: Plan) -> None:
    print(f"\nmedians of {figures['runs']} runs of {figures['mib_per_run']} MiB each")
    print(
        f"{'':17} {'MB/s':^26} {'client CPU us/record':^22} {'broker CPU us/record':^22}\n"
        f"{'batch.size':>10} {'record':>6} {'ketch':>8} {'librdkafka':>11} {'ratio':>6} "
        f"{'ketch':>10} {'librdkafka':>11} {'ketch':>10} {'librdkafka':>11}"
    )
    nan = float("nan")
    for batch_size in plan.batch_sizes:
        for size in plan.sizes:
            ketch, rdkafka = _key("ketch", batch_size, size), _key("librdkafka", batch_size, size)
            print(
                f"{batch_size:>10} {size:>4} B "
                f"{figures.get(f'{ketch}_mb_per_s', nan):>8.1f} "
                f"{figures.get(f'{rdkafka}_mb_per_s', nan):>11.1f} "
                f"{figures.get(f'ratio_b{batch_size}_{size}', nan):>6} "
                f"{figures.get(f'{ketch}_cpu_us_per_record', nan):>10.2f} "
                f"{figures.get(f'{rdkafka}_cpu_us_per_record', nan):>11.2f} "
                f"{figures.get(f'{ketch}_broker_cpu_us_per_record', nan):>10.2f} "
                f"{figures.get(f'{rdkafka}_broker_cpu_us_per_record', nan):>11.2f}"
            )
    for key, met in figures.items():
        if key.startswith("target_"):
            print(f"{key}: {met}")


def _default_data_dir() -> Path | None:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() else None


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.native_producer", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="runs per client and size")
    parser.add_argument("--mib", type=float, default=DEFAULT_MIB, help="MiB of values per run")
    parser.add_argument(
        "--sizes",
        type=_ints,
        default=list(DEFAULT_SIZES),
        help="record value sizes in bytes, comma-separated",
    )
    parser.add_argument(
        "--batch-sizes",
        type=_ints,
        default=list(DEFAULT_BATCH_SIZES),
        help="batch.size settings to measure, comma-separated",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=_default_data_dir(),
        help="where the broker keeps its data (default: /dev/shm where there is one)",
    )
    parser.add_argument("--only", choices=CLIENTS, help="measure one client only (profiling)")
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    args = parser.parse_args(argv)
    sizes: list[int] = args.sizes
    batch_sizes: list[int] = args.batch_sizes
    if args.runs <= 0 or args.mib <= 0 or min(sizes + batch_sizes, default=0) <= 0:
        parser.error("--runs, --mib, --sizes and --batch-sizes must be positive")
    clients = [c for c in CLIENTS if args.only in (None, c)]
    plan = Plan(args.runs, args.mib, sizes, batch_sizes, clients, args.data_dir)
    loop = new_event_loop()
    try:
        figures = loop.run_until_complete(_measure(plan))
    finally:
        loop.close()
    _print_table(figures, plan)
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
