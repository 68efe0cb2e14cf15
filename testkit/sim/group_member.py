"""A consumer-group member for the simulation: Kafka's classic group protocol, by hand.

ketch's own client has no group consumer, so this worker speaks the protocol itself, as an
eager Kafka consumer does: FindCoordinator; JoinGroup (a new member first gets its id from a
MEMBER_ID_REQUIRED answer and joins again with it, KIP-394); the leader computes a range
assignment from the members' subscriptions and sends it in its SyncGroup; every member reads its
partitions from the group's committed offsets (the earliest offset where none), heartbeats, and
commits what it has read with its member id and generation. When the coordinator says the group
is rebalancing, the member commits what it read (a commit the coordinator accepts while the group
prepares a rebalance, as in Kafka) and joins again; ILLEGAL_GENERATION and UNKNOWN_MEMBER_ID
make it join again (the latter under a new id); a coordinator that moved is looked up again.
With `restart_every_ms`, the member also restarts on that period as an application instance
does (commit, LeaveGroup, join under a new id), so every seed sees rebalances.

Subscriptions and assignments are Kafka's consumer protocol blobs (version 0), written by
assignor.py and read back with `wire.kafka.consumer_protocol`, so the coordinator handles what a
Kafka consumer would send.

What it records (history.py): every assignment (`GroupAssignment`), a `ConsumerRestart` for each
partition it starts reading (a new owner starts at the committed offset, so reads may repeat
across owners: at-least-once), every record read, and every commit sent and acknowledged with
its member id and generation. The checkers then judge that one generation never hands a
partition to two members, that no commit of an older generation is accepted once a newer one
has been assigned, and, with the other consumers', that everything read is in the log.

Ownership: a task on the simulation's loop, started and stopped by the run; it owns its client
and its consumer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Final

from client.client import Client
from client.config import ConsumerConfig
from client.consumer import Consumer
from client.errors import ClientError
from client.fetched_records import ConsumerRecord
from runtime.clock import Clock
from runtime.net.transport import Address, Transport
from testkit.sim.assignor import assignment_blob, range_assignment, subscription_blob
from testkit.sim.history import ConsumerRestart, GroupAssignment, History, OffsetCommitted, Read
from testkit.sim.workload import Worker, find_coordinator, new_client
from wire.errors import ErrorCode, KafkaError
from wire.kafka.consumer_protocol import read_assignment, read_subscription
from wire.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
    LeaveGroupRequest,
    MemberIdentity,
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from wire.topic import TopicPartition

PROTOCOL_TYPE: Final = "consumer"
ASSIGNOR: Final = "range"
SESSION_TIMEOUT_MS: Final = 600
REBALANCE_TIMEOUT_MS: Final = 1_000
HEARTBEAT_INTERVAL_MS: Final = 100
# A JoinGroup waits at the coordinator for the other members (up to the rebalance timeout), so
# it is given longer than an ordinary request, as Kafka's consumer does.
JOIN_TIMEOUT_MS: Final = REBALANCE_TIMEOUT_MS + 1_000
BACKOFF_S: Final = 0.05

_COORDINATOR_MOVED: Final = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


async def give_offsets(
    client: Client,
    bootstrap: list[Address],
    group: str,
    partitions: Sequence[TopicPartition],
    clock: Clock,
    history: History,
    *,
    attempts: int = 100,
) -> bool:
    """Commit offset 0 of `partitions` for `group` as a simple consumer (generation -1), until
    acknowledged (bounded); True once it was. A group with committed offsets is never
    forgotten, whereas Kafka forgets an Empty group without any (on a topic deletion, or its
    periodic cleanup) and its generations then start again from 1: given offsets before its
    members join, a group keeps one sequence of generations for the whole run, which is what
    `checkers.group_generations_fenced` relies on."""
    request = OffsetCommitRequest(
        group_id=group,
        topics=[
            OffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    OffsetCommitRequestPartition(partition_index=tp.partition, committed_offset=0)
                    for tp in partitions
                    if tp.topic == topic
                ],
            )
            for topic in sorted({tp.topic for tp in partitions})
        ],
    )
    for _ in range(attempts):
        coordinator = await find_coordinator(client, bootstrap, group)
        answer = None
        if coordinator is not None:
            with contextlib.suppress(ClientError, TimeoutError):
                answer = await client.send(coordinator, request)
        if isinstance(answer, OffsetCommitResponse) and all(
            p.error_code == ErrorCode.NONE for t in answer.topics for p in t.partitions
        ):
            for tp in partitions:
                history.append_offset_commit(
                    OffsetCommitted(group, tp, 0, True, clock.monotonic_ns())
                )
            return True
        await clock.sleep(BACKOFF_S)
    return False


class _Rejoin(Exception):
    """The member must join the group again (with `reset_id`: under a new member id)."""

    def __init__(self, reason: str, *, reset_id: bool = False) -> None:
        super().__init__(reason)
        self.reset_id = reset_id


class GroupMemberWorker(Worker):
    """One member of `group`, subscribed to `topic` (module docstring)."""

    def __init__(
        self,
        name: str,
        *,
        transport: Transport,
        bootstrap: Sequence[Address],
        clock: Clock,
        history: History,
        group: str,
        topic: str,
        partitions: int,
        commit_interval_ms: int = 300,
        restart_every_ms: int = 0,
    ) -> None:
        super().__init__(name, clock, history)
        self.group = group
        self.topic = topic
        self.partition_count = partitions
        self.commit_interval_ms = commit_interval_ms
        self.restart_every_ms = restart_every_ms
        self.restarts = 0
        self.bootstrap = list(bootstrap)
        self.client: Client = new_client(transport, bootstrap, clock, name)
        self.consumer = Consumer(
            self.client,
            config=ConsumerConfig(
                fetch_max_wait_ms=50,
                auto_offset_reset="earliest",
                request_timeout_ms=1_000,
                retry_backoff_ms=20,
            ),
        )
        self.member_id = ""
        self.generation = -1
        self.assigned: tuple[TopicPartition, ...] = ()
        self.positions: dict[TopicPartition, int] = {}  # the next offset to commit
        self.committed: dict[TopicPartition, int] = {}  # acknowledged, by this member
        self.generations_joined = 0
        self._coordinator: Address | None = None

    # -- the loop -----------------------------------------------------------------------------

    async def _run(self) -> None:
        while not self._stopping:
            try:
                if self.generation < 0:
                    await self._join()
                await self._consume()
            except _Rejoin as rejoin:
                self.errors[f"rejoin: {rejoin}"] += 1
                self.generation = -1
                if rejoin.reset_id:
                    self.member_id = ""
            except (ClientError, KafkaError, TimeoutError) as error:
                self.errors[type(error).__name__] += 1
                self._coordinator = None
                await self.clock.sleep(BACKOFF_S)

    async def _consume(self) -> None:
        """Read, heartbeat and commit on their intervals until told to rejoin."""
        now_ms = self.clock.monotonic_ms()
        next_beat, next_commit = now_ms + HEARTBEAT_INTERVAL_MS, now_ms + self.commit_interval_ms
        restart_at = now_ms + self.restart_every_ms if self.restart_every_ms else None
        while not self._stopping:
            if self.assigned:
                self._record(await self.consumer.poll(timeout_ms=HEARTBEAT_INTERVAL_MS // 2))
            else:
                await self.clock.sleep(HEARTBEAT_INTERVAL_MS / 2000)
            now_ms = self.clock.monotonic_ms()
            if now_ms >= next_commit:
                next_commit = now_ms + self.commit_interval_ms
                await self._commit()
            if now_ms >= next_beat:
                next_beat = now_ms + HEARTBEAT_INTERVAL_MS
                await self._heartbeat()
            if restart_at is not None and now_ms >= restart_at:
                await self._restart()

    async def _restart(self) -> None:
        """As an application instance restarts: commit, leave the group, join as a new
        member (the others rebalance twice: once for the leave, once for the join)."""
        self.restarts += 1
        await self._commit()
        await self._leave()
        raise _Rejoin("restarted", reset_id=True)

    def _record(self, records: Sequence[ConsumerRecord]) -> None:
        now_ns = self.clock.monotonic_ns()
        for record in records:
            tp = TopicPartition(record.topic, record.partition)
            if tp not in self.assigned:
                continue  # fetched before a reassignment took the partition away
            self.positions[tp] = record.offset + 1
            self.history.append_read(Read(self.name, tp, record.offset, record.value, now_ns))

    # -- membership ---------------------------------------------------------------------------

    async def _coordinator_address(self) -> Address:
        if self._coordinator is None:
            self._coordinator = await find_coordinator(self.client, self.bootstrap, self.group)
            if self._coordinator is None:
                raise TimeoutError("no coordinator found")
        return self._coordinator

    def _moved(self, code: int) -> bool:
        if ErrorCode.from_code(code) in _COORDINATOR_MOVED:
            self._coordinator = None
            return True
        return False

    async def _join(self) -> None:
        self.consumer.assign([])
        self.assigned, self.positions = (), {}
        coordinator = await self._coordinator_address()
        request = JoinGroupRequest(
            group_id=self.group,
            session_timeout_ms=SESSION_TIMEOUT_MS,
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            member_id=self.member_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=[
                JoinGroupRequestProtocol(name=ASSIGNOR, metadata=subscription_blob([self.topic]))
            ],
        )
        joined = await self.client.send(coordinator, request, timeout_ms=JOIN_TIMEOUT_MS)
        assert isinstance(joined, JoinGroupResponse), joined
        code = ErrorCode.from_code(joined.error_code)
        if code is ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = joined.member_id
            raise _Rejoin("member id required")
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            raise _Rejoin(code.name, reset_id=True)
        if code is not ErrorCode.NONE:
            self._moved(code)
            raise KafkaError(code)
        self.member_id = joined.member_id
        await self._sync(coordinator, joined)

    async def _sync(self, coordinator: Address, joined: JoinGroupResponse) -> None:
        assignments: list[SyncGroupRequestAssignment] = []
        if joined.leader == joined.member_id:
            subscriptions = {
                member.member_id: read_subscription(member.metadata) or ()
                for member in joined.members
            }
            plan = range_assignment(subscriptions, {self.topic: self.partition_count})
            assignments = [
                SyncGroupRequestAssignment(member_id=member, assignment=assignment_blob(owned))
                for member, owned in plan.items()
            ]
        synced = await self.client.send(
            coordinator,
            SyncGroupRequest(
                group_id=self.group,
                generation_id=joined.generation_id,
                member_id=joined.member_id,
                protocol_type=PROTOCOL_TYPE,
                protocol_name=ASSIGNOR,
                assignments=assignments,
            ),
            timeout_ms=JOIN_TIMEOUT_MS,
        )
        assert isinstance(synced, SyncGroupResponse), synced
        code = ErrorCode.from_code(synced.error_code)
        if code is ErrorCode.UNKNOWN_MEMBER_ID:
            raise _Rejoin(code.name, reset_id=True)
        if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
            raise _Rejoin(code.name)
        if code is not ErrorCode.NONE:
            self._moved(code)
            raise KafkaError(code)
        owned = read_assignment(synced.assignment) or {}
        partitions = tuple(TopicPartition(t, p) for t, ps in owned.items() for p in ps)
        self.history.append_group_assignment(
            GroupAssignment(
                self.group,
                self.member_id,
                joined.generation_id,
                partitions,
                self.clock.monotonic_ns(),
            )
        )
        await self._start_reading(coordinator, partitions)
        self.generation = joined.generation_id
        self.generations_joined += 1

    async def _start_reading(
        self, coordinator: Address, partitions: tuple[TopicPartition, ...]
    ) -> None:
        """Each assigned partition from the group's committed offset (earliest where none)."""
        starts: dict[TopicPartition, int] = dict.fromkeys(partitions, -1)
        if partitions:
            fetched = await self.client.send(
                coordinator,
                OffsetFetchRequest(
                    group_id=self.group,
                    topics=[
                        OffsetFetchRequestTopic(
                            name=self.topic, partition_indexes=[tp.partition for tp in partitions]
                        )
                    ],
                    require_stable=True,
                ),
            )
            assert isinstance(fetched, OffsetFetchResponse), fetched
            if fetched.error_code != ErrorCode.NONE:
                self._moved(fetched.error_code)
                raise KafkaError(ErrorCode.from_code(fetched.error_code))
            for topic in fetched.topics:
                for partition in topic.partitions:
                    if partition.error_code != ErrorCode.NONE:
                        raise KafkaError(ErrorCode.from_code(partition.error_code))
                    starts[TopicPartition(topic.name, partition.partition_index)] = (
                        partition.committed_offset
                    )
        self.consumer.assign(partitions)
        now_ns = self.clock.monotonic_ns()
        for tp, offset in starts.items():
            if offset >= 0:
                self.consumer.seek(tp, offset)
            else:
                self.consumer.seek_to_beginning(tp)
            self.history.append_restart(ConsumerRestart(self.name, tp, max(offset, 0), now_ns))
        self.assigned = partitions
        self.positions = {tp: offset for tp, offset in starts.items() if offset >= 0}

    async def _heartbeat(self) -> None:
        coordinator = await self._coordinator_address()
        answer = await self.client.send(
            coordinator,
            HeartbeatRequest(
                group_id=self.group, generation_id=self.generation, member_id=self.member_id
            ),
        )
        assert isinstance(answer, HeartbeatResponse), answer
        code = ErrorCode.from_code(answer.error_code)
        if code is ErrorCode.REBALANCE_IN_PROGRESS:
            await self._commit()  # what was read, before the partitions may move (eager)
            raise _Rejoin(code.name)
        self._refused(code)

    def _refused(self, code: ErrorCode) -> None:
        if code is ErrorCode.NONE:
            return
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID):
            raise _Rejoin(code.name, reset_id=True)
        if code in (ErrorCode.ILLEGAL_GENERATION, ErrorCode.REBALANCE_IN_PROGRESS):
            raise _Rejoin(code.name)
        if not self._moved(code):
            self.errors[code.name] += 1

    async def _commit(self) -> None:
        pending = {
            tp: offset for tp, offset in self.positions.items() if self.committed.get(tp) != offset
        }
        if not pending:
            return
        coordinator = await self._coordinator_address()
        generation, now_ns = self.generation, self.clock.monotonic_ns()
        for tp, offset in sorted(pending.items()):
            self.history.append_offset_commit(
                OffsetCommitted(self.group, tp, offset, False, now_ns, self.member_id, generation)
            )
        request = OffsetCommitRequest(
            group_id=self.group,
            generation_id_or_member_epoch=generation,
            member_id=self.member_id,
            topics=[
                OffsetCommitRequestTopic(
                    name=self.topic,
                    partitions=[
                        OffsetCommitRequestPartition(
                            partition_index=tp.partition, committed_offset=o
                        )
                        for tp, o in sorted(pending.items())
                    ],
                )
            ],
        )
        answer = await self.client.send(coordinator, request)
        assert isinstance(answer, OffsetCommitResponse), answer
        codes = {
            TopicPartition(topic.name, p.partition_index): ErrorCode.from_code(p.error_code)
            for topic in answer.topics
            for p in topic.partitions
        }
        now_ns = self.clock.monotonic_ns()
        for tp, code in sorted(codes.items()):
            if code is ErrorCode.NONE:
                self.committed[tp] = pending[tp]
                self.history.append_offset_commit(
                    OffsetCommitted(
                        self.group, tp, pending[tp], True, now_ns, self.member_id, generation
                    )
                )
        for code in codes.values():
            if code is not ErrorCode.REBALANCE_IN_PROGRESS:  # a heartbeat will say so too
                self._refused(code)

    # -- stopping -----------------------------------------------------------------------------

    async def _leave(self) -> None:
        if self.member_id and self._coordinator is not None:
            await self.client.send(
                self._coordinator,
                LeaveGroupRequest(
                    group_id=self.group, members=[MemberIdentity(member_id=self.member_id)]
                ),
            )

    async def stop(self) -> None:
        await super().stop()
        with contextlib.suppress(Exception):
            await self._leave()
        with contextlib.suppress(Exception):
            await self.consumer.close()
        with contextlib.suppress(Exception):
            await self.client.close()
