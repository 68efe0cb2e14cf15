"""Node metrics in Prometheus text format, served on `GET /metrics`.

Each node (broker or controller) owns one `NodeMetrics`: its own `CollectorRegistry`, never the
process-wide default, because tests run several nodes in one process and each must report only
its own numbers. Names follow Kafka's JMX beans as the Prometheus JMX exporter lowercases them
(`kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions` becomes
`kafka_server_replicamanager_underreplicatedpartitions`); a Kafka rate meter
(`IsrShrinksPerSec`) becomes a counter (`..._isrshrinks_total`), from which Prometheus computes
the rate. What Kafka has no bean for is named `ketch_...`.

Cost model. Only one thing happens per request: `RequestMetrics.observe`, a dict lookup, a
`bisect` over the bucket bounds and two integer additions (no lock, no label resolution, no
`prometheus_client` object touched). Everything else is computed at scrape time by collectors
that read published state: partition views, mailbox `statistics()`, purgatory counts. An ISR
change bumps a plain integer (rare). So an unscraped broker pays only the per-request observation.

Broker metrics (`BrokerMetrics`):

    kafka_server_replicamanager_partitioncount          gauge    hosted partitions
    kafka_server_replicamanager_leadercount             gauge    of which this broker leads
    kafka_server_replicamanager_underreplicatedpartitions gauge  led, committed ISR < replicas
    kafka_server_replicamanager_underminisrpartitioncount gauge  led, ISR < min.insync.replicas
    kafka_server_replicamanager_offlinereplicacount     gauge    replicas whose log failed
    kafka_server_replicamanager_isrshrinks_total        counter  committed ISR shrinks (leader)
    kafka_server_replicamanager_isrexpands_total        counter  committed ISR expansions
    kafka_server_replicamanager_failedisrupdates_total  counter  AlterPartition attempts failed
    kafka_server_delayedoperationpurgatory_purgatorysize{delayedOperation}       gauge  watched
    kafka_server_delayedoperationpurgatory_numdelayedoperations{delayedOperation} gauge waiting
    kafka_network_requestmetrics_totaltimems{request}   histogram  ms, request received to
                                                                   response ready
    ketch_actor_mailbox_depth{kind} / ketch_actor_mailbox_depth_max{kind} / ketch_actors{kind}

Controller metrics (`ControllerMetrics`), refreshed by one `ask` to the controller actor per
scrape (a snapshot, never a read of the actor's fields):

    kafka_controller_kafkacontroller_activecontrollercount   gauge (1)
    kafka_controller_kafkacontroller_offlinepartitionscount  gauge
    kafka_controller_kafkacontroller_activebrokercount       gauge
    kafka_controller_kafkacontroller_fencedbrokercount       gauge
    kafka_controller_controllerstats_uncleanleaderelections_total counter
    ketch_controller_epoch                                   gauge

The HTTP endpoint (`MetricsHttpServer`) runs on the node's own event loop, not in a thread. The
collectors read state that belongs to the loop (routing tables, views, mailbox lengths, purgatory
counters); read from another thread they could see a dict change size mid-iteration. On the loop
a scrape is one synchronous step between two tasks' steps, so it sees a consistent picture and
needs no lock. The step is short (a few hundred samples: well under a millisecond for a broker of
a few hundred partitions), and scrapes come every few seconds at most, so the loop barely
notices. Each connection is one request (`Connection: close`) with a bounded header size and a
deadline on the node's clock; the number of open connections is bounded too.

Ownership: a `NodeMetrics` belongs to its node; every method runs on the node's loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from runtime.actor import ActorStatistics
from runtime.clock import NS_PER_MS, Alarm, Clock
from runtime.properties import int_property
from wire.messages import ApiKey, FetchRequest, Request

log = logging.getLogger(__name__)

METRICS_PORT_KEY: Final = "metrics.port"
METRICS_DISABLED: Final = -1

# Request latency buckets, in ms: sub-millisecond for in-memory answers, up to the 30 s of a
# request.timeout.ms for a stuck acks=all produce; fetches that long-poll fill the upper half.
LATENCY_BUCKETS_MS: Final[tuple[float, ...]] = (
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    25,
    50,
    100,
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    30_000,
)

# Bounds on the HTTP endpoint: one small GET per connection.
MAX_HEADER_BYTES: Final = 8 * 1024
MAX_CONNECTIONS: Final = 16
REQUEST_DEADLINE_MS: Final = 10_000


def metrics_port(properties: Mapping[str, object]) -> int:
    """`metrics.port` from a node's properties: -1 (the default) is off, 0 any free port."""
    port = int_property(properties, METRICS_PORT_KEY, METRICS_DISABLED)
    if port != METRICS_DISABLED and not 0 <= port <= 65_535:
        raise ValueError(f"{METRICS_PORT_KEY} must be -1 (off) or a port 0..65535: {port}")
    return port


def request_name(api_key: int) -> str:
    """Kafka's request name for an API key: LEADER_AND_ISR -> LeaderAndIsr."""
    try:
        name = ApiKey(api_key).name
    except ValueError:
        return f"Api{api_key}"
    return "".join(part.capitalize() for part in name.split("_"))


# -- request latency (the hot path) -------------------------------------------------------------


class LatencyHistogram:
    """Bucket counts of durations in ns; `observe` is the per-request cost, so it does the least:
    `bisect_left` finds the first bound >= the value (Prometheus' `le`), one slot is bumped.
    Counts are per bucket here and made cumulative only at scrape time."""

    __slots__ = ("bounds_ns", "counts", "sum_ns")

    def __init__(self, bounds_ms: Sequence[float] = LATENCY_BUCKETS_MS) -> None:
        assert list(bounds_ms) == sorted(set(bounds_ms)), bounds_ms
        self.bounds_ns: list[int] = [round(b * NS_PER_MS) for b in bounds_ms]
        self.counts: list[int] = [0] * (len(self.bounds_ns) + 1)  # the last slot is +Inf
        self.sum_ns = 0

    def observe(self, elapsed_ns: int) -> None:
        self.counts[bisect_left(self.bounds_ns, elapsed_ns)] += 1
        self.sum_ns += elapsed_ns

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative_ms(self) -> list[tuple[str, float]]:
        """Prometheus buckets: (`le` in ms, observations <= it), ending with +Inf."""
        buckets: list[tuple[str, float]] = []
        running = 0
        for bound_ns, count in zip(self.bounds_ns, self.counts, strict=False):
            running += count
            buckets.append((_float_text(bound_ns / NS_PER_MS), running))
        buckets.append(("+Inf", running + self.counts[-1]))
        return buckets


def _float_text(value: float) -> str:
    return repr(float(value))


class RequestMetrics:
    """Per-API request latency; `observe` is the server's observer hook (runtime/net/server.py).

    Fetch is also counted as FetchConsumer or FetchFollower, as Kafka does, since follower
    long-polls (which wait replica.fetch.wait.max.ms when idle) would otherwise hide the
    consumers' latency.
    """

    NAME: Final = "kafka_network_requestmetrics_totaltimems"

    def __init__(self, bounds_ms: Sequence[float] = LATENCY_BUCKETS_MS) -> None:
        self._bounds_ms = tuple(bounds_ms)
        self._by_key: dict[int, LatencyHistogram] = {}
        # By request class, for the hot path: a type's hash is its identity, where an IntEnum
        # API key would hash (and compare) through Enum's slower methods. Every version's
        # class of one API maps to the same histogram.
        self._by_type: dict[type[Request], LatencyHistogram] = {}
        self._consumer_fetch = LatencyHistogram(bounds_ms)
        self._follower_fetch = LatencyHistogram(bounds_ms)

    def observe(self, request: Request, elapsed_ns: int) -> None:
        cls = type(request)
        histogram = self._by_type.get(cls)
        if histogram is None:
            histogram = self._histogram_for(cls)
        # LatencyHistogram.observe, inlined: this runs once per request.
        histogram.counts[bisect_left(histogram.bounds_ns, elapsed_ns)] += 1
        histogram.sum_ns += elapsed_ns
        if cls is FetchRequest:
            assert isinstance(request, FetchRequest)
            split = self._follower_fetch if request.replica_id >= 0 else self._consumer_fetch
            split.counts[bisect_left(split.bounds_ns, elapsed_ns)] += 1
            split.sum_ns += elapsed_ns

    def _histogram_for(self, cls: type[Request]) -> LatencyHistogram:
        key = int(cls.API_KEY)
        histogram = self._by_key.get(key)
        if histogram is None:
            histogram = self._by_key[key] = LatencyHistogram(self._bounds_ms)
        self._by_type[cls] = histogram
        return histogram

    def histogram(self, name: str) -> LatencyHistogram | None:
        """The histogram for a request name (`Produce`, `FetchConsumer`, ...), if any yet."""
        return dict(self._named()).get(name)

    def _named(self) -> Iterator[tuple[str, LatencyHistogram]]:
        for key, histogram in sorted(self._by_key.items()):
            yield request_name(key), histogram
        if self._consumer_fetch.count:
            yield "FetchConsumer", self._consumer_fetch
        if self._follower_fetch.count:
            yield "FetchFollower", self._follower_fetch

    def collect(self) -> Iterable[Metric]:
        family = HistogramMetricFamily(
            self.NAME,
            "Time from receiving a request to its response being ready, in ms",
            labels=["request"],
        )
        for name, histogram in self._named():
            family.add_metric([name], histogram.cumulative_ms(), histogram.sum_ns / NS_PER_MS)
        return [family]


# -- ISR changes --------------------------------------------------------------------------------


class IsrChangeCounter:
    """Counts committed ISR changes of a broker's partitions (Kafka's IsrShrinksPerSec,
    IsrExpandsPerSec, FailedIsrUpdatesPerSec). Partition actors call it from their handlers on
    the loop thread, so plain integers suffice. It satisfies
    actors.replication.partition.IsrChangeListener."""

    __slots__ = ("expands", "failed", "shrinks")

    def __init__(self) -> None:
        self.shrinks = 0
        self.expands = 0
        self.failed = 0

    def mark_shrink(self) -> None:
        self.shrinks += 1

    def mark_expand(self) -> None:
        self.expands += 1

    def mark_failed(self) -> None:
        self.failed += 1


# -- sources a node provides ----------------------------------------------------------------------


class ReplicaCounts(Protocol):
    """What the ReplicaManager reports about its hosted partitions (from published views)."""

    @property
    def partitions(self) -> int: ...
    @property
    def leaders(self) -> int: ...
    @property
    def under_replicated(self) -> int: ...
    @property
    def under_min_isr(self) -> int: ...
    @property
    def offline(self) -> int: ...


class PurgatorySize(Protocol):
    """A purgatory's two sizes (runtime/purgatory.py's `Purgatory`)."""

    @property
    def watched(self) -> int: ...
    @property
    def delayed(self) -> int: ...


MailboxSource = Callable[[], Iterable[tuple[str, ActorStatistics]]]
"""(actor kind, statistics) for every actor the node runs now."""


@dataclass(frozen=True, slots=True)
class ControllerGauges:
    """One snapshot of the controller's state, taken by the controller actor."""

    controller_epoch: int
    offline_partitions: int
    active_brokers: int
    fenced_brokers: int
    unclean_elections: int


# -- the per-node registry ------------------------------------------------------------------------


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


class BrokerMetrics(NodeMetrics):
    """A broker's metrics. The node wires the sources; `requests.observe` goes to the server
    and `isr_changes` to the ReplicaManager (which hands it to every partition actor)."""

    def __init__(
        self,
        *,
        replica_counts: Callable[[], ReplicaCounts],
        purgatories: Mapping[str, PurgatorySize],
        mailboxes: MailboxSource,
        latency_bounds_ms: Sequence[float] = LATENCY_BUCKETS_MS,
    ) -> None:
        super().__init__()
        self.requests = RequestMetrics(latency_bounds_ms)
        self.isr_changes = IsrChangeCounter()
        self._replica_counts = replica_counts
        self._purgatories = dict(purgatories)
        self._mailboxes = mailboxes
        self.add_collector(self._replica_manager_metrics)
        self.add_collector(self._purgatory_metrics)
        self.add_collector(lambda: mailbox_metrics(self._mailboxes()))
        self.add_collector(self.requests.collect)

    def _replica_manager_metrics(self) -> Iterable[Metric]:
        counts = self._replica_counts()
        prefix = "kafka_server_replicamanager_"
        isr = self.isr_changes
        return [
            _gauge(prefix + "partitioncount", "Partitions hosted", counts.partitions),
            _gauge(prefix + "leadercount", "Partitions led", counts.leaders),
            _gauge(
                prefix + "underreplicatedpartitions",
                "Led partitions whose ISR is smaller than their replica set",
                counts.under_replicated,
            ),
            _gauge(
                prefix + "underminisrpartitioncount",
                "Led partitions whose ISR is smaller than min.insync.replicas",
                counts.under_min_isr,
            ),
            _gauge(prefix + "offlinereplicacount", "Replicas whose log failed", counts.offline),
            _counter(prefix + "isrshrinks", "ISR shrinks the controller committed", isr.shrinks),
            _counter(prefix + "isrexpands", "ISR expansions the controller committed", isr.expands),
            _counter(prefix + "failedisrupdates", "AlterPartition attempts failed", isr.failed),
        ]

    def _purgatory_metrics(self) -> Iterable[Metric]:
        prefix = "kafka_server_delayedoperationpurgatory_"
        size = GaugeMetricFamily(
            prefix + "purgatorysize",
            "Operations in the purgatory's watch lists (completed ones until purged)",
            labels=["delayedOperation"],
        )
        delayed = GaugeMetricFamily(
            prefix + "numdelayedoperations",
            "Operations waiting: neither completed nor expired",
            labels=["delayedOperation"],
        )
        for name, purgatory in sorted(self._purgatories.items()):
            size.add_metric([name], purgatory.watched)
            delayed.add_metric([name], purgatory.delayed)
        return [size, delayed]


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


class ControllerMetrics(NodeMetrics):
    """The controller's metrics: `snapshot` is awaited once per scrape (an `ask` to the
    controller actor), and the collectors report the last snapshot."""

    def __init__(
        self,
        snapshot: Callable[[], Awaitable[ControllerGauges]],
        mailboxes: MailboxSource,
    ) -> None:
        super().__init__()
        self._snapshot = snapshot
        self.last: ControllerGauges | None = None
        self.add_refresh(self._refresh)
        self.add_collector(self._controller_metrics)
        self.add_collector(lambda: mailbox_metrics(mailboxes()))

    async def _refresh(self) -> None:
        self.last = await self._snapshot()

    def _controller_metrics(self) -> Iterable[Metric]:
        last = self.last
        if last is None:
            return []  # nothing known yet: better absent than a made-up zero
        prefix = "kafka_controller_kafkacontroller_"
        return [
            _gauge(prefix + "activecontrollercount", "1 on the active controller", 1),
            _gauge(
                prefix + "offlinepartitionscount",
                "Partitions without a leader",
                last.offline_partitions,
            ),
            _gauge(
                prefix + "activebrokercount", "Registered, unfenced brokers", last.active_brokers
            ),
            _gauge(prefix + "fencedbrokercount", "Registered, fenced brokers", last.fenced_brokers),
            _counter(
                "kafka_controller_controllerstats_uncleanleaderelections",
                "Leaders elected from outside the ISR",
                last.unclean_elections,
            ),
            _gauge(
                "ketch_controller_epoch", "The active controller's epoch", last.controller_epoch
            ),
        ]


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    # CounterMetricFamily appends the `_total` suffix to the samples.
    return CounterMetricFamily(name, documentation, value=value)


# -- the HTTP endpoint ----------------------------------------------------------------------------


class MetricsHttpServer:
    """`GET /metrics` over HTTP/1.x on the node's loop; `start()` / `stop()`."""

    def __init__(self, metrics: NodeMetrics, host: str, port: int, *, clock: Clock) -> None:
        self._metrics = metrics
        self._host = host
        self._port = port
        self._clock = clock
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self.scrapes = 0

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked for)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("metrics server not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("metrics server already started")
        self._server = await asyncio.start_server(
            self._serve, self._host, self._port, limit=MAX_HEADER_BYTES
        )
        log.info("metrics at http://%s:%d/metrics", self._host, self.port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._handlers) >= MAX_CONNECTIONS:
            writer.close()
            return
        self._handlers.add(task)
        # A client that never finishes its request must not hold a connection slot for ever.
        deadline: Alarm = self._clock.call_at_ns(
            self._clock.monotonic_ns() + REQUEST_DEADLINE_MS * NS_PER_MS, writer.transport.abort
        )
        try:
            await self._answer(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            log.debug("metrics request failed: %s", exc)
        finally:
            deadline.cancel()
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, target = _request_line(head)
        if not method:
            status, body, content_type = "400 Bad Request", b"not an HTTP request\n", "text/plain"
        elif method not in ("GET", "HEAD"):
            status, body, content_type = "405 Method Not Allowed", b"use GET\n", "text/plain"
        elif target.split("?", 1)[0] != "/metrics":
            status, body, content_type = "404 Not Found", b"try /metrics\n", "text/plain"
        else:
            body = await self._metrics.scrape()
            status, content_type = "200 OK", CONTENT_TYPE_PLAIN_0_0_4
            self.scrapes += 1
        header = (
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode("ascii")
        writer.write(header if method == "HEAD" else header + body)
        await writer.drain()


def _request_line(head: bytes) -> tuple[str, str]:
    """(method, target) of an HTTP request head; ("", "") when it is not one."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return "", ""
    return parts[0], parts[1]
