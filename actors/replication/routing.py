"""Where a hosted partition's traffic goes, computed from what the ReplicaManager publishes.

* `Routes`: the routing table `TopicPartition -> PartitionActor` (Kafka's allPartitions). The
  ReplicaManager (actors/replication/replica_manager.py) owns it and publishes it after every
  change as an immutable mapping, replaced whole, so the data path
  (actors/replication/request_path.py), the fetchers and the node read it without asking. A
  partition stopped by StopReplica without delete keeps its stopped actor here (view role
  STOPPED), so requests for it are answered NOT_LEADER_OR_FOLLOWER, as Kafka answers for a
  partition it still hosts.
* `partition_counts`: Kafka's ReplicaManager gauges, from the routes and the views their actors
  publish.
* `route_followers`: which leader each follower fetches from and where it starts (Kafka's
  addFetcherForPartitions), and which followers wait because their leader's endpoint is not
  known yet (it comes with an UpdateMetadata).

Pure functions over published, immutable values (routes, `PartitionView`s, `MetadataSnapshot`):
no state of their own, no lock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from actors.metadata_cache import MetadataSnapshot
from actors.replication.fetch_state import BrokerEndpoint, InitialFetchState
from actors.replication.partition import PartitionActor
from actors.views import PartitionView, Role
from wire.topic import TopicPartition

Routes = Mapping[TopicPartition, PartitionActor]
EMPTY_ROUTES: Routes = MappingProxyType({})


def tp_order(tp: TopicPartition) -> tuple[str, int]:
    return tp.topic, tp.partition


@dataclass(frozen=True, slots=True)
class PartitionCounts:
    partitions: int  # hosted
    leaders: int
    under_replicated: int  # led, committed ISR smaller than the replica set
    under_min_isr: int  # led, committed ISR smaller than min.insync.replicas
    offline: int  # the log failed


def partition_counts(routes: Routes, min_insync_replicas: Callable[[str], int]) -> PartitionCounts:
    """Count the hosted partitions by the views their actors published last."""
    partitions = leaders = under_replicated = under_min_isr = offline = 0
    for actor in routes.values():
        view = actor.view
        partitions += 1
        if view.role is Role.OFFLINE:
            offline += 1
        elif view.is_leader:
            leaders += 1
            # Kafka's isUnderReplicated / isUnderMinIsr count the committed ISR.
            if len(view.isr) < len(view.replicas):
                under_replicated += 1
            if len(view.isr) < min_insync_replicas(view.topic_partition.topic):
                under_min_isr += 1
    return PartitionCounts(partitions, leaders, under_replicated, under_min_isr, offline)


@dataclass(frozen=True, slots=True)
class FollowerRoutes:
    # Per leader, the followers to add to its fetcher and where each starts.
    by_leader: dict[BrokerEndpoint, dict[TopicPartition, InitialFetchState]]
    # Followers whose leader's endpoint is unknown: they wait for an UpdateMetadata.
    waiting: frozenset[TopicPartition]


def route_followers(
    views: Iterable[tuple[TopicPartition, PartitionView | None]],
    snapshot: MetadataSnapshot,
    listener: str,
) -> FollowerRoutes:
    """Route each partition that is still a follower (None: no longer hosted) to its leader's
    endpoint on the inter-broker `listener`, starting at its log end offset; the others are left
    out of both fields."""
    by_leader: dict[BrokerEndpoint, dict[TopicPartition, InitialFetchState]] = {}
    waiting: set[TopicPartition] = set()
    for tp, view in views:
        if view is None or view.role is not Role.FOLLOWER:
            continue
        endpoint = snapshot.endpoint(view.leader_id, listener) if view.leader_id >= 0 else None
        if endpoint is None:
            waiting.add(tp)
            continue
        leader = BrokerEndpoint(view.leader_id, endpoint.host, endpoint.port)
        by_leader.setdefault(leader, {})[tp] = InitialFetchState(
            view.log_end_offset.message_offset, view.leader_epoch
        )
    return FollowerRoutes(by_leader, frozenset(waiting))
