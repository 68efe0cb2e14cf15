"""`GroupCoordinator`: a broker's consumer-group coordinator, one `GroupShard` per led partition.

Routing: a group belongs to `__consumer_offsets` partition `partition_for(group, partitions)`;
this broker coordinates it while it leads that partition. A request for a group whose partition
is led elsewhere is answered NOT_COORDINATOR (the client asks FindCoordinator again); one whose
partition is still loading, COORDINATOR_LOAD_IN_PROGRESS.

Leadership moves arrive from the ReplicaManager's hook (`on_leadership_change`, seed 002's
onLeadershipChange): becoming leader of an offsets partition starts its shard (which loads it),
becoming follower or no longer leading it for any other reason (StopReplica, a stray replica, a
failed log: the hook reports those as followers too) stops it (its waiting members get
NOT_COORDINATOR; a load still running is cancelled, never waited for). Partitions an
UpdateMetadata deletes arrive from the ReplicaManager's other hook (`on_partitions_deleted`)
and go to every shard, which drops the groups' offsets of them. The coordinator is an actor so
moves are applied by one task, each partition ending where the ReplicaManager's latest move put
it; the request methods only read the published `shards` map and ask the shard.

Control messages are never dropped. The hooks are synchronous (they run inside the
ReplicaManager's handler, which must not wait for this actor), so they cannot wait for room in a
mailbox, and a move dropped on a full mailbox would leave a shard serving a partition led
elsewhere, or none serving one led here. So the hooks do not queue moves as messages: they
record them in `_pending` (each partition's latest move wins: only where leadership ends up
matters, and a repeated lead still reloads) and queue one `_Apply` wake-up if none is queued yet.
The mailbox therefore holds at most one message and can never be full; the handler takes
everything pending at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from actors.group.config import GroupCoordinatorConfig
from actors.group.shard import (
    Beat,
    Commit,
    Describe,
    FetchOffsets,
    GroupShard,
    Join,
    Leave,
    ListAll,
    OffsetsLog,
    RemoveOffsets,
    Sync,
)
from runtime.actor import Actor, MailboxClosed, MailboxError, MailboxFull, handles
from runtime.clock import Clock
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC, partition_for
from wire.messages import (
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from wire.topic import TopicPartition

log = logging.getLogger(__name__)

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class _Apply:
    """Wakes the actor to apply what the hooks left in `_pending` (at most one is queued)."""


@dataclass(slots=True)
class _Pending:
    """Moves and deletions the hooks recorded and the actor has not applied yet. Owned by the
    event loop's thread: the hooks write it, the actor's `_Apply` handler swaps it out whole."""

    # Partition -> led (True) or not (False): each partition's latest move.
    moves: dict[int, bool] = field(default_factory=dict)
    deleted: set[tuple[str, int]] = field(default_factory=set)
    woken: bool = False  # an _Apply is queued and has not started yet


class GroupCoordinator(Actor):
    def __init__(
        self,
        log_: OffsetsLog,
        config: GroupCoordinatorConfig,
        *,
        clock: Clock,
        offsets_partitions: Callable[[], int | None],
        seed: int = 0,
    ) -> None:
        """`offsets_partitions()`: the partition count of __consumer_offsets in the broker's
        metadata, None while the topic does not exist."""
        super().__init__("group-coordinator", clock=clock)
        self._log = log_
        self.config = config
        self._offsets_partitions = offsets_partitions
        self._seed = seed
        self.shards: dict[int, GroupShard] = {}
        self._pending = _Pending()

    # -- the hooks (synchronous, outside the actor) --------------------------------------------

    def on_leadership_change(
        self, leaders: Sequence[TopicPartition], followers: Sequence[TopicPartition]
    ) -> None:
        """The ReplicaManager's hook: record the move for the actor. `followers` are every
        offsets partition this broker no longer leads, whatever the reason."""
        moves = self._pending.moves
        for tp in followers:
            if tp.topic == OFFSETS_TOPIC:
                moves[tp.partition] = False
        for tp in leaders:
            if tp.topic == OFFSETS_TOPIC:
                moves[tp.partition] = True
        if moves:
            self._wake()

    def on_partitions_deleted(self, partitions: Sequence[TopicPartition]) -> None:
        """The ReplicaManager's hook for partitions an UpdateMetadata deleted."""
        gone = {(tp.topic, tp.partition) for tp in partitions if tp.topic != OFFSETS_TOPIC}
        if gone:
            self._pending.deleted |= gone
            self._wake()

    def _wake(self) -> None:
        if self._pending.woken:
            return
        try:
            self.try_tell(_Apply())
        except MailboxFull:
            # Only _Apply is ever queued, one at a time: a full mailbox is a bug.
            raise AssertionError(f"{self.name}: mailbox full with one wake-up at most") from None
        except MailboxClosed:
            log.debug("group coordinator stopped; moves not applied")  # shards stop with it
            return
        self._pending.woken = True

    # -- the actor -----------------------------------------------------------------------------

    @handles(_Apply)
    async def _apply(self, _: _Apply) -> None:
        pending, self._pending = self._pending, _Pending()  # hooks from here on wake again
        await self._move(pending.moves)
        if pending.deleted:
            # After the moves, so a shard started by one of them drops the offsets too.
            await self._remove_offsets(frozenset(pending.deleted))

    async def _move(self, moves: dict[int, bool]) -> None:
        # Every shard that goes (unled, or led again: a new leader epoch loads again from the
        # log) leaves the routing table at once and all stop together, so one slow unload does
        # not hold back the others; a shard still loading cancels its load (GroupShard.stop).
        leaving = [shard for p in moves if (shard := self.shards.pop(p, None)) is not None]
        for shard in leaving:
            log.info("unloading groups of %s-%d", OFFSETS_TOPIC, shard.partition)
        await asyncio.gather(*(shard.stop() for shard in leaving))
        for partition, led in moves.items():
            if not led:
                continue
            shard = GroupShard(
                partition, self._log, self.config, clock=self.clock, seed=self._seed + partition
            )
            log.info("loading groups of %s-%d", OFFSETS_TOPIC, partition)
            await shard.start()
            self.shards[partition] = shard

    async def _remove_offsets(self, partitions: frozenset[tuple[str, int]]) -> None:
        for partition, shard in list(self.shards.items()):
            try:
                await shard.tell(RemoveOffsets(partitions))
            except MailboxError:
                log.info("%s-%d unloaded before its deleted offsets went", OFFSETS_TOPIC, partition)

    async def on_stop(self) -> None:
        shards, self.shards = list(self.shards.values()), {}
        await asyncio.gather(*(shard.stop() for shard in shards))

    # -- routing -----------------------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        partitions = self._offsets_partitions() or self.config.offsets_topic_num_partitions
        return partition_for(group_id, partitions)

    def _shard(self, group_id: str) -> GroupShard | ErrorCode:
        partition = self.partition_of(group_id)
        shard = self.shards.get(partition)
        if shard is None and self._pending.moves.get(partition):
            # Led here already, its load not yet started (the wake-up is queued): loading, as
            # Kafka answers while a load is scheduled, so the client waits instead of asking
            # FindCoordinator again for the same broker.
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if shard is None or not shard.running:
            return ErrorCode.NOT_COORDINATOR
        if shard.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return shard

    async def join_group(
        self,
        request: JoinGroupRequest,
        *,
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
    ) -> JoinGroupResponse:
        shard = self._shard(request.group_id)
        if isinstance(shard, ErrorCode):
            return JoinGroupResponse(error_code=shard, member_id=request.member_id)
        message = Join(request, client_id, client_host, require_known_member_id)
        try:
            joined = await shard.ask(message)
            return await joined
        except MailboxError:
            return JoinGroupResponse(
                error_code=ErrorCode.NOT_COORDINATOR, member_id=request.member_id
            )

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        shard = self._shard(request.group_id)
        if isinstance(shard, ErrorCode):
            return SyncGroupResponse(error_code=shard)
        try:
            synced = await shard.ask(Sync(request))
            return await synced
        except MailboxError:
            return SyncGroupResponse(error_code=ErrorCode.NOT_COORDINATOR)

    async def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        shard = self._shard(request.group_id)
        if isinstance(shard, ErrorCode):
            return HeartbeatResponse(error_code=shard)
        try:
            return await shard.ask(Beat(request))
        except MailboxError:
            return HeartbeatResponse(error_code=ErrorCode.NOT_COORDINATOR)

    async def leave_group(self, request: LeaveGroupRequest) -> LeaveGroupResponse:
        shard = self._shard(request.group_id)
        if isinstance(shard, ErrorCode):
            return LeaveGroupResponse(error_code=shard)
        try:
            return await shard.ask(Leave(request))
        except MailboxError:
            return LeaveGroupResponse(error_code=ErrorCode.NOT_COORDINATOR)

    async def offset_commit(self, request: OffsetCommitRequest) -> OffsetCommitResponse:
        shard = self._shard(request.group_id)
        if not isinstance(shard, ErrorCode):
            try:
                stored = await shard.ask(Commit(request))
                return await stored
            except MailboxError:
                shard = ErrorCode.NOT_COORDINATOR
        return OffsetCommitResponse(
            topics=[
                OffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=[
                        OffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=shard
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ]
        )

    async def offset_fetch(self, request: OffsetFetchRequest) -> OffsetFetchResponse:
        shard = self._shard(request.group_id)
        if isinstance(shard, ErrorCode):
            return OffsetFetchResponse(error_code=shard)
        try:
            return await shard.ask(FetchOffsets(request))
        except MailboxError:
            return OffsetFetchResponse(error_code=ErrorCode.NOT_COORDINATOR)

    async def describe_groups(self, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
        described = []
        for group_id in request.groups:
            shard = self._shard(group_id)
            if isinstance(shard, ErrorCode):
                described.append(DescribedGroup(error_code=shard, group_id=group_id))
                continue
            try:
                found = await shard.ask(Describe((group_id,)))
                described.extend(found)
            except MailboxError:
                described.append(
                    DescribedGroup(error_code=ErrorCode.NOT_COORDINATOR, group_id=group_id)
                )
        return DescribeGroupsResponse(groups=described)

    async def list_groups(self, request: ListGroupsRequest) -> ListGroupsResponse:
        """The groups of every offsets partition this broker leads (Kafka lists per broker)."""
        groups = []
        code = ErrorCode.NONE
        for shard in list(self.shards.values()):
            if not shard.running:
                continue  # failed (a bug, logged): it answers nothing, as one led elsewhere
            if shard.loading:
                code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                continue
            try:
                listed = await shard.ask(ListAll(tuple(request.states_filter)))
                groups.extend(listed)
            except MailboxError:
                continue
            except ValueError:
                return ListGroupsResponse(error_code=ErrorCode.INVALID_REQUEST)
        return ListGroupsResponse(error_code=code, groups=groups)
