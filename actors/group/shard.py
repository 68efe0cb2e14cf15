"""`GroupShard`: the group coordinator for one `__consumer_offsets` partition this broker leads.

One actor per led offsets partition (the router, issue 10's GroupCoordinator, starts one when
the broker becomes that partition's leader and stops it when it stops being leader). Why one per
partition: loading, unloading and every operation on the groups of one offsets partition form
one ordered stream with one owner, like a partition actor; different offsets partitions load and
serve independently (Kafka gets the same from per-group locks and a loading scheduler).

This module is the actor: its mailbox and handlers, loading and unloading, the state it owns
(one `ShardState`, state.py) and the mechanisms the rules act through (alarms on its clock,
writes to its offsets partition). The rules are functions of that state, called from the
handlers: membership.py (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, sessions and rebalances),
offsets.py (OffsetCommit, OffsetFetch, expiry and removal of offsets), txn_offsets.py
(TxnOffsetCommit, and a transaction's offsets committed or dropped by its marker) and
deletion.py (DeleteGroups, OffsetDelete). Its messages are in messages.py and importable from
here too.

Lifecycle (seed 002, handleGroupImmigration / handleGroupEmigration):

* **Loading** (`on_start`, in a task of its own): every record of the partition from the log
  start to the high watermark seen when loading began, later records overriding earlier ones and
  tombstones removing, a transaction's offsets pending until its marker (txn_offsets.py); groups
  with members come back Stable with fresh session timers, the others Empty. While `loading` is
  True the router answers COORDINATOR_LOAD_IN_PROGRESS without asking. Only a whole load is
  served: an attempt that fails (the HW never caught up with the log as of the election, a read
  answered an error) is dropped and retried after a backoff on the clock, `loading` staying
  True, until one succeeds or the shard is stopped. Messages told meanwhile (deleted
  partitions, ended transactions) wait in the mailbox until the load is done.
* **Serving**: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, TxnOffsetCommit,
  OffsetFetch, DescribeGroups, ListGroups, DeleteGroups and OffsetDelete (the `@handles`
  methods). A request that must wait (a join until the rebalance completes, a sync until the
  leader's assignment is stored, a commit or a deletion until its records are replicated) gets
  back a future, which the handler completes
  later from another message: the mailbox never blocks on a member or on replication.
* **Deleted partitions** (`RemoveOffsets`): the committed offsets of partitions the cluster
  deleted are dropped with tombstones, and a group left Empty without offsets is forgotten.
* **Transactions ended** (`TxnCompleted`, from the broker once a COMMIT or ABORT marker is
  written to the partition): the producer's pending offsets are committed or dropped.
* **Unloading** (`stop()` -> `on_stop`): every waiting member is answered NOT_COORDINATOR, every
  group goes Dead, and the state is dropped; the new leader loads it from the log. Writes in
  flight are cancelled with their answers unsettled: the router waits on those through
  `Actor.settled`, which turns the shard's end into NOT_COORDINATOR, and the client commits
  again at the new coordinator (a commit is idempotent; one that was written is only
  rewritten). A shard still loading cancels the load at once instead of waiting for it (it may
  be parked for seconds, and the coordinator's other unloads would wait too) and rejects what
  is queued.

Time: session and rebalance deadlines are alarms on the injected clock whose callbacks only
`try_tell` the actor a message, so every state change happens in a handler. Writes (group
metadata after the leader's SyncGroup, offset commits, expiry tombstones) go through the
injected `OffsetsLog.append` with acks=all; their outcome comes back as a message too.

Static membership, pending members and the simplifications (KIP-890's verification of
transactional commits) are said in membership.py and txn_offsets.py.

Consumer groups of the new protocol (KIP-848) live in the same shard, beside the classic ones
(`ShardState.consumer`): ConsumerGroupHeartbeat (consumer_heartbeat.py), their writes, timers,
loading, deletion and the other APIs' checks (consumer_lifecycle.py), ConsumerGroupDescribe
(consumer_describe.py); a group id is of one type at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any, Final

from actors.group import (
    consumer_describe,
    consumer_heartbeat,
    consumer_lifecycle,
    deletion,
    membership,
    offsets,
    txn_offsets,
)
from actors.group.config import GroupCoordinatorConfig
from actors.group.consumer_describe import ConsumerDescribe
from actors.group.consumer_group import CONSUMER_PROTOCOL_TYPE, ConsumerGroupState
from actors.group.consumer_heartbeat import ConsumerHeartbeat
from actors.group.consumer_lifecycle import ConsumerGroupStored, ConsumerMemberExpired
from actors.group.messages import (
    Beat,
    Commit,
    DeleteGroups,
    DeleteOffsets,
    Describe,
    ExpireOffsets,
    FetchOffsets,
    GroupStored,
    Join,
    JoinDeadline,
    Leave,
    ListAll,
    OffsetsStored,
    RemoveOffsets,
    SessionExpired,
    StaticMemberStored,
    Sync,
    TombstonesStored,
    TxnCommit,
    TxnCompleted,
    TxnOffsetsStored,
)
from actors.group.metadata import Group, GroupState, states_named
from actors.group.state import AfterWrite, PendingTxnOffset, ShardState
from actors.partition_log import InternalTopicLog, LogChunk
from runtime.actor import Actor, MailboxError, handles
from runtime.clock import NS_PER_MS, Alarm, Clock
from wire.errors import ErrorCode
from wire.group_records import GroupValue, OffsetValue
from wire.messages import (
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
    DescribedGroup,
    DescribedGroupMember,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListedGroup,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
    TxnOffsetCommitResponse,
)

__all__ = [
    "Beat",
    "Commit",
    "ConsumerDescribe",
    "ConsumerHeartbeat",
    "DeleteGroups",
    "DeleteOffsets",
    "Describe",
    "FetchOffsets",
    "GroupShard",
    "Join",
    "Leave",
    "ListAll",
    "LogChunk",
    "OffsetsLog",
    "RemoveOffsets",
    "Sync",
    "TxnCommit",
    "TxnCompleted",
]

log = logging.getLogger(__name__)

# A failed load is retried after 100 ms, doubling up to 1 s (the Kafka clients' retry.backoff.ms
# and retry.backoff.max.ms): the causes (a HW catching up, a leadership in flux) pass in that
# time, and clients meanwhile retry COORDINATOR_LOAD_IN_PROGRESS on their own backoff.
LOAD_RETRY_BACKOFF_MS: Final = 100
LOAD_RETRY_BACKOFF_MAX_MS: Final = 1_000


# The offsets partitions as the coordinator uses them (the node implements it on the broker's
# request path, node/broker/offsets_log.py).
OffsetsLog = InternalTopicLog


class GroupShard(Actor):
    def __init__(
        self,
        partition: int,
        log_: OffsetsLog,
        config: GroupCoordinatorConfig,
        *,
        clock: Clock,
    ) -> None:
        super().__init__(f"group-shard-{partition}", clock=clock)
        self.partition = partition
        self._log = log_
        self._config = config
        self.loading = True
        self._state = ShardState(
            name=self.name,
            config=config,
            clock=clock,
            alarm=self._alarm,
            write=self._write,
        )
        # Insertion-ordered (dicts as sets): the order they are closed or woken in is part of a
        # run, and a seeded simulation must replay it (a set of objects orders them by address).
        self._writes: dict[asyncio.Task[None], None] = {}
        self._loader: asyncio.Task[None] | None = None
        self._unloading = False  # stop() was called

    @property
    def groups(self) -> dict[str, Group]:
        """The groups this shard coordinates (for tests: other actors ask)."""
        return self._state.groups

    @property
    def offsets(self) -> dict[str, dict[tuple[str, int], OffsetValue]]:
        """Each group's committed offsets (for tests: other actors ask)."""
        return self._state.offsets

    @property
    def pending_txn(self) -> dict[str, dict[int, dict[tuple[str, int], PendingTxnOffset]]]:
        """Each group's offsets of transactions not yet ended, per producer id (for tests)."""
        return self._state.pending_txn

    # -- what the rules act through --------------------------------------------------------

    def _alarm(self, after_ms: int, message: object) -> Alarm:
        def fire() -> None:
            # Stopped (unloaded: the state is gone) or overloaded (it times out again later).
            with contextlib.suppress(MailboxError):
                self.try_tell(message)

        return self.clock.call_at_ns(self.clock.monotonic_ns() + after_ms * NS_PER_MS, fire)

    def _write(self, batch: bytes, after: AfterWrite) -> None:
        """Append `batch` in a task of its own (replication must not block the mailbox), then
        tell the actor what `after` makes of the outcome."""

        async def write() -> None:
            error = await self._log.append(self.partition, batch)
            message = after(error)
            if message is not None:
                await self.tell(message)

        self._spawn(write())

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._writes[task] = None
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._writes.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            error = task.exception()
            if not isinstance(error, MailboxError):  # the answer came after the unload
                log.error("%s: a write failed: %r", self.name, error)

    # -- loading and unloading -------------------------------------------------------------

    async def on_start(self) -> None:
        if self._unloading:
            return  # stopped before its task first ran: nothing to load
        # The load runs in a task of its own so that `stop()` can cancel it: an unload must not
        # wait for a load that may be parked for seconds (a HW catching up, a slow read).
        loader = asyncio.get_running_loop().create_task(self._load(), name=f"{self.name}-load")
        self._loader = loader
        try:
            await asyncio.wait((loader,))
        finally:
            loader.cancel()  # this task itself was cancelled: the load goes with it
        if loader.cancelled():
            return  # unloaded while loading (stop() rejected what was queued)
        loader.result()  # a bug in loading stops the shard: the router answers NOT_COORDINATOR
        self.loading = False
        self.every(
            self._config.offsets_retention_check_interval_ms,
            lambda: self.try_tell(ExpireOffsets()),
        )

    async def stop(self, *, drain: bool = True) -> None:
        """Unload. A shard still loading cancels its load rather than waiting for it, and
        rejects what is queued instead of handling it: its state is not the partition's."""
        self._unloading = True
        if self._loader is not None:
            self._loader.cancel()  # a no-op once loaded
        await super().stop(drain=drain and not self.loading)

    async def _load(self) -> None:
        """Load attempts until one reads the partition whole. An attempt that fails (the HW
        never covered the log as of the election, a read answered an error) drops what it read
        and the next one starts after a backoff on the clock; meanwhile `loading` stays True, so
        the router answers COORDINATOR_LOAD_IN_PROGRESS and clients retry, and no committed
        offset older than the partition's is ever served. The retries end with the
        leadership: the coordinator stops the shard, which cancels them."""
        backoff_ms = LOAD_RETRY_BACKOFF_MS
        while (error := await self._load_once()) is not ErrorCode.NONE:
            self._state.clear_stored()
            log.warning("%s: load failed (%s), retry in %d ms", self.name, error.name, backoff_ms)
            await self.clock.sleep(backoff_ms / 1000)
            backoff_ms = min(2 * backoff_ms, LOAD_RETRY_BACKOFF_MAX_MS)

    async def _load_once(self) -> ErrorCode:
        """One attempt: NONE once every record below the HW seen when it began is loaded, else
        the error that stopped it (the state then holds part of the partition)."""
        state = self._state
        committed = await self._log.wait_committed(self.partition)
        if committed is not ErrorCode.NONE:
            return committed
        group_values: dict[str, GroupValue | None] = {}
        offset = 0  # the log answers from its start when that is later
        end: int | None = None  # the high watermark when loading began
        while True:
            chunk = await self._log.read(
                self.partition, offset, self._config.offsets_load_buffer_size
            )
            if isinstance(chunk, ErrorCode):
                log.info("%s: a read from %d failed: %s", self.name, offset, chunk.name)
                return chunk
            if end is None:
                end = chunk.high_watermark
            txn_offsets.load_batches(state, chunk.records, end, group_values)
            # Done at `end`, or when a read brings nothing: the log holds nothing more below it.
            if chunk.next_offset <= offset or chunk.next_offset >= end:
                break
            offset = chunk.next_offset
        for group_id, value in group_values.items():
            if value is not None:
                group = Group.from_record(group_id, value)
                state.groups[group_id] = group
                for member_id in group.members:
                    membership.arm_session(state, group, member_id)
        for group_id in (*state.offsets, *state.pending_txn):
            state.groups.setdefault(group_id, Group(group_id))
        consumer_lifecycle.loaded(state)
        assert end is not None  # set by the first read, which answered
        state.next_order = end  # what this shard writes comes after everything it loaded
        log.info(
            "%s: loaded %d groups, offsets of %d, transactions pending in %d",
            self.name,
            len(state.groups),
            len(state.offsets),
            len(state.pending_txn),
        )
        return ErrorCode.NONE

    async def on_stop(self) -> None:
        membership.unload(self._state)
        for task in list(self._writes):
            task.cancel()
        await asyncio.gather(*self._writes, return_exceptions=True)
        self._state.waiting.clear()
        self._state.clear_stored()

    # -- membership (membership.py) --------------------------------------------------------

    # A consumer group (KIP-848) answers the classic requests itself (consumer_lifecycle.py).

    @handles(Join)
    def _join(self, message: Join) -> asyncio.Future[JoinGroupResponse]:
        if code := consumer_lifecycle.classic_join_refusal(self._state, message.request.group_id):
            refused: asyncio.Future[JoinGroupResponse] = asyncio.get_running_loop().create_future()
            refused.set_result(
                JoinGroupResponse(error_code=code, member_id=message.request.member_id)
            )
            return refused
        return membership.join(self._state, message)

    @handles(Sync)
    def _sync(self, message: Sync) -> asyncio.Future[SyncGroupResponse]:
        if code := consumer_lifecycle.classic_refusal(self._state, message.request.group_id):
            refused: asyncio.Future[SyncGroupResponse] = asyncio.get_running_loop().create_future()
            refused.set_result(SyncGroupResponse(error_code=code))
            return refused
        return membership.sync(self._state, message.request)

    @handles(Beat)
    def _heartbeat(self, message: Beat) -> HeartbeatResponse:
        if code := consumer_lifecycle.classic_refusal(self._state, message.request.group_id):
            return HeartbeatResponse(error_code=code)
        return membership.heartbeat(self._state, message.request)

    @handles(Leave)
    def _leave(self, message: Leave) -> LeaveGroupResponse:
        if code := consumer_lifecycle.classic_refusal(self._state, message.request.group_id):
            return LeaveGroupResponse(error_code=code)
        return membership.leave(self._state, message.request)

    # -- consumer groups of the new protocol (consumer_heartbeat.py, consumer_lifecycle.py,
    # consumer_describe.py) --------------------------------------------------------------

    @handles(ConsumerHeartbeat)
    def _consumer_heartbeat(
        self, message: ConsumerHeartbeat
    ) -> asyncio.Future[ConsumerGroupHeartbeatResponse]:
        return consumer_heartbeat.heartbeat(self._state, message)

    @handles(ConsumerGroupStored)
    def _consumer_group_stored(self, message: ConsumerGroupStored) -> None:
        consumer_lifecycle.stored(self._state, message)

    @handles(ConsumerMemberExpired)
    def _consumer_member_expired(self, message: ConsumerMemberExpired) -> None:
        consumer_lifecycle.member_expired(self._state, message)

    @handles(ConsumerDescribe)
    def _consumer_describe(self, message: ConsumerDescribe) -> list[DescribedConsumerGroup]:
        return consumer_describe.describe(self._state, message.group_ids)

    @handles(JoinDeadline)
    def _join_deadline(self, message: JoinDeadline) -> None:
        membership.join_deadline(self._state, message)

    @handles(SessionExpired)
    def _session_expired(self, message: SessionExpired) -> None:
        membership.session_expired(self._state, message)

    @handles(GroupStored)
    def _group_stored(self, message: GroupStored) -> None:
        membership.group_stored(self._state, message)

    @handles(StaticMemberStored)
    def _static_member_stored(self, message: StaticMemberStored) -> None:
        membership.static_member_stored(self._state, message)

    # -- offsets (offsets.py) --------------------------------------------------------------

    @handles(Commit)
    def _commit(self, message: Commit) -> asyncio.Future[OffsetCommitResponse]:
        return offsets.commit(self._state, message.request)

    @handles(OffsetsStored)
    def _offsets_stored(self, message: OffsetsStored) -> None:
        offsets.offsets_stored(self._state, message)

    @handles(TxnCommit)
    def _txn_commit(self, message: TxnCommit) -> asyncio.Future[TxnOffsetCommitResponse]:
        return txn_offsets.txn_commit(self._state, message.request)

    @handles(TxnOffsetsStored)
    def _txn_offsets_stored(self, message: TxnOffsetsStored) -> None:
        txn_offsets.txn_offsets_stored(self._state, message)

    @handles(TxnCompleted)
    def _txn_completed(self, message: TxnCompleted) -> None:
        txn_offsets.complete(self._state, message.producer_id, commit=message.commit)

    @handles(FetchOffsets)
    def _fetch_offsets(self, message: FetchOffsets) -> OffsetFetchResponse:
        return offsets.fetch(self._state, message.request)

    @handles(ExpireOffsets)
    def _expire_offsets(self, message: ExpireOffsets) -> None:
        offsets.expire(self._state)
        # A deleted offset's tombstone order outlives the writes it guards against (issued
        # before it, bounded by offsets.commit.timeout.ms) by the check interval at least.
        interval_ms = self._config.offsets_retention_check_interval_ms
        self._state.forget_deleted_before(self._state.now_ms() - interval_ms)

    @handles(RemoveOffsets)
    def _remove_offsets(self, message: RemoveOffsets) -> None:
        offsets.remove(self._state, message.partitions)

    # -- deletion (deletion.py) ------------------------------------------------------------

    @handles(DeleteGroups)
    def _delete_groups(self, message: DeleteGroups) -> asyncio.Future[dict[str, ErrorCode]]:
        return deletion.delete_groups(self._state, message.group_ids)

    @handles(DeleteOffsets)
    def _delete_offsets(self, message: DeleteOffsets) -> asyncio.Future[OffsetDeleteResponse]:
        return deletion.delete_offsets(self._state, message.request)

    @handles(TombstonesStored)
    def _tombstones_stored(self, message: TombstonesStored) -> None:
        deletion.tombstones_stored(self._state, message)

    # -- describe and list -----------------------------------------------------------------

    @handles(Describe)
    def _describe(self, message: Describe) -> list[DescribedGroup]:
        described = []
        for group_id in message.group_ids:
            group = self._state.groups.get(group_id)
            if group is None:
                described.append(DescribedGroup(group_id=group_id, group_state="Dead"))
                continue
            protocol = group.protocol
            described.append(
                DescribedGroup(
                    group_id=group_id,
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=protocol or "",
                    members=[
                        DescribedGroupMember(
                            member_id=m.member_id,
                            group_instance_id=m.group_instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata_for(protocol) if protocol else b"",
                            member_assignment=m.assignment,
                        )
                        for m in group.members.values()
                    ],
                )
            )
        return described

    @handles(ListAll)
    def _list(self, message: ListAll) -> list[ListedGroup]:
        # A state filter names states of either group type (KIP-848's consumer groups have
        # Assigning and Reconciling); a name neither type has is refused (ValueError).
        wanted = {name.lower() for name in message.states}
        consumer_states = {s.value.lower() for s in ConsumerGroupState}
        states = states_named(n for n in message.states if n.lower() not in consumer_states)
        states |= {s for s in GroupState if s.value.lower() in wanted}
        types = {t.lower() for t in message.types} or {"classic", "consumer"}
        listed = []
        if "classic" in types:
            listed += [
                ListedGroup(
                    group_id=g.group_id,
                    protocol_type=g.protocol_type or "",
                    group_state=g.state.value,
                )
                for g in self._state.groups.values()
                if not wanted or g.state in states
            ]
        if "consumer" in types:
            listed += [
                ListedGroup(
                    group_id=g.group_id,
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    group_state=g.state.value,
                    group_type="consumer",
                )
                for g in self._state.consumer.groups.values()
                if not wanted or g.state.value.lower() in wanted
            ]
        return listed
