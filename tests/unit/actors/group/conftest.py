"""Fixtures of the GroupShard tests: a manual clock, an in-memory offsets log, a loaded shard."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from actors.group.shard import GroupShard
from runtime.clock import ManualClock
from tests.unit.actors.group.shard_harness import MemoryOffsetsLog, start_shard


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def offsets_log() -> MemoryOffsetsLog:
    return MemoryOffsetsLog()


@pytest.fixture
async def shard(clock: ManualClock, offsets_log: MemoryOffsetsLog) -> AsyncIterator[GroupShard]:
    started = await start_shard(clock, offsets_log)
    yield started
    await started.stop()
