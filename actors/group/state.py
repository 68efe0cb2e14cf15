"""`ShardState`: everything one `GroupShard` owns, and the means the group rules act through.

The shard actor creates one `ShardState` and is its only owner: its handlers pass it to the
rules in `membership.py`, `offsets.py` and `txn_offsets.py`, which change it and return, so
only the shard's task ever touches it (no locks, as for any actor). The rules never see the
mailbox or the log: to act later they ask the shard for an alarm (`alarm`: tell the shard a
message after some ms) or a write (`write`: append a batch to the shard's offsets partition
with acks=all, then tell the shard the message built from the outcome), and the outcome comes
back as a message.

What is stored (`groups`, `offsets`, and the transactional offsets not yet ended by a marker,
`pending_txn`) is rebuilt from the offsets partition when a shard loads; `waiting` is not
stored: parked answers and alarms die with the shard, whose unloading answers every waiting
member NOT_COORDINATOR.

Orders (`committed_order`, `PendingTxnOffset.order`, `next_order`) say where an offset's record
lies in the offsets partition, so that a transaction's offsets, committed by its marker, replace
only committed offsets whose records came before theirs (Kafka's
CommitRecordMetadataAndOffset.olderThan). A loaded record's order is its offset; a record
written by this shard gets `next_write_order()` when its write is issued, counting up from the
high watermark the load stopped at. They are only compared, never used as offsets: the writes
of one shard reach the partition in the order they are issued (each write task takes the same
path to the partition's mailbox, and tasks and full mailboxes both wake their waiters first in,
first out), so issue order is log order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from actors.group.config import GroupCoordinatorConfig
from actors.group.metadata import Group
from runtime.clock import NS_PER_MS, Alarm, Clock
from wire.errors import ErrorCode
from wire.group_records import OffsetValue
from wire.messages import JoinGroupResponse, SyncGroupResponse

T = TypeVar("T")

# After an offsets-topic append: the append's outcome -> the message to tell the shard, or None.
# It runs in the write's own task, outside the mailbox, so it must not touch the state.
AfterWrite = Callable[[ErrorCode], object | None]


@dataclass(slots=True)
class Waiting:
    """A group's waiting members and alarms (not part of the stored state)."""

    joins: dict[str, asyncio.Future[JoinGroupResponse]] = field(default_factory=dict)
    syncs: dict[str, asyncio.Future[SyncGroupResponse]] = field(default_factory=dict)
    sessions: dict[str, tuple[int, Alarm]] = field(default_factory=dict)
    pending_members: dict[str, tuple[int, Alarm]] = field(default_factory=dict)
    join_alarm: Alarm | None = None
    join_token: int = 0
    initial_delay_until_ms: int | None = None  # while the first rebalance waits for members
    initial_delay_limit_ms: int = 0


@dataclass(slots=True, eq=False)
class PendingTxnOffset:
    """An offset a transaction committed (TxnOffsetCommit) and no marker has ended yet.
    `written` once its record is replicated: only then may a COMMIT marker apply it."""

    value: OffsetValue
    order: int
    written: bool = False


@dataclass(slots=True, eq=False)
class ShardState:
    """One shard's groups, offsets and waiting members, with what the rules need to act."""

    name: str  # the shard's, for log lines
    config: GroupCoordinatorConfig
    clock: Clock
    alarm: Callable[[int, object], Alarm]  # tell the shard `message` after `after_ms`
    write: Callable[[bytes, AfterWrite], None]  # append `batch`, then tell what AfterWrite says
    groups: dict[str, Group] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], OffsetValue]] = field(default_factory=dict)
    # Each committed offset's order (the module doc), beside `offsets`.
    committed_order: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    # Group -> producer id -> (topic, partition) -> its transaction's offset (txn_offsets.py).
    pending_txn: dict[str, dict[int, dict[tuple[str, int], PendingTxnOffset]]] = field(
        default_factory=dict
    )
    next_order: int = 0
    waiting: dict[str, Waiting] = field(default_factory=dict)
    tokens: int = 0

    def now_ms(self) -> int:
        """Monotonic ms, for deadlines. Group state times are wall-clock ms, as Kafka stores
        them in the group's record."""
        return self.clock.monotonic_ns() // NS_PER_MS

    def wall_ms(self) -> int:
        return self.clock.wall_ms()

    def token(self) -> int:
        """A fresh token for an alarm: its message is ignored once a newer one is armed."""
        self.tokens += 1
        return self.tokens

    def waits(self, group_id: str) -> Waiting:
        return self.waiting.setdefault(group_id, Waiting())

    def next_write_order(self) -> int:
        """The order of a record whose write is being issued now."""
        order = self.next_order
        self.next_order += 1
        return order

    def commit_offset(
        self, group_id: str, tp: tuple[str, int], value: OffsetValue, order: int
    ) -> None:
        """Make `value` the committed offset unless the committed one's record came later
        (Kafka's olderThan check, for plain and transactional commits alike)."""
        orders = self.committed_order.setdefault(group_id, {})
        current = orders.get(tp)
        if current is not None and current > order:
            return
        self.offsets.setdefault(group_id, {})[tp] = value
        orders[tp] = order

    def forget_committed(self, group_id: str, tp: tuple[str, int]) -> None:
        """Drop one committed offset (a tombstone); a group left without any loses its entry."""
        for table in (self.offsets, self.committed_order):
            entries = table.get(group_id)
            if entries is not None:
                entries.pop(tp, None)
                if not entries:
                    del table[group_id]

    def pending_partitions(self, group_id: str) -> frozenset[tuple[str, int]]:
        """The group's partitions with offsets of a transaction not yet ended."""
        return frozenset(
            tp for pending in self.pending_txn.get(group_id, {}).values() for tp in pending
        )

    def clear_stored(self) -> None:
        """Forget what the partition holds (a failed load, an unload)."""
        self.groups.clear()
        self.offsets.clear()
        self.committed_order.clear()
        self.pending_txn.clear()
        self.next_order = 0


def settle(future: asyncio.Future[T], value: T) -> None:
    if not future.done():
        future.set_result(value)


def store_error(error: ErrorCode) -> ErrorCode:
    """What a failed offsets-topic append means to the member (Kafka's mapping)."""
    if error in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if error in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if error in (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
    return ErrorCode.UNKNOWN_SERVER_ERROR
