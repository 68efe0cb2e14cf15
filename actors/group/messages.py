"""Messages a `GroupShard` handles: the requests the router asks it, and the ones it tells itself.

Every message is a frozen, slotted dataclass; those answered with a value subclass `Ask[R]`. A
request that must wait (a join until the rebalance completes, a sync until the leader's
assignment is stored, a commit until its records are replicated) is answered with a future the
shard completes later from another message, so the mailbox never blocks on a member or on
replication.

The shard's own messages come from its alarms (`JoinDeadline`, `SessionExpired`), its periodic
expiry check (`ExpireOffsets`) and its offsets-topic writes (`GroupStored`, `OffsetsStored`,
`TxnOffsetsStored`, `TombstonesStored`, `StaticMemberStored`): they carry a timer's token or a
write's outcome back into the mailbox, so every state change happens in a handler.
`TxnCompleted` comes from the broker's WriteTxnMarkers handler, through the router, once a
transaction's marker is written to the shard's partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

from actors.group.metadata import Protocol
from actors.group.state import PendingTxnOffset, Removed
from runtime.actor import Ask
from wire.errors import ErrorCode
from wire.group_records import OffsetValue
from wire.messages import (
    DescribedGroup,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

# -- from the router -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Join(Ask[asyncio.Future[JoinGroupResponse]]):
    request: JoinGroupRequest
    client_id: str
    client_host: str
    # Kafka clients from JoinGroup v4 on take a member id from a MEMBER_ID_REQUIRED answer and
    # rejoin with it; older ones are given theirs in the join's own answer.
    require_known_member_id: bool = True


@dataclass(frozen=True, slots=True)
class Sync(Ask[asyncio.Future[SyncGroupResponse]]):
    request: SyncGroupRequest


@dataclass(frozen=True, slots=True)
class Beat(Ask[HeartbeatResponse]):
    request: HeartbeatRequest


@dataclass(frozen=True, slots=True)
class Leave(Ask[LeaveGroupResponse]):
    request: LeaveGroupRequest


@dataclass(frozen=True, slots=True)
class Commit(Ask[asyncio.Future[OffsetCommitResponse]]):
    request: OffsetCommitRequest


@dataclass(frozen=True, slots=True)
class TxnCommit(Ask[asyncio.Future[TxnOffsetCommitResponse]]):
    request: TxnOffsetCommitRequest


@dataclass(frozen=True, slots=True)
class TxnCompleted:
    """A COMMIT (`commit`) or ABORT marker of the producer is written to the shard's partition
    (Kafka's onTransactionCompleted): its pending offsets are committed or dropped."""

    producer_id: int
    commit: bool


@dataclass(frozen=True, slots=True)
class FetchOffsets(Ask[OffsetFetchResponse]):
    request: OffsetFetchRequest


@dataclass(frozen=True, slots=True)
class Describe(Ask[list[DescribedGroup]]):
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ListAll(Ask[list[ListedGroup]]):
    states: tuple[str, ...] = ()
    types: tuple[str, ...] = ()  # "classic", "consumer" (KIP-848); empty: both


@dataclass(frozen=True, slots=True)
class DeleteGroups(Ask[asyncio.Future[dict[str, ErrorCode]]]):
    """DeleteGroups for groups of this shard: each one's outcome, once its tombstones are
    written (deletion.py)."""

    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeleteOffsets(Ask[asyncio.Future[OffsetDeleteResponse]]):
    """OffsetDelete: answered once the tombstones are written (deletion.py)."""

    request: OffsetDeleteRequest


@dataclass(frozen=True, slots=True)
class RemoveOffsets:
    """Partitions deleted from the cluster (an UpdateMetadata named them): every group's
    committed offsets of them go, with tombstones (Kafka's onPartitionsDeleted)."""

    partitions: frozenset[tuple[str, int]]


# -- from the shard's own alarms and writes --------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinDeadline:
    group_id: str
    token: int


@dataclass(frozen=True, slots=True)
class SessionExpired:
    group_id: str
    member_id: str
    token: int


@dataclass(frozen=True, slots=True)
class GroupStored:
    group_id: str
    generation: int
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class ReplacedSettings:
    """A static member's settings before a restarted instance replaced it (put back if the
    record naming the new member id fails to be written)."""

    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[Protocol, ...]


@dataclass(frozen=True, slots=True, eq=False)
class StaticMemberStored:
    """The record after a static member's replacement without a rebalance is written, or
    failed; `answer` is the restarted instance's parked JoinGroup answer."""

    group_id: str
    generation: int
    old_member_id: str
    new_member_id: str
    leader: str  # the group's leader before the replacement, as the answer names it
    previous: ReplacedSettings
    error: ErrorCode
    answer: asyncio.Future[JoinGroupResponse]


@dataclass(frozen=True, slots=True)
class OffsetsStored:
    group_id: str
    offsets: tuple[tuple[tuple[str, int], OffsetValue], ...]
    error: ErrorCode
    answer: asyncio.Future[OffsetCommitResponse]
    request: OffsetCommitRequest
    order: int  # the write's (state.py)


@dataclass(frozen=True, slots=True, eq=False)
class TxnOffsetsStored:
    """A TxnOffsetCommit's write ended; `pending` are the entries it made pending (a later
    commit of the same producer may have replaced some: only these are settled)."""

    group_id: str
    producer_id: int
    pending: tuple[tuple[tuple[str, int], PendingTxnOffset], ...]
    error: ErrorCode
    answer: asyncio.Future[TxnOffsetCommitResponse]
    request: TxnOffsetCommitRequest


@dataclass(frozen=True, slots=True, eq=False)
class TombstonesStored:
    """A DeleteGroups' or an OffsetDelete's tombstones (written at `order`) are replicated, or
    failed: `removed` goes back into the state on failure; `answer` settles the request."""

    removed: tuple[Removed, ...]
    order: int
    error: ErrorCode
    answer: Callable[[ErrorCode], None]


@dataclass(frozen=True, slots=True)
class ExpireOffsets:
    pass
