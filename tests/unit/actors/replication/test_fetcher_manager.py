"""ReplicaFetcherManager routing and lifecycle, with clients that never answer and follower
replicas that never answer (so every partition stays live and in place)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from actors.replication.config import ReplicaFetcherConfig
from actors.replication.fetch_state import BrokerEndpoint, FetchStatus, InitialFetchState
from actors.replication.fetcher_manager import (
    ReplicaFetcherManager,
    fetcher_id_for,
    java_string_hash,
)
from runtime.clock import ManualClock
from runtime.net.transport import Address
from wire.messages import Request, Response
from wire.topic import TopicPartition

LEADER_1 = BrokerEndpoint(1, "broker-1", 9092)
LEADER_3 = BrokerEndpoint(3, "broker-3", 9092)


@dataclass
class SilentClient:
    """Sends go nowhere (they wait until cancelled); records what it was asked and closing."""

    sent: list[Request] = field(default_factory=list)
    closed: bool = False

    async def send(
        self, target: Address, request: Request, *, timeout_ms: float | None = None
    ) -> Response:
        self.sent.append(request)
        await asyncio.get_running_loop().create_future()
        raise AssertionError("unreachable")

    async def close(self) -> None:
        self.closed = True


class SilentReplica:
    """A follower PartitionActor that never answers; with the silent client, the fetcher stays
    in its first request (the OffsetForLeaderEpoch for epoch 0)."""

    view = SimpleNamespace(leader_epoch=0, latest_epoch=0)

    async def ask(self, message: object) -> Any:
        await asyncio.get_running_loop().create_future()


@dataclass
class Harness:
    clock: ManualClock = field(default_factory=ManualClock)
    clients: dict[tuple[int, int], list[SilentClient]] = field(default_factory=dict)

    def manager(self, num_fetchers: int = 1) -> ReplicaFetcherManager:
        replica: Any = SilentReplica()

        def factory(leader: BrokerEndpoint, fetcher_id: int) -> SilentClient:
            client = SilentClient()
            self.clients.setdefault((leader.broker_id, fetcher_id), []).append(client)
            return client

        return ReplicaFetcherManager(
            2,
            factory,
            lambda tp: replica,
            self.clock,
            ReplicaFetcherConfig(num_replica_fetchers=num_fetchers),
        )


def tps(count: int, topic: str = "orders") -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(count)]


def test_java_string_hash_matches_java() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    assert java_string_hash("test") == 3_556_498
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE
    assert java_string_hash("é") == 0xE9


def test_fetcher_id_is_kafkas() -> None:
    # abs(31 * hash + partition) % n, in 32-bit arithmetic: 31 * 3556498 = 110251438.
    assert fetcher_id_for(TopicPartition("test", 0), 3) == 110_251_438 % 3
    assert fetcher_id_for(TopicPartition("test", 4), 7) == 110_251_442 % 7
    # "orders": hash -1008770331; 31 * it wraps to -1207109189.
    assert fetcher_id_for(TopicPartition("orders", 0), 3) == 1_207_109_189 % 3
    # 31 * Integer.MIN_VALUE wraps to MIN_VALUE, which Kafka's Utils.abs maps to 0.
    assert fetcher_id_for(TopicPartition("polygenelubricants", 0), 5) == 0
    assert fetcher_id_for(TopicPartition("t", 0), 1) == 0


async def test_partitions_spread_over_fetchers_by_id() -> None:
    harness = Harness()
    manager = harness.manager(num_fetchers=3)
    partitions = tps(9)
    manager.add_partitions(LEADER_1, {tp: InitialFetchState(0, 0) for tp in partitions})
    for tp in partitions:
        fetcher = manager.fetcher_of(tp)
        assert fetcher is not None
        assert fetcher.fetcher_id == fetcher_id_for(tp, 3)
        assert fetcher.source == LEADER_1
        assert fetcher.state(tp) is not None
    assert manager.fetcher_count == len({fetcher_id_for(tp, 3) for tp in partitions})
    await manager.shutdown()


async def test_a_partition_moving_to_another_leader_leaves_the_old_fetcher() -> None:
    harness = Harness()
    manager = harness.manager()
    tp, other = tps(2)
    manager.add_partitions(LEADER_1, {tp: InitialFetchState(0, 0), other: InitialFetchState(0, 0)})
    old = manager.fetcher_of(tp)
    manager.add_partitions(LEADER_3, {tp: InitialFetchState(5, 1)})
    new = manager.fetcher_of(tp)
    assert old is not None
    assert new is not None
    assert new is not old
    assert old.state(tp) is None
    assert old.state(other) is not None
    new_state = new.state(tp)
    assert new_state is not None
    assert (new_state.fetch_offset, new_state.leader_epoch) == (5, 1)
    assert new_state.status is FetchStatus.TRUNCATING
    await manager.shutdown()


async def test_re_add_keeps_a_live_state_of_the_same_epoch_and_resets_another() -> None:
    harness = Harness()
    manager = harness.manager()
    [tp] = tps(1)
    manager.add_partitions(LEADER_1, {tp: InitialFetchState(0, 0)})
    fetcher = manager.fetcher_of(tp)
    assert fetcher is not None
    first = fetcher.state(tp)
    assert first is not None
    manager.add_partitions(LEADER_1, {tp: InitialFetchState(7, 0)})
    assert fetcher.state(tp) == first, "a repeated LeaderAndIsr changes nothing"
    manager.add_partitions(LEADER_1, {tp: InitialFetchState(7, 1)})
    second = fetcher.state(tp)
    assert second is not None
    assert (second.fetch_offset, second.leader_epoch) == (7, 1)
    assert second.generation > first.generation
    await manager.shutdown()


async def test_shutdown_idle_stops_only_fetchers_without_partitions() -> None:
    harness = Harness()
    manager = harness.manager()
    a, b = tps(2)
    manager.add_partitions(LEADER_1, {a: InitialFetchState(0, 0)})
    manager.add_partitions(LEADER_3, {b: InitialFetchState(0, 0)})
    await asyncio.sleep(0)
    manager.remove_partitions([a])
    await manager.shutdown_idle()
    assert manager.fetcher(1, 0) is None
    assert manager.fetcher(3, 0) is not None
    assert harness.clients[(1, 0)][0].closed
    assert not harness.clients[(3, 0)][0].closed
    await manager.shutdown()
    assert harness.clients[(3, 0)][0].closed


async def test_a_leader_at_a_new_address_gets_a_new_fetcher_with_the_same_partitions() -> None:
    harness = Harness()
    manager = harness.manager()
    a, b = tps(2)
    manager.add_partitions(LEADER_1, {a: InitialFetchState(3, 0)})
    old = manager.fetcher(1, 0)
    moved = BrokerEndpoint(1, "broker-1-new", 9092)
    manager.add_partitions(moved, {b: InitialFetchState(4, 0)})
    new = manager.fetcher(1, 0)
    assert new is not None
    assert new is not old
    assert new.source == moved
    state_a, state_b = new.state(a), new.state(b)
    assert state_a is not None
    assert state_b is not None
    assert (state_a.fetch_offset, state_b.fetch_offset) == (3, 4)
    assert old is not None
    assert not old.running
    await manager.shutdown_idle()
    assert harness.clients[(1, 0)][0].closed, "the replaced fetcher's client is closed"
    await manager.shutdown()


async def test_shutdown_cancels_every_task() -> None:
    harness = Harness()
    manager = harness.manager(num_fetchers=2)
    manager.add_partitions(LEADER_1, {tp: InitialFetchState(0, 0) for tp in tps(4)})
    await asyncio.sleep(0)
    names = {t.get_name() for t in asyncio.all_tasks()}
    assert any(n.startswith("replica-fetcher-") for n in names), names
    await manager.shutdown()
    names = {t.get_name() for t in asyncio.all_tasks() if not t.done()}
    assert not any(n.startswith("replica-fetcher-") for n in names), names
    assert all(c.closed for clients in harness.clients.values() for c in clients)
    with pytest.raises(AssertionError):
        manager.add_partitions(LEADER_1, {TopicPartition("orders", 0): InitialFetchState(0, 0)})
