"""`GroupCoordinator`: a broker's consumer-group coordinator, one `GroupShard` per led partition.

Routing: a group belongs to `__consumer_offsets` partition `partition_for(group, partitions)`;
this broker coordinates it while it leads that partition. A request for a group whose partition
is led elsewhere is answered NOT_COORDINATOR (the client asks FindCoordinator again); one whose
partition is still loading, COORDINATOR_LOAD_IN_PROGRESS.

The leadership hook, the moves and the routing are the shared `PartitionRouter`'s
(actors/partition_router.py): a shard starts (and loads) when this broker becomes leader of its
offsets partition and stops when it no longer leads it. Partitions an UpdateMetadata deletes
arrive from the ReplicaManager's other hook (`on_partitions_deleted`), are recorded like the
moves and go to every shard after them, which drops the groups' offsets of them.

DeleteGroups names groups of any partition: each goes to its group's shard (the groups of one
shard in one message, so their tombstones are one write), and the shards are asked together.

Consumer groups of the new protocol (KIP-848): ConsumerGroupHeartbeat and ConsumerGroupDescribe
are routed like the classic APIs (a consumer group lives in its offsets partition's shard too);
the heartbeat carries the broker's topics (name -> id, partition count) as of its arrival, which
the shard's assignor works from.
The empty group id is refused (INVALID_GROUP_ID) before routing, for DeleteGroups and
OffsetDelete alike (deletion.py says why).

Transactions (KIP-98): TxnOffsetCommit goes to the group's shard like OffsetCommit. When a
transaction's COMMIT or ABORT marker is written to an offsets partition led here, the broker's
WriteTxnMarkers handler calls `on_transaction_completed` (Kafka's onTransactionCompleted) and
waits for it before answering: it puts the news in the shard's mailbox, awaiting room (never
dropped), so the shard has it before the transaction coordinator can end the transaction and
the producer start its next one, whose TxnOffsetCommits then queue behind it. A partition with
no shard here (led elsewhere, or its shard not started yet) needs no message: the shard that
loads it next reads the marker from the log, which holds it by then (it was acknowledged with
acks=all); so does the successor of a shard that stops before reading the message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from actors.group.config import GroupCoordinatorConfig
from actors.group.consumer_describe import ConsumerDescribe
from actors.group.consumer_heartbeat import ConsumerHeartbeat, TopicsView
from actors.group.shard import (
    Beat,
    Commit,
    DeleteGroups,
    DeleteOffsets,
    Describe,
    FetchOffsets,
    GroupShard,
    Join,
    Leave,
    ListAll,
    OffsetsLog,
    RemoveOffsets,
    Sync,
    TxnCommit,
    TxnCompleted,
)
from actors.partition_router import PartitionRouter
from runtime.actor import MailboxError
from runtime.clock import Clock
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC, partition_for
from wire.messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribedConsumerGroup,
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
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from wire.topic import TopicPartition

log = logging.getLogger(__name__)

R = TypeVar("R")


@dataclass(slots=True)
class _Deleted:
    """Partitions an UpdateMetadata deleted that the actor has not applied yet (written by the
    hook, swapped out whole by `_apply_extra`)."""

    partitions: set[tuple[str, int]] = field(default_factory=set)


class GroupCoordinator(PartitionRouter[GroupShard]):
    def __init__(
        self,
        log_: OffsetsLog,
        config: GroupCoordinatorConfig,
        *,
        clock: Clock,
        offsets_partitions: Callable[[], int | None],
    ) -> None:
        """`offsets_partitions()`: the partition count of __consumer_offsets in the broker's
        metadata, None while the topic does not exist."""
        super().__init__("group-coordinator", OFFSETS_TOPIC, clock=clock)
        self._log = log_
        self.config = config
        self._offsets_partitions = offsets_partitions
        self._deleted = _Deleted()

    def _new_shard(self, partition: int) -> GroupShard:
        return GroupShard(partition, self._log, self.config, clock=self.clock)

    def on_partitions_deleted(self, partitions: Sequence[TopicPartition]) -> None:
        """The ReplicaManager's hook for partitions an UpdateMetadata deleted."""
        gone = {(tp.topic, tp.partition) for tp in partitions if tp.topic != OFFSETS_TOPIC}
        if gone:
            self._deleted.partitions |= gone
            self._wake()

    async def _apply_extra(self) -> None:
        # After the moves, so a shard started by one of them drops the offsets too.
        deleted, self._deleted = self._deleted, _Deleted()
        if deleted.partitions:
            await self._remove_offsets(frozenset(deleted.partitions))

    async def _remove_offsets(self, partitions: frozenset[tuple[str, int]]) -> None:
        for partition, shard in list(self.shards.items()):
            try:
                await shard.tell(RemoveOffsets(partitions))
            except MailboxError:
                log.info("%s-%d unloaded before its deleted offsets went", OFFSETS_TOPIC, partition)

    # -- routing -----------------------------------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        partitions = self._offsets_partitions() or self.config.offsets_topic_num_partitions
        return partition_for(group_id, partitions)

    def _shard(self, group_id: str) -> GroupShard | ErrorCode:
        return self.shard_for(group_id)

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
            return await shard.settled(joined)
        except MailboxError:
            return JoinGroupResponse(
                error_code=ErrorCode.NOT_COORDINATOR, member_id=request.member_id
            )

    async def consumer_group_heartbeat(
        self,
        request: ConsumerGroupHeartbeatRequest,
        *,
        client_id: str,
        client_host: str,
        topics: TopicsView,
    ) -> ConsumerGroupHeartbeatResponse:
        """KIP-848's heartbeat (consumer_heartbeat.py); `topics`: the broker's topics now."""
        shard = self._shard(request.group_id)
        if isinstance(shard, ErrorCode):
            return ConsumerGroupHeartbeatResponse(error_code=shard)
        try:
            beat = await shard.ask(ConsumerHeartbeat(request, client_id, client_host, topics))
            return await shard.settled(beat)
        except MailboxError:
            return ConsumerGroupHeartbeatResponse(error_code=ErrorCode.NOT_COORDINATOR)

    async def consumer_group_describe(
        self, request: ConsumerGroupDescribeRequest
    ) -> ConsumerGroupDescribeResponse:
        described = []
        for group_id in request.group_ids:
            shard = self._shard(group_id)
            if isinstance(shard, ErrorCode):
                described.append(DescribedConsumerGroup(error_code=shard, group_id=group_id))
                continue
            try:
                found = await shard.ask(ConsumerDescribe((group_id,)))
                described.extend(found)
            except MailboxError:
                described.append(
                    DescribedConsumerGroup(error_code=ErrorCode.NOT_COORDINATOR, group_id=group_id)
                )
        return ConsumerGroupDescribeResponse(groups=described)

    async def sync_group(self, request: SyncGroupRequest) -> SyncGroupResponse:
        shard = self._shard(request.group_id)
        if isinstance(shard, ErrorCode):
            return SyncGroupResponse(error_code=shard)
        try:
            synced = await shard.ask(Sync(request))
            return await shard.settled(synced)
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
                return await shard.settled(stored)
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

    async def txn_offset_commit(self, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
        shard = self._shard(request.group_id)
        if not isinstance(shard, ErrorCode):
            try:
                stored = await shard.ask(TxnCommit(request))
                return await shard.settled(stored)
            except MailboxError:
                shard = ErrorCode.NOT_COORDINATOR
        return TxnOffsetCommitResponse(
            topics=[
                TxnOffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=[
                        TxnOffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=shard
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ]
        )

    async def on_transaction_completed(
        self, producer_id: int, partitions: Iterable[TopicPartition], *, commit: bool
    ) -> None:
        """The producer's COMMIT (`commit`) or ABORT marker is written to these partitions (the
        offsets partitions among them matter): their shards commit or drop its pending offsets.
        Returns once each shard here has the news in its mailbox (the module doc says why)."""
        for tp in partitions:
            if tp.topic != OFFSETS_TOPIC:
                continue
            shard = self.shards.get(tp.partition)
            if shard is None:
                continue  # the shard that loads it reads the marker
            try:
                await shard.tell(TxnCompleted(producer_id, commit))
            except MailboxError:
                log.info("%s-%d unloaded before the marker's news", OFFSETS_TOPIC, tp.partition)

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
                listed = await shard.ask(
                    ListAll(tuple(request.states_filter), tuple(request.types_filter))
                )
                groups.extend(listed)
            except MailboxError:
                continue
            except ValueError:
                return ListGroupsResponse(error_code=ErrorCode.INVALID_REQUEST)
        return ListGroupsResponse(error_code=code, groups=groups)

    async def delete_groups(self, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
        """One result per group named (a group named twice is deleted once, as Kafka takes
        them as a set), in the order named."""
        wanted = list(dict.fromkeys(request.groups_names))
        codes: dict[str, ErrorCode] = {}
        by_shard: dict[int, tuple[GroupShard, list[str]]] = {}
        for group_id in wanted:
            shard = self._shard(group_id) if group_id else ErrorCode.INVALID_GROUP_ID
            if isinstance(shard, ErrorCode):
                codes[group_id] = shard
            else:
                by_shard.setdefault(shard.partition, (shard, []))[1].append(group_id)
        answers = await asyncio.gather(
            *(self._delete_at(shard, tuple(ids)) for shard, ids in by_shard.values())
        )
        for answered in answers:
            codes.update(answered)
        return DeleteGroupsResponse(
            results=[DeletableGroupResult(group_id=g, error_code=codes[g]) for g in wanted]
        )

    async def _delete_at(
        self, shard: GroupShard, group_ids: tuple[str, ...]
    ) -> dict[str, ErrorCode]:
        try:
            deleted = await shard.ask(DeleteGroups(group_ids))
            return await shard.settled(deleted)
        except MailboxError:
            return dict.fromkeys(group_ids, ErrorCode.NOT_COORDINATOR)

    async def offset_delete(self, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
        shard = self._shard(request.group_id) if request.group_id else ErrorCode.INVALID_GROUP_ID
        if isinstance(shard, ErrorCode):
            return OffsetDeleteResponse(error_code=shard)
        try:
            deleted = await shard.ask(DeleteOffsets(request))
            return await shard.settled(deleted)
        except MailboxError:
            return OffsetDeleteResponse(error_code=ErrorCode.NOT_COORDINATOR)
