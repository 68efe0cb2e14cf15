"""`PartitionRouter`: a coordinator that serves the partitions of one internal topic this broker
leads, one shard actor per led partition (the group coordinator on `__consumer_offsets`, the
transaction coordinator on `__transaction_state`).

Leadership moves arrive from the ReplicaManager's hook (`on_leadership_change`, seed 002's
onLeadershipChange): becoming leader of one of the topic's partitions starts its shard (which
loads it), no longer leading it for any reason (the hook reports StopReplica, a stray replica and
a failed log as followers too) stops it. The router is an actor so moves are applied by one task,
each partition ending where the ReplicaManager's latest move put it; request methods only read
the published `shards` map and ask the shard.

Control messages are never dropped. The hooks are synchronous (they run inside the
ReplicaManager's handler, which must not wait for this actor), so they cannot wait for room in a
mailbox, and a move dropped on a full mailbox would leave a shard serving a partition led
elsewhere, or none serving one led here. So the hooks do not queue moves as messages: they record
them in `_pending` (each partition's latest move wins: only where leadership ends up matters, and
a repeated lead still reloads) and queue one `_Apply` wake-up if none is queued yet. The mailbox
therefore holds at most one message and can never be full; the handler takes everything pending
at once. A subclass may record other work the same way and do it in `_apply_extra`, after the
moves.

Routing: a key (group id, transactional id) belongs to the partition `partition_of(key)`; a
request for a key whose partition is led elsewhere is answered NOT_COORDINATOR (the client asks
FindCoordinator again); one whose partition is still loading, or led here with its load not yet
started, COORDINATOR_LOAD_IN_PROGRESS.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from runtime.actor import Actor, MailboxClosed, MailboxFull, handles
from runtime.clock import Clock
from wire.errors import ErrorCode
from wire.topic import TopicPartition

log = logging.getLogger(__name__)


class Shard(Protocol):
    """What the router needs of a shard actor."""

    @property
    def partition(self) -> int: ...

    @property
    def running(self) -> bool: ...

    @property
    def loading(self) -> bool: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


S = TypeVar("S", bound=Shard)


@dataclass(frozen=True, slots=True)
class _Apply:
    """Wakes the actor to apply what the hooks left in `_pending` (at most one is queued)."""


@dataclass(slots=True)
class _Pending:
    """Moves the hooks recorded and the actor has not applied yet. Owned by the event loop's
    thread: the hooks write it, the actor's `_Apply` handler swaps it out whole."""

    # Partition -> led (True) or not (False): each partition's latest move.
    moves: dict[int, bool] = field(default_factory=dict)
    woken: bool = False  # an _Apply is queued and has not started yet


class PartitionRouter(Actor, Generic[S]):
    """Subclasses name the `topic`, build shards (`_new_shard`) and say how a key maps to a
    partition (`partition_of`)."""

    topic: str

    def __init__(self, name: str, topic: str, *, clock: Clock) -> None:
        super().__init__(name, clock=clock)
        self.topic = topic
        self.shards: dict[int, S] = {}
        self._pending = _Pending()

    # -- to be provided by the subclass --------------------------------------------------------

    def _new_shard(self, partition: int) -> S:
        raise NotImplementedError

    def partition_of(self, key: str) -> int:
        raise NotImplementedError

    async def _apply_extra(self) -> None:
        """The subclass's recorded work, after the moves."""

    # -- the hooks (synchronous, outside the actor) --------------------------------------------

    def on_leadership_change(
        self, leaders: Sequence[TopicPartition], followers: Sequence[TopicPartition]
    ) -> None:
        """The ReplicaManager's hook: record the move for the actor. `followers` are every
        partition this broker no longer leads, whatever the reason."""
        moves = self._pending.moves
        for tp in followers:
            if tp.topic == self.topic:
                moves[tp.partition] = False
        for tp in leaders:
            if tp.topic == self.topic:
                moves[tp.partition] = True
        if moves:
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
            log.debug("%s stopped; moves not applied", self.name)  # shards stop with it
            return
        self._pending.woken = True

    # -- the actor -----------------------------------------------------------------------------

    @handles(_Apply)
    async def _apply(self, _: _Apply) -> None:
        pending, self._pending = self._pending, _Pending()  # hooks from here on wake again
        await self._move(pending.moves)
        await self._apply_extra()

    async def _move(self, moves: dict[int, bool]) -> None:
        # Every shard that goes (unled, or led again: a new leader epoch loads again from the
        # log) leaves the routing table at once and all stop together, so one slow unload does
        # not hold back the others; a shard still loading cancels its load.
        leaving = [shard for p in moves if (shard := self.shards.pop(p, None)) is not None]
        for shard in leaving:
            log.info("%s: unloading %s-%d", self.name, self.topic, shard.partition)
        await asyncio.gather(*(shard.stop() for shard in leaving))
        for partition, led in moves.items():
            if not led:
                continue
            shard = self._new_shard(partition)
            log.info("%s: loading %s-%d", self.name, self.topic, partition)
            await shard.start()
            self.shards[partition] = shard

    async def on_stop(self) -> None:
        shards, self.shards = list(self.shards.values()), {}
        await asyncio.gather(*(shard.stop() for shard in shards))

    # -- routing -----------------------------------------------------------------------------

    def shard_for(self, key: str) -> S | ErrorCode:
        partition = self.partition_of(key)
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
