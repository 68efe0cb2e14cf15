"""The controller's request channels and request batch, over the in-memory network."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Final

import pytest

from actors.controller.channel import (
    ChannelConfig,
    ControllerChannelManager,
    applied,
    applied_code,
)
from runtime.clock import ManualClock
from runtime.net.dialect import (
    Handler,
    RequestContext,
)
from runtime.net.memory import MemoryNetwork
from runtime.net.server import Server
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    ApiKey,
    UpdateMetadataRequest,
)
from wire.messages.base import Request, Response

SEED: Final = 6
SECRET: Final = b"ketch-test-cluster-secret-0123456789"
CONFIG: Final = ChannelConfig(
    request_timeout_ms=1_000,
    socket_connection_setup_timeout_ms=500,
    retry_backoff_ms=100,
    retry_backoff_max_ms=400,
    reconnect_backoff_ms=10,
    reconnect_backoff_max_ms=50,
)


async def settle(condition: Callable[[], bool] = lambda: False, *, turns: int = 200) -> bool:
    """Let the loop run (bounded) until `condition` holds; whether it does."""
    for _ in range(turns):
        if condition():
            return True
        await asyncio.sleep(0)
    return condition()


async def advance_until(
    clock: ManualClock, condition: Callable[[], bool], *, step_ms: float = 50, limit_ms: float
) -> None:
    """Move the clock in steps, letting the loop run after each, until `condition` holds."""
    elapsed = 0.0
    while not await settle(condition, turns=50):
        assert elapsed < limit_ms, f"condition not met within {limit_ms} ms (seed {SEED})"
        clock.advance(step_ms)
        elapsed += step_ms


class FakeBroker:
    """A broker's control-plane endpoint that records what it is sent."""

    def __init__(self, network: MemoryNetwork, clock: ManualClock, broker_id: int) -> None:
        self.node = f"broker-{broker_id}"
        self.received: list[Request] = []
        self.errors: list[ErrorCode] = []  # answer codes to use, in turn (then NONE)
        self.on_request: Callable[[Request], None] | None = None
        self.gate: asyncio.Event | None = None  # when set: requests wait for it
        self.handling = 0
        self.max_handling = 0
        handlers: dict[int, Handler] = {
            ApiKey.LEADER_AND_ISR: self.handle,
            ApiKey.STOP_REPLICA: self.handle,
            ApiKey.UPDATE_METADATA: self.handle,
        }
        self.server = Server(
            network.transport(self.node),
            Address(self.node, 9092),
            handlers,
            clock=clock,
            cluster_secret=SECRET,
        )

    async def handle(self, request: Request, ctx: RequestContext) -> Response:
        self.received.append(request)
        self.handling += 1
        self.max_handling = max(self.max_handling, self.handling)
        try:
            if self.on_request is not None:
                self.on_request(request)
            if self.gate is not None:
                await self.gate.wait()
            code = self.errors.pop(0) if self.errors else ErrorCode.NONE
            return request.RESPONSE.error_response(code)
        finally:
            self.handling -= 1


@dataclass
class Cluster:
    clock: ManualClock
    network: MemoryNetwork
    manager: ControllerChannelManager
    brokers: dict[int, FakeBroker]
    answers: list[tuple[int, Response | None, int]] = field(default_factory=list)

    def add(self, broker_id: int) -> None:
        self.manager.add_broker(broker_id, self.brokers[broker_id].server.address)

    def callback(self, broker_id: int) -> Callable[[Response | None, int], None]:
        def record(response: Response | None, attempts: int) -> None:
            self.answers.append((broker_id, response, attempts))

        return record

    def record(self, broker_id: int, response: Response | None, attempts: int) -> None:
        self.answers.append((broker_id, response, attempts))


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    clock = ManualClock()
    network = MemoryNetwork(SEED, clock)
    brokers = {b: FakeBroker(network, clock, b) for b in range(3)}
    for broker in brokers.values():
        await broker.server.start()
    manager = ControllerChannelManager(
        transport=network.transport("controller"),
        clock=clock,
        credential=SECRET,
        config=CONFIG,
        seed=SEED,
    )
    yield Cluster(clock, network, manager, brokers)
    await manager.close()
    for broker in brokers.values():
        if broker.gate is not None:
            broker.gate.set()
        await broker.server.stop()


def update_metadata(tag: int, *, broker_epoch: int = -1) -> UpdateMetadataRequest:
    """A request told apart by its controller epoch."""
    return UpdateMetadataRequest(
        controller_id=100,
        controller_epoch=tag,
        broker_epoch=broker_epoch,
        partition_states=[],
        live_brokers=[],
    )


def error(response: Response | None) -> ErrorCode | None:
    return None if response is None else response.error


def tags(requests: list[Request]) -> list[int]:
    return [r.controller_epoch for r in requests if isinstance(r, UpdateMetadataRequest)]


# -- the channel ----------------------------------------------------------------------------------


async def test_requests_go_one_at_a_time_in_order(cluster: Cluster) -> None:
    cluster.add(0)
    cluster.add(1)
    broker = cluster.brokers[0]
    broker.gate = asyncio.Event()
    for tag in range(1, 6):
        cluster.manager.send(0, update_metadata(tag), cluster.callback(0))
    cluster.manager.send(1, update_metadata(42), cluster.callback(1))
    # Broker 0 holds its first request; broker 1 is served meanwhile (its own channel).
    assert await settle(lambda: len(cluster.answers) == 1 and len(broker.received) == 1)
    assert cluster.answers[0][0] == 1
    assert cluster.manager.queue_size(0) == 4
    (stats0, stats1, *_) = cluster.manager.statistics()
    assert (stats0.broker_id, stats0.queued, stats0.in_flight) == (0, 4, True)
    assert (stats1.broker_id, stats1.queued, stats1.in_flight, stats1.answered) == (1, 0, False, 1)
    broker.gate.set()
    assert await settle(lambda: len(cluster.answers) == 6)
    assert tags(broker.received) == [1, 2, 3, 4, 5]
    assert broker.max_handling == 1
    answers0 = [(error(r), attempts) for b, r, attempts in cluster.answers if b == 0]
    assert answers0 == [(ErrorCode.NONE, 1)] * 5
    assert cluster.manager.queue_size(0) == 0


async def test_error_answers_are_delivered_not_retried(cluster: Cluster) -> None:
    cluster.add(0)
    cluster.brokers[0].errors = [ErrorCode.STALE_CONTROLLER_EPOCH]
    cluster.manager.send(0, update_metadata(1), cluster.callback(0))
    assert await settle(lambda: len(cluster.answers) == 1)
    _, response, attempts = cluster.answers[0]
    assert (error(response), attempts) == (ErrorCode.STALE_CONTROLLER_EPOCH, 1)
    assert not applied(response, attempts)
    assert len(cluster.brokers[0].received) == 1


async def test_lost_response_is_resent_and_counted(cluster: Cluster) -> None:
    cluster.add(0)
    broker = cluster.brokers[0]
    network = cluster.network

    def drop_the_answer(request: Request) -> None:
        if len(broker.received) == 1:
            # The broker applies the request, but its response never arrives.
            network.set_link("controller", broker.node, drop_probability=1.0)

    broker.on_request = drop_the_answer
    broker.errors = [ErrorCode.NONE, ErrorCode.STALE_CONTROLLER_EPOCH]
    cluster.manager.send(0, update_metadata(7), cluster.callback(0))
    cluster.manager.send(0, update_metadata(8), cluster.callback(0))
    assert await settle(lambda: cluster.manager.statistics()[0].failed_attempts == 1)
    assert cluster.answers == []
    network.set_link("controller", broker.node)  # the link recovers
    await advance_until(cluster.clock, lambda: len(cluster.answers) == 2, limit_ms=2_000)
    assert tags(broker.received) == [7, 7, 8]
    (_, first, attempts), (_, second, second_attempts) = cluster.answers
    assert (error(first), attempts) == (ErrorCode.STALE_CONTROLLER_EPOCH, 2)
    # The repeat of an applied request was fenced: that counts as applied.
    assert applied(first, attempts)
    assert (error(second), second_attempts) == (ErrorCode.NONE, 1)
    assert cluster.manager.statistics()[0].resends == 1


async def test_removal_tells_the_callback_of_a_request_that_may_have_arrived(
    cluster: Cluster,
) -> None:
    cluster.add(0)
    broker = cluster.brokers[0]
    broker.on_request = lambda _: cluster.network.set_link(
        "controller", broker.node, drop_probability=1.0
    )
    cluster.manager.send(0, update_metadata(1), cluster.callback(0))
    assert await settle(lambda: cluster.manager.statistics()[0].failed_attempts == 1)
    cluster.manager.remove_broker(0)
    await cluster.manager.wait_removed()
    # Sent once, answer lost: the broker may have applied it, and the callback says so.
    assert cluster.answers == [(0, None, 1)]
    assert tags(broker.received) == [1]


async def test_timeout_during_partition_then_resend_after_heal(cluster: Cluster) -> None:
    cluster.add(0)
    broker = cluster.brokers[0]
    cluster.manager.send(0, update_metadata(1), cluster.callback(0))
    assert await settle(lambda: len(cluster.answers) == 1)  # connected
    cluster.network.partition("controller", broker.node)
    cluster.manager.send(0, update_metadata(2), cluster.callback(0))
    # The request times out (counted), reconnects fail while partitioned (not counted).
    await advance_until(
        cluster.clock, lambda: cluster.manager.statistics()[0].failed_attempts >= 4, limit_ms=5_000
    )
    assert len(cluster.answers) == 1
    assert tags(broker.received) == [1]
    cluster.network.heal("controller", broker.node)
    await advance_until(cluster.clock, lambda: len(cluster.answers) == 2, limit_ms=2_000)
    _, response, attempts = cluster.answers[1]
    assert (error(response), attempts) == (ErrorCode.NONE, 2)
    # The timed-out copy, held by the partition, may arrive too; the resend certainly does.
    assert tags(broker.received)[0] == 1
    assert 2 in tags(broker.received)[1:]


async def test_connection_refused_is_retried_without_counting_a_send(cluster: Cluster) -> None:
    broker = cluster.brokers[0]
    address = broker.server.address
    await broker.server.stop()
    cluster.manager.add_broker(0, address)
    cluster.manager.send(0, update_metadata(1), cluster.callback(0))
    await advance_until(
        cluster.clock, lambda: cluster.manager.statistics()[0].failed_attempts >= 3, limit_ms=5_000
    )
    restarted = FakeBroker(cluster.network, cluster.clock, 0)
    cluster.brokers[0] = restarted
    await restarted.server.start()
    await advance_until(cluster.clock, lambda: len(cluster.answers) == 1, limit_ms=2_000)
    assert cluster.answers[0][2] == 1  # nothing was ever sent before
    assert tags(restarted.received) == [1]


async def test_remove_broker_stops_retries_and_leaks_nothing(cluster: Cluster) -> None:
    alarms_before = cluster.clock.pending_alarms
    broker = cluster.brokers[0]
    cluster.network.partition("controller", broker.node)
    cluster.add(0)
    cluster.manager.send(0, update_metadata(1), cluster.callback(0))
    cluster.manager.send(0, update_metadata(2), cluster.callback(0))
    await advance_until(
        cluster.clock, lambda: cluster.manager.statistics()[0].failed_attempts >= 2, limit_ms=5_000
    )
    cluster.manager.remove_broker(0)
    assert cluster.manager.broker_ids == []
    assert cluster.manager.queue_size(0) == 0
    assert cluster.answers == []  # callbacks are never called inside remove_broker()
    await cluster.manager.wait_removed()
    assert cluster.manager.dropped_on_removal == 2
    # Each dropped request's callback hears of it once, with no response; neither ever
    # reached the broker (the connects failed), so no send counts.
    assert [(b, r, a) for b, r, a in cluster.answers] == [(0, None, 0), (0, None, 0)]
    assert not applied(None, 0)
    cluster.answers.clear()
    assert cluster.network.open_connections("controller") == 0
    assert cluster.clock.pending_alarms == alarms_before
    channel_tasks = [t for t in asyncio.all_tasks() if "controller channel" in t.get_name()]
    assert channel_tasks == []
    # Nothing is sent any more, even once the broker is reachable again.
    cluster.network.heal("controller", broker.node)
    for _ in range(20):
        cluster.clock.advance(500)
        await settle()
    assert broker.received == []
    assert cluster.answers == []
    # A broker that returns gets a fresh channel.
    cluster.add(0)
    cluster.manager.send(0, update_metadata(3), cluster.callback(0))
    assert await settle(lambda: len(cluster.answers) == 1)
    assert tags(broker.received) == [3]


async def test_unknown_brokers(cluster: Cluster) -> None:
    cluster.manager.send(5, update_metadata(1), cluster.callback(5))
    assert cluster.manager.dropped_unknown_broker == 1
    assert not cluster.manager.has_broker(5)
    cluster.manager.remove_broker(5)  # a no-op
    await cluster.manager.wait_removed()
    cluster.add(0)
    cluster.add(0)  # the same address again: a no-op
    assert cluster.manager.broker_ids == [0]
    with pytest.raises(ValueError, match="already has a channel"):
        cluster.manager.add_broker(0, cluster.brokers[1].server.address)
    await settle()
    assert cluster.answers == []


async def test_close_stops_everything(cluster: Cluster) -> None:
    cluster.network.partition("controller", cluster.brokers[1].node)
    cluster.add(0)
    cluster.add(1)
    cluster.manager.send(0, update_metadata(1), cluster.callback(0))
    cluster.manager.send(1, update_metadata(1), cluster.callback(1))
    assert await settle(lambda: len(cluster.answers) == 1)
    await cluster.manager.close()
    assert cluster.manager.broker_ids == []
    assert cluster.network.open_connections("controller") == 0
    with pytest.raises(RuntimeError, match="closed"):
        cluster.manager.add_broker(2, cluster.brokers[2].server.address)


def test_applied() -> None:
    ok = UpdateMetadataRequest.RESPONSE.error_response(ErrorCode.NONE)
    stale = UpdateMetadataRequest.RESPONSE.error_response(ErrorCode.STALE_CONTROLLER_EPOCH)
    stale_broker = UpdateMetadataRequest.RESPONSE.error_response(ErrorCode.STALE_BROKER_EPOCH)
    other = UpdateMetadataRequest.RESPONSE.error_response(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    assert applied(ok, 1)
    assert applied(ok, 3)
    assert not applied(stale, 1)
    assert applied(stale, 2)
    assert not applied(stale_broker, 1)
    assert applied(stale_broker, 2)
    assert not applied(other, 2)
    assert applied_code(int(ErrorCode.STALE_CONTROLLER_EPOCH), 2)
    assert not applied_code(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), 2)
