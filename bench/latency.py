"""`ketch bench latency`: request latency of a ketch cluster, as ratios to Python's floor.

    ketch bench latency [--acks 0|1|all] [--rate N] [--duration S] [--size B] [--json F]
                        [--plot F.png] [--bootstrap HOST:PORT] [--brokers 3]
                        [--loop asyncio|uvloop] [--in-process]
                        [--protocol native|kafka] [--kafka-client confluent|aiokafka|both]
                        [--peer-cmd CMD]
    python -m bench.latency ...   (the same)

The cluster: without --bootstrap, a controller and --brokers brokers as child processes
(`ketch controller` / `ketch broker`, bench/latency_cluster.py), or with --in-process
testkit/cluster.py's in-process cluster on the client's own event loop (then acks=all and
end-to-end include the followers' work on that one core). If the process commands are not
registered in cli/main.py the in-process cluster is used, with a warning. With --bootstrap
an existing cluster is measured. Each scenario gets its own run-unique topic with
RF=min(3, brokers), min.insync.replicas=min(2, RF).

Scenarios, in order (each: warm-up excluded, then an equal share of --duration):

* floor: bare msgpack echo round trip over 127.0.0.1 TCP (bench/rpc.py `echo_floor`, closed
  loop), on the --loop event loop; `floor_<other loop>` is the same on the other loop
  (asyncio versus uvloop); `floor_process` is the echo with its server in another process
  (bench/echo_process.py), as the brokers are unless --in-process: the round trip then also
  pays the wake-ups across processes, and the table gives each scenario's p50 against both;
* produce_acks0 (time until the request is written), produce_acks1, produce_acks_all: one
  producer, linger.ms=0, --size-byte values, partition 0;
* e2e: produce (acks=all) until a consumer long-polling with fetch.max.wait.ms=500 has it;
* throughput_acks1, throughput_acks_all: 8 producers, 16 KB batches, 3 partitions, flat out
  (MB/s and msgs/s; latency is per record under that load).

With --protocol kafka (bench/latency_kafka_scenarios.py) the brokers also serve the Kafka wire
protocol (`--kafka-listen`), and every cluster scenario is driven through it by a Kafka client,
once per client of --kafka-client (default both): `produce_acks1[confluent]`,
`e2e[aiokafka]`, ...; the floors stay (they are the divisor), and --bootstrap then names Kafka
listeners. With --peer-cmd (bench/latency_kafka_peer.py: a command template that starts another
Kafka-compatible broker on `{port}`) each Kafka scenario runs against ketch and then against the
peer, alternating scenario by scenario so drifting machine load hits both, and the table and the
JSON (`"peer"`) add the ratios peer/ketch of p50, p99 and throughput. --duration is shared by
every measured run, the peer's included: each run (a scenario, with one client, against one
broker) gets an equal share.

With --acks only that produce scenario runs beside floor and e2e. Without --rate the produce
and e2e scenarios are closed-loop (one in flight); with --rate N they are open-loop at N msgs/s,
each latency measured from the request's intended send time (coordinated-omission correction,
see bench/latency_scenarios.py). The floor is always closed-loop: it is the one-in-flight cost
everything is divided by.

Output: a rich progress bar while running (stderr), then a summary table (p50, p90, p99, p99.9,
max, count, msgs/s, MB/s, p50 as a multiple of the floor's p50). `--json F` writes
`{"config": {...}, "scenarios": [{"name", "p50_us", "p90_us", "p99_us", "p999_us", "max_us",
"count", "throughput_msgs_s"[, "throughput_mb_s"]}, ...]}`, with --peer-cmd also `"peer":
{"command", "bootstrap", "brokers", "replication_factor", "min_insync_replicas", "scenarios":
[as above], "ratios": [{"name", "p50_ratio", "p99_ratio", "throughput_ratio"}]}` (peer / ketch:
above 1 the peer is slower, or for throughput faster); `--plot F.png` a latency-by-
percentile plot and `F.<scenario>.hlog` HdrHistogram logs (values in ns) next to it.

Exit codes: 0 done; 1 the benchmark could not run (cluster did not start, --bootstrap
unreachable, a request failed); 2 bad arguments.

Tests (tests/integration/test_bench_latency.py) run the in-process cluster for speed and
the process cluster under the `slow` marker.

This module is the command line only (argparse, no heavy imports: cli/main.py imports it to
register the command); bench/latency_run.py runs the benchmark.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from client.config import ACKS_ALL
from runtime.net.transport import Address

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
LOOPS: Final = ("uvloop", "asyncio")
PROTOCOLS: Final = ("native", "kafka")
KAFKA_CLIENTS: Final = ("confluent", "aiokafka")  # bench/latency_kafka_clients.py's CLIENTS
ACKS_CHOICES: Final = {"0": 0, "1": 1, "all": ACKS_ALL, "-1": ACKS_ALL}
MAX_WARMUP_S: Final = 1.0
WARMUP_SHARE: Final = 0.25  # of a scenario's share, capped at MAX_WARMUP_S


def _address(text: str) -> Address:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return Address(host, int(port))


def _addresses(text: str) -> list[Address]:
    return [_address(part) for part in text.split(",") if part]


@dataclass(frozen=True, slots=True)
class Plan:
    """What one run measures, derived from the arguments once."""

    acks: int | None  # None: every produce scenario and the throughput ones
    rate: int | None
    duration_s: float
    size_bytes: int
    brokers: int
    loop: str
    bootstrap: list[Address] | None
    in_process: bool
    protocol: str = "native"
    kafka_clients: tuple[str, ...] = ()  # with protocol kafka: each scenario once per client
    peer_cmd: str | None = None

    @property
    def kafka(self) -> bool:
        return self.protocol == "kafka"

    @property
    def produce_acks(self) -> list[int]:
        return [0, 1, ACKS_ALL] if self.acks is None else [self.acks]

    @property
    def throughput_acks(self) -> list[int]:
        return [1, ACKS_ALL] if self.acks is None else []

    @property
    def cluster_scenarios(self) -> int:
        """Measured runs against clusters: each scenario per client, and per target."""
        scenarios = len(self.produce_acks) + 1 + len(self.throughput_acks)
        if not self.kafka:
            return scenarios
        return scenarios * len(self.kafka_clients) * (2 if self.peer_cmd is not None else 1)

    @property
    def share_s(self) -> float:
        # The floors count as one share between them: they are cheap and fast.
        return self.duration_s / (self.cluster_scenarios + 1)

    @property
    def warmup_s(self) -> float:
        return min(MAX_WARMUP_S, self.share_s * WARMUP_SHARE)

    @property
    def other_loop(self) -> str:
        return next(name for name in LOOPS if name != self.loop)


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="python -m bench.latency", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--acks", choices=sorted(ACKS_CHOICES), help="only this produce scenario (and floor, e2e)"
    )
    parser.add_argument(
        "--rate", type=int, help="open loop at N msgs/s (default: closed loop, 1 in flight)"
    )
    parser.add_argument(
        "--duration", type=float, default=30.0, help="measured seconds, split over the scenarios"
    )
    parser.add_argument("--size", type=int, default=100, help="value bytes per message")
    parser.add_argument("--json", type=Path, help="write the figures and configuration here")
    parser.add_argument("--plot", type=Path, help="write a percentile plot (PNG) and .hlog files")
    parser.add_argument(
        "--bootstrap",
        type=_addresses,
        help="measure this cluster (HOST:PORT[,HOST:PORT...]; Kafka listeners with --protocol "
        "kafka)",
    )
    parser.add_argument("--brokers", type=int, default=3, help="brokers of the started cluster")
    parser.add_argument("--loop", choices=LOOPS, default="uvloop", help="the client's event loop")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="start the cluster on the client's event loop instead of as child processes",
    )
    parser.add_argument(
        "--protocol",
        choices=PROTOCOLS,
        default="native",
        help="native: ketch's own client; kafka: Kafka clients through the Kafka listener",
    )
    parser.add_argument(
        "--kafka-client",
        choices=(*KAFKA_CLIENTS, "both"),
        default="both",
        help="with --protocol kafka: the client(s) each scenario runs with (default both)",
    )
    parser.add_argument(
        "--peer-cmd",
        metavar="CMD",
        help="with --protocol kafka: shell command starting another Kafka-compatible broker on "
        "{port} (data in {dir}; {native_port}: a free base port); measured alternately, ratios",
    )
    return parser


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds `bench latency` (`ketch bench latency ...`) to a `ketch` subparsers action."""
    bench = subparsers.add_parser(
        "bench",
        help="benchmarks",
        epilog="examples:\n  ketch bench latency --duration 5\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = bench.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    latency = commands.add_parser(
        "latency",
        help="request latency: floor, produce acks 0/1/all, end-to-end, throughput",
        epilog=(
            "examples:\n"
            "  ketch bench latency --duration 5 --json out.json --plot out.png\n"
            "  ketch bench latency --bootstrap 127.0.0.1:9092 --acks all --rate 1000\n"
            "  ketch bench latency --protocol kafka --kafka-client aiokafka --duration 10\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    build_parser(latency)
    # cli/main.py dispatches on `handler`; `func` is the name the brief used.
    latency.set_defaults(handler=run, func=run)


def _plan(args: argparse.Namespace) -> Plan | str:
    """The plan, or what is wrong with the arguments."""
    if args.duration <= 0:
        return "--duration must be positive"
    if args.rate is not None and args.rate <= 0:
        return "--rate must be positive"
    if args.size < 0:
        return "--size must not be negative"
    if args.brokers < 1:
        return "--brokers must be at least 1"
    if args.bootstrap is not None and args.in_process:
        return "--bootstrap and --in-process exclude each other"
    if args.bootstrap is not None and not args.bootstrap:
        return "--bootstrap needs HOST:PORT"
    kafka = args.protocol == "kafka"
    if kafka and args.in_process:
        return "--protocol kafka needs the process cluster or --bootstrap (not --in-process)"
    if args.peer_cmd is not None:
        if not kafka:
            return "--peer-cmd needs --protocol kafka"
        from bench.latency_kafka_peer import template_problem  # standard library only

        if (problem := template_problem(args.peer_cmd)) is not None:
            return problem
    clients = KAFKA_CLIENTS if args.kafka_client == "both" else (args.kafka_client,)
    return Plan(
        acks=None if args.acks is None else ACKS_CHOICES[args.acks],
        rate=args.rate,
        duration_s=args.duration,
        size_bytes=args.size,
        brokers=args.brokers,
        loop=args.loop,
        bootstrap=args.bootstrap,
        in_process=args.in_process,
        protocol=args.protocol,
        kafka_clients=clients if kafka else (),
        peer_cmd=args.peer_cmd,
    )


def run(args: argparse.Namespace) -> int:
    plan = _plan(args)
    if isinstance(plan, str):
        print(f"ketch bench latency: {plan}", file=sys.stderr)
        return EXIT_USAGE
    from bench.latency_run import execute  # matplotlib, the cluster, the clients: only now

    return execute(plan, json_path=args.json, plot_path=args.plot)


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
