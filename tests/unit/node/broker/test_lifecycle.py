"""The broker's side of the controller: registration, heartbeats, re-registration, controlled
shutdown and forwarding of topic requests, against a small fake controller.

A real `BrokerNode` (lifecycle on) and a fake controller `Server` share a `MemoryNetwork` with
no delay; time is a ManualClock advanced 1 ms at a time while the loop runs, so every time
asserted below is exact simulated time.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

import pytest

from client.client import Client
from node.broker.config import BrokerConfig
from node.broker.lifecycle import BrokerLifecycleConfig, LifecycleState
from node.broker.node import BrokerNode, NodeState
from runtime.clock import ManualClock
from runtime.log.manager import CLEAN_SHUTDOWN_FILE
from runtime.net.memory import MemoryNetwork
from runtime.net.server import RequestContext, Server
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    ApiKey,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationListener,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    CreatableTopic,
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
    shutdowns: list[tuple[int, int]] = field(default_factory=list)  # (time ms, epoch)
    forwarded: list[tuple[bool, object]] = field(default_factory=list)  # (cluster member, req)
    refuse_registration: ErrorCode | None = None
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
            return BrokerRegistrationResponse.error_response(self.refuse_registration)
        self.epoch = FIRST_EPOCH + len(self.registrations) - 1
        return BrokerRegistrationResponse(broker_epoch=self.epoch)

    async def _heartbeat(
        self, request: BrokerHeartbeatRequest, ctx: RequestContext
    ) -> BrokerHeartbeatResponse:
        self.heartbeats.append((self.clock.monotonic_ms(), request.broker_epoch))
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


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    clock = ManualClock()
    network = MemoryNetwork(seed=1, clock=clock)
    controller = FakeController(network, clock)
    await controller.start()
    environment = Env(tmp_path, clock, network, controller)
    try:
        yield environment
    finally:
        for node in environment.nodes:
            if node.state is NodeState.RUNNING:
                await environment.drive(node.crash())
        await environment.drive(controller.stop())
    await let_loop_run()
    # No task of a node, its lifecycle, a client or a server outlives its stop.
    assert asyncio.all_tasks() == {asyncio.current_task()}


def registered(node: BrokerNode) -> Callable[[], bool]:
    return lambda: node.lifecycle is not None and node.lifecycle.registered


# -- registration and heartbeats ------------------------------------------------------------------


async def test_serves_before_registration_then_registers_and_heartbeats(env: Env) -> None:
    env.controller.hold_registration = asyncio.Event()
    node = env.node()
    await env.drive(node.start())
    await env.run_until(lambda: bool(env.controller.registrations), max_ms=10, what="register")
    # The registration is not answered yet, and the broker already serves.
    assert await env.metadata_answered()
    assert node.broker_epoch == -1
    env.controller.hold_registration.set()
    await env.run_until(registered(node), max_ms=10, what="registered")
    assert node.broker_epoch == FIRST_EPOCH

    _, request = env.controller.registrations[0]
    assert request.broker_id == 0
    assert request.cluster_id == "test-cluster"
    assert request.previous_broker_epoch == -1
    assert len(request.incarnation_id) == 16
    assert request.listeners == [
        BrokerRegistrationListener(name="native", host="broker-0", port=9092)
    ]

    start_ms = env.clock.monotonic_ms()
    await env.run_for(5 * HEARTBEAT_MS)
    # The first heartbeat goes at once, then one per interval, each with the epoch.
    assert env.controller.heartbeats == [
        (start_ms + i * HEARTBEAT_MS, FIRST_EPOCH) for i in range(6)
    ]
    assert len(env.controller.registrations) == 1
    assert node.lifecycle is not None
    assert node.lifecycle.is_fenced is False


async def test_a_new_process_registers_with_a_new_incarnation(env: Env) -> None:
    first = env.node()
    await env.drive(first.start())
    await env.run_until(registered(first), max_ms=10, what="first registered")
    await env.drive(first.stop())
    second = env.node()
    await env.drive(second.start())
    await env.run_until(registered(second), max_ms=10, what="second registered")
    [(_, one), (_, two)] = env.controller.registrations
    assert one.incarnation_id != two.incarnation_id
    assert second.broker_epoch == FIRST_EPOCH + 1
    await env.drive(second.stop())


async def test_stale_broker_epoch_registers_again_with_a_new_epoch(env: Env) -> None:
    node = env.node()
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    assert node.broker_epoch == FIRST_EPOCH
    env.controller.forget()  # e.g. the controller restarted without this registration
    await env.run_until(
        lambda: len(env.controller.registrations) == 2 and registered(node)(),
        max_ms=2 * HEARTBEAT_MS,
        what="registered again",
    )
    _, again = env.controller.registrations[1]
    assert again.previous_broker_epoch == FIRST_EPOCH
    assert node.broker_epoch == FIRST_EPOCH + 1
    assert again.incarnation_id == env.controller.registrations[0][1].incarnation_id
    # The heartbeat after the stale one carries the new epoch.
    stale_at = next(i for i, (_, e) in enumerate(env.controller.heartbeats) if e == FIRST_EPOCH)
    await env.run_for(2 * HEARTBEAT_MS)
    later = [epoch for _, epoch in env.controller.heartbeats[stale_at + 1 :]]
    assert FIRST_EPOCH + 1 in later
    assert later[later.index(FIRST_EPOCH + 1) :] == [FIRST_EPOCH + 1] * len(
        later[later.index(FIRST_EPOCH + 1) :]
    )


async def test_unreachable_controller_keeps_the_broker_serving_and_retrying(env: Env) -> None:
    await env.controller.stop()
    node = env.node()
    await env.drive(node.start())
    await env.run_for(2_000)
    lifecycle = node.lifecycle
    assert lifecycle is not None
    # Nothing answered, the broker retried with backoff (100, 200, 400, ... ms, capped), and
    # serves all the while.
    assert lifecycle.state is LifecycleState.REGISTERING
    assert 4 <= lifecycle.registration_attempts <= 8, lifecycle.registration_attempts
    assert await env.metadata_answered()

    await env.controller.start()
    await env.run_until(registered(node), max_ms=5_000, what="registered after return")
    assert node.broker_epoch == FIRST_EPOCH

    # Registered, then the controller goes away again: heartbeats fail, nothing is torn down.
    await env.controller.stop()
    failures_before = lifecycle.heartbeat_failures
    await env.run_for(1_000)
    assert lifecycle.heartbeat_failures > failures_before
    assert registered(node)()
    assert node.state is NodeState.RUNNING
    assert await env.metadata_answered()

    # It comes back having lost the registration: the broker registers again.
    env.controller.forget()
    await env.controller.start()
    await env.run_until(
        lambda: node.broker_epoch == FIRST_EPOCH + 1, max_ms=10_000, what="registered again"
    )
    await env.drive(node.stop())


async def test_refused_registration_is_retried(env: Env) -> None:
    env.controller.refuse_registration = ErrorCode.DUPLICATE_BROKER_REGISTRATION
    node = env.node()
    await env.drive(node.start())
    await env.run_for(1_000)
    assert len(env.controller.registrations) >= 3
    assert node.broker_epoch == -1
    assert not env.controller.heartbeats
    env.controller.refuse_registration = None  # the previous incarnation's session expired
    await env.run_until(registered(node), max_ms=5_000, what="registered")
    # Unregistered at the stop: no ControlledShutdown would have been sent; registered: one.
    await env.drive(node.stop())
    assert len(env.controller.shutdowns) == 1


async def test_without_lifecycle_nothing_is_sent(env: Env) -> None:
    node = env.node(lifecycle=False)
    await env.drive(node.start())
    await env.run_for(500)
    await env.drive(node.stop())
    assert env.controller.registrations == []
    assert env.controller.shutdowns == []


# -- controlled shutdown --------------------------------------------------------------------------


async def test_controlled_shutdown_retries_while_partitions_remain(env: Env) -> None:
    env.controller.shutdown_answers = [remaining(0, 1), remaining(1)]
    node = env.node()
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    lifecycle = node.lifecycle
    assert lifecycle is not None
    task = asyncio.ensure_future(lifecycle.controlled_shutdown())
    assert await env.drive(task) is True
    times = [t for t, _ in env.controller.shutdowns]
    assert [b - a for a, b in itertools.pairwise(times)] == [SHUTDOWN_BACKOFF_MS] * 2
    assert [e for _, e in env.controller.shutdowns] == [FIRST_EPOCH] * 3
    # Heartbeats went on while leadership moved, so the controller never took it for dead.
    during = [t for t, _ in env.controller.heartbeats if times[0] <= t <= times[-1]]
    assert len(during) >= 2 * SHUTDOWN_BACKOFF_MS // HEARTBEAT_MS - 1
    await env.drive(node.stop())


async def test_controlled_shutdown_gives_up_after_max_retries(env: Env) -> None:
    env.controller.shutdown_answers = [
        ControlledShutdownResponse.error_response(ErrorCode.NOT_CONTROLLER),
        remaining(3),
        remaining(3),
        remaining(3),
    ]
    node = env.node()
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    lifecycle = node.lifecycle
    assert lifecycle is not None
    start_ms = env.clock.monotonic_ms()
    assert await env.drive(lifecycle.controlled_shutdown()) is False
    times = [t for t, _ in env.controller.shutdowns]
    assert times == [start_ms, start_ms + SHUTDOWN_BACKOFF_MS, start_ms + 2 * SHUTDOWN_BACKOFF_MS]
    # No backoff after the last attempt: it gives up as soon as the third answer is in.
    assert env.clock.monotonic_ms() == times[-1]
    assert lifecycle.controlled_shutdown_attempts == 3
    # The node's stop does not ask again, and shuts down cleanly.
    await env.drive(node.stop())
    assert lifecycle.controlled_shutdown_attempts == 3
    assert (env.tmp_path / "broker-0" / CLEAN_SHUTDOWN_FILE).exists()
    assert env.controller.shutdown_answers == [remaining(3)]  # the fourth was never asked


async def test_controlled_shutdown_with_the_controller_unreachable(env: Env) -> None:
    node = env.node({"controlled.shutdown.max.retries": 2})
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    await env.controller.stop()
    lifecycle = node.lifecycle
    assert lifecycle is not None
    assert await env.drive(lifecycle.controlled_shutdown()) is False
    assert lifecycle.controlled_shutdown_attempts == 2
    await env.drive(node.stop())
    assert (env.tmp_path / "broker-0" / CLEAN_SHUTDOWN_FILE).exists()


async def test_controlled_shutdown_disabled_sends_nothing(env: Env) -> None:
    node = env.node({"controlled.shutdown.enable": "false"})
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    await env.drive(node.stop())
    assert env.controller.shutdowns == []
    assert (env.tmp_path / "broker-0" / CLEAN_SHUTDOWN_FILE).exists()


async def test_crash_sends_nothing_more(env: Env) -> None:
    node = env.node()
    await env.drive(node.start())
    await env.run_until(registered(node), max_ms=10, what="registered")
    await env.run_for(HEARTBEAT_MS)
    env.network.kill("broker-0")
    await env.drive(node.crash())
    heartbeats = len(env.controller.heartbeats)
    await env.run_for(3 * HEARTBEAT_MS)
    assert len(env.controller.heartbeats) == heartbeats
    assert env.controller.shutdowns == []


# -- forwarding -----------------------------------------------------------------------------------


async def test_create_and_delete_topics_are_forwarded_to_the_controller(env: Env) -> None:
    node = env.node()
    await env.drive(node.start())
    client = env.client()  # a plain client: no cluster credential
    try:
        created = await env.drive(
            client.send(
                BROKER,
                CreateTopicsRequest(
                    topics=[
                        CreatableTopic(name="events", num_partitions=3, replication_factor=2),
                        CreatableTopic(name="taken", num_partitions=1, replication_factor=1),
                    ]
                ),
            )
        )
        deleted = await env.drive(client.send(BROKER, DeleteTopicsRequest(topic_names=["events"])))
    finally:
        await env.drive(client.close())
    assert isinstance(created, CreateTopicsResponse)
    assert [(t.name, t.error_code, t.topic_id, t.num_partitions) for t in created.topics] == [
        ("events", ErrorCode.NONE, TOPIC_ID, 3),
        ("taken", ErrorCode.TOPIC_ALREADY_EXISTS, TOPIC_ID, 1),
    ]
    assert isinstance(deleted, DeleteTopicsResponse)
    assert [(r.name, r.error_code) for r in deleted.responses] == [("events", ErrorCode.NONE)]
    # The controller got them from the broker's credentialed channel.
    assert [member for member, _ in env.controller.forwarded] == [True, True]
    assert isinstance(env.controller.forwarded[0][1], CreateTopicsRequest)
    await env.drive(node.stop())


async def test_forwarding_to_an_unreachable_controller_times_out_per_topic(env: Env) -> None:
    await env.controller.stop()
    node = env.node(lifecycle=False)
    await env.drive(node.start())
    client = env.client()
    try:
        sent_at = env.clock.monotonic_ms()
        created = await env.drive(
            client.send(
                BROKER,
                CreateTopicsRequest(
                    topics=[
                        CreatableTopic(name="a", num_partitions=1, replication_factor=1),
                        CreatableTopic(name="b", num_partitions=1, replication_factor=1),
                    ]
                ),
                timeout_ms=10 * REQUEST_TIMEOUT_MS,
            )
        )
        answered_at = env.clock.monotonic_ms()
        deleted = await env.drive(
            client.send(
                BROKER, DeleteTopicsRequest(topic_names=["a"]), timeout_ms=10 * REQUEST_TIMEOUT_MS
            )
        )
    finally:
        await env.drive(client.close())
    assert isinstance(created, CreateTopicsResponse)
    assert created.error is ErrorCode.NONE
    assert [(t.name, t.error_code) for t in created.topics] == [
        ("a", ErrorCode.REQUEST_TIMED_OUT),
        ("b", ErrorCode.REQUEST_TIMED_OUT),
    ]
    # Resent while the budget (the broker's request.timeout.ms) lasted, then answered.
    assert REQUEST_TIMEOUT_MS // 2 <= answered_at - sent_at <= REQUEST_TIMEOUT_MS
    assert isinstance(deleted, DeleteTopicsResponse)
    assert [(r.name, r.error_code) for r in deleted.responses] == [
        ("a", ErrorCode.REQUEST_TIMED_OUT)
    ]
    await env.drive(node.stop())


# -- configuration --------------------------------------------------------------------------------


def test_lifecycle_config_reads_kafka_property_names() -> None:
    assert BrokerLifecycleConfig.from_properties({}) == BrokerLifecycleConfig(
        cluster_id="",
        broker_heartbeat_interval_ms=2_000,
        broker_session_timeout_ms=9_000,
        controlled_shutdown_enable=True,
        controlled_shutdown_max_retries=3,
        controlled_shutdown_retry_backoff_ms=5_000,
    )
    config = BrokerLifecycleConfig.from_properties(
        {
            "cluster.id": "prod",
            "broker.heartbeat.interval.ms": "250",
            "broker.session.timeout.ms": 1_000,
            "controlled.shutdown.enable": "False",
            "controlled.shutdown.max.retries": 5,
            "controlled.shutdown.retry.backoff.ms": 10,
        }
    )
    assert config == BrokerLifecycleConfig("prod", 250, 1_000, False, 5, 10)
    assert config.resend_backoff.max_ms == 500
    for bad in (
        {"broker.heartbeat.interval.ms": 0},
        {"controlled.shutdown.enable": "yes"},
        {"controlled.shutdown.max.retries": -1},
        {"controlled.shutdown.retry.backoff.ms": "soon"},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            BrokerLifecycleConfig.from_properties(bad)
    broker = BrokerConfig.from_properties({"broker.id": 1, "controlled.shutdown.max.retries": 7})
    assert broker.lifecycle.controlled_shutdown_max_retries == 7
