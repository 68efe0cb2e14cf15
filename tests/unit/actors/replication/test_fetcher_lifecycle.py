"""Replica fetchers interrupted, end to end (tests/unit/actors/replication/fetcher_harness.py): a
partition removed or re-added while its request is in flight (the answer is dropped, by the
generation rule of actors/replication/fetch_state.py), a lost connection, and shutdown with a
long poll in flight."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from actors.replication.fetch_state import InitialFetchState
from actors.replication.partition_messages import BecomeFollower, BecomeLeader
from tests.unit.actors.replication.fetcher_harness import (
    BACKOFF_MS,
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


# -- removal, connection loss, shutdown -----------------------------------------------------------


async def test_removing_a_partition_mid_fetch_drops_the_stale_response(setup: Setup) -> None:
    leader, follower = await leader_and_follower(setup)
    server = await setup.serve(leader)
    manager = setup.manager(follower)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(0, 0)})
    await produce(leader, 1, tag=1)
    await setup.until(lambda: leo(follower) == 1, what="caught up")

    server.hold = asyncio.Event()
    await produce(leader, 2, tag=2)
    server.notify()
    await setup.until(lambda: server.held == 1, what="a response with offsets 1-2 in flight")
    manager.remove_partitions([TP])
    server.hold.set()
    server.hold = None
    await turns()
    assert leo(follower) == 1, "the removed partition's response was not appended"

    manager.add_partitions(server.endpoint, {TP: InitialFetchState(leo(follower), 0)})
    await setup.until(lambda: leo(follower) == 3, what="caught up after the re-add")
    assert log_bytes(follower) == log_bytes(leader), "nothing lost, nothing doubled"


async def test_re_add_with_a_new_position_mid_fetch_drops_the_stale_response(
    setup: Setup,
) -> None:
    leader, follower = await leader_and_follower(setup)
    server = await setup.serve(leader)
    manager = setup.manager(follower)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(0, 0)})
    await produce(leader, 1, tag=1)
    await setup.until(lambda: leo(follower) == 1, what="caught up")
    server.hold = asyncio.Event()
    await produce(leader, 1, tag=2)
    server.notify()
    await setup.until(lambda: server.held == 1, what="response in flight")
    # The ReplicaManager moves the partition to a new leadership (epoch 1) on the same leader.
    await leader.actor.ask(BecomeLeader(state(1, 1, (1, 2), 1, replicas=(1, 2))))
    await follower.actor.ask(BecomeFollower(state(1, 1, (1, 2), 1, replicas=(1, 2))))
    manager.remove_partitions([TP])
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(leo(follower), 1)})
    generation = fetcher_state(manager).generation
    server.hold.set()
    server.hold = None
    await setup.until(lambda: leo(follower) == 2, what="caught up in epoch 1")
    assert fetcher_state(manager).generation == generation
    assert log_bytes(follower) == log_bytes(leader)
    # Offset 1 came from a fetch in epoch 1, not from the epoch-0 answer that was in flight.
    epoch_1 = [
        r.topics[0].partitions[0]
        for r in server.of(FetchRequest)
        if r.topics[0].partitions[0].current_leader_epoch == 1
    ]
    assert epoch_1[0].fetch_offset == 1


async def test_re_add_during_the_epoch_round_trip_drops_the_stale_answer(
    setup: Setup,
) -> None:
    leader, follower = await leader_and_follower(setup)
    await produce(leader, 1)
    await replicate(leader, follower)
    server = await setup.serve(leader)
    server.hold = asyncio.Event()
    manager = setup.manager(follower)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(1, 0)})
    await setup.until(lambda: server.held == 1, what="OffsetForLeaderEpoch in flight")
    await leader.actor.ask(BecomeLeader(state(1, 1, (1, 2), 1, replicas=(1, 2))))
    await follower.actor.ask(BecomeFollower(state(1, 1, (1, 2), 1, replicas=(1, 2))))
    manager.remove_partitions([TP])
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(1, 1)})  # same offset
    server.hold.set()
    server.hold = None
    await setup.until(lambda: bool(server.of(FetchRequest)), what="fetching")
    epochs = [
        r.topics[0].partitions[0].current_leader_epoch
        for r in server.of(OffsetForLeaderEpochRequest)
    ]
    assert epochs == [0, 1], "the answer to the epoch-0 question was not used for epoch 1"
    assert server.of(FetchRequest)[0].topics[0].partitions[0].current_leader_epoch == 1


async def test_connection_loss_backs_off_and_recovers(setup: Setup) -> None:
    leader, follower = await leader_and_follower(setup)
    server = await setup.serve(leader)
    manager = setup.manager(follower)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(0, 0)})
    await produce(leader, 1, tag=1)
    await setup.until(lambda: leo(follower) == 1, what="caught up")

    await server.server.stop()  # the in-flight long poll is cut off; reconnects are refused
    await turns()
    state_now = fetcher_state(manager)
    assert state_now.delayed_until_ms == setup.clock.monotonic_ms() + BACKOFF_MS
    count = len(server.requests)
    setup.clock.advance(BACKOFF_MS)  # one more attempt: refused, backs off again
    await turns()
    assert fetcher_state(manager).delayed_until_ms == setup.clock.monotonic_ms() + BACKOFF_MS
    assert len(server.requests) == count

    await produce(leader, 2, tag=2)
    await server.restart()
    setup.clock.advance(BACKOFF_MS)
    await setup.until(lambda: leo(follower) == 3, what="recovered")
    assert log_bytes(follower) == log_bytes(leader)


def _fetcher_tasks() -> set[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not current and not t.done()}


async def test_shutdown_leaves_no_tasks(setup: Setup) -> None:
    leader, follower = await leader_and_follower(setup)
    server = await setup.serve(leader)
    before = _fetcher_tasks()
    manager = setup.manager(follower)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(0, 0)})
    await produce(leader, 1)
    await setup.until(lambda: leo(follower) == 1, what="caught up")
    names = {t.get_name() for t in _fetcher_tasks() - before}
    assert "replica-fetcher-0-broker-1" in names, names
    await manager.shutdown()  # with a long poll in flight
    await turns()
    left = {t.get_name() for t in _fetcher_tasks() - before}
    # The server's side of the closed connection may still be finishing; no client task stays.
    assert not {n for n in left if n.startswith(("replica-fetcher", "connect ", "read "))}, left
    assert all(client.closed for client in setup.clients)
