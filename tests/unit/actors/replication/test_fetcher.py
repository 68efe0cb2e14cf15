"""Replica fetchers end to end (tests/unit/actors/replication/fetcher_harness.py): a follower
catches up with its leader byte for byte and follows its high watermark, and the fetcher's
answers to errors — an out-of-range position reset by ListOffsets, a fenced epoch that stops the
partition until it is re-added, an unknown epoch retried after the back-off. All time is a
ManualClock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.replication.fetch_state import FetchStatus, InitialFetchState
from actors.replication.fetcher import LEADER_BEHIND_BACKOFF_MS
from actors.replication.partition_messages import BecomeFollower, BecomeLeader
from tests.unit.actors.replication.fetcher_harness import (
    BACKOFF_MS,
    WAIT_MS,
    Setup,
    fetcher_state,
    leader_and_follower,
    leo,
    log_bytes,
    turns,
)
from tests.unit.actors.replication.partition_harness import TP, produce, replicate, state
from wire.messages import FetchRequest, ListOffsetsRequest, OffsetForLeaderEpochRequest


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    s = Setup(tmp_path)
    yield s
    await s.close()


# -- catching up --------------------------------------------------------------------------------


async def test_follower_catches_up_and_its_log_is_byte_identical(setup: Setup) -> None:
    leader, follower = await leader_and_follower(setup)
    server = await setup.serve(leader)
    for tag in range(3):
        await produce(leader, 2, tag=tag)
    manager = setup.manager(follower)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(0, 0)})
    await setup.until(lambda: leo(follower) == leo(leader) == 6, what="follower caught up")
    assert log_bytes(follower) == log_bytes(leader)

    # New appends wake the long poll and reach the follower without the clock moving.
    await produce(leader, 1, tag=9)
    server.notify()
    await turns()
    assert leo(follower) == 7
    assert log_bytes(follower) == log_bytes(leader)

    fetch = server.of(FetchRequest)[-1]
    assert (fetch.replica_id, fetch.max_wait_ms, fetch.min_bytes, fetch.max_bytes) == (
        2,
        WAIT_MS,
        1,
        256 * 1024,
    )
    [partition] = fetch.topics[0].partitions
    assert (partition.current_leader_epoch, partition.partition_max_bytes) == (0, 64 * 1024)
    assert partition.log_start_offset == 0
    # It truncated once (nothing to cut: an empty follower has no epochs), then only fetched.
    assert server.of(OffsetForLeaderEpochRequest) == []


async def test_follower_high_watermark_follows_the_leaders(setup: Setup) -> None:
    leader, follower = await leader_and_follower(setup)
    server = await setup.serve(leader)
    manager = setup.manager(follower)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(0, 0)})
    for tag in range(3):
        await produce(leader, 1, tag=tag)
        server.notify()
        expected = tag + 1
        # The leader's HW moves once the follower fetches past the record; the follower learns
        # it from the next answer (after a long poll, as in Kafka).
        await setup.until(
            lambda: follower.log.high_watermark == leader.log.high_watermark == expected,  # noqa: B023
            what=f"HW {expected} on both",
        )
        assert leo(follower) == expected


# -- errors ---------------------------------------------------------------------------------------


async def test_out_of_range_behind_the_leaders_log_start_starts_over_there(setup: Setup) -> None:
    leader, follower = await leader_and_follower(setup)
    for tag in range(3):
        await produce(leader, 1, tag=tag)
    # The leader's HW must cover the new start: the follower fetches once by hand, but its own
    # log is then wiped below (it lost its disk).
    await replicate(leader, follower)
    await replicate(leader, follower)
    assert leader.log.high_watermark == 3
    leader.log.maybe_increment_log_start_offset(2)
    follower = await setup.brokers.restart(follower)
    follower.log.truncate_fully_and_start_at(0)
    await follower.actor.ask(BecomeFollower(state(1, 0, (1, 2), replicas=(1, 2))))

    server = await setup.serve(leader)
    manager = setup.manager(follower)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(0, 0)})
    await setup.until(lambda: leo(follower) == 3, what="follower reset and caught up")
    assert follower.log.log_start_offset == 2
    kinds = [type(r).__name__ for r in server.requests]
    assert kinds[:3] == ["FetchRequest", "ListOffsetsRequest", "ListOffsetsRequest"], kinds
    assert [r.topics[0].partitions[0].timestamp for r in server.of(ListOffsetsRequest)] == [-1, -2]
    assert server.of(FetchRequest)[1].topics[0].partitions[0].fetch_offset == 2


async def test_out_of_range_beyond_the_leaders_end_truncates_to_it(setup: Setup) -> None:
    leader, follower = await leader_and_follower(setup)
    server = await setup.serve(leader)
    for tag in range(3):
        await produce(leader, 1, tag=tag)
    manager = setup.manager(follower)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(0, 0)})
    await setup.until(lambda: leo(follower) == 3, what="caught up")
    # The leader loses its tail behind the actors' backs (an unclean restart), so the follower
    # is now ahead of it within the same epoch: only the out-of-range reset can fix this.
    leader.log.truncate_to(1)
    server.notify()
    await setup.until(lambda: leo(follower) == 1, what="follower cut to the leader's end")
    assert fetcher_state(manager).fetch_offset == 1
    await produce(leader, 1, tag=7)
    server.notify()
    await setup.until(lambda: leo(follower) == 2, what="fetching again")
    assert log_bytes(follower) == log_bytes(leader)


async def test_fenced_epoch_stops_fetching_until_re_added(setup: Setup) -> None:
    leader, follower = await leader_and_follower(setup)
    server = await setup.serve(leader)
    await produce(leader, 1)
    manager = setup.manager(follower)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(0, 0)})
    await setup.until(lambda: leo(follower) == 1, what="caught up")

    # A new leadership (epoch 1) on the same leader; this fetcher still fetches in epoch 0.
    await leader.actor.ask(BecomeLeader(state(1, 1, (1, 2), 1, replicas=(1, 2))))
    server.notify()
    await setup.until(lambda: fetcher_state(manager).status is FetchStatus.FAILED, what="fenced")
    count = len(server.requests)
    setup.clock.advance(10 * BACKOFF_MS)
    await turns()
    assert len(server.requests) == count, "a fenced partition is not fetched"
    assert manager.fetcher_of(TP) is not None
    await manager.shutdown_idle()
    assert manager.fetcher_count == 0, "a fetcher with only failed partitions is idle"

    await follower.actor.ask(BecomeFollower(state(1, 1, (1, 2), 1, replicas=(1, 2))))
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(leo(follower), 1)})
    await produce(leader, 1, tag=5)
    server.notify()
    await setup.until(lambda: leo(follower) == 2, what="fetching in epoch 1")
    assert log_bytes(follower) == log_bytes(leader)


async def test_unknown_leader_epoch_backs_off_briefly_and_retries(setup: Setup) -> None:
    """The follower learned of epoch 1 before the leader did: the leader answers
    UNKNOWN_LEADER_EPOCH, and the fetcher retries after the short leader-behind back-off (not the
    full replica.fetch.backoff.ms) until the leader catches up."""
    leader, follower = await leader_and_follower(setup)
    await produce(leader, 1)
    await follower.actor.ask(BecomeFollower(state(1, 1, (1, 2), 1, replicas=(1, 2))))
    server = await setup.serve(leader)
    manager = setup.manager(follower)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(0, 1)})
    await turns()
    # An empty follower has nothing to truncate: its first request is the fetch, refused.
    assert [type(r) for r in server.requests] == [FetchRequest]
    short = min(LEADER_BEHIND_BACKOFF_MS, BACKOFF_MS)
    assert short < BACKOFF_MS
    assert fetcher_state(manager).delayed_until_ms == setup.clock.monotonic_ms() + short
    setup.clock.advance(short - 1)
    await turns()
    assert len(server.requests) == 1, "no retry before the back-off"
    setup.clock.advance(1)
    await setup.until(lambda: len(server.requests) == 2, what="the retry after the short back-off")
    await leader.actor.ask(BecomeLeader(state(1, 1, (1, 2), 1, replicas=(1, 2))))
    setup.clock.advance(short)
    await setup.until(lambda: leo(follower) == 1, what="caught up in epoch 1")
