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
member NOT_COORDINATOR. Nor is `deleted` (below).

Orders (`committed_order`, `PendingTxnOffset.order`, `next_order`) say where an offset's record
lies in the offsets partition, so that a transaction's offsets, committed by its marker, replace
only committed offsets whose records came before theirs (Kafka's
CommitRecordMetadataAndOffset.olderThan). A loaded record's order is its offset; a record
written by this shard gets `next_write_order()` when its write is issued, counting up from the
high watermark the load stopped at. They are only compared, never used as offsets: the writes
of one shard reach the partition in the order they are issued (each write task takes the same
path to the partition's mailbox, and tasks and full mailboxes both wake their waiters first in,
first out), so issue order is log order.

Deleted offsets (DeleteGroups, OffsetDelete: deletion.py) leave their tombstone's order in
`deleted`, so that a commit whose record came before the tombstone, but whose write ends after
it, stays deleted: in the log the tombstone follows it, and a loading shard drops it too (Kafka
gets the same by dropping the partition's pending commit). An entry is kept until no write
issued before it can still be in flight (`forget_deleted_before`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from actors.group.config import GroupCoordinatorConfig
from actors.group.consumer_group import ConsumerGroups
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


@dataclass(frozen=True, slots=True, eq=False)
class Removed:
    """What a DeleteGroups or an OffsetDelete took out of one group's state while its
    tombstones were being written: put back if the write fails (deletion.py)."""

    group_id: str
    group: Group | None  # the group itself, when it was forgotten
    offsets: tuple[tuple[tuple[str, int], OffsetValue, int], ...]  # (partition, value, order)


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
    # Group -> (topic, partition) -> (its tombstone's order, monotonic ms when it was issued).
    deleted: dict[str, dict[tuple[str, int], tuple[int, int]]] = field(default_factory=dict)
    waiting: dict[str, Waiting] = field(default_factory=dict)
    tokens: int = 0
    # The consumer groups of the new protocol (KIP-848: consumer_heartbeat.py), stored and not.
    consumer: ConsumerGroups = field(default_factory=ConsumerGroups)

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
        (Kafka's olderThan check, for plain and transactional commits alike), or a tombstone
        that deleted the partition's offset did (the module doc)."""
        deleted = self.deleted.get(group_id, {}).get(tp)
        if deleted is not None and deleted[0] > order:
            return
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

    def delete_committed(
        self, group_id: str, tp: tuple[str, int], order: int
    ) -> tuple[OffsetValue, int] | None:
        """Drop a committed offset whose tombstone is written at `order`; the offset and its
        order, for putting it back if that write fails (None: nothing was committed)."""
        value = self.offsets.get(group_id, {}).get(tp)
        if value is None:
            return None
        previous = self.committed_order[group_id][tp]
        self.forget_committed(group_id, tp)
        self.deleted.setdefault(group_id, {})[tp] = (order, self.now_ms())
        return value, previous

    def undelete(self, removed: Removed, order: int) -> None:
        """Put back what a deletion whose tombstones (at `order`) failed to be written took
        out: the offsets, unless one was committed since, and the group, unless its id has been
        taken since (a member joined, a consumer committed)."""
        marks = self.deleted.get(removed.group_id, {})
        for tp, value, previous in removed.offsets:
            mark = marks.get(tp)
            if mark is not None and mark[0] == order:
                del marks[tp]
            self.commit_offset(removed.group_id, tp, value, previous)
        if not marks:
            self.deleted.pop(removed.group_id, None)
        if removed.group is not None:
            self.groups.setdefault(removed.group_id, removed.group)

    def forget_deleted_before(self, before_ms: int) -> None:
        """Forget the tombstones' orders issued before `before_ms` (monotonic): every write
        issued before them has ended by then."""
        for group_id, marks in list(self.deleted.items()):
            for tp in [tp for tp, (_, at_ms) in marks.items() if at_ms < before_ms]:
                del marks[tp]
            if not marks:
                del self.deleted[group_id]

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
        self.deleted.clear()
        self.next_order = 0
        self.consumer.clear()


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
