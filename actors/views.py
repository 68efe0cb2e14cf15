"""Immutable snapshots and purgatory keys shared by the replication actors.

Actors never read each other's fields. A PartitionActor publishes a `PartitionView` after every
change (replacing it whole), and delayed operations, fetch planning and the ReplicaManager read
the latest view. A view is a frozen value, so a reader can keep it as long as it likes: it may be
stale, never torn.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from runtime.log.offsets import LogOffsetMetadata
from wire.topic import TopicPartition

NO_LEADER = -1
NO_LEADERSHIP = 0  # PartitionView.leadership of a replica that has not led yet


class Role(enum.Enum):
    """A hosted replica's role; its legal moves are a table in actors/replication/leadership.py."""

    NONE = "none"  # created, no LeaderAndIsr applied yet
    LEADER = "leader"
    FOLLOWER = "follower"
    # Its actor was stopped (StopReplica, or the broker stopping) while the log stays on disk:
    # still hosted, so requests get NOT_LEADER_OR_FOLLOWER rather than UNKNOWN_TOPIC_OR_PARTITION
    # (Kafka keeps such a partition in allPartitions); a later LeaderAndIsr hosts it again with a
    # new actor.
    STOPPED = "stopped"
    OFFLINE = "offline"  # its log failed; serves nothing (KAFKA_STORAGE_ERROR)


@dataclass(frozen=True, slots=True)
class PartitionView:
    topic_partition: TopicPartition
    role: Role
    local_broker_id: int
    leader_id: int  # NO_LEADER when none
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    # The ISR the controller committed, and the one the leader uses for the high watermark and
    # acks=all while an AlterPartition is in flight (committed ISR plus any replica being added:
    # Kafka's "maximal ISR"). Equal when nothing is pending.
    isr: tuple[int, ...]
    maximal_isr: tuple[int, ...]
    high_watermark: LogOffsetMetadata
    log_end_offset: LogOffsetMetadata
    log_start_offset: int
    # The first offset of the current leader epoch on this replica (KAFKA-7128: a follower joins
    # the ISR only once its LEO reaches it).
    leader_epoch_start_offset: int
    # The largest epoch in this replica's leader-epoch cache (-1 when empty): where a follower's
    # truncation by epoch starts (KIP-101/279).
    latest_epoch: int = -1
    # Which leadership of this broker the view belongs to: a new value each time the replica
    # becomes leader from another role, unique among all partition actors of the process (so a
    # replacement actor never repeats its predecessor's); unchanged by a leader-epoch bump while
    # it stays leader. NO_LEADERSHIP until it first leads. A waiting acks=all produce compares it
    # with the one it appended under: a broker deposed and re-elected meanwhile may have
    # truncated the batch (actors/replication/delayed_produce.py).
    leadership: int = NO_LEADERSHIP
    # The last stable offset (Kafka's LSO): where a read_committed consumer's reads stop; the
    # high watermark's offset when no transaction is open.
    last_stable_offset: int = -1

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER


class WatchKind(enum.Enum):
    """Which delayed operations a purgatory key wakes: produce requests waiting for the high
    watermark, consumer fetches waiting for it, or follower fetches waiting for new appends."""

    PRODUCE = "produce"
    CONSUMER_FETCH = "consumer-fetch"
    FOLLOWER_FETCH = "follower-fetch"


@dataclass(frozen=True, slots=True)
class TopicPartitionKey:
    """A purgatory watch key (Kafka's TopicPartitionOperationKey, split by kind)."""

    topic_partition: TopicPartition
    kind: WatchKind
