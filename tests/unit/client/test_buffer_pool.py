"""buffer.memory's pool: allocations up to the total, waiters served first come first served,
a wait bounded by max.block.ms on the injected clock."""

from __future__ import annotations

import asyncio

import pytest

from client.buffer_pool import BufferExhaustedError, BufferPool
from runtime.clock import ManualClock
from tests.unit.client.scripted_cluster import settle


async def test_allocations_up_to_the_total_succeed_at_once() -> None:
    pool = BufferPool(100, ManualClock())
    assert pool.try_allocate(60)
    assert pool.try_allocate(40)
    assert not pool.try_allocate(1)
    pool.release(40)
    assert pool.used_bytes == 60
    await pool.allocate(40, max_block_ms=0)  # free: no wait, even with no time to wait
    assert pool.used_bytes == 100


async def test_a_release_wakes_waiters_in_order_of_arrival() -> None:
    pool = BufferPool(100, ManualClock())
    assert pool.try_allocate(100)
    big = asyncio.create_task(pool.allocate(80, max_block_ms=1000))
    small = asyncio.create_task(pool.allocate(10, max_block_ms=1000))
    await settle()
    assert pool.waiting == 2
    assert not pool.try_allocate(10)  # someone waits: no overtaking
    pool.release(50)
    await settle()
    assert not big.done()  # the first in line needs 80
    assert not small.done()
    pool.release(50)
    await settle()
    assert big.done()
    assert small.done()
    assert pool.used_bytes == 90


async def test_a_wait_fails_after_max_block_ms_and_lets_the_next_one_through() -> None:
    clock = ManualClock()
    pool = BufferPool(100, clock)
    assert pool.try_allocate(50)
    big = asyncio.create_task(pool.allocate(80, max_block_ms=100))
    small = asyncio.create_task(pool.allocate(30, max_block_ms=1000))
    await settle()
    assert not small.done()  # behind the big one, though it would fit
    clock.advance(99)
    await settle()
    assert not big.done()
    clock.advance(1)
    await settle()
    with pytest.raises(BufferExhaustedError):
        big.result()
    assert small.done()
    assert small.exception() is None
    assert pool.used_bytes == 80


async def test_a_cancelled_waiter_takes_nothing() -> None:
    pool = BufferPool(100, ManualClock())
    assert pool.try_allocate(100)
    waiter = asyncio.create_task(pool.allocate(10, max_block_ms=1000))
    await settle()
    waiter.cancel()
    await settle()
    pool.release(100)
    assert pool.used_bytes == 0
    assert pool.waiting == 0


async def test_more_than_the_total_can_never_be_allocated() -> None:
    pool = BufferPool(100, ManualClock())
    with pytest.raises(ValueError, match=r"buffer\.memory"):
        await pool.allocate(101, max_block_ms=1000)
    with pytest.raises(ValueError, match="positive"):
        BufferPool(0, ManualClock())
