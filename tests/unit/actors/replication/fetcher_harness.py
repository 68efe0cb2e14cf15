"""The replica-fetcher test bench: a follower PartitionActor on a real Log fetches, through the real
client and a real Server on the in-memory network, from a leader PartitionActor on another Log.
All time is a ManualClock.

`LeaderServer` answers Fetch, OffsetForLeaderEpoch and ListOffsets from one leader replica (and
can hold answers in flight); `Setup` opens the brokers, servers and fetcher managers of one test
and closes them; the helpers below run the loop and read the logs. Used by test_fetcher.py,
test_fetcher_truncation.py and test_fetcher_lifecycle.py."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.replication.config import ReplicaFetcherConfig
from actors.replication.fetch_state import BrokerEndpoint
from actors.replication.fetcher_manager import ReplicaFetcherManager
from actors.replication.partition_messages import (
    BecomeFollower,
    BecomeLeader,
    LastOffsetForEpoch,
    ReadRecords,
)
from client.client import Client
from runtime.clock import ManualClock
from runtime.net.dialect import RequestContext
from runtime.net.memory import MemoryNetwork
from runtime.net.server import Server, ServerConfig
from runtime.properties import property_names
from tests.unit.actors.replication.partition_harness import (
    TP,
    Brokers,
    Replica,
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
    return {name: getattr(config, name) for name in property_names(ReplicaFetcherConfig)}


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
