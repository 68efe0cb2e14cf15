"""A fake controller and a broker environment, for the lifecycle and forwarder tests (the `env`
fixture is in conftest.py).

A real `BrokerNode` (lifecycle on) and a fake controller `Server` share a `MemoryNetwork` with
no delay; time is a ManualClock advanced 1 ms at a time while the loop runs, so every time
asserted in those tests is exact simulated time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

from client.client import Client
from node.broker.config import BrokerConfig
from node.broker.node import BrokerNode
from runtime.clock import ManualClock
from runtime.net.dialect import RequestContext
from runtime.net.memory import MemoryNetwork
from runtime.net.server import Server
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    ApiKey,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    RemainingPartition,
)

T = TypeVar("T")

SECRET: Final = b"lifecycle-test-cluster-secret-0123"
CONTROLLER: Final = Address("controller", 9090)
BROKER: Final = Address("broker-0", 9092)
FIRST_EPOCH: Final = 100
HEARTBEAT_MS: Final = 100
SHUTDOWN_BACKOFF_MS: Final = 300
REQUEST_TIMEOUT_MS: Final = 500
TOPIC_ID: Final = bytes(range(16))


# -- the fake controller --------------------------------------------------------------------------


@dataclass
class FakeController:
    """Answers what a broker sends and records when it came. Decides nothing itself: the test
    sets what it answers (`refuse_registration`, `shutdown_answers`) and can forget the broker
    (`forget`, as a controller restarted without its registration)."""

    network: MemoryNetwork
    clock: ManualClock
    registrations: list[tuple[int, BrokerRegistrationRequest]] = field(default_factory=list)
    heartbeats: list[tuple[int, int]] = field(default_factory=list)  # (time ms, epoch)
    heartbeat_requests: list[BrokerHeartbeatRequest] = field(default_factory=list)
    shutdowns: list[tuple[int, int]] = field(default_factory=list)  # (time ms, epoch)
    forwarded: list[tuple[bool, object]] = field(default_factory=list)  # (cluster member, req)
    refuse_registration: ErrorCode | None = None
    cluster_id: str = ""  # the id its registration answers carry ("": none, as before)
    shutdown_answers: list[ControlledShutdownResponse] = field(default_factory=list)
    hold_registration: asyncio.Event | None = None
    epoch: int = FIRST_EPOCH - 1  # the epoch the broker holds, as this controller knows it
    server: Server | None = None

    async def start(self) -> None:
        self.server = Server(
            self.network.transport("controller"),
            CONTROLLER,
            {
                ApiKey.BROKER_REGISTRATION: self._register,
                ApiKey.BROKER_HEARTBEAT: self._heartbeat,
                ApiKey.CONTROLLED_SHUTDOWN: self._controlled_shutdown,
                ApiKey.CREATE_TOPICS: self._create_topics,
                ApiKey.DELETE_TOPICS: self._delete_topics,
            },
            clock=self.clock,
            cluster_secret=SECRET,
        )
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            server, self.server = self.server, None
            await server.stop()
            self.network.kill("controller")

    def forget(self) -> None:
        """As a controller that lost the registration: the held epoch is stale from now on."""
        self.epoch = -1

    async def _register(
        self, request: BrokerRegistrationRequest, ctx: RequestContext
    ) -> BrokerRegistrationResponse:
        assert ctx.cluster_member
        self.registrations.append((self.clock.monotonic_ms(), request))
        if self.hold_registration is not None:
            await self.hold_registration.wait()
        if self.refuse_registration is not None:
            return BrokerRegistrationResponse(
                error_code=self.refuse_registration, cluster_id=self.cluster_id
            )
        self.epoch = FIRST_EPOCH + len(self.registrations) - 1
        return BrokerRegistrationResponse(broker_epoch=self.epoch, cluster_id=self.cluster_id)

    async def _heartbeat(
        self, request: BrokerHeartbeatRequest, ctx: RequestContext
    ) -> BrokerHeartbeatResponse:
        self.heartbeats.append((self.clock.monotonic_ms(), request.broker_epoch))
        self.heartbeat_requests.append(request)
        if request.broker_epoch != self.epoch:
            return BrokerHeartbeatResponse.error_response(ErrorCode.STALE_BROKER_EPOCH)
        return BrokerHeartbeatResponse(is_fenced=False)

    async def _controlled_shutdown(
        self, request: ControlledShutdownRequest, ctx: RequestContext
    ) -> ControlledShutdownResponse:
        self.shutdowns.append((self.clock.monotonic_ms(), request.broker_epoch))
        if self.shutdown_answers:
            return self.shutdown_answers.pop(0)
        return ControlledShutdownResponse()

    async def _create_topics(
        self, request: CreateTopicsRequest, ctx: RequestContext
    ) -> CreateTopicsResponse:
        self.forwarded.append((ctx.cluster_member, request))
        return CreateTopicsResponse(
            topics=[
                CreatableTopicResult(
                    name=t.name,
                    topic_id=TOPIC_ID,
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    error_code=(
                        ErrorCode.TOPIC_ALREADY_EXISTS if t.name == "taken" else ErrorCode.NONE
                    ),
                )
                for t in request.topics
            ]
        )

    async def _delete_topics(
        self, request: DeleteTopicsRequest, ctx: RequestContext
    ) -> DeleteTopicsResponse:
        self.forwarded.append((ctx.cluster_member, request))
        return DeleteTopicsResponse(
            responses=[DeletableTopicResult(name=n, topic_id=TOPIC_ID) for n in request.topic_names]
        )


def remaining(*partitions: int) -> ControlledShutdownResponse:
    return ControlledShutdownResponse(
        remaining_partitions=[
            RemainingPartition(topic_name="t", partition_index=p) for p in partitions
        ]
    )


# -- driving the ManualClock ----------------------------------------------------------------------


async def let_loop_run(rounds: int = 30) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)


@dataclass
class Env:
    tmp_path: Path
    clock: ManualClock
    network: MemoryNetwork
    controller: FakeController
    nodes: list[BrokerNode] = field(default_factory=list)

    async def run_until(self, condition: Callable[[], bool], *, max_ms: int, what: str) -> None:
        for _ in range(max_ms):
            await let_loop_run()
            if condition():
                return
            self.clock.advance(1)
        raise AssertionError(f"{what} not reached within {max_ms} ms")

    async def run_for(self, duration_ms: int) -> None:
        for _ in range(duration_ms):
            await let_loop_run()
            self.clock.advance(1)
        await let_loop_run()

    async def drive(self, awaitable: Awaitable[T], *, max_ms: int = 10_000) -> T:
        task = asyncio.ensure_future(awaitable)
        try:
            await self.run_until(task.done, max_ms=max_ms, what="operation")
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        return task.result()

    def node(
        self, properties: Mapping[str, object] | None = None, *, lifecycle: bool = True
    ) -> BrokerNode:
        config = BrokerConfig.from_properties(
            {
                "broker.id": 0,
                "log.dirs": str(self.tmp_path / "broker-0"),
                "listeners": f"native://{BROKER}",
                "cluster.id": "test-cluster",
                "broker.heartbeat.interval.ms": HEARTBEAT_MS,
                "controlled.shutdown.retry.backoff.ms": SHUTDOWN_BACKOFF_MS,
                "request.timeout.ms": REQUEST_TIMEOUT_MS,
                **(properties or {}),
            }
        )
        node = BrokerNode(
            config,
            transport=self.network.transport("broker-0"),
            clock=self.clock,
            cluster_secret=SECRET,
            controller=CONTROLLER,
            lifecycle=lifecycle,
        )
        self.nodes.append(node)
        return node

    def client(self) -> Client:
        return Client([BROKER], transport=self.network.transport("client"), clock=self.clock)

    async def metadata_answered(self) -> bool:
        """The broker answers a client's Metadata request (it is serving)."""
        client = self.client()
        try:
            response = await self.drive(client.send(BROKER, MetadataRequest(topics=[])))
        finally:
            await self.drive(client.close())
        return isinstance(response, MetadataResponse) and response.error is ErrorCode.NONE


def registered(node: BrokerNode) -> Callable[[], bool]:
    return lambda: node.lifecycle is not None and node.lifecycle.registered
