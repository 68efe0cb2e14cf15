"""Replica fetchers end to end: a follower PartitionActor on a real Log fetches, through the real
client and a real Server on the in-memory network, from a leader PartitionActor on another Log.
All time is a ManualClock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from actors.replication.fetcher import (
    BrokerEndpoint,
    FetchStatus,
    InitialFetchState,
    ReplicaFetcherConfig,
)
from actors.replication.fetcher_manager import ReplicaFetcherManager
from actors.replication.partition_messages import (
    BecomeFollower,
    BecomeLeader,
    LastOffsetForEpoch,
    ReadRecords,
)
from client.client import Client
from runtime.clock import ManualClock
from runtime.net.memory import MemoryNetwork
from runtime.net.server import RequestContext, Server, ServerConfig
from tests.unit.actors.replication.partition_harness import (
    TP,
    Brokers,
    Replica,
    produce,
    replicate,
    state,
)
from wire.errors import ErrorCode
from wire.messages import (
    ApiKey,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
    Request,
)
from wire.topic import TopicPartition

SEED = 5005
WAIT_MS = 500
BACKOFF_MS = 1_000
CONFIG = ReplicaFetcherConfig(
    replica_fetch_wait_max_ms=WAIT_MS,
    replica_fetch_min_bytes=1,
    replica_fetch_max_bytes=64 * 1024,
    replica_fetch_response_max_bytes=256 * 1024,
    replica_fetch_backoff_ms=BACKOFF_MS,
)


class LeaderServer:
    """A broker's Fetch / OffsetForLeaderEpoch / ListOffsets handlers over one leader replica.

    Fetch long-polls like DelayedFetch: with nothing to send it waits for `notify()` (the test
    appended) or max_wait on the clock, then reads again. `hold` keeps answers in flight."""

    def __init__(self, network: MemoryNetwork, clock: ManualClock, leader: Replica) -> None:
        self.leader = leader
        self.clock = clock
        broker_id = leader.actor.local_broker_id
        self.endpoint = BrokerEndpoint(broker_id, f"broker-{broker_id}", 9092)
        self.network = network
        self.requests: list[Request] = []
        self.hold: asyncio.Event | None = None
        self.held = 0
        self._changed = asyncio.Event()
        self.server = self._new_server()

    def _new_server(self) -> Server:
        return Server(
            self.network.transport(self.endpoint.host),
            self.endpoint.address,
            {
                ApiKey.FETCH: self.fetch,
                ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
                ApiKey.LIST_OFFSETS: self.list_offsets,
            },
            clock=self.clock,
            # Stop at once: a long poll waiting on the manual clock would hold stop() up.
            config=ServerConfig(server_shutdown_timeout_ms=0),
        )

    async def restart(self) -> None:
        self.server = self._new_server()
        await self.server.start()

    def notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def of(self, kind: type[Request]) -> list[Any]:
        return [r for r in self.requests if isinstance(r, kind)]

    async def fetch(self, request: FetchRequest, ctx: RequestContext) -> FetchResponse:
        self.requests.append(request)
        changed = self._changed
        answer = await self._read(request)
        if not any(p.records or p.error_code for p in answer) and request.max_wait_ms > 0:
            waiter = asyncio.ensure_future(changed.wait())
            sleeper = asyncio.ensure_future(self.clock.sleep(request.max_wait_ms / 1000))
            await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
            for task in (waiter, sleeper):
                task.cancel()
            await asyncio.gather(waiter, sleeper, return_exceptions=True)
            answer = await self._read(request)
        if self.hold is not None:
            self.held += 1
            await self.hold.wait()
        return FetchResponse(responses=[FetchableTopicResponse(topic=TP.topic, partitions=answer)])

    async def _read(self, request: FetchRequest) -> list[FetchResponsePartition]:
        answer = []
        for topic in request.topics:
            for p in topic.partitions:
                assert TopicPartition(topic.topic, p.partition) == TP
                result = await self.leader.actor.ask(
                    ReadRecords(
                        p.fetch_offset,
                        p.partition_max_bytes,
                        current_leader_epoch=p.current_leader_epoch,
                        replica_id=request.replica_id,
                    )
                )
                answer.append(
                    FetchResponsePartition(
                        partition_index=p.partition,
                        error_code=result.error,
                        high_watermark=result.high_watermark,
                        log_start_offset=result.log_start_offset,
                        records=bytes(result.records),
                    )
                )
        return answer

    async def offset_for_leader_epoch(
        self, request: OffsetForLeaderEpochRequest, ctx: RequestContext
    ) -> OffsetForLeaderEpochResponse:
        self.requests.append(request)
        if self.hold is not None:
            self.held += 1
            await self.hold.wait()
        topics = []
        for topic in request.topics:
            results = []
            for p in topic.partitions:
                answer = await self.leader.actor.ask(
                    LastOffsetForEpoch(
                        p.leader_epoch, p.current_leader_epoch, fetch_only_from_leader=True
                    )
                )
                results.append(
                    EpochEndOffset(
                        error_code=answer.error,
                        partition=p.partition,
                        leader_epoch=answer.leader_epoch,
                        end_offset=answer.end_offset,
                    )
                )
            topics.append(OffsetForLeaderTopicResult(topic=topic.topic, partitions=results))
        return OffsetForLeaderEpochResponse(topics=topics)

    async def list_offsets(
        self, request: ListOffsetsRequest, ctx: RequestContext
    ) -> ListOffsetsResponse:
        """A follower's ListOffsets: latest is the LEO, earliest the log start (read from the
        log itself, so a test may cut the leader's log behind the actor's back)."""
        self.requests.append(request)
        log = self.leader.log
        topics = []
        for topic in request.topics:
            results = []
            for p in topic.partitions:
                epoch = self.leader.actor.view.leader_epoch
                error = ErrorCode.NONE
                if 0 <= p.current_leader_epoch < epoch:
                    error = ErrorCode.FENCED_LEADER_EPOCH
                offset = log.log_end_offset if p.timestamp == -1 else log.log_start_offset
                results.append(
                    ListOffsetsPartitionResponse(
                        partition_index=p.partition_index, error_code=error, offset=offset
                    )
                )
            topics.append(ListOffsetsTopicResponse(name=topic.name, partitions=results))
        return ListOffsetsResponse(topics=topics)


class Setup:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = ManualClock()
        self.network = MemoryNetwork(SEED, self.clock)
        self.brokers = Brokers(tmp_path, self.clock)
        self.clients: list[Client] = []
        self.servers: list[LeaderServer] = []
        self.managers: list[ReplicaFetcherManager] = []

    async def serve(self, leader: Replica) -> LeaderServer:
        server = LeaderServer(self.network, self.clock, leader)
        await server.server.start()
        self.servers.append(server)
        return server

    def manager(self, follower: Replica, **config: Any) -> ReplicaFetcherManager:
        local_id = follower.actor.local_broker_id

        def client_factory(leader: BrokerEndpoint, fetcher_id: int) -> Client:
            client = Client(
                [leader.address],
                transport=self.network.transport(f"broker-{local_id}"),
                clock=self.clock,
                client_id=f"fetcher-{fetcher_id}",
            )
            self.clients.append(client)
            return client

        manager = ReplicaFetcherManager(
            local_id,
            client_factory,
            lambda tp: follower.actor if tp == TP else None,
            self.clock,
            ReplicaFetcherConfig(**{**_config_fields(CONFIG), **config}),
        )
        self.managers.append(manager)
        return manager

    async def until(self, condition: Callable[[], bool], *, what: str, rounds: int = 20) -> None:
        """Run the loop — moving the clock by one long-poll whenever it stalls — until
        `condition()` holds."""
        for _ in range(rounds):
            await turns()
            if condition():
                return
            self.clock.advance(WAIT_MS)
        raise AssertionError(f"not reached: {what} (seed {SEED})")

    async def close(self) -> None:
        for manager in self.managers:
            await manager.shutdown()
        for server in self.servers:
            if server.hold is not None:
                server.hold.set()
            await server.server.stop()
        await self.brokers.close()


def _config_fields(config: ReplicaFetcherConfig) -> dict[str, int]:
    names = [key.replace(".", "_") for key in config.PROPERTIES]
    return {name: getattr(config, name) for name in names}


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    s = Setup(tmp_path)
    yield s
    await s.close()


async def turns(count: int = 200) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def log_bytes(replica: Replica) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(replica.directory.glob("*.log")))


async def leader_and_follower(s: Setup, *, epoch: int = 0) -> tuple[Replica, Replica]:
    leader = await s.brokers.open(1)
    follower = await s.brokers.open(2)
    await leader.actor.ask(BecomeLeader(state(1, epoch, (1, 2), replicas=(1, 2))))
    await follower.actor.ask(BecomeFollower(state(1, epoch, (1, 2), replicas=(1, 2))))
    return leader, follower


def leo(replica: Replica) -> int:
    return replica.log.log_end_offset


def fetcher_state(manager: ReplicaFetcherManager) -> Any:
    fetcher = manager.fetcher_of(TP)
    assert fetcher is not None
    return fetcher.state(TP)


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


async def test_unknown_leader_epoch_backs_off_and_retries(setup: Setup) -> None:
    """The follower learned of epoch 1 before the leader did: the leader answers
    UNKNOWN_LEADER_EPOCH, and the fetcher retries after the back-off until it catches up."""
    leader, follower = await leader_and_follower(setup)
    await produce(leader, 1)
    await follower.actor.ask(BecomeFollower(state(1, 1, (1, 2), 1, replicas=(1, 2))))
    server = await setup.serve(leader)
    manager = setup.manager(follower)
    manager.add_partitions(server.endpoint, {TP: InitialFetchState(0, 1)})
    await turns()
    # An empty follower has nothing to truncate: its first request is the fetch, refused.
    assert [type(r) for r in server.requests] == [FetchRequest]
    assert fetcher_state(manager).delayed_until_ms == setup.clock.monotonic_ms() + BACKOFF_MS
    setup.clock.advance(BACKOFF_MS - 1)
    await turns()
    assert len(server.requests) == 1, "no retry before the back-off"
    await leader.actor.ask(BecomeLeader(state(1, 1, (1, 2), 1, replicas=(1, 2))))
    setup.clock.advance(1)
    await setup.until(lambda: leo(follower) == 1, what="caught up in epoch 1")


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
