"""Consumer-group timings through ketch's Kafka listener, with real clients.

    python -m bench.groups [--trials 5] [--delays 3000,0] [--clients confluent,aiokafka]
                           [--json F]

For each group.initial.rebalance.delay.ms in --delays (3000 is Kafka's default; 0 answers the
first member at once), a process cluster of 3 brokers with that setting (bench/latency_cluster.py)
and a topic of 6 partitions, RF 3, holding 60 records. Per client of --clients, each with its
own defaults except the group id and auto.offset.reset=earliest (bench/group_members.py):

* `assign_to_first_record`, the baseline: a consumer outside any group, assign()ed partition 0
  from offset 0, from its creation to its first record (a client's start and first fetch);
* `subscribe_to_first_record`: a consumer of a new group, from its creation and subscribe() to
  its first record: FindCoordinator, JoinGroup (waiting the initial delay), SyncGroup,
  OffsetFetch, ListOffsets, Fetch. `x baseline` is its median over the baseline's median (the
  price of the group, for that client);
* `rebalance_on_join` (on the last cluster of --delays only: the initial delay does not apply to
  a group that has members): two members consume, a third subscribes; from its creation until
  all three hold assignments given after that moment which share the topic's partitions. The
  two old members hear of the rebalance in a heartbeat's answer, so the clients'
  heartbeat.interval.ms (3 s by default in both) bounds it;
* `rebalance_on_leave`: then the third member closes (LeaveGroup); from the close until the
  other two hold new assignments sharing all partitions.

Each scenario runs --trials times, each with a new group; the table and `--json F` give every
trial and the median, min and max in ms. Exit codes: 0 done; 1 the benchmark could not run;
2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import itertools
import json
import logging
import statistics
import sys
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from rich.console import Console
from rich.table import Table

from bench.group_members import MEMBERS, Member, now_ns
from bench.latency_cluster import kafka_process_cluster
from bench.latency_kafka_clients import client as kafka_client
from client.config import ACKS_ALL
from runtime.net.tcp import TcpTransport

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
BROKERS: Final = 3
PARTITIONS: Final = 6
RECORDS: Final = 60
KAFKA_DEFAULT_DELAY_MS: Final = 3000
TRIAL_TIMEOUT_S: Final = 60.0
READY_TIMEOUT_S: Final = 30.0
POLL_S: Final = 0.005  # how often a wait checks; the figures come from the clients' callbacks
FETCH_MAX_WAIT_MS: Final = 500  # the baseline consumer's; Kafka's default
NS_PER_MS: Final = 1_000_000
TABLE_WIDTH: Final = 110
BASELINE: Final = "assign_to_first_record"
FIRST: Final = "subscribe_to_first_record"


@dataclass(frozen=True, slots=True)
class Result:
    name: str
    client: str
    initial_delay_ms: int
    trials_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.trials_ms)

    def to_json(self, baseline_ms: float | None) -> dict[str, Any]:
        return {
            "name": self.name,
            "client": self.client,
            "initial_delay_ms": self.initial_delay_ms,
            "trials_ms": [round(t, 2) for t in self.trials_ms],
            "median_ms": round(self.median_ms, 2),
            "min_ms": round(min(self.trials_ms), 2),
            "max_ms": round(max(self.trials_ms), 2),
            "ratio_to_baseline": None
            if baseline_ms is None
            else round(self.median_ms / baseline_ms, 2),
        }


async def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + TRIAL_TIMEOUT_S
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{what}: not within {TRIAL_TIMEOUT_S:.0f} s")
        await asyncio.sleep(POLL_S)


def _shared(members: Sequence[Member], since_ns: int) -> bool:
    """Every member holds an assignment given at or after `since_ns`, and together those
    assignments cover each partition exactly once."""
    held = [m.observed.assigned_since(since_ns) for m in members]
    if any(h is None or not h for h in held):
        return False
    every = [p for h in held if h is not None for p in h]
    return sorted(every) == list(range(PARTITIONS))


class Trials:
    """One cluster's scenarios, for one client."""

    def __init__(self, bootstrap: str, topic: str, client: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.client = client
        self._names = itertools.count()

    def member(self, group: str) -> Member:
        return MEMBERS[self.client](
            self.bootstrap, group, self.topic, f"bench-{self.client}-{next(self._names)}"
        )

    async def assign_to_first_record(self) -> float:
        arrived: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def first(_offset: int, at_ns: int) -> None:
            if not arrived.done():
                arrived.set_result(at_ns)

        start = now_ns()
        consumer = await kafka_client(self.client).consumer(
            self.bootstrap, self.topic, 0, 0, FETCH_MAX_WAIT_MS, first
        )
        try:
            done_ns = await asyncio.wait_for(arrived, TRIAL_TIMEOUT_S)
        finally:
            await consumer.close()
        return (done_ns - start) / NS_PER_MS

    async def subscribe_to_first_record(self) -> float:
        member = self.member(f"bench-first-{uuid.uuid4().hex[:8]}")
        start = now_ns()
        await member.start()
        try:
            await wait_until(lambda: member.observed.first_record_ns is not None, "first record")
        finally:
            await member.close()
        first = member.observed.first_record_ns
        assert first is not None
        return (first - start) / NS_PER_MS

    async def rebalances(self) -> tuple[float, float]:
        """(join, leave) of one group: two members, then a third joins, then it leaves."""
        group = f"bench-rebalance-{uuid.uuid4().hex[:8]}"
        members = [self.member(group), self.member(group)]
        joined: Member | None = None
        try:
            for member in members:
                await member.start()
            await wait_until(lambda: _shared(members, 0), "two members share the partitions")
            joined = self.member(group)
            start = now_ns()
            await joined.start()
            everyone = [*members, joined]
            await wait_until(lambda: _shared(everyone, start), "a third member is assigned")
            join_ms = (max(m.observed.last_assignment_ns() for m in everyone) - start) / NS_PER_MS
            start = now_ns()
            leaving, joined = joined, None
            await leaving.close()
            await wait_until(lambda: _shared(members, start), "two members share again")
            leave_ms = (max(m.observed.last_assignment_ns() for m in members) - start) / NS_PER_MS
        finally:
            for member in [*members, *([joined] if joined is not None else [])]:
                await member.close()
        return join_ms, leave_ms


async def _prepare(bootstrap: str) -> str:
    """A topic of PARTITIONS partitions with RECORDS records spread over them."""
    topic = f"bench-groups-{uuid.uuid4().hex[:8]}"
    admin = kafka_client("aiokafka")
    try:
        await admin.create_topic(
            bootstrap, topic, PARTITIONS, BROKERS, {"min.insync.replicas": "2"}
        )
        await wait_until_async(lambda: admin.leaders_known(bootstrap, topic, PARTITIONS))
        async with await admin.producer(bootstrap, ACKS_ALL) as producer:
            for index in range(RECORDS):
                await producer.send_and_wait(topic, b"record-%d" % index, index % PARTITIONS)
    finally:
        admin.release()
    return topic


async def wait_until_async(condition: Callable[[], Awaitable[bool]]) -> None:
    deadline = asyncio.get_running_loop().time() + READY_TIMEOUT_S
    while not await condition():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"the topic had no leaders within {READY_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.1)


async def _cluster_run(
    delay_ms: int, clients: Sequence[str], trials: int, rebalance: bool, console: Console
) -> list[Result]:
    properties = {"group.initial.rebalance.delay.ms": delay_ms}
    async with kafka_process_cluster(BROKERS, TcpTransport(), 2, properties) as listeners:
        bootstrap = ",".join(str(a) for a in listeners)
        topic = await _prepare(bootstrap)
        results = []
        for client in clients:
            runs = Trials(bootstrap, topic, client)
            console.print(f"[{client}, initial delay {delay_ms} ms] {trials} trial(s)")
            baseline = [await runs.assign_to_first_record() for _ in range(trials)]
            first = [await runs.subscribe_to_first_record() for _ in range(trials)]
            results += [
                Result(BASELINE, client, delay_ms, tuple(baseline)),
                Result(FIRST, client, delay_ms, tuple(first)),
            ]
            if rebalance:
                pairs = [await runs.rebalances() for _ in range(trials)]
                results += [
                    Result("rebalance_on_join", client, delay_ms, tuple(j for j, _ in pairs)),
                    Result("rebalance_on_leave", client, delay_ms, tuple(v for _, v in pairs)),
                ]
        return results


def _baselines(results: Sequence[Result]) -> dict[tuple[str, int], float]:
    return {(r.client, r.initial_delay_ms): r.median_ms for r in results if r.name == BASELINE}


def print_table(console: Console, results: Sequence[Result]) -> None:
    baselines = _baselines(results)
    table = Table(
        "Scenario", "Client", "Initial delay ms", "Median ms", "Min ms", "Max ms", "x baseline"
    )
    for r in results:
        baseline = baselines.get((r.client, r.initial_delay_ms))
        ratio = "" if r.name != FIRST or baseline is None else f"{r.median_ms / baseline:.1f}x"
        table.add_row(
            r.name,
            r.client,
            str(r.initial_delay_ms),
            f"{r.median_ms:.1f}",
            f"{min(r.trials_ms):.1f}",
            f"{max(r.trials_ms):.1f}",
            ratio,
        )
    console.print(table)


def document(results: Sequence[Result], clients: Sequence[str], trials: int) -> dict[str, Any]:
    baselines = _baselines(results)
    return {
        "config": {
            "brokers": BROKERS,
            "partitions": PARTITIONS,
            "records": RECORDS,
            "trials": trials,
            "clients": {
                name: importlib.metadata.version(
                    "confluent-kafka" if name == "confluent" else "aiokafka"
                )
                for name in clients
            },
        },
        "scenarios": [
            r.to_json(baselines.get((r.client, r.initial_delay_ms)) if r.name == FIRST else None)
            for r in results
        ],
    }


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench.groups", description="consumer-group timings with Kafka clients"
    )
    parser.add_argument("--trials", type=int, default=5, help="runs of each scenario (default 5)")
    parser.add_argument(
        "--delays",
        default=f"{KAFKA_DEFAULT_DELAY_MS},0",
        help="group.initial.rebalance.delay.ms values, one cluster each (default 3000,0)",
    )
    parser.add_argument(
        "--clients", default="confluent,aiokafka", help="confluent, aiokafka or both (default)"
    )
    parser.add_argument("--json", type=Path, help="write the figures as JSON")
    return parser


def _plan(args: argparse.Namespace) -> tuple[list[int], list[str]] | str:
    if args.trials < 1:
        return "--trials must be at least 1"
    try:
        delays = [int(d) for d in args.delays.split(",") if d]
    except ValueError:
        return f"--delays needs integers, got {args.delays!r}"
    if not delays or any(d < 0 for d in delays):
        return "--delays needs one or more values >= 0"
    clients = [c for c in args.clients.split(",") if c]
    if not clients or any(c not in MEMBERS for c in clients):
        return f"--clients takes {', '.join(MEMBERS)}; got {args.clients!r}"
    return delays, clients


async def _run(
    delays: list[int], clients: list[str], trials: int, console: Console
) -> list[Result]:
    results: list[Result] = []
    for index, delay in enumerate(delays):
        last = index == len(delays) - 1
        results += await _cluster_run(delay, clients, trials, last, console)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plan = _plan(args)
    if isinstance(plan, str):
        print(f"bench.groups: {plan}", file=sys.stderr)
        return EXIT_USAGE
    delays, clients = plan
    # The clients' own logs (aiokafka's auto-commit retries during a rebalance, librdkafka's
    # connection notes) are their business; the figures are the output.
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
    console = Console(stderr=True)
    try:
        results = asyncio.run(_run(delays, clients, args.trials, console))
    except (RuntimeError, TimeoutError, OSError) as exc:
        print(f"bench.groups: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print_table(Console(width=TABLE_WIDTH), results)
    if args.json is not None:
        args.json.write_text(json.dumps(document(results, clients, args.trials), indent=2) + "\n")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
