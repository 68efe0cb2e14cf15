"""Helpers for the PartitionActor tests: a recording AlterPartition sink, a recording listener,
record batches, and the moves of a replica fetcher done by hand."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from actors.replication.alter_partition import IsrProposal, IsrProposalResult
from actors.replication.config import PartitionConfig
from actors.replication.partition import PartitionActor
from actors.replication.partition_messages import (
    AppendAsFollower,
    AppendAsLeader,
    FollowerAppendResult,
    LeaderAppendResult,
    PartitionState,
    ReadRecords,
    ReadResult,
)
from runtime.actor import Supervisor
from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.log import Log
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.topic import TopicPartition

TP = TopicPartition("orders", 0)
WALL_MS = 1_700_000_000_000
LAG_MS = 10_000
MAX_BYTES = 1 << 20


def batch(count: int = 1, *, tag: int = 0) -> bytes:
    """A producer batch of `count` records (base offset 0); `tag` makes its bytes distinct."""
    records = [(b"k%d-%d" % (tag, i), b"v%d-%d" % (tag, i)) for i in range(count)]
    return build_batch(records, base_timestamp=WALL_MS)


def state(
    leader: int,
    leader_epoch: int,
    isr: tuple[int, ...],
    partition_epoch: int = 0,
    replicas: tuple[int, ...] = (1, 2, 3),
) -> PartitionState:
    return PartitionState(leader, leader_epoch, isr, partition_epoch, replicas)


@dataclass
class Submitted:
    proposal: IsrProposal
    on_result: Callable[[IsrProposalResult], None]


@dataclass
class RecordingSink:
    """Keeps every proposal; answers only when the test says so."""

    submitted: list[Submitted] = field(default_factory=list)

    def submit(self, proposal: IsrProposal, on_result: Callable[[IsrProposalResult], None]) -> None:
        self.submitted.append(Submitted(proposal, on_result))

    @property
    def last(self) -> IsrProposal:
        return self.submitted[-1].proposal

    def accept(self, partition_epoch: int, index: int = -1) -> None:
        """The controller commits the proposal as sent, at `partition_epoch`."""
        entry = self.submitted[index]
        proposal = entry.proposal
        entry.on_result(
            IsrProposalResult(
                ErrorCode.NONE,
                leader_id=proposal.leader_id,
                leader_epoch=proposal.leader_epoch,
                isr=proposal.new_isr,
                partition_epoch=partition_epoch,
            )
        )

    def fail(self, error: ErrorCode, index: int = -1) -> None:
        self.submitted[index].on_result(IsrProposalResult.failed(error))


@dataclass
class RecordingListener:
    events: list[str] = field(default_factory=list)

    def on_high_watermark_advanced(self, topic_partition: TopicPartition) -> None:
        assert topic_partition == TP
        self.events.append("hw")

    def on_leader_append(self, topic_partition: TopicPartition) -> None:
        assert topic_partition == TP
        self.events.append("append")

    def on_leadership_changed(self, topic_partition: TopicPartition) -> None:
        assert topic_partition == TP
        self.events.append("leadership")


@dataclass
class Replica:
    """One broker's copy of the partition: its actor and what it was built from."""

    actor: PartitionActor
    log: Log
    sink: RecordingSink
    listener: RecordingListener
    directory: Path


def open_replica(
    root: Path,
    broker_id: int,
    clock: ManualClock,
    *,
    config: PartitionConfig | None = None,
    log_config: LogConfig | None = None,
    eligible: Callable[[int], bool] = lambda broker_id: True,
    high_watermark: int | None = None,
    supervisor: Supervisor | None = None,
) -> Replica:
    directory = root / f"broker-{broker_id}" / TP.dir_name
    partition_log = Log.open(
        directory, log_config or LogConfig(), clock, high_watermark=high_watermark
    )
    sink = RecordingSink()
    listener = RecordingListener()
    actor = PartitionActor(
        TP,
        broker_id,
        partition_log,
        alter_partition_sink=sink,
        config=config or PartitionConfig(replica_lag_time_max_ms=LAG_MS, min_insync_replicas=1),
        listener=listener,
        is_replica_eligible=eligible,
        clock=clock,
        supervisor=supervisor,
    )
    return Replica(actor, partition_log, sink, listener, directory)


async def produce(
    replica: Replica, count: int = 1, *, tag: int = 0, acks: int = 1
) -> LeaderAppendResult:
    result = await replica.actor.ask(AppendAsLeader(batch(count, tag=tag), acks))
    assert result.error is ErrorCode.NONE, result
    return result


async def follower_fetch(leader: Replica, follower_id: int, fetch_offset: int) -> ReadResult:
    """What the leader does for a follower's fetch (the follower's side is not involved)."""
    return await leader.actor.ask(ReadRecords(fetch_offset, MAX_BYTES, replica_id=follower_id))


async def replicate(leader: Replica, follower: Replica) -> FollowerAppendResult:
    """One fetch round by hand: the follower fetches from its LEO and appends what came back."""
    view = follower.actor.view
    fetched = await leader.actor.ask(
        ReadRecords(
            view.log_end_offset.message_offset,
            MAX_BYTES,
            current_leader_epoch=view.leader_epoch,
            replica_id=follower.actor.local_broker_id,
        )
    )
    assert fetched.error is ErrorCode.NONE, fetched
    appended = await follower.actor.ask(
        AppendAsFollower(
            fetched.records, fetched.high_watermark, fetched.log_start_offset, view.leader_epoch
        )
    )
    assert appended.error is ErrorCode.NONE, appended
    return appended


async def settle(condition: Callable[[], bool], *, turns: int = 100) -> None:
    """Let the loop run until `condition` holds (bounded; no sleeping on time)."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition did not hold after the loop ran")


class Brokers:
    """Opens replicas in one tmp dir on one manual clock, and stops and closes them all."""

    def __init__(self, root: Path, clock: ManualClock) -> None:
        self.root = root
        self.clock = clock
        self._open: list[Replica] = []

    async def open(self, broker_id: int, **kwargs: Any) -> Replica:
        replica = open_replica(self.root, broker_id, self.clock, **kwargs)
        await replica.actor.start()
        self._open.append(replica)
        return replica

    async def restart(self, replica: Replica, **kwargs: Any) -> Replica:
        """Stop the actor, close and reopen its log with the HW it had, start a new actor."""
        high_watermark = replica.log.high_watermark
        await replica.actor.stop()
        replica.log.close()
        self._open.remove(replica)
        return await self.open(
            replica.actor.local_broker_id, high_watermark=high_watermark, **kwargs
        )

    async def close(self) -> None:
        for replica in self._open:
            await replica.actor.stop()
            replica.log.close()
