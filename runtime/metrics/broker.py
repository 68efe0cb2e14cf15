"""A broker's metrics (`BrokerMetrics`), with the per-request latency histograms.

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
    kafka_server_fetchsessioncache_numincrementalfetchsessions        gauge    sessions cached
    kafka_server_fetchsessioncache_numincrementalfetchpartitionscached gauge  their partitions
    kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total counter  evicted
    ketch_fetchsessioncache_incrementalfetches_total    counter  Fetches answered in a session
    kafka_network_requestmetrics_totaltimems{request}   histogram  ms, request received to
                                                                   response ready
    ketch_actor_mailbox_depth{kind} / ketch_actor_mailbox_depth_max{kind} / ketch_actors{kind}

`RequestMetrics.observe` is the one per-request cost (see the package docstring's cost model);
the rest is read at scrape time from the sources the node wires in. Owned by the broker node;
every method runs on its loop thread (partition actors bump `IsrChangeCounter` from their
handlers there too).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Final, Protocol

from prometheus_client.metrics_core import GaugeMetricFamily, HistogramMetricFamily, Metric

from runtime.clock import NS_PER_MS
from runtime.metrics.registry import MailboxSource, NodeMetrics, counter, gauge, mailbox_metrics
from wire.messages import ApiKey, FetchRequest, Request

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


class FetchSessionCounts(Protocol):
    """What the Kafka listener's FetchSessionCache (runtime/net/fetch_session.py) reports."""

    def __len__(self) -> int: ...
    @property
    def num_partitions(self) -> int: ...
    @property
    def evictions(self) -> int: ...
    @property
    def incremental_fetches(self) -> int: ...


def fetch_session_metrics(cache: FetchSessionCounts) -> list[Metric]:
    """Kafka's kafka.server:type=FetchSessionCache metrics (the evictions as a total, as
    Prometheus counts), and how many Fetches were answered incrementally."""
    prefix = "kafka_server_fetchsessioncache_"
    return [
        gauge(prefix + "numincrementalfetchsessions", "Incremental fetch sessions", len(cache)),
        gauge(
            prefix + "numincrementalfetchpartitionscached",
            "Partitions in the incremental fetch sessions",
            cache.num_partitions,
        ),
        counter(
            prefix + "incrementalfetchsessionevictions",
            "Fetch sessions evicted to make room for another",
            cache.evictions,
        ),
        counter(
            "ketch_fetchsessioncache_incrementalfetches",
            "Fetches answered in an incremental fetch session",
            cache.incremental_fetches,
        ),
    ]


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
            gauge(prefix + "partitioncount", "Partitions hosted", counts.partitions),
            gauge(prefix + "leadercount", "Partitions led", counts.leaders),
            gauge(
                prefix + "underreplicatedpartitions",
                "Led partitions whose ISR is smaller than their replica set",
                counts.under_replicated,
            ),
            gauge(
                prefix + "underminisrpartitioncount",
                "Led partitions whose ISR is smaller than min.insync.replicas",
                counts.under_min_isr,
            ),
            gauge(prefix + "offlinereplicacount", "Replicas whose log failed", counts.offline),
            counter(prefix + "isrshrinks", "ISR shrinks the controller committed", isr.shrinks),
            counter(prefix + "isrexpands", "ISR expansions the controller committed", isr.expands),
            counter(prefix + "failedisrupdates", "AlterPartition attempts failed", isr.failed),
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
