"""Failover time: from `kill -9` of a partition leader's process to the first acks=all produce
acknowledged by its successor, in real processes on 127.0.0.1.

    python -m bench.failover [--runs 5] [--json F] [--session-timeout-ms 2000]
                             [--heartbeat-interval-ms 500]

The cluster is a controller and three brokers, each `python -m cli.main controller|broker`
(the command line contract of DESIGN.md) with one TOML config file, and a topic with one
partition, replication factor 3 and min.insync.replicas=2. Each run kills the partition's current
leader with SIGKILL and watches, from the benchmark process, through the surviving brokers only:

    detection         kill -> DescribeCluster (forwarded to the controller) reports the killed
                      broker "fenced": the controller noticed the missing heartbeats. Bounded
                      below by broker.session.timeout.ms minus the time since the last heartbeat,
                      and above by the session timeout plus one session check interval.
    election          fenced -> Metadata from a surviving broker names a new leader: the
                      election in the controller, the metadata log commit, and LeaderAndIsr /
                      UpdateMetadata reaching that broker.
    first produce     new leader named -> the first acks=all Produce the new leader acknowledges
                      (the ISR must have shrunk to the survivors, min.insync.replicas=2).
    total             kill -> that acknowledgement (the sum of the three).

Each figure is observed by polling every --poll-ms (default 5 ms), so each may be late by up to
one poll interval; the three pollers run concurrently so one does not delay another. Between runs
the killed broker is restarted and the run waits until it is back in the ISR, so every run starts
from a full ISR.

Timeouts: Kafka's defaults are broker.session.timeout.ms 9000 and broker.heartbeat.interval.ms
2000; the benchmark scales both down by the same factor as far as a production cluster on a fast
network could go (2000 / 500 ms), leaving replica.lag.time.max.ms at 10000 (Kafka: 30000) so the
ISR only changes through the controller's fencing, which is what is measured.

The cluster is testkit/processes.py's ProcessCluster (also what the process tests run); the
requests that watch it are testkit/probes.py's. Ownership: the harness and the pollers run on the
benchmark's one event loop; the children are separate processes, reached only over TCP and
signals.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

from rich.console import Console
from rich.table import Table

from client.client import Client
from client.errors import ClientError
from runtime.config import Value
from runtime.net.transport import Address
from testkit.probes import (
    broker_states,
    create_topic,
    one_record,
    only_answer,
    partitions_of,
    wait_fully_replicated,
    wait_until,
)
from testkit.processes import ProcessCluster, running_cluster
from wire.errors import ErrorCode

TOPIC: Final = "failover"
# What the benchmark runs with (see the module docstring for why these values).
BENCH_PROPERTIES: Final[Mapping[str, Value]] = {
    "broker.session.timeout.ms": 2_000,
    "broker.heartbeat.interval.ms": 500,
    "replica.lag.time.max.ms": 10_000,
    "request.timeout.ms": 2_000,
    "controlled.shutdown.retry.backoff.ms": 100,
    "controlled.shutdown.max.retries": 3,
}


# ---------------------------------------------------------------------------------------------
# The produce that ends a failover


async def produce_once(
    client: Client, address: Address, topic: str, partition: int, value: bytes
) -> ErrorCode | str:
    """One acks=all record to `address`: its error code, or the client error's name."""
    try:
        response = await client.send(
            address, one_record(topic, partition, value, timeout_ms=1_000), timeout_ms=2_000
        )
    except ClientError as exc:
        return type(exc).__name__
    return ErrorCode.from_code(only_answer(response).error_code)


# ---------------------------------------------------------------------------------------------
# The benchmark


@dataclass(frozen=True, slots=True)
class RunResult:
    run: int
    killed: int
    new_leader: int
    detection_ms: float
    election_ms: float
    first_produce_ms: float
    total_ms: float
    produce_attempts: int


async def _poll(condition: Callable[[], Awaitable[bool]], poll_s: float, limit_s: float) -> float:
    return await wait_until(condition, "failover", timeout_s=limit_s, poll_s=poll_s)


async def one_failover(
    cluster: ProcessCluster, run: int, *, poll_s: float, limit_s: float
) -> RunResult:
    client = cluster.client()
    try:
        [before] = (
            await wait_fully_replicated(
                client, cluster.addresses.values(), TOPIC, 1, timeout_s=limit_s
            )
        ).values()
        old = before.leader_id
        survivors = [a for b, a in cluster.addresses.items() if b != old]
        code = await produce_once(client, cluster.addresses[old], TOPIC, 0, b"before-%d" % run)
        assert code is ErrorCode.NONE, f"run {run}: produce before the kill: {code}"

        killed_at = time.monotonic()
        await cluster.broker(old).kill()

        async def fenced() -> bool:
            states = await broker_states(client, survivors)
            return states.get(old) == "fenced"

        new_leader = -1
        leader_at = 0.0

        async def elected() -> bool:
            nonlocal new_leader
            partition = (await partitions_of(client, survivors, TOPIC)).get(0)
            if partition is None or partition.leader_id in (old, -1):
                return False
            new_leader = partition.leader_id
            return True

        attempts = 0

        async def acknowledged() -> bool:
            nonlocal attempts, leader_at
            if new_leader < 0 and not await elected():
                return False
            if not leader_at:
                leader_at = time.monotonic()
            attempts += 1
            address = cluster.addresses[new_leader]
            code = await produce_once(client, address, TOPIC, 0, b"after-%d" % run)
            return code is ErrorCode.NONE

        fenced_at, acked_at = await asyncio.gather(
            _poll(fenced, poll_s, limit_s), _poll(acknowledged, poll_s, limit_s)
        )
        # Restore a full ISR for the next run.
        await cluster.broker(old).start()
        await wait_fully_replicated(client, cluster.addresses.values(), TOPIC, 1, timeout_s=limit_s)
    finally:
        await client.close()
    ms = 1_000.0
    return RunResult(
        run=run,
        killed=old,
        new_leader=new_leader,
        detection_ms=(fenced_at - killed_at) * ms,
        # The leader can show up before the fencing is seen (the pollers are independent).
        election_ms=max(0.0, leader_at - fenced_at) * ms,
        first_produce_ms=(acked_at - leader_at) * ms,
        total_ms=(acked_at - killed_at) * ms,
        produce_attempts=attempts,
    )


async def benchmark(
    runs: int, properties: Mapping[str, Value], *, poll_s: float, progress: Console
) -> list[RunResult]:
    with tempfile.TemporaryDirectory(prefix="ketch-bench-failover-") as tmp:
        async with running_cluster(Path(tmp), properties) as cluster:
            client = cluster.client()
            try:
                await create_topic(
                    client,
                    cluster.addresses.values(),
                    TOPIC,
                    partitions=1,
                    replication_factor=3,
                    configs={"min.insync.replicas": "2"},
                )
            finally:
                await client.close()
            results = []
            session_s = float(str(properties["broker.session.timeout.ms"])) / 1_000
            for run in range(runs):
                result = await one_failover(
                    cluster, run, poll_s=poll_s, limit_s=10 * session_s + 30
                )
                progress.print(
                    f"run {run}: killed broker {result.killed}, new leader "
                    f"{result.new_leader}, {result.total_ms:.0f} ms"
                )
                results.append(result)
            codes = await cluster.stop()
            progress.print(f"clean stop, exit codes {codes}")
    return results


FIGURES: Final = (
    ("detection_ms", "detection", "kill -> controller reports the broker fenced"),
    ("election_ms", "election + propagation", "fenced -> a survivor's Metadata names a new leader"),
    ("first_produce_ms", "first produce", "new leader named -> first acks=all ack from it"),
    ("total_ms", "total", "kill -> first acks=all ack on the new leader"),
)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): an observed value, not an interpolation."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n*q/100), at least the first
    return ordered[int(rank) - 1]


def summary(results: Sequence[RunResult]) -> dict[str, dict[str, float]]:
    out = {}
    for key, _, _ in FIGURES:
        values = [float(getattr(r, key)) for r in results]
        out[key] = {
            "median": statistics.median(values),
            "p90": percentile(values, 90),
            "min": min(values),
            "max": max(values),
        }
    return out


def render(results: Sequence[RunResult], properties: Mapping[str, Value], poll_ms: float) -> Table:
    table = Table(
        title=(
            f"Failover, {len(results)} runs (session {properties['broker.session.timeout.ms']} ms,"
            f" heartbeat {properties['broker.heartbeat.interval.ms']} ms, poll {poll_ms:g} ms)"
        )
    )
    table.add_column("figure")
    table.add_column("measures")
    for column in ("median ms", "p90 ms", "min ms", "max ms"):
        table.add_column(column, justify="right")
    stats = summary(results)
    for key, name, what in FIGURES:
        s = stats[key]
        table.add_row(name, what, *(f"{s[k]:.0f}" for k in ("median", "p90", "min", "max")))
    return table


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.failover", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", type=Path, help="write every run and the summary here")
    parser.add_argument("--session-timeout-ms", type=int, default=2_000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=500)
    parser.add_argument("--poll-ms", type=float, default=5.0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.runs < 1 or args.poll_ms <= 0:
        print("--runs must be >= 1 and --poll-ms > 0", file=sys.stderr)
        return 2
    properties = {
        **BENCH_PROPERTIES,
        "broker.session.timeout.ms": args.session_timeout_ms,
        "broker.heartbeat.interval.ms": args.heartbeat_interval_ms,
    }
    # The table's "measures" column is prose: give it room even on an 80-column terminal.
    console = Console(width=max(Console().width, 120))
    results = asyncio.run(
        benchmark(args.runs, properties, poll_s=args.poll_ms / 1_000, progress=console)
    )
    console.print(render(results, properties, args.poll_ms))
    if args.json is not None:
        document = {
            "properties": dict(properties),
            "poll_ms": args.poll_ms,
            "figures": {key: what for key, _, what in FIGURES},
            "summary": summary(results),
            "runs": [asdict(r) for r in results],
        }
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
