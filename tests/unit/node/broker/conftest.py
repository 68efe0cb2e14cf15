"""The `env` fixture of the lifecycle and forwarder tests: a real broker node beside the fake
controller of fake_controller.py; afterwards no task of theirs may outlive its stop."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from node.broker.node import NodeState
from runtime.clock import ManualClock
from runtime.net.memory import MemoryNetwork
from tests.unit.node.broker.fake_controller import Env, FakeController, let_loop_run


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
