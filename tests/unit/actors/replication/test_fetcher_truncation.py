"""Truncation by leader epoch (KIP-101, KIP-279): the decision of actors/replication/truncation.py
as a table, then through the replica fetcher end to end (tests/unit/actors/replication/
fetcher_harness.py): a diverged suffix is cut, committed records survive a restart with an old
HW, and a follower lacking the leader's epoch cuts in steps."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.replication.fetch_state import FetchStatus, InitialFetchState
from actors.replication.partition_messages import BecomeFollower, BecomeLeader
from actors.replication.truncation import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    TruncationTarget,
    needs_local_epoch_end,
    truncation_by_leader_epoch,
    truncation_without_epochs,
)
from tests.unit.actors.replication.fetcher_harness import (
    Setup,
    fetcher_state,
    leader_and_follower,
    leo,
    log_bytes,
    turns,
)
from tests.unit.actors.replication.partition_harness import TP, produce, replicate, state
from wire.messages import FetchRequest, OffsetForLeaderEpochRequest


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    s = Setup(tmp_path)
    yield s
    await s.close()


# -- the decision -------------------------------------------------------------------------------

FETCH_OFFSET = 5  # where the fetcher was told to start (the follower's HW)
LOCAL_END = 10  # the follower's log end offset


@pytest.mark.parametrize(
    ("leader_epoch", "leader_end_offset", "local_epoch_end", "expected"),
    [
        # The leader holds no epoch <= the follower's: back to the initial fetch offset.
        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, None, TruncationTarget(FETCH_OFFSET)),
        # An answer without an epoch: only its offset is trusted.
        (UNDEFINED_EPOCH, 7, None, TruncationTarget(7)),
        (UNDEFINED_EPOCH, 12, None, TruncationTarget(LOCAL_END)),
        # The follower holds no epoch <= the leader's: the leader's end.
        (3, 6, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET), TruncationTarget(6)),
        # Both hold the epoch: the smaller end, never past the follower's log end.
        (3, 6, (3, 8), TruncationTarget(6)),
        (3, 9, (3, 8), TruncationTarget(8)),
        (3, 14, (3, 12), TruncationTarget(LOCAL_END)),
        # The follower never held epoch 3: cut to the end of its epoch below, and ask again.
        (3, 6, (2, 4), TruncationTarget(4, complete=False)),
    ],
)
def test_truncation_target_for_the_leaders_answer(
    leader_epoch: int,
    leader_end_offset: int,
    local_epoch_end: tuple[int, int] | None,
    expected: TruncationTarget,
) -> None:
    assert needs_local_epoch_end(leader_epoch, leader_end_offset) == (local_epoch_end is not None)
    target = truncation_by_leader_epoch(
        fetch_offset=FETCH_OFFSET,
        local_end=LOCAL_END,
        leader_epoch=leader_epoch,
        leader_end_offset=leader_end_offset,
        local_epoch_end=local_epoch_end,
    )
    assert target == expected


def test_truncation_without_epochs_never_goes_past_the_log_end() -> None:
    assert truncation_without_epochs(FETCH_OFFSET, LOCAL_END) == TruncationTarget(FETCH_OFFSET)
    assert truncation_without_epochs(FETCH_OFFSET, 3) == TruncationTarget(3)


# -- end to end -----------------------------------------------------------------------------------


async def test_kip101_divergent_suffix_is_truncated_by_epoch(setup: Setup) -> None:
    """KIP-101 scenario 2 through the fetcher: A holds offset 1 from epoch 0 that B never got;
    B is elected (epoch 1) and writes its own offset 1. A's fetcher must cut offset 1 (a cut to
    A's HW would keep it, and the logs would diverge for ever) and fetch B's."""
    a = await setup.brokers.open(1)
    b = await setup.brokers.open(2)
    await a.actor.ask(BecomeLeader(state(1, 0, (1, 2), replicas=(1, 2))))
    await b.actor.ask(BecomeFollower(state(1, 0, (1, 2), replicas=(1, 2))))
    await produce(a, 1, tag=1)
    await replicate(a, b)
    await replicate(a, b)  # both hold offset 0 and know HW 1
    await produce(a, 1, tag=2)  # offset 1 only on A
    setup.clock.advance(20_000)
    await a.actor.ask(BecomeLeader(state(1, 0, (1,), 1, replicas=(1, 2))))
    await a.actor.ask(BecomeFollower(state(2, 1, (2,), 2, replicas=(1, 2))))
    await b.actor.ask(BecomeLeader(state(2, 1, (2,), 2, replicas=(1, 2))))
    await produce(b, 1, tag=3)
    await produce(b, 1, tag=4)
    assert (leo(a), a.log.high_watermark, leo(b)) == (2, 2, 3)

    server = await setup.serve(b)
    manager = setup.manager(a)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(a.log.high_watermark, 1)})
    await setup.until(lambda: leo(a) == 3, what="A caught up with B")
    [asked] = server.of(OffsetForLeaderEpochRequest)
    assert asked.replica_id == 1
    [partition] = asked.topics[0].partitions
    assert (partition.leader_epoch, partition.current_leader_epoch) == (0, 1)
    assert log_bytes(a) == log_bytes(b), "A's offset 1 was replaced by B's"


async def test_kip101_committed_records_survive_a_restart_with_an_old_hw(setup: Setup) -> None:
    """KIP-101 scenario 1: the follower restarted knowing HW 0 but holding offsets 0-1, which
    the leader committed. Epoch truncation keeps them; the fetcher continues from 2."""
    leader, follower = await leader_and_follower(setup)
    await produce(leader, 1, tag=1)
    await produce(leader, 1, tag=2)
    await replicate(leader, follower)
    follower = await setup.brokers.restart(follower)
    await follower.actor.ask(BecomeFollower(state(1, 0, (1, 2), replicas=(1, 2))))
    assert (follower.log.high_watermark, leo(follower)) == (0, 2)
    server = await setup.serve(leader)
    manager = setup.manager(follower)
    # Kafka starts a follower at its HW; truncation moves the position to where logs agree.
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(0, 0)})
    await setup.until(lambda: fetcher_state(manager).status is FetchStatus.FETCHING, what="fetch")
    await turns()
    assert leo(follower) == 2, "the committed records are kept"
    assert server.of(FetchRequest)[0].topics[0].partitions[0].fetch_offset == 2
    await produce(leader, 1, tag=3)
    server.notify()
    await setup.until(lambda: leo(follower) == 3, what="next record")
    assert log_bytes(follower) == log_bytes(leader)


async def test_intermediate_truncation_when_the_follower_lacks_the_leaders_epoch(
    setup: Setup,
) -> None:
    """A holds epochs 0 and 2, B holds 0, 1 and 3. B answers A's epoch 2 with epoch 1 (ending
    at 2), which A never held: A cuts to the end of its epoch 0 and asks again with epoch 0."""
    a = await setup.brokers.open(1)
    b = await setup.brokers.open(2)
    both = (1, 2)
    await a.actor.ask(BecomeLeader(state(1, 0, both, replicas=both)))
    await b.actor.ask(BecomeFollower(state(1, 0, both, replicas=both)))
    await produce(a, 1, tag=0)
    await replicate(a, b)  # offset 0, epoch 0, on both
    await b.actor.ask(BecomeLeader(state(2, 1, both, 1, replicas=both)))
    await a.actor.ask(BecomeFollower(state(2, 1, both, 1, replicas=both)))
    await produce(b, 2, tag=1)  # offsets 1-2, epoch 1, only on B
    await a.actor.ask(BecomeLeader(state(1, 2, (1,), 2, replicas=both)))
    await b.actor.ask(BecomeFollower(state(1, 2, (1,), 2, replicas=both)))
    await produce(a, 3, tag=2)  # offsets 1-3, epoch 2, only on A
    await b.actor.ask(BecomeLeader(state(2, 3, (2,), 3, replicas=both)))
    await a.actor.ask(BecomeFollower(state(2, 3, (2,), 3, replicas=both)))
    await produce(b, 1, tag=3)  # offset 3, epoch 3, on B
    assert (leo(a), leo(b)) == (4, 4)

    server = await setup.serve(b)
    manager = setup.manager(a)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(leo(a), 3)})
    await setup.until(lambda: log_bytes(a) == log_bytes(b), what="A equal to B")
    asked = [r.topics[0].partitions[0].leader_epoch for r in server.of(OffsetForLeaderEpochRequest)]
    assert asked == [2, 0]
    assert server.of(FetchRequest)[0].topics[0].partitions[0].fetch_offset == 1
