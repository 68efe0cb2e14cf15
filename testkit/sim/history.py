"""What a simulated run did, as plain data: the history the checkers judge.

The simulator's recorder appends events here while the run goes on (what the workload's
producers were told, what its consumers received, what brokers and the controller showed when
sampled) and, once the cluster has healed and settled, each replica's final state. The checkers
(`testkit.sim.checkers`) are pure functions over a finished `History`; nothing here reads a clock,
a socket or a broker.

Events are frozen, slotted dataclasses. Times are the simulated clock's nanoseconds (`at_ns`).
Every value the workload produces is unique, so a value names one write: that is what lets the
checkers find a write in a log, or count its copies, without keys or sequence numbers.

Ownership: one `History` per run, owned by the simulator's recorder, which is the only writer (one
event loop, so no lock). Once the run has ended it is read-only input to the checkers.

Ordering: `Read` and `ConsumerRestart` share one stream (`consumer_events`) in the order the
recorder saw them, because a restart separates two runs of reads of one consumer and partition and
two events can carry the same `at_ns`; `reads` and `restarts` are views of that stream. Every other
kind has its own list, in append order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wire.topic import TopicPartition

ACKS_ALL = -1  # Kafka's acks=all: the leader answered once the whole ISR had the write


@dataclass(frozen=True, slots=True)
class Ack:
    """A produce the broker acknowledged. acks=0 has no answer, so its offset is -1."""

    producer: str
    tp: TopicPartition
    value: bytes
    offset: int
    acks: int
    idempotent: bool
    at_ns: int


@dataclass(frozen=True, slots=True)
class Read:
    """One record a consumer received, recorded in the order that consumer received them."""

    consumer: str
    tp: TopicPartition
    offset: int
    value: bytes | None
    at_ns: int


@dataclass(frozen=True, slots=True)
class ConsumerRestart:
    """The consumer starts reading `tp` again at `from_offset` (recorded before the reads)."""

    consumer: str
    tp: TopicPartition
    from_offset: int
    at_ns: int


@dataclass(frozen=True, slots=True)
class LeaderClaim:
    """A broker's replica of `tp` became leader in `leader_epoch`.

    `incarnation` counts restarts of the broker process (0 for the first start)."""

    broker: int
    incarnation: int
    tp: TopicPartition
    leader_epoch: int
    at_ns: int


@dataclass(frozen=True, slots=True)
class HighWatermark:
    """A sample of one replica's high watermark, as that replica knew it."""

    broker: int
    incarnation: int
    tp: TopicPartition
    leader_epoch: int
    high_watermark: int
    at_ns: int


@dataclass(frozen=True, slots=True)
class LogEnd:
    """A sample of one replica's log end offset (its next offset), as its own log knew it at the
    end of the time step `at_ns` (observer.py).

    -1 once the replica is no longer observed (its broker stopped, or it no longer hosts `tp`):
    from then on, until a new incarnation's first sample, it holds nothing."""

    broker: int
    incarnation: int
    tp: TopicPartition
    log_end_offset: int
    at_ns: int


@dataclass(frozen=True, slots=True)
class IsrChange:
    """The controller committed this partition state (leader -1: no leader)."""

    tp: TopicPartition
    leader: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    at_ns: int


@dataclass(frozen=True, slots=True)
class ControllerEpoch:
    """A sample of the active controller's epoch."""

    epoch: int
    at_ns: int


@dataclass(frozen=True, slots=True)
class LoggedRecord:
    """A data record in a replica's final log (control batches and markers are left out)."""

    offset: int
    value: bytes | None


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One replica's state after the run healed and settled.

    `records` holds every data record from log start to log end, in offset order.
    `batch_bytes` is the raw record-batch bytes from the log start up to the *leader's* high
    watermark, cut by the recorder; a replica that is behind gives fewer bytes."""

    broker: int
    tp: TopicPartition
    leader_epoch: int
    is_leader: bool
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    records: tuple[LoggedRecord, ...]
    batch_bytes: bytes


@dataclass(frozen=True, slots=True)
class TopicDeleted:
    """The workload deleted the topic; its acks and reads are exempt from the final-log checks
    (topic names are never reused within a run)."""

    topic: str
    at_ns: int


@dataclass(frozen=True, slots=True)
class OffsetCommitted:
    """A group's offset commit for a partition: sent (`acknowledged` False) or answered NONE."""

    group: str
    tp: TopicPartition
    offset: int
    acknowledged: bool
    at_ns: int
    # A group member's commit names its member id and generation; a simple consumer's has
    # "" and -1 (no membership).
    member: str = ""
    generation: int = -1


@dataclass(frozen=True, slots=True)
class GroupAssignment:
    """A group member learned its generation and its partitions (its SyncGroup answer)."""

    group: str
    member: str
    generation: int
    partitions: tuple[TopicPartition, ...]
    at_ns: int


@dataclass(frozen=True, slots=True)
class TransactionOutcome:
    """A transaction's values and what its producer was told: "committed" (EndTxn commit
    answered), "aborted" (abort answered) or "unknown" (the producer failed or was fenced
    before an answer: the transaction may have been either)."""

    producer: str
    values: tuple[bytes, ...]
    outcome: str
    at_ns: int


@dataclass(slots=True)
class History:
    """Everything one run recorded; the recorder appends, the checkers read."""

    seed: int
    acks: list[Ack] = field(default_factory=list)
    consumer_events: list[Read | ConsumerRestart] = field(default_factory=list)
    leader_claims: list[LeaderClaim] = field(default_factory=list)
    high_watermarks: list[HighWatermark] = field(default_factory=list)
    log_ends: list[LogEnd] = field(default_factory=list)
    isr_changes: list[IsrChange] = field(default_factory=list)
    controller_epochs: list[ControllerEpoch] = field(default_factory=list)
    topic_deletions: list[TopicDeleted] = field(default_factory=list)
    # value -> was its producer idempotent, recorded when the workload *sends* it: a write retried
    # after a lost answer may be acknowledged once (or never) yet be in the log twice.
    attempted: dict[bytes, bool] = field(default_factory=dict)
    # value -> producer, recorded with `attempted`, so copies of unacknowledged values can be
    # counted against their producer.
    attempted_by: dict[bytes, str] = field(default_factory=dict)
    # value -> the time step its attempt was recorded in (the observer stamps it at the next
    # quiescent point: the workload records attempts without a time). No replica can hold the
    # write in a `LogEnd` sample stamped earlier.
    attempted_at: dict[bytes, int] = field(default_factory=dict)
    final: dict[TopicPartition, list[ReplicaState]] = field(default_factory=dict)
    # Offset commits sent and acknowledged, and each group's committed offsets read at the end.
    offset_commits: list[OffsetCommitted] = field(default_factory=list)
    final_offsets: dict[tuple[str, TopicPartition], int] = field(default_factory=dict)
    # Transactions ended (or given up), and what a read_committed consumer read at the end of
    # each partition they wrote (offset, value), kept apart from `consumer_events`: its skips
    # over aborted records are not the gaps `reads_match_the_log` allows.
    transactions: list[TransactionOutcome] = field(default_factory=list)
    committed_reads: dict[TopicPartition, list[tuple[int, bytes | None]]] = field(
        default_factory=dict
    )
    min_insync_replicas: dict[str, int] = field(default_factory=dict)
    # What each consumer-group member was assigned, generation by generation.
    group_assignments: list[GroupAssignment] = field(default_factory=list)

    # -- appended by the recorder ---------------------------------------------------------------

    def append_attempt(self, producer: str, value: bytes, idempotent: bool) -> None:
        # Recording a value again (a resend) changes nothing: values are unique per write.
        self.attempted[value] = idempotent
        self.attempted_by[value] = producer

    def append_ack(self, ack: Ack) -> None:
        assert ack.acks in (ACKS_ALL, 0, 1), ack
        assert ack.acks != 0 or ack.offset == -1, f"acks=0 knows no offset: {ack}"
        self.acks.append(ack)

    def append_read(self, read: Read) -> None:
        self.consumer_events.append(read)

    def append_restart(self, restart: ConsumerRestart) -> None:
        self.consumer_events.append(restart)

    def append_leader_claim(self, claim: LeaderClaim) -> None:
        self.leader_claims.append(claim)

    def append_high_watermark(self, sample: HighWatermark) -> None:
        self.high_watermarks.append(sample)

    def append_log_end(self, sample: LogEnd) -> None:
        assert sample.log_end_offset >= -1, sample
        self.log_ends.append(sample)

    def set_attempted_at(self, value: bytes, at_ns: int) -> None:
        # The first stamp stays: a value recorded again (a resend) was sent first back then.
        self.attempted_at.setdefault(value, at_ns)

    def append_isr_change(self, change: IsrChange) -> None:
        self.isr_changes.append(change)

    def append_controller_epoch(self, sample: ControllerEpoch) -> None:
        self.controller_epochs.append(sample)

    def append_topic_deleted(self, deleted: TopicDeleted) -> None:
        self.topic_deletions.append(deleted)

    def append_final(self, replica: ReplicaState) -> None:
        offsets = [record.offset for record in replica.records]
        assert offsets == sorted(set(offsets)), f"{replica.tp} broker {replica.broker}: unsorted"
        self.final.setdefault(replica.tp, []).append(replica)

    def append_group_assignment(self, assignment: GroupAssignment) -> None:
        self.group_assignments.append(assignment)

    def append_offset_commit(self, commit: OffsetCommitted) -> None:
        self.offset_commits.append(commit)

    def set_final_offset(self, group: str, tp: TopicPartition, offset: int) -> None:
        self.final_offsets[(group, tp)] = offset

    def append_transaction(self, outcome: TransactionOutcome) -> None:
        assert outcome.outcome in ("committed", "aborted", "unknown"), outcome
        self.transactions.append(outcome)

    def append_committed_read(self, tp: TopicPartition, offset: int, value: bytes | None) -> None:
        self.committed_reads.setdefault(tp, []).append((offset, value))

    def set_min_insync_replicas(self, topic: str, value: int) -> None:
        self.min_insync_replicas[topic] = value

    # -- read by the checkers and the run summary ------------------------------------------------

    @property
    def reads(self) -> list[Read]:
        return [event for event in self.consumer_events if isinstance(event, Read)]

    @property
    def restarts(self) -> list[ConsumerRestart]:
        return [event for event in self.consumer_events if isinstance(event, ConsumerRestart)]

    @property
    def deleted_topics(self) -> frozenset[str]:
        return frozenset(deleted.topic for deleted in self.topic_deletions)

    def final_leader(self, tp: TopicPartition) -> ReplicaState | None:
        """The replica leading `tp` at the end; if several claim to (a violation the checkers
        report), the one with the newest epoch, which clients would follow."""
        leaders = [replica for replica in self.final.get(tp, ()) if replica.is_leader]
        return max(leaders, key=lambda replica: replica.leader_epoch) if leaders else None

    def final_partition_state(self, tp: TopicPartition) -> IsrChange | None:
        """The controller's last committed state of `tp`: the highest partition epoch (of equals,
        the later one, as the controller commits in order)."""
        last: IsrChange | None = None
        for change in self.isr_changes:
            if change.tp == tp and (last is None or change.partition_epoch >= last.partition_epoch):
                last = change
        return last

    def producer_of(self, value: bytes) -> str:
        """Who sent `value` ("?" when neither a send nor an answer was recorded)."""
        producer = self.attempted_by.get(value)
        if producer is None:
            producer = next((ack.producer for ack in self.acks if ack.value == value), "?")
        return producer

    def producers(self) -> set[str]:
        return set(self.attempted_by.values()) | {ack.producer for ack in self.acks}

    def events_summary(self) -> dict[str, int]:
        """How many events of each kind the run recorded (for the run summary)."""
        reads = self.reads
        return {
            "attempts": len(self.attempted),
            "acks": len(self.acks),
            "reads": len(reads),
            "restarts": len(self.consumer_events) - len(reads),
            "leader_claims": len(self.leader_claims),
            "high_watermarks": len(self.high_watermarks),
            "log_ends": len(self.log_ends),
            "isr_changes": len(self.isr_changes),
            "controller_epochs": len(self.controller_epochs),
            "topic_deletions": len(self.topic_deletions),
            "offset_commits": sum(1 for commit in self.offset_commits if commit.acknowledged),
            "transactions": len(self.transactions),
            "group_assignments": len(self.group_assignments),
            "final_replicas": sum(len(replicas) for replicas in self.final.values()),
        }
