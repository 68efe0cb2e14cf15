"""`ShardState`: everything one `GroupShard` owns, and the means the group rules act through.

The shard actor creates one `ShardState` and is its only owner: its handlers pass it to the
rules in `membership.py` and `offsets.py`, which change it and return, so only the shard's task
ever touches it (no locks, as for any actor). The rules never see the mailbox or the log: to act
later they ask the shard for an alarm (`alarm`: tell the shard a message after some ms) or a
write (`write`: append a batch to the shard's offsets partition with acks=all, then tell the
shard the message built from the outcome), and the outcome comes back as a message.

What is stored (`groups`, `offsets`) is rebuilt from the offsets partition when a shard loads;
`waiting` is not stored: parked answers and alarms die with the shard, whose unloading answers
every waiting member NOT_COORDINATOR.
"""

from __future__ import annotations

import asyncio
import random
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
class ShardState:
    """One shard's groups, offsets and waiting members, with what the rules need to act."""

    name: str  # the shard's, for log lines
    config: GroupCoordinatorConfig
    clock: Clock
    rng: random.Random  # member ids, seeded so tests replay
    alarm: Callable[[int, object], Alarm]  # tell the shard `message` after `after_ms`
    write: Callable[[bytes, AfterWrite], None]  # append `batch`, then tell what AfterWrite says
    groups: dict[str, Group] = field(default_factory=dict)
    offsets: dict[str, dict[tuple[str, int], OffsetValue]] = field(default_factory=dict)
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
