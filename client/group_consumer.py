"""A consumer in a group: subscribe to topics, poll the partitions the group assigns, commit what
was consumed (Kafka's KafkaConsumer with a group.id, eager rebalancing).

    consumer = GroupConsumer(client, ["orders"], group=GroupConfig("billing"),
                             config=ConsumerConfig(auto_offset_reset="earliest"))
    records = await consumer.poll(timeout_ms=1000)
    consumer.mark_consumed(records)     # what the application is done with
    await consumer.commit()             # or let auto commit do it (enable.auto.commit)
    await consumer.close()              # commit, LeaveGroup, close the fetcher

Membership is client/group_member.py's `GroupMember`; fetching is a `Consumer` (client/consumer.py)
whose assignment follows the group's.

Rebalances. `poll()` joins the group when the member must (at first, and after a heartbeat was
answered REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID). As Kafka's eager
consumer does before it rejoins, it commits what was consumed (with enable.auto.commit; the
coordinator still takes the generation's commits while it prepares the rebalance) and gives up
every partition; after the join it fetches the group's committed offsets (OffsetFetch) for the
new assignment and starts each partition there, or by auto.offset.reset where nothing is
committed. The join runs in a task of its own that outlives a `poll()` whose timeout ends first,
so a short poll never restarts a long rebalance. A poll waits for records in slices of at most
POLL_SLICE_MS, so a rebalance a heartbeat learned of is joined within that much.

Commits. Unlike Kafka's consumer, which commits the position (everything `poll()` returned),
this one commits what the caller marked with `mark_consumed()`: a caller that stops in the
middle of a poll's records (a message limit) must not commit the ones it never used. With
enable.auto.commit the marked offsets are committed every auto.commit.interval.ms (checked at
each poll slice), before a rebalance and on `close()`. An automatic commit that fails is not
raised (as in Kafka, where it is logged): `commit_failures` counts them and
`last_commit_error` keeps the last; the records may then be read again by the next owner.

Time is the client's injected clock. Owned by one caller on one event loop; the join task only
runs while `poll()` waits for it or between the caller's calls. No locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from client.client import Client
from client.config import ConsumerConfig
from client.consumer import Consumer
from client.errors import ClientClosedError, ClientError
from client.fetched_records import ConsumerRecord
from client.group_member import GroupConfig, GroupMember, MemberState
from runtime.clock import NS_PER_MS
from wire.errors import KafkaError
from wire.topic import TopicPartition

_log = logging.getLogger(__name__)

POLL_SLICE_MS: Final = 100

# (assignment, generation id), called after each join with the partitions it brought.
AssignmentListener = Callable[[frozenset[TopicPartition], int], None]


class GroupConsumer:
    def __init__(
        self,
        client: Client,
        topics: Sequence[str],
        *,
        group: GroupConfig,
        config: ConsumerConfig | None = None,
        on_assigned: AssignmentListener | None = None,
        seed: int = 0,
    ) -> None:
        self._clock = client.clock
        self._consumer = Consumer(client, config=config)
        self.member = GroupMember(client, group, topics, seed=seed)
        self.group = group
        self._on_assigned = on_assigned
        self._consumed: dict[TopicPartition, int] = {}  # next offset, per partition, to commit
        self._committed: dict[TopicPartition, int] = {}  # as the group has it
        self._join: asyncio.Task[None] | None = None
        self._next_auto_commit_ns = self._clock.monotonic_ns() + self._auto_commit_ns
        self.commit_failures = 0
        self.last_commit_error: BaseException | None = None
        self._closed = False

    @property
    def _auto_commit_ns(self) -> int:
        return self.group.auto_commit_interval_ms * NS_PER_MS

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this member reads now (none while it joins)."""
        if self.member.state is not MemberState.STABLE:
            return frozenset()
        return self.member.assignment

    # -- polling ------------------------------------------------------------------------------

    async def poll(self, timeout_ms: float) -> list[ConsumerRecord]:
        """Records of the assigned partitions, joining the group first when due; `[]` after
        `timeout_ms` (on the client's clock) without any. Raises what the join or the fetcher
        cannot get past (`KafkaError`, the client's errors)."""
        if self._closed:
            raise ClientClosedError("the group consumer is closed")
        deadline_ns = self._clock.monotonic_ns() + round(timeout_ms * NS_PER_MS)
        while True:
            await self._maybe_auto_commit()
            if self.member.rejoin_needed and not await self._rejoin(deadline_ns):
                return []
            now_ns = self._clock.monotonic_ns()
            if now_ns >= deadline_ns:
                return []
            slice_ns = min(deadline_ns - now_ns, POLL_SLICE_MS * NS_PER_MS)
            if self.group.enable_auto_commit:
                slice_ns = min(slice_ns, max(0, self._next_auto_commit_ns - now_ns))
            records = await self._consumer.poll(timeout_ms=slice_ns / NS_PER_MS)
            assigned = self.assignment()
            records = [r for r in records if TopicPartition(r.topic, r.partition) in assigned]
            if records:
                return records

    async def _rejoin(self, deadline_ns: int) -> bool:
        """Start (or go on waiting for) the join; True once it completed."""
        if self._join is None:
            await self._before_rejoin()
            self._join = asyncio.create_task(
                self._join_group(), name=f"join group {self.group.group_id}"
            )
        join = self._join
        await self._wait(join, deadline_ns)
        if not join.done():
            return False
        self._join = None
        join.result()  # a join that failed for good raises here
        return True

    async def _before_rejoin(self) -> None:
        if self.group.enable_auto_commit and self.member.generation_id >= 0:
            await self._commit_quietly()
        self._consumer.assign([])
        self._consumed.clear()

    async def _join_group(self) -> None:
        await self.member.ensure_active_group()
        assigned = self.member.assignment
        self._consumer.assign(sorted(assigned))
        committed = await self.member.committed(assigned)
        self._committed = {tp: offset for tp, offset in committed.items() if offset is not None}
        for tp, offset in self._committed.items():
            self._consumer.seek(tp, offset)
        _log.info(
            "group %s generation %d: assigned %s, committed %s",
            self.group.group_id,
            self.member.generation_id,
            sorted(assigned),
            committed,
        )
        if self._on_assigned is not None:
            self._on_assigned(assigned, self.member.generation_id)

    async def _wait(self, task: asyncio.Task[None], deadline_ns: int) -> None:
        """Until `task` is done or the clock reaches `deadline_ns`."""
        if task.done():
            return
        woken = asyncio.Event()

        def wake(_: object = None) -> None:
            woken.set()

        alarm = self._clock.call_at_ns(deadline_ns, wake)
        task.add_done_callback(wake)
        try:
            await woken.wait()
        finally:
            alarm.cancel()
            task.remove_done_callback(wake)

    # -- commits ------------------------------------------------------------------------------

    def mark_consumed(self, records: Iterable[ConsumerRecord]) -> None:
        """Note `records` as used: their offsets + 1 are what the next commit stores."""
        assigned = self.assignment()
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            if tp in assigned and record.offset >= self._consumed.get(tp, -1):
                self._consumed[tp] = record.offset + 1

    def uncommitted(self) -> dict[TopicPartition, int]:
        """Offsets marked consumed that the group does not have yet."""
        return {tp: o for tp, o in self._consumed.items() if self._committed.get(tp) != o}

    async def commit(self, *, timeout_ms: float | None = None) -> None:
        """Commit the offsets marked consumed (raises `CommitFailedError` and the like)."""
        offsets = self.uncommitted()
        if not offsets:
            return
        await self.member.commit(offsets, timeout_ms=timeout_ms)
        self._committed.update(offsets)

    async def _maybe_auto_commit(self) -> None:
        if not self.group.enable_auto_commit:
            return
        now_ns = self._clock.monotonic_ns()
        if now_ns < self._next_auto_commit_ns:
            return
        self._next_auto_commit_ns = now_ns + self._auto_commit_ns
        if self.member.state is MemberState.STABLE:
            await self._commit_quietly()

    async def _commit_quietly(self, timeout_ms: float | None = None) -> None:
        try:
            await self.commit(timeout_ms=timeout_ms)
        except ClientClosedError:
            raise
        except (ClientError, KafkaError) as exc:
            self.commit_failures += 1
            self.last_commit_error = exc
            _log.warning("group %s: commit failed: %s", self.group.group_id, exc)

    # -- closing ------------------------------------------------------------------------------

    async def close(self) -> None:
        """Commit what was consumed (with enable.auto.commit), leave the group, stop fetching."""
        if self._closed:
            return
        self._closed = True
        join, self._join = self._join, None
        if join is not None and not join.done():
            join.cancel()
        if join is not None:
            with contextlib.suppress(asyncio.CancelledError, ClientError, KafkaError):
                await join
        try:
            if self.group.enable_auto_commit and self.member.generation_id >= 0:
                await self._commit_quietly(timeout_ms=self.group.request_timeout_ms)
            await self.member.leave()
        finally:
            await self._consumer.close()
