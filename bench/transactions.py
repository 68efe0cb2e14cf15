"""Transactions' cost: transactional produce (a commit every --commit-ms) against plain acks=all
idempotent produce, in the same run, on the same cluster, through librdkafka (confluent-kafka).

    python -m bench.transactions [--seconds 10] [--rounds 3] [--commit-ms 100]
                                 [--record-bytes 1000] [--json F]

The cluster is a controller and three brokers in real processes on 127.0.0.1 (testkit/
processes.py's ProcessCluster, with Kafka listeners) and a topic of 3 partitions, replication
factor 3, min.insync.replicas 2. Each round runs the two producers one after the other (their
order alternating between rounds, so a warming cache or a noisy neighbour weighs on both),
each for --seconds, producing --record-bytes records as fast as librdkafka accepts them
(`produce` until its queue is full, then `poll`):

    plain           acks=all, enable.idempotence (librdkafka's default acks; its idempotence
                    switched on, as the transactional producer has it too)
    transactional   the same, inside transactions: begin, produce for --commit-ms, commit
                    (Kafka Streams' default commit.interval.ms with exactly-once is 100 ms)

Figures: records/s acknowledged for each (the median over rounds) and their ratio, and the
latency of `commit_transaction` (EndTxn to the coordinator, the markers written to every
partition's ISR, and the answer) as median and p99 over every commit of every round.

Ownership: the benchmark's event loop runs the cluster harness; each producer runs in a worker
thread (librdkafka's API is blocking) and touches nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

import confluent_kafka
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from rich.console import Console
from rich.table import Table

from runtime.config import Value
from testkit.processes import running_cluster

TOPIC: Final = "bench-txn"
PARTITIONS: Final = 3
PROPERTIES: Final[Mapping[str, Value]] = {
    "broker.session.timeout.ms": 6_000,
    "broker.heartbeat.interval.ms": 500,
    "replica.fetch.wait.max.ms": 50,
}


@dataclass
class Sample:
    mode: str
    records: int = 0
    seconds: float = 0.0
    commit_ms: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def _producer(bootstrap: str, transactional_id: str | None) -> Any:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
    }
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    return confluent_kafka.Producer(config)


def _fill(producer: Any, value: bytes, until: float, acked: list[int]) -> None:
    """Produce until `until` (monotonic), counting acknowledgements in `acked[0]`."""

    def delivered(error: Any, _: Any) -> None:
        if error is None:
            acked[0] += 1

    partition = 0
    while time.monotonic() < until:
        try:
            producer.produce(TOPIC, value=value, partition=partition, on_delivery=delivered)
            partition = (partition + 1) % PARTITIONS
        except BufferError:
            producer.poll(0.001)
        producer.poll(0)


def run_plain(bootstrap: str, seconds: float, record_bytes: int) -> Sample:
    producer = _producer(bootstrap, None)
    value = b"x" * record_bytes
    acked = [0]
    start = time.monotonic()
    _fill(producer, value, start + seconds, acked)
    producer.flush(60)
    return Sample("plain", acked[0], time.monotonic() - start)


def run_transactional(
    bootstrap: str, seconds: float, record_bytes: int, commit_ms: int, round_: int
) -> Sample:
    producer = _producer(bootstrap, f"bench-txn-{round_}")
    producer.init_transactions(60)
    value = b"x" * record_bytes
    acked = [0]
    sample = Sample("transactional")
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        producer.begin_transaction()
        _fill(producer, value, min(end, time.monotonic() + commit_ms / 1000), acked)
        # Everything produced is acknowledged first, so the time measured is the commit's own:
        # EndTxn, the markers on every partition's ISR, the answer.
        producer.flush(60)
        committing = time.monotonic()
        producer.commit_transaction(60)
        sample.commit_ms.append((time.monotonic() - committing) * 1000)
    sample.records = acked[0]
    sample.seconds = time.monotonic() - start
    return sample


async def run_all(
    rounds: int, seconds: float, record_bytes: int, commit_ms: int, root: Path
) -> list[Sample]:
    samples: list[Sample] = []
    async with running_cluster(root, PROPERTIES, kafka=True) as cluster:
        bootstrap = cluster.kafka_bootstrap()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        futures = admin.create_topics(
            [NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})]
        )
        await asyncio.to_thread(futures[TOPIC].result, 60)
        for round_ in range(rounds):
            order = ["plain", "transactional"] if round_ % 2 == 0 else ["transactional", "plain"]
            for mode in order:
                if mode == "plain":
                    sample = await asyncio.to_thread(run_plain, bootstrap, seconds, record_bytes)
                else:
                    sample = await asyncio.to_thread(
                        run_transactional, bootstrap, seconds, record_bytes, commit_ms, round_
                    )
                print(f"round {round_}: {mode}: {sample.rate:,.0f} records/s")
                samples.append(sample)
    return samples


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=10.0, help="per producer per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commit-ms", type=int, default=100, help="transaction length")
    parser.add_argument("--record-bytes", type=int, default=1_000)
    parser.add_argument("--json", default=None, metavar="FILE", help="write the figures here")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.seconds <= 0 or args.commit_ms < 1 or args.record_bytes < 1:
        parser.error("--rounds, --seconds, --commit-ms and --record-bytes must be positive")
    with tempfile.TemporaryDirectory(prefix="ketch-bench-txn-") as tmp:
        samples = asyncio.run(
            run_all(args.rounds, args.seconds, args.record_bytes, args.commit_ms, Path(tmp))
        )
    plain = statistics.median(s.rate for s in samples if s.mode == "plain")
    txn = statistics.median(s.rate for s in samples if s.mode == "transactional")
    commits = [ms for s in samples for ms in s.commit_ms]
    table = Table(
        title=(
            f"Transactions, {args.rounds} rounds of {args.seconds:g} s, "
            f"{args.record_bytes} B records, a commit every {args.commit_ms} ms"
        )
    )
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("plain acks=all (idempotent), records/s, median", f"{plain:,.0f}")
    table.add_row("transactional, records/s, median", f"{txn:,.0f}")
    table.add_row("transactional / plain", f"{txn / plain:.2f}x" if plain else "-")
    table.add_row("commit_transaction, median ms", f"{statistics.median(commits):.1f}")
    table.add_row("commit_transaction, p99 ms", f"{_percentile(commits, 0.99):.1f}")
    table.add_row("commits measured", str(len(commits)))
    Console().print(table)
    if args.json:
        figures = {
            "plain_records_per_s": plain,
            "transactional_records_per_s": txn,
            "ratio": txn / plain if plain else None,
            "commit_ms_median": statistics.median(commits),
            "commit_ms_p99": _percentile(commits, 0.99),
            "samples": [asdict(s) for s in samples],
        }
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
