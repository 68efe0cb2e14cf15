"""The client-side metadata cache: which broker leads each partition, and when to ask again.

A client learns the cluster from Metadata responses: the brokers (id -> address) and, per topic,
its partitions with leader, leader epoch, replicas and ISR. The cache keeps the last answer as an
immutable `ClusterView` that is replaced whole on every update, so a caller holding a view never
sees it change under it.

When to refresh (Kafka's `Metadata` class does the same):

* on request: a NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, ... in a
  response, or a lost connection to a leader, calls `request_update()`;
* by age: a view older than `metadata.max.age.ms` is refreshed even when nothing failed;
* not too often: after an update, the next one waits `retry.backoff.ms`, so a broker that keeps
  answering NOT_LEADER_OR_FOLLOWER is not hammered with Metadata requests.

A Metadata response from a broker that has not heard of a leader change yet must not roll the
cache back: per partition, an update carrying an older leader epoch than the cached one keeps the
cached entry (KIP-320). Epoch -1 means "unknown" and never wins over a known epoch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from runtime.net.transport import Address
from wire.topic import TopicPartition

NO_LEADER = -1
UNKNOWN_EPOCH = -1


@dataclass(frozen=True, slots=True)
class BrokerNode:
    node_id: int
    address: Address
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as a Metadata response described it. `error` is a Kafka error code."""

    topic: str
    partition: int
    leader_id: int
    leader_epoch: int = UNKNOWN_EPOCH
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error: int = 0

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic of a Metadata response; `partitions` is indexed by partition number."""

    name: str
    error: int = 0
    topic_id: bytes | None = None
    is_internal: bool = False
    partitions: tuple[PartitionInfo, ...] = ()

    def __post_init__(self) -> None:
        for index, info in enumerate(self.partitions):
            if info.partition != index or info.topic != self.name:
                raise ValueError(f"topic {self.name!r}: partition entry {index} is {info}")


@dataclass(frozen=True, slots=True)
class ClusterView:
    """An immutable snapshot of what the client knows about the cluster."""

    brokers: Mapping[int, BrokerNode] = field(default_factory=dict)
    topics: Mapping[str, TopicInfo] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        topic = self.topics.get(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            return None
        return topic.partitions[tp.partition]

    def leader(self, tp: TopicPartition) -> BrokerNode | None:
        """The leader's node when it is known and the broker is listed, else None."""
        info = self.partition(tp)
        if info is None or info.leader_id == NO_LEADER:
            return None
        return self.brokers.get(info.leader_id)

    def partition_count(self, topic: str) -> int | None:
        info = self.topics.get(topic)
        return None if info is None or info.error != 0 else len(info.partitions)

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions of `topic` whose leader is a known broker."""
        info = self.topics.get(topic)
        if info is None:
            return []
        return [
            p.partition
            for p in info.partitions
            if p.leader_id != NO_LEADER and p.leader_id in self.brokers
        ]


def _newer_or_same(candidate: PartitionInfo, cached: PartitionInfo | None) -> bool:
    # UNKNOWN_EPOCH is -1, below every real epoch, so an answer without an epoch never
    # replaces a cached entry that has one.
    return cached is None or candidate.leader_epoch >= cached.leader_epoch


class MetadataCache:
    """The current `ClusterView` plus the bookkeeping that decides when to refresh it.

    Owned by one `Client` and touched only from the event loop, so it needs no lock. Times are
    monotonic milliseconds from the client's injected clock.
    """

    def __init__(self, *, max_age_ms: int, refresh_backoff_ms: int) -> None:
        self._max_age_ms = max_age_ms
        self._refresh_backoff_ms = refresh_backoff_ms
        self._view = ClusterView()
        self._topics: set[str] = set()
        self._update_requested = True
        self._last_refresh_ms: int | None = None
        self._version = 0

    @property
    def view(self) -> ClusterView:
        return self._view

    @property
    def version(self) -> int:
        """Bumped by every applied update; lets a waiter tell an old view from a new one."""
        return self._version

    @property
    def topics(self) -> frozenset[str]:
        """The topics the client is interested in (sent in each Metadata request)."""
        return frozenset(self._topics)

    def add_topics(self, topics: Iterable[str]) -> bool:
        """Start tracking `topics`; returns True (and requests an update) if any was new."""
        new = set(topics) - self._topics
        if new:
            self._topics |= new
            self._update_requested = True
        return bool(new)

    def request_update(self) -> None:
        self._update_requested = True

    def update_requested(self) -> bool:
        return self._update_requested

    def needs_refresh(self, now_ms: int) -> bool:
        """True when a refresh is due: requested or expired, and not within the backoff."""
        return self.ms_until_refresh(now_ms) == 0

    def ms_until_refresh(self, now_ms: int) -> int:
        if self._last_refresh_ms is None:
            return 0
        since = now_ms - self._last_refresh_ms
        if self._update_requested:
            return max(0, self._refresh_backoff_ms - since)
        return max(0, self._max_age_ms - since)

    def update(
        self,
        brokers: Iterable[BrokerNode],
        topics: Iterable[TopicInfo],
        *,
        now_ms: int,
        controller_id: int = -1,
        cluster_id: str | None = None,
    ) -> ClusterView:
        """Apply a Metadata response and return the new view.

        Brokers are replaced wholesale (a broker missing from the answer is gone). A topic
        absent from the answer keeps its cached entry, because a partial request only asked
        about some topics. Per partition, an older leader epoch than cached is ignored.
        """
        merged: dict[str, TopicInfo] = dict(self._view.topics)
        for topic in topics:
            merged[topic.name] = self._merge_topic(topic, self._view.topics.get(topic.name))
        self._view = ClusterView(
            brokers={b.node_id: b for b in brokers},
            topics=merged,
            controller_id=controller_id,
            cluster_id=cluster_id,
        )
        self._last_refresh_ms = now_ms
        self._update_requested = False
        self._version += 1
        return self._view

    def refresh_failed(self, now_ms: int) -> None:
        """A refresh attempt failed: back off before the next one, but keep it requested."""
        self._last_refresh_ms = now_ms
        self._update_requested = True

    @staticmethod
    def _merge_topic(new: TopicInfo, cached: TopicInfo | None) -> TopicInfo:
        if cached is None or new.error != 0 or cached.error != 0:
            return new
        if cached.topic_id is not None and new.topic_id not in (None, cached.topic_id):
            # Same name, different id: the topic was deleted and recreated. Old epochs are moot.
            return new
        partitions = []
        for info in new.partitions:
            old = (
                cached.partitions[info.partition]
                if info.partition < len(cached.partitions)
                else None
            )
            keep_old = old is not None and info.error == 0 and not _newer_or_same(info, old)
            partitions.append(old if keep_old and old is not None else info)
        return TopicInfo(
            name=new.name,
            error=new.error,
            topic_id=new.topic_id,
            is_internal=new.is_internal,
            partitions=tuple(partitions),
        )
