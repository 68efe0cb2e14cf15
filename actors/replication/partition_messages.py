"""Messages a PartitionActor handles, and the values it answers with.

Every message is a frozen, slotted dataclass; those answered with a value subclass `Ask[R]`.
Expected failures come back as an `ErrorCode` inside the reply (Kafka's per-partition error),
never as an exception: the ReplicaManager copies them into responses unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.replication.alter_partition import IsrProposal, IsrProposalResult
from actors.views import NO_LEADERSHIP, PartitionView
from runtime.actor import Ask
from runtime.log.cleaner.swap import SwapOutcome
from runtime.log.cleaner.task import CleanedRange, CleaningTask
from runtime.log.log import Records
from runtime.log.offsets import LogAppendInfo, LogOffsetMetadata
from runtime.log.producer_state import AppendOrigin
from runtime.log.transaction_index import AbortedTxn
from wire.errors import ErrorCode
from wire.messages.control import LeaderAndIsrPartitionState

CONSUMER_REPLICA_ID = -1  # Kafka's replica id of a consumer's fetch
NO_EPOCH = -1  # a request's current_leader_epoch of -1 skips the epoch check (KIP-320)
READ_UNCOMMITTED = 0  # Kafka's isolation levels (Fetch and ListOffsets)
READ_COMMITTED = 1
NO_TIMESTAMP = -1
UNKNOWN_OFFSET = -1
ACKS_NONE, ACKS_LEADER, ACKS_ALL = 0, 1, -1


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition's LeaderAndIsr state, as the controller decided it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    replicas: tuple[int, ...]
    is_new: bool = False

    @classmethod
    def from_wire(cls, state: LeaderAndIsrPartitionState) -> PartitionState:
        return cls(
            leader=state.leader,
            leader_epoch=state.leader_epoch,
            isr=tuple(state.isr),
            partition_epoch=state.partition_epoch,
            replicas=tuple(state.replicas),
            is_new=state.is_new,
        )

    @property
    def epochs(self) -> tuple[int, int]:
        return self.leader_epoch, self.partition_epoch


# -- LeaderAndIsr ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeadershipResult:
    """error: NONE, or STALE_CONTROLLER_EPOCH when (leader epoch, partition epoch) is older than
    what was applied (the caller answers that code, as Kafka does). changed: seed 002's return
    value — this broker became leader, or follows another leader (or a new leader epoch), so the
    ReplicaManager must (re)start fetchers and run its leadership hooks. A repeat of the applied
    epochs is NONE with changed False."""

    error: ErrorCode
    changed: bool = False


@dataclass(frozen=True, slots=True)
class BecomeLeader(Ask[LeadershipResult]):
    state: PartitionState


@dataclass(frozen=True, slots=True)
class BecomeFollower(Ask[LeadershipResult]):
    state: PartitionState


# -- produce -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaderAppendResult:
    """info is None unless error is NONE. `leadership` is the leadership the records were
    written under (`PartitionView.leadership`): a DelayedProduce gives up if the broker stopped
    leading since, not when only the leader epoch moves on."""

    error: ErrorCode
    info: LogAppendInfo | None = None
    log_start_offset: int = -1
    leadership: int = NO_LEADERSHIP


@dataclass(frozen=True, slots=True)
class AppendAsLeader(Ask[LeaderAppendResult]):
    """`min_insync_replicas` overrides the actor's config (a topic-level setting) when given.

    A client's acks value is checked once, where requests enter (the request path answers
    INVALID_REQUIRED_ACKS); a bad value here is a caller's bug. `origin` COORDINATOR: a
    coordinator of this broker writes (its batches skip the producer's sequence rules)."""

    records: Records
    required_acks: int = ACKS_ALL
    min_insync_replicas: int | None = None
    origin: AppendOrigin = AppendOrigin.CLIENT

    def __post_init__(self) -> None:
        if self.required_acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
            raise ValueError(f"required_acks must be 0, 1 or -1, got {self.required_acks}")


@dataclass(frozen=True, slots=True)
class AppendTxnMarker(Ask[LeaderAppendResult]):
    """WriteTxnMarkers for this partition: end the producer's transaction with a COMMIT
    (`commit`) or ABORT marker. Answered like an acks=all append, which the caller then waits
    for."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    min_insync_replicas: int | None = None


# -- fetch -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReadResult:
    """Whole batches from `fetch_offset` (empty on error). Offsets are the leader's after the
    read (and, for a follower's fetch, after its fetch state was recorded)."""

    error: ErrorCode
    records: bytes | memoryview = b""
    fetch_offset_metadata: LogOffsetMetadata | None = None
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    leader_epoch: int = NO_EPOCH
    last_stable_offset: int = -1
    # read_committed: the aborted transactions the data may hold (None for read_uncommitted).
    aborted_transactions: tuple[AbortedTxn, ...] | None = None


@dataclass(frozen=True, slots=True)
class ReadRecords(Ask[ReadResult]):
    """A fetch of one partition. replica_id >= 0 is a follower (reads up to the LEO and must ask
    the leader); -1 is a consumer (reads up to the HW; from the leader unless
    `fetch_only_from_leader` is off). `fetch_time_ms` (monotonic) defaults to the actor's clock."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = NO_EPOCH
    replica_id: int = CONSUMER_REPLICA_ID
    fetch_time_ms: int | None = None
    min_one: bool = True
    fetch_only_from_leader: bool = True
    isolation_level: int = READ_UNCOMMITTED  # READ_COMMITTED: up to the last stable offset


# -- ISR ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MaybeShrinkIsr(Ask[bool]):
    """The ReplicaManager's isr-expiration tick. Answers whether a shrink was proposed."""


@dataclass(frozen=True, slots=True)
class ReplicasIneligible:
    """Told by the ReplicaManager when an UpdateMetadata made some of this partition's followers
    ineligible (their broker fenced or shutting down, or their replica offline in a failed log
    dir). A leader whose HW waited for one of them, caught up outside the ISR, recomputes it now
    rather than at the next fetch or append, which may never come while writes wait for acks."""


@dataclass(frozen=True, slots=True)
class AlterPartitionCompleted:
    """The sink's answer to `proposal`, delivered through the mailbox."""

    proposal: IsrProposal
    result: IsrProposalResult


# -- follower side -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FollowerAppendResult:
    error: ErrorCode
    info: LogAppendInfo | None = None
    high_watermark: int = -1
    log_end_offset: int = -1


@dataclass(frozen=True, slots=True)
class AppendAsFollower(Ask[FollowerAppendResult]):
    """Batches fetched from the leader, appended unchanged. `fetch_leader_epoch` is the leader
    epoch the fetch was sent with: if this replica has moved to another epoch since, the data
    belongs to a superseded leadership and is refused with FENCED_LEADER_EPOCH (-1 skips it)."""

    records: Records
    leader_high_watermark: int
    leader_log_start_offset: int
    fetch_leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class TruncateTo(Ask[ErrorCode]):
    offset: int


@dataclass(frozen=True, slots=True)
class TruncateFullyAndStartAt(Ask[ErrorCode]):
    offset: int


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """OffsetForLeaderEpoch's answer: the largest epoch <= the one asked for, and its end offset
    (-1, -1 when unknown)."""

    error: ErrorCode
    leader_epoch: int = -1
    end_offset: int = -1


@dataclass(frozen=True, slots=True)
class LastOffsetForEpoch(Ask[EpochEndOffset]):
    """Asked of the leader by a follower (fetch_only_from_leader, with its current epoch), or of
    the local replica by its own fetcher (defaults)."""

    leader_epoch: int
    current_leader_epoch: int = NO_EPOCH
    fetch_only_from_leader: bool = False


@dataclass(frozen=True, slots=True)
class LogDirOffline:
    """Another partition's I/O error failed this partition's log dir (Kafka fails the whole
    dir): this replica goes OFFLINE as if its own log had failed."""

    directory: str


@dataclass(frozen=True, slots=True)
class GetView(Ask[PartitionView]):
    pass


@dataclass(frozen=True, slots=True)
class OffsetForTimestampResult:
    error: ErrorCode
    timestamp: int = NO_TIMESTAMP
    offset: int = UNKNOWN_OFFSET
    leader_epoch: int = NO_EPOCH


@dataclass(frozen=True, slots=True)
class FetchOffsetForTimestamp(Ask[OffsetForTimestampResult]):
    """ListOffsets for one partition. `timestamp` is a time in ms, or LATEST (-1) / EARLIEST (-2).
    A consumer (`replica_id` < 0) sees only up to the high watermark; a replica up to the LEO."""

    timestamp: int
    current_leader_epoch: int = NO_EPOCH
    replica_id: int = -1
    fetch_only_from_leader: bool = True
    isolation_level: int = READ_UNCOMMITTED


# -- DescribeProducers -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    """One producer the replica's log keeps state for (Kafka's DescribeProducers ProducerState),
    copied out of the live entry: `last_sequence` -1 with no data batch retained (after a
    marker), `last_timestamp` the last batch's max timestamp, `current_txn_start_offset` the
    first offset of its open transaction (-1: none)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


@dataclass(frozen=True, slots=True)
class ActiveProducerState:
    """`producers` by producer id, empty unless error is NONE."""

    error: ErrorCode
    producers: tuple[ActiveProducer, ...] = ()


@dataclass(frozen=True, slots=True)
class GetActiveProducers(Ask[ActiveProducerState]):
    """DescribeProducers for one partition (Kafka's Partition.activeProducerState): any replica
    holding the log answers, leader or follower, as Kafka's does (an admin may ask a chosen
    replica); a replica that is neither answers NOT_LEADER_OR_FOLLOWER."""


@dataclass(frozen=True, slots=True)
class SwapCleaned(Ask[SwapOutcome]):
    """The broker's log cleaner finished a pass over this replica's log: check that it still
    fits the log and swap it in, or discard it (runtime/log/cleaner/swap.py)."""

    task: CleaningTask
    cleaned: CleanedRange
