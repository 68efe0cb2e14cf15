"""`PartitionActor`: one hosted partition — its log, role, epochs, ISR and high watermark.

Kafka's `Partition` guards all of this with `leaderIsrUpdateLock`. Here the actor's own task is
the only one that touches it: every message (LeaderAndIsr, produce, fetch, the ISR-expiration tick,
an AlterPartition answer) is handled to completion before the next, so none needs a lock. Others
read the published `PartitionView`, an immutable snapshot replaced whole after every change.

State owned (all private to the actor's task):
* the `Log` (opened by the caller, closed by the caller; the actor only reads and writes it);
* role (moved only along `ROLE_MOVES`), leader id, leader epoch, partition epoch, replicas;
* the committed ISR and at most one pending AlterPartition proposal. While an expansion is
  pending the high watermark and a waiting acks=all produce count the *maximal* ISR (committed
  plus the joining replica), while a shrink is pending the old ISR: the leader must act as if both
  the old and the proposed ISR could be the true one until the controller answers (KIP-497).
  min.insync.replicas before an acks=all append counts the committed ISR only, as Kafka's
  appendRecordsToLeader does: a joiner the controller may still refuse must not admit a write;
* the current leadership (`PartitionView.leadership`): a new process-unique number each time the
  replica becomes leader from another role, kept through leader-epoch bumps while it leads;
* per remote replica its fetch state (`actors.replication.replica_state.RemoteReplica`).

Behaviour follows seeds 000/002/003 with the later Kafka fixes of DESIGN.md:
* leader and follower changes are fenced by (leader epoch, partition epoch): a repeat changes
  nothing, an older pair is refused;
* a follower never truncates to its high watermark on becoming follower (that lost or diverged
  committed data, KIP-101); its fetcher truncates by leader epoch (OffsetForLeaderEpoch, then
  `TruncateTo`);
* fetches carry the fetcher's leader epoch (KIP-320);
* a replica joins the ISR only once it reached both the HW and the start of the leader's epoch
  (KAFKA-7128), and only if its broker is alive and not shutting down (KIP-841).

A log failure (OSError) makes the actor's state untrustworthy: the partition goes OFFLINE and the
handler raises `ActorFatalError`, so the supervisor (the node) takes over, as Kafka marks a
partition offline on a log-dir failure.

What is not state ownership lives beside it, as pure functions this actor applies to its state:
the role table and the epoch fences (actors/replication/leadership.py); the ISR and
high-watermark rules — maximal ISR, joining, shrinking, min.insync.replicas before an append,
what an AlterPartition answer means (actors/replication/isr.py); the ListOffsets answer
(actors/replication/list_offsets.py); the settings (`PartitionConfig`,
actors/replication/config.py). Why this module still runs over ~500 lines: it is one actor's
state and the handlers that change it, which share every field (role, epochs, ISR, pending
proposal, HW); cutting the handlers apart would scatter that one owner's state over files.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable, Iterator
from typing import Protocol

from actors.replication.alter_partition import AlterPartitionSink, IsrProposal, IsrProposalResult
from actors.replication.config import PartitionConfig
from actors.replication.isr import (
    IsrAnswer,
    PendingIsrChange,
    enough_replicas_for_append,
    high_watermark_candidate,
    isr_expansion,
    isr_shrink,
    judge_alter_partition,
    maximal_isr,
    next_high_watermark,
)
from actors.replication.leadership import leader_and_isr_fence, next_role, read_fence
from actors.replication.list_offsets import offset_for_timestamp
from actors.replication.partition_messages import (
    ACKS_ALL,
    NO_EPOCH,
    READ_COMMITTED,
    ActiveProducer,
    ActiveProducerState,
    AlterPartitionCompleted,
    AppendAsFollower,
    AppendAsLeader,
    AppendTxnMarker,
    BecomeFollower,
    BecomeLeader,
    EpochEndOffset,
    FetchOffsetForTimestamp,
    FollowerAppendResult,
    GetActiveProducers,
    GetView,
    LastOffsetForEpoch,
    LeaderAppendResult,
    LeadershipResult,
    LogDirOffline,
    MaybeShrinkIsr,
    OffsetForTimestampResult,
    PartitionState,
    ReadRecords,
    ReadResult,
    ReplicasIneligible,
    SwapCleaned,
    TruncateFullyAndStartAt,
    TruncateTo,
)
from actors.replication.replica_state import RemoteReplica
from actors.views import NO_LEADER, NO_LEADERSHIP, PartitionView, Role
from runtime import reinjected
from runtime.actor import Actor, ActorFatalError, MailboxClosed, MailboxFull, Supervisor, handles
from runtime.clock import Clock
from runtime.log.cleaner.swap import SwapOutcome, swap_cleaned_segments
from runtime.log.errors import (
    InvalidOffsetError,
    InvalidProducerStateError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from runtime.log.log import Log
from runtime.log.offsets import LogOffsetMetadata
from runtime.log.transaction_index import AbortedTxn
from wire.errors import ErrorCode
from wire.records import CorruptRecordError
from wire.topic import TopicPartition

log = logging.getLogger(__name__)

# Leadership numbers, shared by every partition actor of the process so that no two leaderships
# of one partition on this broker get the same number, even across actors (StopReplica with
# delete or a log failure replaces the actor): a produce waiting from the old actor's leadership
# must never match the new one's. Drawn only on the event loop thread, so it needs no lock.
_LEADERSHIPS = itertools.count(NO_LEADERSHIP + 1)

# -- the listener ---------------------------------------------------------------------------------


class PartitionListener(Protocol):
    """Wake-ups for delayed operations (the ReplicaManager's purgatories). Called on the event
    loop from inside the actor's handler, after the new view is published, so a woken operation
    reads the state that caused the wake-up."""

    def on_high_watermark_advanced(self, topic_partition: TopicPartition) -> None: ...

    def on_leader_append(self, topic_partition: TopicPartition) -> None: ...

    def on_leadership_changed(self, topic_partition: TopicPartition) -> None: ...


class IsrChangeListener(Protocol):
    """Told of every ISR change the controller committed for a partition this broker leads,
    and of every failed AlterPartition attempt (Kafka's AlterPartitionListener, behind the
    IsrShrinksPerSec / IsrExpandsPerSec / FailedIsrUpdatesPerSec meters). Called on the loop
    thread from inside the actor's handler; it must not block."""

    def mark_shrink(self) -> None: ...

    def mark_expand(self) -> None: ...

    def mark_failed(self) -> None: ...


class _NoIsrChangeListener:
    def mark_shrink(self) -> None:
        pass

    def mark_expand(self) -> None:
        pass

    def mark_failed(self) -> None:
        pass


class _NoListener:
    def on_high_watermark_advanced(self, topic_partition: TopicPartition) -> None:
        pass

    def on_leader_append(self, topic_partition: TopicPartition) -> None:
        pass

    def on_leadership_changed(self, topic_partition: TopicPartition) -> None:
        pass


# -- the actor ------------------------------------------------------------------------------------


class PartitionActor(Actor):
    def __init__(
        self,
        topic_partition: TopicPartition,
        local_broker_id: int,
        partition_log: Log,
        *,
        alter_partition_sink: AlterPartitionSink,
        config: PartitionConfig | None = None,
        listener: PartitionListener | None = None,
        is_replica_eligible: Callable[[int], bool] = lambda broker_id: True,
        isr_change_listener: IsrChangeListener | None = None,
        clock: Clock | None = None,
        supervisor: Supervisor | None = None,
        capacity: int | None = None,
    ) -> None:
        super().__init__(
            f"partition-{topic_partition}@{local_broker_id}",
            clock=clock,
            capacity=capacity,
            supervisor=supervisor,
        )
        self.topic_partition = topic_partition
        self.local_broker_id = local_broker_id
        self._log = partition_log
        self._sink = alter_partition_sink
        self._config = config if config is not None else PartitionConfig()
        self._listener: PartitionListener = listener if listener is not None else _NoListener()
        # KIP-841: alive, unfenced, not shutting down (from the metadata cache).
        self._is_eligible = is_replica_eligible
        self._isr_changes: IsrChangeListener = (
            isr_change_listener if isr_change_listener is not None else _NoIsrChangeListener()
        )
        self._role = Role.NONE
        self._leader_id = NO_LEADER
        self._leader_epoch = NO_EPOCH
        self._partition_epoch = NO_EPOCH
        self._replicas: tuple[int, ...] = ()
        self._isr: tuple[int, ...] = ()
        self._pending: PendingIsrChange | None = None
        self._remote: dict[int, RemoteReplica] = {}
        self._leader_epoch_start_offset = -1
        self._leadership = NO_LEADERSHIP
        self._hw_metadata = self._local_hw_metadata()
        # Insertion-ordered (dicts as sets): the order they are closed or woken in is part of a
        # run, and a seeded simulation must replay it (a set of objects orders them by address).
        self._delivery_tasks: dict[asyncio.Task[None], None] = {}
        self._view = self._build_view()

    # -- reading without a message ------------------------------------------------------------

    @property
    def view(self) -> PartitionView:
        return self._view

    @property
    def pending_isr_change(self) -> PendingIsrChange | None:
        """For tests and diagnostics; the ISR fields of the view say the same to other actors."""
        return self._pending

    @property
    def _maximal_isr(self) -> tuple[int, ...]:
        return maximal_isr(self._isr, self._pending)

    # -- LeaderAndIsr -------------------------------------------------------------------------

    @handles(BecomeLeader)
    def _become_leader(self, message: BecomeLeader) -> LeadershipResult:
        state = message.state
        assert state.leader == self.local_broker_id, (self.name, state)
        refused = self._check_epochs(state)
        if refused is not None:
            return refused
        was_leader = self._role is Role.LEADER
        new_epoch = state.leader_epoch > self._leader_epoch
        starting = new_epoch or not was_leader
        with self._log_io("become leader"):
            self._role = next_role(self._role, Role.LEADER)
            self._apply_assignment(state)
            now_ms = self.clock.monotonic_ms()
            if starting:
                start = self._log.log_end_offset
                self._log.epoch_cache.assign(state.leader_epoch, start)
                for replica in self._remote.values():
                    replica.reset(
                        now_ms,
                        start,
                        new_leader=not was_leader,
                        in_isr=replica.broker_id in self._isr,
                    )
                self._leader_epoch_start_offset = start
            if not was_leader:
                # A new leadership: produces appended under an earlier one must not be
                # acknowledged by this one's high watermark (their batches may be truncated).
                self._leadership = next(_LEADERSHIPS)
            self._leader_id = self.local_broker_id
            self._leader_epoch = state.leader_epoch
            self._partition_epoch = state.partition_epoch
            self._hw_metadata = self._local_hw_metadata()
            advanced = self._maybe_increment_high_watermark(now_ms)
        self._publish(leadership=starting, high_watermark=advanced)
        return LeadershipResult(ErrorCode.NONE, changed=not was_leader)

    @handles(BecomeFollower)
    def _become_follower(self, message: BecomeFollower) -> LeadershipResult:
        state = message.state
        assert state.leader != self.local_broker_id, (self.name, state)
        refused = self._check_epochs(state)
        if refused is not None:
            return refused
        # A new epoch under the same leader still needs the fetcher restarted with that epoch.
        changed = (
            self._role is not Role.FOLLOWER
            or self._leader_id != state.leader
            or state.leader_epoch > self._leader_epoch
        )
        # The role and epoch change at once, so a deposed leader stops accepting appends now. No
        # truncation here: the fetcher truncates by leader epoch before fetching (KIP-101/279).
        with self._log_io("become follower"):
            self._role = next_role(self._role, Role.FOLLOWER)
            self._apply_assignment(state)
            self._remote.clear()  # only a leader tracks followers
            self._leader_id = state.leader
            self._leader_epoch = state.leader_epoch
            self._partition_epoch = state.partition_epoch
            self._leader_epoch_start_offset = -1
            self._hw_metadata = self._local_hw_metadata()
        self._publish(leadership=changed)
        return LeadershipResult(ErrorCode.NONE, changed=changed)

    def _check_epochs(self, state: PartitionState) -> LeadershipResult | None:
        """None when `state` is newer than what was applied and must be applied."""
        assert self.local_broker_id in state.replicas, (self.name, state)
        applied = None if self._role is Role.NONE else (self._leader_epoch, self._partition_epoch)
        error = leader_and_isr_fence(applied, state.epochs)
        if error is None:
            return None
        if error is ErrorCode.STALE_CONTROLLER_EPOCH:
            log.info(
                "%s: refusing state at epochs %s, older than %s", self.name, state.epochs, applied
            )
        return LeadershipResult(error)

    def _apply_assignment(self, state: PartitionState) -> None:
        """Take the controller's replicas and ISR; whatever was pending is superseded by it."""
        self._replicas = state.replicas
        self._isr = state.isr
        self._pending = None
        remote_ids = [r for r in state.replicas if r != self.local_broker_id]
        self._remote = {r: self._remote.get(r) or RemoteReplica(r) for r in remote_ids}

    # -- produce ------------------------------------------------------------------------------

    @handles(AppendAsLeader)
    def _append_as_leader(self, message: AppendAsLeader) -> LeaderAppendResult:
        if self._role is not Role.LEADER:
            return LeaderAppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        min_isr = message.min_insync_replicas or self._config.min_insync_replicas
        # The committed ISR, not the maximal one: while an expansion is pending the controller
        # may still refuse the joiner, and the write would then have been admitted on too few
        # replicas (Kafka's appendRecordsToLeader counts partitionState.isr).
        if not enough_replicas_for_append(message.required_acks, self._isr, min_isr):
            return LeaderAppendResult(ErrorCode.NOT_ENOUGH_REPLICAS)
        with self._log_io("leader append"):
            try:
                info = self._log.append_as_leader(
                    message.records, self._leader_epoch, origin=message.origin
                )
            except CorruptRecordError:
                return LeaderAppendResult(ErrorCode.CORRUPT_MESSAGE)
            except RecordTooLargeError:
                return LeaderAppendResult(ErrorCode.MESSAGE_TOO_LARGE)
            except InvalidRecordError:
                return LeaderAppendResult(ErrorCode.INVALID_RECORD)
            except InvalidProducerStateError as exc:
                return LeaderAppendResult(exc.error)
            advanced = self._maybe_increment_high_watermark(self.clock.monotonic_ms())
        self._publish(leader_append=True, high_watermark=advanced)
        return LeaderAppendResult(
            ErrorCode.NONE, info, self._log.log_start_offset, self._leadership
        )

    @handles(AppendTxnMarker)
    def _append_txn_marker(self, message: AppendTxnMarker) -> LeaderAppendResult:
        if self._role is not Role.LEADER:
            return LeaderAppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        min_isr = message.min_insync_replicas or self._config.min_insync_replicas
        if not enough_replicas_for_append(ACKS_ALL, self._isr, min_isr):
            return LeaderAppendResult(ErrorCode.NOT_ENOUGH_REPLICAS)
        with self._log_io("transaction marker append"):
            try:
                info = self._log.append_end_txn_marker(
                    message.producer_id,
                    message.producer_epoch,
                    message.coordinator_epoch,
                    commit=message.commit,
                    leader_epoch=self._leader_epoch,
                )
            except InvalidProducerStateError as exc:
                return LeaderAppendResult(exc.error)
            advanced = self._maybe_increment_high_watermark(self.clock.monotonic_ms())
        self._publish(leader_append=True, high_watermark=advanced)
        return LeaderAppendResult(
            ErrorCode.NONE, info, self._log.log_start_offset, self._leadership
        )

    # -- fetch --------------------------------------------------------------------------------

    @handles(ReadRecords)
    def _read_records(self, message: ReadRecords) -> ReadResult:
        is_follower = message.replica_id >= 0
        error = self._check_fetch_permission(
            message.current_leader_epoch, is_follower or message.fetch_only_from_leader
        )
        if error is None and is_follower and message.replica_id not in self._remote:
            error = ErrorCode.NOT_LEADER_OR_FOLLOWER  # not an assigned follower of this partition
        if error is not None:
            return ReadResult(error, leader_epoch=self._leader_epoch)
        leader_end_offset = self._log.log_end_offset
        # Consumers see only committed records, read_committed ones only decided transactions;
        # followers replicate everything.
        read_committed = not is_follower and message.isolation_level == READ_COMMITTED
        if is_follower:
            max_offset = None
        elif read_committed:
            max_offset = self._log.last_stable_offset
        else:
            max_offset = self._log.high_watermark
        with self._log_io("read"):
            try:
                data = self._log.read(
                    message.fetch_offset, message.max_bytes, max_offset, message.min_one
                )
            except OffsetOutOfRangeError:
                return self._read_result(ErrorCode.OFFSET_OUT_OF_RANGE)
            if is_follower:
                fetch_time_ms = message.fetch_time_ms
                if fetch_time_ms is None:
                    fetch_time_ms = self.clock.monotonic_ms()
                advanced = self._update_follower_fetch_state(
                    self._remote[message.replica_id],
                    data.fetch_offset_metadata,
                    fetch_time_ms,
                    leader_end_offset,
                )
                self._publish(high_watermark=advanced)
        aborted: tuple[AbortedTxn, ...] | None = None
        if read_committed:
            # Kafka's collectAbortedTransactions up to the LSO (a superset of what the data
            # needs; the consumer matches them by producer id and offsets).
            aborted = (
                tuple(
                    self._log.collect_aborted_transactions(
                        message.fetch_offset, self._log.last_stable_offset
                    )
                )
                if data.records
                else ()
            )
        return self._read_result(ErrorCode.NONE, data.records, data.fetch_offset_metadata, aborted)

    def _check_fetch_permission(
        self, current_leader_epoch: int, leader_only: bool
    ) -> ErrorCode | None:
        return read_fence(
            self._role, self._leader_epoch, current_leader_epoch, leader_only=leader_only
        )

    def _read_result(
        self,
        error: ErrorCode,
        records: bytes | memoryview = b"",
        fetch_offset_metadata: LogOffsetMetadata | None = None,
        aborted_transactions: tuple[AbortedTxn, ...] | None = None,
    ) -> ReadResult:
        return ReadResult(
            error,
            records,
            fetch_offset_metadata,
            self._log.high_watermark,
            self._log.log_start_offset,
            self._log.log_end_offset,
            self._leader_epoch,
            self._log.last_stable_offset,
            aborted_transactions,
        )

    def _update_follower_fetch_state(
        self,
        replica: RemoteReplica,
        fetch_offset: LogOffsetMetadata,
        fetch_time_ms: int,
        leader_end_offset: int,
    ) -> bool:
        """Seed 000's updateReplicaLogReadResult: record the position, maybe expand the ISR,
        maybe advance the HW (the follower may be in the ISR and just moved). True when the HW
        advanced."""
        replica.update_fetch_state(fetch_offset, fetch_time_ms, leader_end_offset)
        self._maybe_expand_isr(replica)
        return self._maybe_increment_high_watermark(fetch_time_ms)

    # -- ISR ----------------------------------------------------------------------------------

    def _maybe_expand_isr(self, replica: RemoteReplica) -> None:
        if self._pending is not None:
            return  # one change at a time (KIP-497)
        new_isr = isr_expansion(
            self._isr,
            replica,
            high_watermark=self._log.high_watermark,
            leader_epoch_start_offset=self._leader_epoch_start_offset,
            is_eligible=self._is_eligible,
        )
        if new_isr is None:
            return
        log.info("%s: expanding ISR %s -> %s", self.name, self._isr, new_isr)
        self._propose(new_isr, maximal_isr=new_isr)

    @handles(ReplicasIneligible)
    def _replicas_ineligible(self, message: ReplicasIneligible) -> None:
        advanced = self._maybe_increment_high_watermark(self.clock.monotonic_ms())
        if advanced:
            self._publish(high_watermark=True)

    @handles(MaybeShrinkIsr)
    def _maybe_shrink_isr(self, message: MaybeShrinkIsr) -> bool:
        if self._role is not Role.LEADER or self._pending is not None:
            return False
        new_isr = isr_shrink(
            self._isr,
            self.local_broker_id,
            self._remote,
            leader_end_offset=self._log.log_end_offset,
            now_ms=self.clock.monotonic_ms(),
            max_lag_ms=self._config.replica_lag_time_max_ms,
        )
        if new_isr is None:
            return False
        log.info("%s: shrinking ISR %s -> %s", self.name, self._isr, new_isr)
        # The HW stays computed over the old ISR until the controller commits the shrink: if the
        # proposal failed, advancing it now would count records as committed that a remaining
        # ISR member does not hold.
        self._propose(new_isr, maximal_isr=self._isr)
        self._publish()
        return True

    def _propose(self, new_isr: tuple[int, ...], *, maximal_isr: tuple[int, ...]) -> None:
        assert self._pending is None, self._pending
        proposal = IsrProposal(
            self.topic_partition,
            self.local_broker_id,
            self._leader_epoch,
            self._partition_epoch,
            new_isr,
        )
        self._pending = PendingIsrChange(proposal, maximal_isr)
        self._submit(proposal)

    def _submit(self, proposal: IsrProposal) -> None:
        def on_result(result: IsrProposalResult) -> None:
            self._deliver(AlterPartitionCompleted(proposal, result))

        self._sink.submit(proposal, on_result)

    def _deliver(self, message: AlterPartitionCompleted) -> None:
        """Put an answer into the mailbox from whatever context the sink runs in."""
        try:
            self.try_tell(message)
        except MailboxFull:
            # Wait for room rather than drop it: the pending proposal would never clear.
            task = asyncio.get_running_loop().create_task(self._tell_quietly(message))
            self._delivery_tasks[task] = None
            task.add_done_callback(lambda done: self._delivery_tasks.pop(done, None))
        except MailboxClosed:
            pass  # stopped: the answer no longer matters

    async def _tell_quietly(self, message: AlterPartitionCompleted) -> None:
        with contextlib.suppress(MailboxClosed):
            await self.tell(message)

    @handles(AlterPartitionCompleted)
    def _alter_partition_completed(self, message: AlterPartitionCompleted) -> None:
        pending = self._pending
        if pending is None or pending.proposal is not message.proposal:
            return  # superseded by a LeaderAndIsr (or never ours): nothing to apply
        result = message.result
        answer = judge_alter_partition(
            result, leader_epoch=self._leader_epoch, partition_epoch=self._partition_epoch
        )
        if result.error is not ErrorCode.NONE:
            self._isr_changes.mark_failed()
        advanced = False
        if answer is IsrAnswer.COMMIT:
            self._count_isr_change(self._isr, result.isr)
            self._isr = result.isr
            self._partition_epoch = result.partition_epoch
            self._pending = None
            with self._log_io("high watermark"):
                advanced = self._maybe_increment_high_watermark(self.clock.monotonic_ms())
        elif answer is IsrAnswer.REVERT:
            self._pending = None
        elif answer is IsrAnswer.RESUBMIT:
            self._submit(pending.proposal)
        elif answer is IsrAnswer.OTHER_LEADER_EPOCH:
            log.info(
                "%s: ignoring AlterPartition result of epoch %d", self.name, result.leader_epoch
            )
        elif answer is IsrAnswer.OLDER_PARTITION_EPOCH:
            log.info("%s: ignoring AlterPartition result of older partition epoch", self.name)
        else:
            assert answer is IsrAnswer.WAIT_FOR_METADATA, answer
            log.info(
                "%s: AlterPartition %s; waiting for LeaderAndIsr", self.name, result.error.name
            )
        self._publish(high_watermark=advanced)

    def _count_isr_change(self, old: tuple[int, ...], new: tuple[int, ...]) -> None:
        # By what the committed ISR became, not by what was proposed: the controller may have
        # answered with another ISR than the proposal (a newer one), and the meters count
        # what really changed.
        if set(new) - set(old):
            self._isr_changes.mark_expand()
        if set(old) - set(new):
            self._isr_changes.mark_shrink()

    # -- high watermark -----------------------------------------------------------------------

    def _maybe_increment_high_watermark(self, now_ms: int) -> bool:
        """Move the leader's HW to what the maximal ISR and the caught-up replicas hold
        (actors/replication/isr.py). True when its offset advanced."""
        if self._role is not Role.LEADER:
            return False
        candidate = high_watermark_candidate(
            self._log.log_end_offset_metadata,
            self._remote.values(),
            self._maximal_isr,
            now_ms=now_ms,
            max_lag_ms=self._config.replica_lag_time_max_ms,
            is_eligible=self._is_eligible,
        )
        if reinjected.HIGH_WATERMARK_AT_LOG_END in reinjected.REINJECTED:
            candidate = self._log.log_end_offset_metadata  # the bug (runtime/reinjected.py)
        old = self._hw_metadata
        new = next_high_watermark(old, candidate)
        if new.message_offset > old.message_offset:
            self._log.update_high_watermark(new.message_offset)
            self._hw_metadata = new
            return True
        self._hw_metadata = new  # the same offset, perhaps now with its segment position
        return False

    def _local_hw_metadata(self) -> LogOffsetMetadata:
        high_watermark = self._log.high_watermark
        if high_watermark == self._log.log_end_offset:
            return self._log.log_end_offset_metadata
        return self._log.offset_metadata(high_watermark)

    # -- follower side ------------------------------------------------------------------------

    @handles(AppendAsFollower)
    def _append_as_follower(self, message: AppendAsFollower) -> FollowerAppendResult:
        if self._role is not Role.FOLLOWER:
            return FollowerAppendResult(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if message.fetch_leader_epoch not in (NO_EPOCH, self._leader_epoch):
            return FollowerAppendResult(ErrorCode.FENCED_LEADER_EPOCH)
        with self._log_io("follower append"):
            try:
                info = self._log.append_as_follower(message.records)
            except CorruptRecordError:
                return FollowerAppendResult(ErrorCode.CORRUPT_MESSAGE)
            except InvalidOffsetError:
                # Offsets that do not continue this log: the fetcher's position is wrong; it
                # backs off and refetches (there is no closer Kafka code for this).
                return FollowerAppendResult(ErrorCode.UNKNOWN_SERVER_ERROR)
            old_high_watermark = self._log.high_watermark
            # A follower's HW is the leader's, bounded by what it holds itself, and never lowered
            # by an answer: a former leader keeps the HW it committed, since the new leader came
            # from its ISR and holds everything below it (only a truncation lowers it). Kafka
            # would step back to the new leader's lagging HW until that catches up, so a reader
            # of this replica could see committed records vanish for a while (the simulator's
            # high_watermark_monotonic found it, seed 1173).
            high_watermark = self._log.update_high_watermark(
                max(message.leader_high_watermark, old_high_watermark)
            )
            new_start = min(message.leader_log_start_offset, high_watermark)
            if new_start > self._log.log_start_offset:
                self._log.maybe_increment_log_start_offset(new_start)
            self._hw_metadata = self._local_hw_metadata()
        self._publish(high_watermark=high_watermark > old_high_watermark)
        return FollowerAppendResult(ErrorCode.NONE, info, high_watermark, self._log.log_end_offset)

    @handles(TruncateTo)
    def _truncate_to(self, message: TruncateTo) -> ErrorCode:
        if self._role is not Role.FOLLOWER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER  # a leader's log is the reference; never cut
        with self._log_io("truncate"):
            self._log.truncate_to(message.offset)
            self._hw_metadata = self._local_hw_metadata()
        self._publish()
        return ErrorCode.NONE

    @handles(TruncateFullyAndStartAt)
    def _truncate_fully(self, message: TruncateFullyAndStartAt) -> ErrorCode:
        if self._role is not Role.FOLLOWER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        with self._log_io("truncate fully"):
            self._log.truncate_fully_and_start_at(message.offset)
            self._hw_metadata = self._local_hw_metadata()
        self._publish()
        return ErrorCode.NONE

    @handles(SwapCleaned)
    def _swap_cleaned(self, message: SwapCleaned) -> SwapOutcome:
        """The log cleaner's pass: checked against the log and swapped in here, on the log's
        owner, so no produce, fetch or truncation runs in between (runtime/log/cleaner/swap.py)."""
        if self._role is Role.OFFLINE:
            return SwapOutcome(False, "the replica is offline")
        with self._log_io("cleaned segment swap"):
            outcome = swap_cleaned_segments(self._log, message.task, message.cleaned)
        if outcome.swapped:
            # Positions in the swapped segments moved; the HW lies above them, but re-read it.
            self._hw_metadata = self._local_hw_metadata()
            self._publish()
        return outcome

    @handles(LastOffsetForEpoch)
    def _last_offset_for_epoch(self, message: LastOffsetForEpoch) -> EpochEndOffset:
        error = self._check_fetch_permission(
            message.current_leader_epoch, message.fetch_only_from_leader
        )
        if error is not None:
            return EpochEndOffset(error)
        epoch, end_offset = self._log.end_offset_for_epoch(message.leader_epoch)
        return EpochEndOffset(ErrorCode.NONE, epoch, end_offset)

    @handles(GetView)
    def _get_view(self, message: GetView) -> PartitionView:
        return self._view

    @handles(GetActiveProducers)
    def _active_producers(self, message: GetActiveProducers) -> ActiveProducerState:
        error = self._check_fetch_permission(NO_EPOCH, leader_only=False)
        if error is not None:
            return ActiveProducerState(error)
        # Copied here, on the actor's task: the entries are live and change with every append.
        producers = self._log.producer_state.active_producers
        return ActiveProducerState(
            ErrorCode.NONE,
            tuple(
                ActiveProducer(
                    producer_id=producer_id,
                    producer_epoch=entry.producer_epoch,
                    last_sequence=entry.last_seq,
                    last_timestamp=entry.last_timestamp,
                    coordinator_epoch=entry.coordinator_epoch,
                    current_txn_start_offset=(
                        -1
                        if entry.current_txn_first_offset is None
                        else entry.current_txn_first_offset
                    ),
                )
                for producer_id, entry in sorted(producers.items())
            ),
        )

    # -- publishing and failure ---------------------------------------------------------------

    def _build_view(self) -> PartitionView:
        latest_epoch = self._log.latest_epoch
        return PartitionView(
            topic_partition=self.topic_partition,
            role=self._role,
            local_broker_id=self.local_broker_id,
            leader_id=self._leader_id,
            leader_epoch=self._leader_epoch,
            partition_epoch=self._partition_epoch,
            replicas=self._replicas,
            isr=self._isr,
            maximal_isr=self._maximal_isr,
            high_watermark=self._hw_metadata,
            log_end_offset=self._log.log_end_offset_metadata,
            log_start_offset=self._log.log_start_offset,
            leader_epoch_start_offset=self._leader_epoch_start_offset,
            latest_epoch=-1 if latest_epoch is None else latest_epoch,
            leadership=self._leadership,
            last_stable_offset=self._log.last_stable_offset,
        )

    def _publish(
        self, *, leadership: bool = False, leader_append: bool = False, high_watermark: bool = False
    ) -> None:
        """Replace the view, then wake whoever waits on what changed (they read the new view)."""
        self._view = self._build_view()
        tp = self.topic_partition
        if leadership:
            self._listener.on_leadership_changed(tp)
        if leader_append:
            self._listener.on_leader_append(tp)
        if high_watermark:
            self._listener.on_high_watermark_advanced(tp)

    async def on_stop(self) -> None:
        """Stopped (StopReplica, a stray, the broker stopping): the replica serves nothing any
        more, though the ReplicaManager may keep it routed while its log stays on disk. A failed
        actor already went OFFLINE and stays so."""
        if self._role is Role.OFFLINE:
            return
        self._role = next_role(self._role, Role.STOPPED)
        self._leader_id = NO_LEADER
        self._pending = None
        self._remote.clear()
        self._leader_epoch_start_offset = -1
        # Waiting produces and fetches learn that this replica leads no more.
        self._publish(leadership=True)

    @contextlib.contextmanager
    def _log_io(self, what: str) -> Iterator[None]:
        try:
            yield
        except OSError as error:
            raise self._go_offline(f"log failure during {what}: {error!r}") from error

    @handles(LogDirOffline)
    def _log_dir_offline(self, message: LogDirOffline) -> None:
        if self._role is not Role.OFFLINE:
            raise self._go_offline(f"log dir {message.directory} failed")

    def _go_offline(self, why: str) -> ActorFatalError:
        """OFFLINE for good; the error the handler raises so the actor stops and its supervisor
        (the ReplicaManager) hears of it."""
        self._role = next_role(self._role, Role.OFFLINE)
        self._pending = None
        # Waiters must learn that this replica serves nothing any more.
        self._publish(leadership=True)
        return ActorFatalError(f"{self.name}: {why}")

    @handles(FetchOffsetForTimestamp)
    def _fetch_offset_for_timestamp(
        self, message: FetchOffsetForTimestamp
    ) -> OffsetForTimestampResult:
        error = self._check_fetch_permission(
            message.current_leader_epoch, message.fetch_only_from_leader
        )
        if error is not None:
            return OffsetForTimestampResult(error)
        return offset_for_timestamp(
            self._log,
            message,
            role=self._role,
            leader_epoch=self._leader_epoch,
            leader_epoch_start_offset=self._leader_epoch_start_offset,
        )
