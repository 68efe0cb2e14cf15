"""AllocateProducerIds end to end on a ManualClock over the in-memory network: a broker's
ProducerIdManager sends through a credentialed client to a real ControllerNode (server, actor,
metadata log). Ids stay unique across blocks, across a controller restart, and a connection
without the cluster credential is refused and allocates nothing."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from pathlib import Path
from typing import TypeVar

from actors.controller.messages import ControllerConfig
from client.client import Client
from node.broker.producer_ids import ProducerIdManager
from node.controller.node import ControllerNode
from runtime.clock import ManualClock
from runtime.net.memory import MemoryNetwork
from runtime.net.transport import Address
from wire.errors import ErrorCode
from wire.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    BrokerRegistrationListener,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    InitProducerIdRequest,
)

SECRET = b"producer-ids-test-cluster-secret-0123456789"
SEED = 20261122
CONTROLLER = Address("controller", 9093)
T = TypeVar("T")


class Rig:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.clock = ManualClock()
        self.network = MemoryNetwork(SEED, self.clock)
        self.controller = self._controller()
        self.control = Client(
            [CONTROLLER],
            transport=self.network.transport("broker-0"),
            clock=self.clock,
            client_id="broker-0-control",
            credential=SECRET,
        )
        self.broker_epoch = -1

    def _controller(self) -> ControllerNode:
        return ControllerNode(
            ControllerConfig(auto_leader_rebalance_enable=False),
            self.directory,
            transport=self.network.transport("controller"),
            clock=self.clock,
            cluster_secret=SECRET,
            listen=CONTROLLER,
        )

    async def drive(self, awaitable: Awaitable[T], *, max_ms: int = 5_000) -> T:
        """Await while letting the loop run and the clock move 1 ms at a time."""
        task = asyncio.ensure_future(awaitable)
        for _ in range(max_ms):
            for _ in range(20):
                await asyncio.sleep(0)
            if task.done():
                return task.result()
            self.clock.advance(1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise AssertionError(f"not done within {max_ms} ms (seed={SEED})")

    async def register(self) -> None:
        response = await self.drive(
            self.control.send(
                CONTROLLER,
                BrokerRegistrationRequest(
                    broker_id=0,
                    cluster_id="",
                    incarnation_id=uuid.UUID(int=SEED, version=4).bytes,
                    listeners=[BrokerRegistrationListener(name="native", host="b0", port=9092)],
                ),
            )
        )
        assert isinstance(response, BrokerRegistrationResponse), response
        assert response.error is ErrorCode.NONE, response
        self.broker_epoch = response.broker_epoch

    async def send(self, request: AllocateProducerIdsRequest) -> AllocateProducerIdsResponse:
        response = await self.control.send(CONTROLLER, request)
        assert isinstance(response, AllocateProducerIdsResponse), response
        return response

    def manager(self) -> ProducerIdManager:
        return ProducerIdManager(self.send, 0, lambda: self.broker_epoch, self.clock)

    async def restart_controller(self) -> None:
        await self.drive(self.controller.stop())
        self.controller = self._controller()
        await self.drive(self.controller.start())

    async def close(self) -> None:
        await self.drive(self.control.close())
        await self.drive(self.controller.stop())


async def generate_many(rig: Rig, manager: ProducerIdManager, count: int) -> list[int]:
    return [await rig.drive(manager.generate()) for _ in range(count)]


async def test_ids_from_the_controller_node_survive_its_restart(tmp_path: Path) -> None:
    rig = Rig(tmp_path / "controller")
    await rig.drive(rig.controller.start())
    try:
        await rig.register()
        manager = rig.manager()
        first = await generate_many(rig, manager, 1_200)
        assert first == list(range(1_200))
        response = await rig.drive(
            manager.init_producer_id(InitProducerIdRequest(transaction_timeout_ms=60_000))
        )
        assert (response.error, response.producer_id, response.producer_epoch) == (
            ErrorCode.NONE,
            1_200,
            0,
        )
        await manager.stop()
        await rig.restart_controller()
        # A new manager holds no block, like a restarted broker's; the broker's registration is
        # still valid with the restarted controller (it replayed it from the log).
        await rig.register()
        manager = rig.manager()
        after = await generate_many(rig, manager, 10)
        # Blocks [0, 1000) and [1000, 2000) went out before the restart (the second one as a
        # prefetch); the restarted controller continues after them.
        assert after == list(range(2_000, 2_010))
        await manager.stop()
    finally:
        await rig.close()


async def test_a_connection_without_the_credential_gets_no_block(tmp_path: Path) -> None:
    rig = Rig(tmp_path / "controller")
    await rig.drive(rig.controller.start())
    anonymous = Client([CONTROLLER], transport=rig.network.transport("client"), clock=rig.clock)
    try:
        await rig.register()
        refused = await rig.drive(
            anonymous.send(
                CONTROLLER, AllocateProducerIdsRequest(broker_id=0, broker_epoch=rig.broker_epoch)
            )
        )
        assert isinstance(refused, AllocateProducerIdsResponse)
        assert refused.error is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        granted = await rig.drive(
            rig.send(AllocateProducerIdsRequest(broker_id=0, broker_epoch=rig.broker_epoch))
        )
        assert (granted.error, granted.producer_id_start) == (ErrorCode.NONE, 0)
    finally:
        await rig.drive(anonymous.close())
        await rig.close()
