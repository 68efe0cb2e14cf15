"""`ReplicaFetcherManager`: the broker's replica fetchers, one per (source broker, fetcher id).

It implements `FetcherControl`, the ReplicaManager's only way to drive the fetchers (tests give
the ReplicaManager a fake one). A partition goes to fetcher id
`abs(31 * java_hash(topic) + partition) % num.replica.fetchers` of its leader's broker, as in
Kafka's AbstractFetcherManager, so the spread over fetchers is the same in every process.

State and why no lock is needed: the fetcher table and the partition -> fetcher routing are
touched only by these methods, called on the event loop by the ReplicaManager's handlers.
`add_partitions` and `remove_partitions` are synchronous — they change tables and wake fetchers,
never await — so the ReplicaManager's handler stays atomic. A fetcher replaced because its
leader's endpoint changed is cancelled at once and awaited by the next `shutdown_idle()` or
`shutdown()`, so no task outlives `shutdown()`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from actors.replication.config import ReplicaFetcherConfig
from actors.replication.fetch_state import BrokerEndpoint, InitialFetchState
from actors.replication.fetcher import FetcherClient, PartitionLookup, ReplicaFetcher
from runtime.clock import Clock
from wire.topic import TopicPartition

log = logging.getLogger(__name__)

FetcherKey = tuple[int, int]  # (source broker id, fetcher id)
ClientFactory = Callable[[BrokerEndpoint, int], FetcherClient]
"""Makes the client of one fetcher (leader endpoint, fetcher id); the fetcher owns and closes
it. One client per fetcher gives each its own connection, so one fetcher's long poll never
queues behind another's on the same connection (Kafka gives each fetcher thread its own)."""


class FetcherControl(Protocol):
    """What the ReplicaManager asks of the fetchers; synchronous add and remove, so a handler's
    fetcher changes happen in one step with the state change that caused them."""

    def add_partitions(
        self, leader: BrokerEndpoint, partitions: Mapping[TopicPartition, InitialFetchState]
    ) -> None: ...

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None: ...

    async def shutdown_idle(self) -> None:
        """Stop fetchers with no partitions left."""
        ...

    async def shutdown(self) -> None: ...


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (signed 32-bit), over UTF-16 code units."""
    value = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        value = (31 * value + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def fetcher_id_for(tp: TopicPartition, num_fetchers: int) -> int:
    """Kafka's getFetcherId: Utils.abs(31 * topic.hashCode + partition) % numFetchers."""
    value = (31 * java_string_hash(tp.topic) + tp.partition) & 0xFFFFFFFF
    if value >= 1 << 31:
        value -= 1 << 32
    # Kafka's Utils.abs: Math.abs, except that Integer.MIN_VALUE (which has no positive
    # counterpart in 32 bits) maps to 0.
    return (0 if value == -(1 << 31) else abs(value)) % num_fetchers


class ReplicaFetcherManager:
    def __init__(
        self,
        local_broker_id: int,
        client_factory: ClientFactory,
        partitions: PartitionLookup,
        clock: Clock,
        config: ReplicaFetcherConfig | None = None,
    ) -> None:
        self.local_broker_id = local_broker_id
        self._client_factory = client_factory
        self._lookup = partitions
        self.clock = clock
        self.config = config or ReplicaFetcherConfig()
        self._fetchers: dict[FetcherKey, ReplicaFetcher] = {}
        self._routes: dict[TopicPartition, FetcherKey] = {}
        # Insertion-ordered (dicts as sets): the order they are closed or woken in is part of a
        # run, and a seeded simulation must replay it (a set of objects orders them by address).
        self._retiring: dict[ReplicaFetcher, None] = {}
        # One counter for all fetchers: a generation is never reused, even across fetchers.
        self._generations = itertools.count()
        self._closed = False

    # -- FetcherControl -----------------------------------------------------------------------

    def add_partitions(
        self, leader: BrokerEndpoint, partitions: Mapping[TopicPartition, InitialFetchState]
    ) -> None:
        assert not self._closed, "fetcher manager is shut down"
        assert leader.broker_id != self.local_broker_id, "a broker never fetches from itself"
        by_fetcher: dict[int, dict[TopicPartition, InitialFetchState]] = {}
        for tp, initial in partitions.items():
            by_fetcher.setdefault(fetcher_id_for(tp, self.config.num_replica_fetchers), {})[tp] = (
                initial
            )
        for fetcher_id, group in by_fetcher.items():
            key = (leader.broker_id, fetcher_id)
            fetcher = self._fetcher_for(key, leader)
            # A partition moving from another leader's fetcher leaves it first, so two fetchers
            # never append to one follower.
            for tp in group:
                old = self._routes.get(tp)
                if old is not None and old != key and old in self._fetchers:
                    self._fetchers[old].remove_partitions((tp,))
                self._routes[tp] = key
            fetcher.add_partitions(group)

    def remove_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            key = self._routes.pop(tp, None)
            if key is not None and key in self._fetchers:
                self._fetchers[key].remove_partitions((tp,))

    async def shutdown_idle(self) -> None:
        """Stop fetchers with no partitions left (FAILED ones do not count, as in Kafka), and
        wait for fetchers retired by an endpoint change."""
        for key, fetcher in list(self._fetchers.items()):
            if fetcher.partition_count == 0:
                del self._fetchers[key]
                self._forget_routes(key)
                self._retire(fetcher)
        await self._await_retired()

    async def shutdown(self) -> None:
        self._closed = True
        fetchers = list(self._fetchers.values())
        self._fetchers.clear()
        self._routes.clear()
        for fetcher in fetchers:
            self._retire(fetcher)
        await self._await_retired()

    # -- introspection ------------------------------------------------------------------------

    def fetcher(self, leader_id: int, fetcher_id: int) -> ReplicaFetcher | None:
        return self._fetchers.get((leader_id, fetcher_id))

    def fetcher_of(self, tp: TopicPartition) -> ReplicaFetcher | None:
        key = self._routes.get(tp)
        return None if key is None else self._fetchers.get(key)

    @property
    def fetcher_count(self) -> int:
        return len(self._fetchers)

    # -- internals ----------------------------------------------------------------------------

    def _fetcher_for(self, key: FetcherKey, leader: BrokerEndpoint) -> ReplicaFetcher:
        fetcher = self._fetchers.get(key)
        if fetcher is not None and fetcher.source == leader:
            return fetcher
        if fetcher is not None:
            # The broker came back at another address: Kafka replaces the fetcher; its
            # partitions come along (they are re-added with their current positions).
            log.info("%s: leader %d moved to %s", fetcher.name, leader.broker_id, leader)
            moved = {
                tp: state
                for tp in [tp for tp, k in self._routes.items() if k == key]
                if (state := fetcher.state(tp)) is not None
            }
            self._retire(fetcher)
        else:
            moved = {}
        fetcher = ReplicaFetcher(
            local_broker_id=self.local_broker_id,
            source=leader,
            fetcher_id=key[1],
            client=self._client_factory(leader, key[1]),
            partitions=self._lookup,
            clock=self.clock,
            config=self.config,
            generations=self._generations,
        )
        self._fetchers[key] = fetcher
        fetcher.start()
        if moved:
            fetcher.add_partitions(
                {tp: InitialFetchState(s.fetch_offset, s.leader_epoch) for tp, s in moved.items()}
            )
        return fetcher

    def _forget_routes(self, key: FetcherKey) -> None:
        for tp in [tp for tp, k in self._routes.items() if k == key]:
            del self._routes[tp]

    def _retire(self, fetcher: ReplicaFetcher) -> None:
        self._retiring[fetcher] = None
        # Cancel now (synchronously), so a retired fetcher appends nothing more; its client is
        # closed when it is awaited.
        fetcher.cancel()

    async def _await_retired(self) -> None:
        while self._retiring:
            fetcher, _ = self._retiring.popitem()
            await fetcher.stop()
