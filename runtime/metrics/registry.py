"""A node's metrics registry (`NodeMetrics`), its `metrics.port`, and the collectors shared by
brokers and controllers.

A `NodeMetrics` holds its own `CollectorRegistry` (never the process-wide default: tests run
several nodes in one process). Collectors are plain functions called at scrape time; a refresh
is an awaitable run before each scrape, for a snapshot only an actor can take (by message).
Owned by one node; every method runs on the node's loop thread.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from runtime.actor import ActorStatistics
from runtime.properties import int_property

log = logging.getLogger(__name__)

METRICS_PORT_KEY: Final = "metrics.port"
METRICS_DISABLED: Final = -1


def metrics_port(properties: Mapping[str, object]) -> int:
    """`metrics.port` from a node's properties: -1 (the default) is off, 0 any free port."""
    port = int_property(properties, METRICS_PORT_KEY, METRICS_DISABLED)
    if port != METRICS_DISABLED and not 0 <= port <= 65_535:
        raise ValueError(f"{METRICS_PORT_KEY} must be -1 (off) or a port 0..65535: {port}")
    return port


MailboxSource = Callable[[], Iterable[tuple[str, ActorStatistics]]]
"""(actor kind, statistics) for every actor the node runs now."""


class _Collector:
    """Adapts a function to prometheus_client's collector protocol."""

    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterable[Metric]:
        return self._collect()


class NodeMetrics:
    """A node's registry, plus the asynchronous refreshes a scrape runs first (a snapshot that
    only an actor can take, by message)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._refreshes: list[Callable[[], Awaitable[None]]] = []

    def add_collector(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self.registry.register(_Collector(collect))

    def add_refresh(self, refresh: Callable[[], Awaitable[None]]) -> None:
        self._refreshes.append(refresh)

    async def scrape(self) -> bytes:
        for refresh in self._refreshes:
            try:
                await refresh()
            except Exception:
                # A stopping actor cannot answer; the gauges keep their last values.
                log.debug("metrics refresh failed; serving the last values", exc_info=True)
        return generate_latest(self.registry)


def mailbox_metrics(actors: Iterable[tuple[str, ActorStatistics]]) -> list[Metric]:
    """Mailbox depth per actor kind: the sum (total queued work), the deepest single mailbox
    (one stuck actor), and how many actors of the kind run."""
    depth: dict[str, int] = {}
    deepest: dict[str, int] = {}
    count: dict[str, int] = {}
    for kind, stats in actors:
        depth[kind] = depth.get(kind, 0) + stats.depth
        deepest[kind] = max(deepest.get(kind, 0), stats.depth)
        count[kind] = count.get(kind, 0) + 1
    families = [
        GaugeMetricFamily(
            "ketch_actor_mailbox_depth", "Messages queued, summed over actors", labels=["kind"]
        ),
        GaugeMetricFamily(
            "ketch_actor_mailbox_depth_max", "Deepest mailbox of the kind", labels=["kind"]
        ),
        GaugeMetricFamily("ketch_actors", "Running actors", labels=["kind"]),
    ]
    for kind in sorted(count):
        families[0].add_metric([kind], depth[kind])
        families[1].add_metric([kind], deepest[kind])
        families[2].add_metric([kind], count[kind])
    return list(families)


def gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    """One unlabelled gauge sample as a family, a collector's usual answer."""
    return GaugeMetricFamily(name, documentation, value=value)


def counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    """One unlabelled counter sample as a family."""
    # CounterMetricFamily appends the `_total` suffix to the samples.
    return CounterMetricFamily(name, documentation, value=value)
