"""What the node-metrics tests share: a text exposition parsed into samples, and a
`BrokerMetrics` over fake sources (replica counts, purgatories, mailbox statistics) whose
values the tests know. Pure functions and small fakes; each test owns what it builds."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from runtime.actor import ActorStatistics
from runtime.metrics.broker import BrokerMetrics

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: bytes) -> Samples:
    """Every sample of a text exposition by (name, sorted labels)."""
    out: Samples = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def value(parsed: Samples, name: str, **labels: str) -> float:
    return parsed[(name, tuple(sorted(labels.items())))]


@dataclass(frozen=True)
class Counts:
    partitions: int = 5
    leaders: int = 3
    under_replicated: int = 2
    under_min_isr: int = 1
    offline: int = 1


@dataclass
class FakePurgatory:
    watched: int
    delayed: int


def stats(name: str, depth: int) -> ActorStatistics:
    return ActorStatistics(
        name=name,
        depth=depth,
        capacity=1024,
        blocked_senders=0,
        processed=0,
        failed=0,
        max_wait_ms=0.0,
        running=True,
    )


def broker_metrics(mailboxes: list[tuple[str, ActorStatistics]]) -> BrokerMetrics:
    return BrokerMetrics(
        replica_counts=Counts,
        purgatories={"Produce": FakePurgatory(4, 3), "Fetch": FakePurgatory(7, 6)},
        mailboxes=lambda: mailboxes,
    )
