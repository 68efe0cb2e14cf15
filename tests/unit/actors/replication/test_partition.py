"""PartitionActor: LeaderAndIsr fencing, produce, reads, log failures."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.replication.alter_partition import IsrProposal, IsrProposalResult
from actors.replication.config import PartitionConfig
from actors.replication.partition import PartitionActor
from actors.replication.partition_messages import (
    AppendAsLeader,
    BecomeFollower,
    BecomeLeader,
    GetView,
    LastOffsetForEpoch,
    PartitionState,
    ReadRecords,
    TruncateTo,
)
from actors.views import Role
from runtime.actor import ActorFatalError
from runtime.clock import ManualClock
from runtime.log.checkpoints import EpochEntry
from runtime.log.config import LogConfig
from runtime.log.log import Log
from tests.unit.actors.replication.partition_harness import (
    MAX_BYTES,
    TP,
    WALL_MS,
    Brokers,
    RecordingSink,
    batch,
    follower_fetch,
    produce,
    state,
)
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.messages.control import AlterPartitionPartitionResult, LeaderAndIsrPartitionState
from wire.records import iter_batches


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=1_000_000)


@pytest.fixture
async def brokers(tmp_path: Path, clock: ManualClock) -> AsyncIterator[Brokers]:
    opened = Brokers(tmp_path, clock)
    yield opened
    await opened.close()


# -- LeaderAndIsr -------------------------------------------------------------------------------


async def test_single_replica_leader_advances_hw_on_append(brokers: Brokers) -> None:
    leader = await brokers.open(1)
    result = await leader.actor.ask(BecomeLeader(state(1, 0, (1,), replicas=(1,))))
    assert result.error is ErrorCode.NONE
    assert result.changed
    assert leader.log.epoch_cache.entries == (EpochEntry(0, 0),)

    appended = await produce(leader, 3)
    assert appended.info is not None
    assert (appended.info.first_offset, appended.info.last_offset) == (0, 2)
    view = leader.actor.view
    assert view.is_leader
    assert view.high_watermark.message_offset == 3
    assert view.log_end_offset.message_offset == 3
    assert leader.listener.events == ["leadership", "append", "hw"]
    assert await leader.actor.ask(GetView()) is view


async def test_leader_and_isr_fencing_by_epochs(brokers: Brokers) -> None:
    leader = await brokers.open(1)
    assert (await leader.actor.ask(BecomeLeader(state(1, 5, (1, 2), 3)))).changed
    before = leader.actor.view

    repeat = await leader.actor.ask(BecomeLeader(state(1, 5, (1, 2), 3)))
    assert repeat.error is ErrorCode.NONE
    assert not repeat.changed
    for older in (state(1, 4, (1,), 9), state(1, 5, (1,), 2), state(2, 4, (2,), 9)):
        message = BecomeLeader(older) if older.leader == 1 else BecomeFollower(older)
        refused = await leader.actor.ask(message)
        assert refused.error is ErrorCode.STALE_CONTROLLER_EPOCH, older
    assert leader.actor.view is before, "a stale or repeated state changed nothing"

    # Same leader epoch, newer partition epoch: the controller changed the ISR.
    newer = await leader.actor.ask(BecomeLeader(state(1, 5, (1, 2, 3), 4)))
    assert newer.error is ErrorCode.NONE
    assert not newer.changed
    assert leader.actor.view.isr == (1, 2, 3)
    assert leader.actor.view.partition_epoch == 4
    assert leader.log.epoch_cache.entries == (EpochEntry(5, 0),)


async def test_deposed_leader_refuses_appends_at_once_and_keeps_its_log(
    brokers: Brokers,
) -> None:
    leader = await brokers.open(1)
    await leader.actor.ask(BecomeLeader(state(1, 0, (1, 2))))
    await produce(leader, 2)
    assert leader.actor.view.high_watermark.message_offset == 0  # follower 2 has not fetched

    result = await leader.actor.ask(BecomeFollower(state(2, 1, (2,), 1)))
    assert result.changed
    refused = await leader.actor.ask(AppendAsLeader(batch(), -1))
    assert refused.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    view = leader.actor.view
    assert view.role is Role.FOLLOWER
    assert (view.leader_id, view.leader_epoch) == (2, 1)
    # No truncation to the HW on becoming follower (KIP-101): the fetcher truncates by epoch.
    assert view.log_end_offset.message_offset == 2
    assert leader.listener.events[-1] == "leadership"


async def test_leadership_survives_a_leader_epoch_bump_and_changes_when_leading_again(
    brokers: Brokers,
) -> None:
    """PartitionView.leadership, which a waiting acks=all produce compares: the same through a
    leader-epoch bump while leading, a new value once the broker was deposed and re-elected (and
    never one an earlier actor of the partition had)."""
    leader = await brokers.open(1)
    await leader.actor.ask(BecomeLeader(state(1, 0, (1, 2, 3))))
    first = leader.actor.view.leadership
    appended = await produce(leader, 1)
    assert appended.leadership == first
    # The controller removed replica 3 from the replica set: a new leader epoch, same leader.
    bumped = await leader.actor.ask(BecomeLeader(state(1, 1, (1, 2), 1, replicas=(1, 2))))
    assert not bumped.changed
    assert (leader.actor.view.leader_epoch, leader.actor.view.leadership) == (1, first)
    await leader.actor.ask(BecomeFollower(state(2, 2, (1, 2), 2, replicas=(1, 2))))
    await leader.actor.ask(BecomeLeader(state(1, 3, (1, 2), 3, replicas=(1, 2))))
    second = leader.actor.view.leadership
    assert second != first
    replaced = await brokers.restart(leader)
    await replaced.actor.ask(BecomeLeader(state(1, 4, (1, 2), 4, replicas=(1, 2))))
    assert replaced.actor.view.leadership not in (first, second)


async def test_a_stopped_replica_serves_nothing_and_keeps_its_epochs(brokers: Brokers) -> None:
    leader = await brokers.open(1)
    await leader.actor.ask(BecomeLeader(state(1, 4, (1, 2), 2)))
    await produce(leader, 2)
    await follower_fetch(leader, 2, 2)
    await leader.actor.stop()
    view = leader.actor.view
    assert view.role is Role.STOPPED
    assert (view.leader_epoch, view.partition_epoch) == (4, 2), "StopReplica's fence reads them"
    assert view.log_end_offset.message_offset == 2
    assert leader.listener.events[-1] == "leadership", "waiting produces and fetches re-check"


async def test_follower_with_new_epoch_under_same_leader_reports_a_change(
    brokers: Brokers,
) -> None:
    follower = await brokers.open(2)
    assert (await follower.actor.ask(BecomeFollower(state(1, 0, (1, 2))))).changed
    assert not (await follower.actor.ask(BecomeFollower(state(1, 0, (1, 2), 1)))).changed
    assert (await follower.actor.ask(BecomeFollower(state(1, 1, (1, 2), 2)))).changed


# -- produce ------------------------------------------------------------------------------------


async def test_not_enough_replicas_before_append(brokers: Brokers) -> None:
    leader = await brokers.open(1, config=PartitionConfig(min_insync_replicas=2))
    await leader.actor.ask(BecomeLeader(state(1, 0, (1,))))

    refused = await leader.actor.ask(AppendAsLeader(batch(), -1))
    assert refused.error is ErrorCode.NOT_ENOUGH_REPLICAS
    assert leader.log.log_end_offset == 0, "nothing appended"
    assert (await leader.actor.ask(AppendAsLeader(batch(), 1))).error is ErrorCode.NONE
    topic_override = await leader.actor.ask(AppendAsLeader(batch(), -1, min_insync_replicas=1))
    assert topic_override.error is ErrorCode.NONE
    # A client's bad acks is answered by the request path; inside the broker it is a bug.
    with pytest.raises(ValueError, match="required_acks"):
        AppendAsLeader(batch(), 2)


async def test_append_errors_come_from_the_logs_typed_errors(brokers: Brokers) -> None:
    leader = await brokers.open(1, log_config=LogConfig(max_message_bytes=200))
    await leader.actor.ask(BecomeLeader(state(1, 0, (1,), replicas=(1,))))

    corrupt = bytearray(batch())
    corrupt[-1] ^= 0xFF  # inside the CRC-covered part
    too_large = build_batch([(b"k", b"x" * 400)], base_timestamp=WALL_MS)
    control = build_batch([(b"k", b"v")], base_timestamp=WALL_MS, is_control=True)
    for records, expected in (
        (bytes(corrupt), ErrorCode.CORRUPT_MESSAGE),
        (too_large, ErrorCode.MESSAGE_TOO_LARGE),
        (control, ErrorCode.INVALID_RECORD),
    ):
        result = await leader.actor.ask(AppendAsLeader(records, 1))
        assert result.error is expected
        assert result.info is None
    assert leader.log.log_end_offset == 0
    assert leader.listener.events == ["leadership"]


# -- reads --------------------------------------------------------------------------------------


async def test_consumers_read_up_to_hw_followers_up_to_leo(brokers: Brokers) -> None:
    leader = await brokers.open(1)
    await leader.actor.ask(BecomeLeader(state(1, 0, (1, 2), replicas=(1, 2))))
    await produce(leader, 2, tag=1)
    await produce(leader, 3, tag=2)
    fetched = await follower_fetch(leader, 2, 0)
    assert [h.base_offset for _, h in iter_batches(fetched.records)] == [0, 2]
    await follower_fetch(leader, 2, 2)  # the follower holds offsets 0-1: HW 2
    assert leader.actor.view.high_watermark.message_offset == 2

    consumer = await leader.actor.ask(ReadRecords(0, MAX_BYTES))
    assert consumer.error is ErrorCode.NONE
    assert [h.base_offset for _, h in iter_batches(consumer.records)] == [0]
    assert (consumer.high_watermark, consumer.log_end_offset) == (2, 5)
    beyond_hw = await leader.actor.ask(ReadRecords(2, MAX_BYTES))
    assert beyond_hw.error is ErrorCode.NONE
    assert beyond_hw.records == b""
    out_of_range = await leader.actor.ask(ReadRecords(6, MAX_BYTES))
    assert out_of_range.error is ErrorCode.OFFSET_OUT_OF_RANGE
    assert out_of_range.log_end_offset == 5


async def test_fetch_epoch_checks_kip_320(brokers: Brokers) -> None:
    leader = await brokers.open(1)
    await leader.actor.ask(BecomeLeader(state(1, 3, (1, 2), replicas=(1, 2))))
    await produce(leader)

    async def read(epoch: int, replica_id: int = 2) -> ErrorCode:
        result = await leader.actor.ask(
            ReadRecords(0, MAX_BYTES, current_leader_epoch=epoch, replica_id=replica_id)
        )
        return result.error

    assert await read(2) is ErrorCode.FENCED_LEADER_EPOCH
    assert await read(4) is ErrorCode.UNKNOWN_LEADER_EPOCH
    assert await read(3) is ErrorCode.NONE
    assert await read(-1) is ErrorCode.NONE
    assert await read(3, replica_id=7) is ErrorCode.NOT_LEADER_OR_FOLLOWER, "not assigned"
    assert await read(2, replica_id=-1) is ErrorCode.FENCED_LEADER_EPOCH


async def test_follower_replica_refuses_leader_only_reads(brokers: Brokers) -> None:
    follower = await brokers.open(2)
    await follower.actor.ask(BecomeFollower(state(1, 3, (1, 2), replicas=(1, 2))))
    from_follower = await follower.actor.ask(ReadRecords(0, MAX_BYTES, replica_id=3))
    assert from_follower.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    consumer = await follower.actor.ask(ReadRecords(0, MAX_BYTES))
    assert consumer.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    nearest = await follower.actor.ask(ReadRecords(0, MAX_BYTES, fetch_only_from_leader=False))
    assert nearest.error is ErrorCode.NONE
    # Stale epoch is checked before leadership (KIP-320 order).
    fenced = await follower.actor.ask(ReadRecords(0, MAX_BYTES, current_leader_epoch=1))
    assert fenced.error is ErrorCode.FENCED_LEADER_EPOCH


# -- leader epoch cache -------------------------------------------------------------------------


async def test_leader_epoch_cache_and_last_offset_for_epoch(brokers: Brokers) -> None:
    leader = await brokers.open(1)
    await leader.actor.ask(BecomeLeader(state(1, 0, (1,), replicas=(1, 2))))
    await produce(leader, 3)
    await leader.actor.ask(BecomeLeader(state(1, 2, (1,), 1, replicas=(1, 2))))
    assert leader.actor.view.leader_epoch_start_offset == 3
    await produce(leader, 2)
    assert leader.log.epoch_cache.entries == (EpochEntry(0, 0), EpochEntry(2, 3))
    stamped = [
        h.partition_leader_epoch for _, h in iter_batches(leader.log.read(0, MAX_BYTES).records)
    ]
    assert stamped == [0, 2]

    async def last_offset(epoch: int, **kwargs: object) -> tuple[ErrorCode, int, int]:
        answer = await leader.actor.ask(LastOffsetForEpoch(epoch, **kwargs))  # type: ignore[arg-type]
        return answer.error, answer.leader_epoch, answer.end_offset

    assert await last_offset(0) == (ErrorCode.NONE, 0, 3)
    assert await last_offset(1) == (ErrorCode.NONE, 0, 3)
    assert await last_offset(2) == (ErrorCode.NONE, 2, 5)
    assert await last_offset(3) == (ErrorCode.NONE, -1, -1)
    assert (await last_offset(0, current_leader_epoch=1))[0] is ErrorCode.FENCED_LEADER_EPOCH
    assert (await last_offset(0, current_leader_epoch=3))[0] is ErrorCode.UNKNOWN_LEADER_EPOCH

    follower = await brokers.open(2)
    await follower.actor.ask(BecomeFollower(state(1, 2, (1,), 1, replicas=(1, 2))))
    refused = await follower.actor.ask(LastOffsetForEpoch(0, fetch_only_from_leader=True))
    assert refused.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    local = await follower.actor.ask(LastOffsetForEpoch(0))
    assert (local.error, local.leader_epoch, local.end_offset) == (ErrorCode.NONE, -1, -1)


# -- failures -----------------------------------------------------------------------------------


async def test_truncation_is_for_followers_only(brokers: Brokers) -> None:
    leader = await brokers.open(1)
    await leader.actor.ask(BecomeLeader(state(1, 0, (1,), replicas=(1,))))
    await produce(leader, 2)
    assert await leader.actor.ask(TruncateTo(0)) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert leader.log.log_end_offset == 2


async def test_log_failure_is_fatal_and_marks_the_partition_offline(
    brokers: Brokers, monkeypatch: pytest.MonkeyPatch
) -> None:
    failures: list[BaseException] = []
    # The supervisor is the node's business; here it only records the failure.
    leader = await brokers.open(1, supervisor=lambda actor, error: failures.append(error))
    await leader.actor.ask(BecomeLeader(state(1, 0, (1,), replicas=(1,))))

    def broken_append(records: object, leader_epoch: int, **_: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(leader.log, "append_as_leader", broken_append)
    with pytest.raises(ActorFatalError):
        await leader.actor.ask(AppendAsLeader(batch(), 1))
    assert leader.actor.view.role is Role.OFFLINE
    assert not leader.actor.running
    assert len(failures) == 1
    assert isinstance(failures[0], ActorFatalError)
    assert leader.listener.events[-1] == "leadership"


def test_actor_construction_publishes_an_initial_view(tmp_path: Path, clock: ManualClock) -> None:
    partition_log = Log.open(tmp_path / TP.dir_name, LogConfig(), clock)
    try:
        actor = PartitionActor(
            TP, 1, partition_log, alter_partition_sink=RecordingSink(), clock=clock
        )
        view = actor.view
        assert (view.role, view.leader_id, view.leader_epoch) == (Role.NONE, -1, -1)
        assert view.high_watermark.message_offset == 0
    finally:
        partition_log.close()


async def test_new_assignment_creates_and_drops_remote_replicas(brokers: Brokers) -> None:
    leader = await brokers.open(1)
    await leader.actor.ask(BecomeLeader(state(1, 0, (1, 2), replicas=(1, 2, 3))))
    await produce(leader, 2)
    await follower_fetch(leader, 2, 2)
    assert leader.actor.view.high_watermark.message_offset == 2
    # Reassignment: 3 leaves, 4 joins. Replica 2 keeps its position (same leader).
    await leader.actor.ask(BecomeLeader(state(1, 0, (1, 2), 1, replicas=(1, 2, 4))))
    gone = await leader.actor.ask(ReadRecords(0, MAX_BYTES, replica_id=3))
    assert gone.error is ErrorCode.NOT_LEADER_OR_FOLLOWER
    joined = await leader.actor.ask(ReadRecords(0, MAX_BYTES, replica_id=4))
    assert joined.error is ErrorCode.NONE
    assert leader.actor.view.replicas == (1, 2, 4)


def test_wire_conversions() -> None:
    wire_state = LeaderAndIsrPartitionState(
        topic_name=TP.topic,
        partition_index=TP.partition,
        controller_epoch=3,
        leader=1,
        leader_epoch=7,
        isr=[1, 2],
        partition_epoch=9,
        replicas=[1, 2, 3],
        is_new=True,
    )
    assert PartitionState.from_wire(wire_state) == PartitionState(1, 7, (1, 2), 9, (1, 2, 3), True)

    proposal = IsrProposal(TP, 1, 7, 9, (1, 2, 3))
    data = proposal.to_partition_data()
    assert (data.partition_index, data.leader_epoch, data.partition_epoch) == (0, 7, 9)
    assert data.new_isr == [1, 2, 3]
    ok = AlterPartitionPartitionResult(
        partition_index=0, leader_id=1, leader_epoch=7, isr=[1, 2, 3], partition_epoch=10
    )
    assert IsrProposalResult.from_partition_result(ok) == IsrProposalResult(
        ErrorCode.NONE, 1, 7, (1, 2, 3), 10
    )
    failed = AlterPartitionPartitionResult(partition_index=0, error_code=95)
    assert IsrProposalResult.from_partition_result(failed) == IsrProposalResult(
        ErrorCode.INVALID_UPDATE_VERSION
    )
