"""`ketch cluster health [--json]`: is the cluster healthy, and if not, what is wrong (rpk's
`cluster health` view).

    ketch cluster health
    ketch cluster health --json
    ketch cluster health --bootstrap 127.0.0.1:9093 || echo "not healthy"

Three looks, then one pure verdict (`cluster_health`):
1. DescribeCluster through the bootstrap broker, which forwards it to the controller
   (node/broker/apis.py): the controller's id and every registered broker with its state.
2. Metadata for every topic from the same broker: each partition's leader, replicas and ISR.
3. A Metadata request for no topic to every registered broker the controller does not already
   hold fenced, bounded by PROBE_TIMEOUT_MS: a broker killed a moment ago is still registered
   (until its session expires) but does not answer.

The verdict:
- brokers down: registered brokers that are fenced, or that did not answer the probe;
- leaderless partitions: no leader, or a leader that is down (its clients cannot write there);
- under-replicated partitions: led by a broker that is up, with fewer replicas in the ISR on
  brokers that are up than it has replicas;
- the cluster is healthy when there is a controller and none of the three lists has an entry.
The metadata is the bootstrap broker's: right after a change it may trail the controller by a
moment (the controller's UpdateMetadata is on its way), so a script waiting for health polls.

Output: a table of labels and values that fits 80 columns (`render`; partitions grouped by topic,
runs of three or more shown as `first-last`), or with `--json`: {"healthy", "unhealthy_reasons",
"controller_id" (null when none), "brokers", "brokers_down": [{"id", "reason"}],
"leaderless_partitions" and "under_replicated_partitions": [{"topic", "partition"}]}.

Exit codes: 0 healthy; 1 not healthy, or the cluster could not be asked; 2 bad arguments. The
exit code says "unhealthy" without a flag, so `ketch cluster health && deploy` works as is.

Registration: `register_cluster_commands(cluster_subparsers)`, one entry of cli/main.py's
`cluster_extensions`. The command runs on its own event loop (cli/common.py); nothing outlives it.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    BootstrapServers,
    CliError,
    SubParsers,
    add_bootstrap_flag,
    fetch_metadata,
    format_bootstrap,
    open_client,
    print_json,
    run_async,
    set_command,
)
from client.client import Client
from client.errors import (
    ClientError,
    ConnectionFailedError,
    ConnectionLostError,
    RequestTimeoutError,
)
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
    MetadataRequest,
    MetadataResponse,
)
from wire.topic import TopicPartition

PROG: Final = "ketch cluster health"
PROBE_TIMEOUT_MS: Final = 3_000
FENCED: Final = "fenced"  # a DescribeClusterBroker state (actors/controller/sessions.py)
NO_CONTROLLER: Final = -1
WIDTH: Final = 80
# The label column never takes more than half the line, whatever the counts in the labels.
MAX_LABEL_WIDTH: Final = 40
# A run of at least this many consecutive partitions is printed as first-last.
RUN_MIN: Final = 3

# Why the cluster is not healthy, in the order they are listed (the JSON's unhealthy_reasons).
REASON_NO_CONTROLLER: Final = "no_controller"
REASON_BROKERS_DOWN: Final = "brokers_down"
REASON_LEADERLESS: Final = "leaderless_partitions"
REASON_UNDER_REPLICATED: Final = "under_replicated_partitions"
REASON_WORDS: Final = {
    REASON_NO_CONTROLLER: "no controller",
    REASON_BROKERS_DOWN: "brokers down",
    REASON_LEADERLESS: "leaderless partitions",
    REASON_UNDER_REPLICATED: "under-replicated partitions",
}


@dataclass(frozen=True, slots=True)
class BrokerDown:
    broker_id: int
    reason: str  # "fenced", or "not answering (...)"


@dataclass(frozen=True, slots=True)
class ClusterHealth:
    controller_id: int | None
    brokers: tuple[int, ...]
    brokers_down: tuple[BrokerDown, ...]
    leaderless: tuple[TopicPartition, ...]
    under_replicated: tuple[TopicPartition, ...]

    @property
    def unhealthy_reasons(self) -> tuple[str, ...]:
        found = (
            (REASON_NO_CONTROLLER, self.controller_id is None),
            (REASON_BROKERS_DOWN, bool(self.brokers_down)),
            (REASON_LEADERLESS, bool(self.leaderless)),
            (REASON_UNDER_REPLICATED, bool(self.under_replicated)),
        )
        return tuple(reason for reason, present in found if present)

    @property
    def healthy(self) -> bool:
        return not self.unhealthy_reasons

    def to_json(self) -> dict[str, object]:
        return {
            "healthy": self.healthy,
            "unhealthy_reasons": list(self.unhealthy_reasons),
            "controller_id": self.controller_id,
            "brokers": list(self.brokers),
            "brokers_down": [{"id": b.broker_id, "reason": b.reason} for b in self.brokers_down],
            "leaderless_partitions": _partitions_json(self.leaderless),
            "under_replicated_partitions": _partitions_json(self.under_replicated),
        }


def _partitions_json(partitions: Iterable[TopicPartition]) -> list[dict[str, object]]:
    return [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]


# ---------------------------------------------------------------------------------------------
# The verdict (pure)


def cluster_health(
    cluster: DescribeClusterResponse,
    metadata: MetadataResponse,
    unanswered: Mapping[int, str],
) -> ClusterHealth:
    """The health of a cluster from the controller's DescribeCluster answer, a broker's
    Metadata for every topic, and the brokers that did not answer a probe (id -> why)."""
    registered = {b.broker_id: b for b in cluster.brokers}
    down: dict[int, str] = {}
    for broker_id, broker in sorted(registered.items()):
        if broker.state == FENCED:
            down[broker_id] = FENCED
        elif broker_id in unanswered:
            down[broker_id] = f"not answering ({unanswered[broker_id]})"
    leaderless: list[TopicPartition] = []
    under_replicated: list[TopicPartition] = []
    for topic in metadata.topics:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            if p.leader_id < 0 or p.leader_id in down:
                leaderless.append(tp)
            elif len(set(p.isr_nodes) - set(down)) < len(p.replica_nodes):
                under_replicated.append(tp)
    return ClusterHealth(
        controller_id=None if cluster.controller_id == NO_CONTROLLER else cluster.controller_id,
        brokers=tuple(sorted(registered)),
        brokers_down=tuple(BrokerDown(b, why) for b, why in down.items()),
        leaderless=tuple(sorted(leaderless)),
        under_replicated=tuple(sorted(under_replicated)),
    )


def render(health: ClusterHealth, width: int = WIDTH) -> list[str]:
    """The text view: one label per row, values wrapped within `width` columns."""
    verdict = "yes" if health.healthy else "no"
    if not health.healthy:
        verdict += f" ({', '.join(REASON_WORDS[r] for r in health.unhealthy_reasons)})"
    rows: list[tuple[str, list[str]]] = [
        ("Healthy", [verdict]),
        ("Controller", ["none" if health.controller_id is None else str(health.controller_id)]),
        ("Brokers", [", ".join(str(b) for b in health.brokers) or "none"]),
        (
            f"Brokers down ({len(health.brokers_down)})",
            [f"{b.broker_id}: {b.reason}" for b in health.brokers_down],
        ),
        (f"Leaderless partitions ({len(health.leaderless)})", by_topic(health.leaderless)),
        (
            f"Under-replicated partitions ({len(health.under_replicated)})",
            by_topic(health.under_replicated),
        ),
    ]
    label_width = min(MAX_LABEL_WIDTH, max(len(label) for label, _ in rows) + 2)
    lines: list[str] = []
    for label, values in rows:
        lines.extend(_labelled(f"{label}:", values or ["-"], label_width, width))
    return lines


def by_topic(partitions: Sequence[TopicPartition]) -> list[str]:
    """`topic: 0-5, 7` per topic, topics in order."""
    return [
        f"{topic}: {partition_ranges([tp.partition for tp in group])}"
        for topic, group in itertools.groupby(partitions, key=lambda tp: tp.topic)
    ]


def partition_ranges(partitions: Iterable[int]) -> str:
    """Sorted partition numbers, a run of RUN_MIN or more consecutive ones as `first-last`."""
    numbers = sorted(set(partitions))
    parts: list[str] = []
    start = 0
    while start < len(numbers):
        end = start
        while end + 1 < len(numbers) and numbers[end + 1] == numbers[end] + 1:
            end += 1
        if end - start + 1 >= RUN_MIN:
            parts.append(f"{numbers[start]}-{numbers[end]}")
        else:
            parts.extend(str(n) for n in numbers[start : end + 1])
        start = end + 1
    return ", ".join(parts)


def _labelled(label: str, values: list[str], label_width: int, width: int) -> list[str]:
    """The label, then each value wrapped in the value column; a label wider than its column
    stands on a line of its own."""
    indent = " " * label_width
    wrapped = [
        line
        for value in values
        for line in textwrap.wrap(
            value,
            width=width - label_width,
            break_on_hyphens=False,
            subsequent_indent="  ",  # a value's continuation lines, set in under its first
        )
    ]
    if len(label) >= label_width:
        return [label[:width], *(indent + line for line in wrapped)]
    return [label.ljust(label_width) + wrapped[0], *(indent + line for line in wrapped[1:])]


# ---------------------------------------------------------------------------------------------
# argparse and the command


def register_cluster_commands(cluster_subparsers: SubParsers[argparse.ArgumentParser]) -> None:
    """Add `health` under an existing `ketch cluster` parser."""
    health = cluster_subparsers.add_parser(
        "health",
        help="healthy or not: brokers down, leaderless and under-replicated partitions",
        # Line breaks of its own: the raw formatter (for the examples) does not wrap it.
        description=(
            "Whether the cluster is healthy: a controller, every registered broker up, every\n"
            "partition led and fully in sync. Exit 0 healthy, 1 not (or no answer), 2 usage."
        ),
        epilog=(
            "examples:\n"
            "  ketch cluster health\n"
            "  ketch cluster health --json > health.json || echo unhealthy\n"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    health.add_argument("--json", action="store_true", help="print JSON")
    add_bootstrap_flag(health)
    set_command(health, cmd_health)


def cmd_health(args: argparse.Namespace) -> int:
    bootstrap: BootstrapServers = args.bootstrap

    async def work() -> int:
        async with open_client(bootstrap, client_id="ketch-health") as client:
            health = await check_health(client, bootstrap)
        if args.json:
            print_json(health.to_json())
        else:
            print("\n".join(render(health)))
        return EXIT_OK if health.healthy else EXIT_FAILED

    return run_async(PROG, bootstrap, work)


async def check_health(client: Client, bootstrap: BootstrapServers) -> ClusterHealth:
    """Ask the cluster (the module docstring's three looks) and judge."""
    try:
        described = await client.send_any(DescribeClusterRequest())
    except RequestTimeoutError:
        # The broker answers at once unless it is waiting for the controller.
        raise CliError(
            f"the broker asked (of {format_bootstrap(bootstrap)}) did not answer in time; it "
            "may be unable to reach the controller (`ketch cluster status` shows what it knows)"
        ) from None
    if not isinstance(described, DescribeClusterResponse):
        raise TypeError(f"DescribeCluster answered with {type(described).__name__}")
    if described.error_code != ErrorCode.NONE:
        code = ErrorCode.from_code(described.error_code)
        detail = described.error_message or "no reason given"
        raise CliError(
            f"the broker asked (of {format_bootstrap(bootstrap)}) answered: {detail} ({code.name})"
        )
    metadata = await fetch_metadata(client, None)
    probed = [b for b in described.brokers if b.state != FENCED]
    unanswered = await _unanswered(client, probed)
    return cluster_health(described, metadata, unanswered)


async def _unanswered(client: Client, brokers: Sequence[DescribeClusterBroker]) -> dict[int, str]:
    """broker id -> why, for the brokers that did not answer a Metadata request for no topic."""

    async def probe(broker: DescribeClusterBroker) -> str | None:
        try:
            await client.send(
                Address(broker.host, broker.port),
                MetadataRequest(topics=[]),
                timeout_ms=PROBE_TIMEOUT_MS,
            )
        except ClientError as exc:
            return _probe_failure(exc)
        return None

    answers = await asyncio.gather(*(probe(b) for b in brokers))
    return {b.broker_id: why for b, why in zip(brokers, answers, strict=True) if why is not None}


def _probe_failure(exc: ClientError) -> str:
    if isinstance(exc, RequestTimeoutError):
        return f"no answer within {PROBE_TIMEOUT_MS / 1000:g} s"
    if isinstance(exc, ConnectionFailedError):
        return f"cannot connect: {_os_reason(exc)}"
    if isinstance(exc, ConnectionLostError):
        return "the connection was lost"
    return str(exc)


def _os_reason(exc: BaseException) -> str:
    """The operating system's words ("connection refused") when the cause chain has them."""
    cause: BaseException | None = exc
    for _ in range(10):  # bounded: a cause chain is short
        if cause is None:
            break
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror.lower()
        cause = cause.__cause__ or cause.__context__
    return str(exc)
