"""The broker's two purgatories, for delayed produces and delayed fetches, and their wake-up rules.

The operations themselves are `DelayedProduce` (actors/replication/delayed_produce.py) and
`DelayedFetch` (actors/replication/delayed_fetch.py). `DelayedOperations` holds the produce and
fetch purgatories of one broker and names which keys each kind of partition change must check
(DESIGN.md, "Timer wheel and purgatory"):

    high watermark advanced   PRODUCE and CONSUMER_FETCH keys (acks=all waits, consumer polls)
    leader appended           FOLLOWER_FETCH keys (followers read up to the LEO)
    partition changed         all three (leadership or epoch change, truncation, stop, offline)

Calling the check in the same event-loop turn as the change is what makes a consumer long-poll
return within a tick of the high-watermark advance instead of at max_wait.

Ownership and why no lock: one `DelayedOperations` per broker, created by the node and used only
on the event-loop thread (the ReplicaManager watches operations; partition actors, or the
ReplicaManager on their behalf, report changes). No method awaits, so each runs to its end.
"""

from __future__ import annotations

from actors.replication.delayed_fetch import DelayedFetch
from actors.replication.delayed_produce import DelayedProduce
from actors.views import TopicPartitionKey, WatchKind
from runtime.clock import Clock
from runtime.purgatory import DEFAULT_PURGE_INTERVAL, Purgatory
from wire.topic import TopicPartition


class DelayedOperations:
    """A broker's produce and fetch purgatories and the keys each partition change wakes."""

    def __init__(self, clock: Clock, *, purge_interval: int = DEFAULT_PURGE_INTERVAL) -> None:
        self.produce: Purgatory[TopicPartitionKey, DelayedProduce] = Purgatory(
            "produce", clock, purge_interval=purge_interval
        )
        self.fetch: Purgatory[TopicPartitionKey, DelayedFetch] = Purgatory(
            "fetch", clock, purge_interval=purge_interval
        )

    def watch_produce(self, op: DelayedProduce) -> bool:
        """Complete `op` now if it can, else watch it; True if it completed here."""
        return self.produce.try_complete_else_watch(op, op.watch_keys())

    def watch_fetch(self, op: DelayedFetch) -> bool:
        """Complete `op` now if it can, else watch it; True if it completed here."""
        return self.fetch.try_complete_else_watch(op, op.watch_keys())

    def high_watermark_advanced(self, tp: TopicPartition) -> int:
        """Returns how many operations completed (as do the two below)."""
        produces = self.produce.check_and_complete(TopicPartitionKey(tp, WatchKind.PRODUCE))
        fetches = self.fetch.check_and_complete(TopicPartitionKey(tp, WatchKind.CONSUMER_FETCH))
        return produces + fetches

    def leader_appended(self, tp: TopicPartition) -> int:
        return self.fetch.check_and_complete(TopicPartitionKey(tp, WatchKind.FOLLOWER_FETCH))

    def partition_changed(self, tp: TopicPartition) -> int:
        """Leadership, leader epoch or log range changed, or the replica stopped: every waiter
        on the partition re-checks (most of them complete)."""
        return self.high_watermark_advanced(tp) + self.leader_appended(tp)

    # The PartitionListener protocol of actors/replication/partition.py, so a partition actor can
    # wake the purgatories directly; the methods above also say how many operations completed.

    def on_high_watermark_advanced(self, topic_partition: TopicPartition) -> None:
        self.high_watermark_advanced(topic_partition)

    def on_leader_append(self, topic_partition: TopicPartition) -> None:
        self.leader_appended(topic_partition)

    def on_leadership_changed(self, topic_partition: TopicPartition) -> None:
        self.partition_changed(topic_partition)

    @property
    def delayed(self) -> tuple[int, int]:
        """(delayed produces, delayed fetches) neither completed nor expired."""
        return self.produce.delayed, self.fetch.delayed

    def close(self) -> None:
        """Stop expiring; waiting operations are dropped unanswered (their connections close)."""
        self.produce.close()
        self.fetch.close()
