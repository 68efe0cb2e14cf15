"""Fixtures shared by the client, producer and consumer tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from runtime.clock import ManualClock
from tests.unit.client.scripted_cluster import ScriptedCluster


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def cluster(
    request: pytest.FixtureRequest, clock: ManualClock
) -> AsyncIterator[ScriptedCluster]:
    """Two scripted brokers hosting topic "t" (partitions 0 and 1), seeded by the test module's
    SEED so that each module replays its own network schedule."""
    cluster = ScriptedCluster(clock, brokers=2, seed=request.module.SEED)
    cluster.create_topic("t", [0, 1])
    await cluster.start()
    yield cluster
    await cluster.stop()
