from __future__ import annotations

import asyncio

import pytest

from runtime.clock import ManualClock, SystemClock


async def test_manual_clock_wakes_sleepers_in_deadline_order() -> None:
    clock = ManualClock(start_ms=100)
    woke: list[tuple[str, int]] = []

    async def sleeper(name: str, delay_s: float) -> None:
        await clock.sleep(delay_s)
        woke.append((name, clock.monotonic_ms()))

    tasks = [
        asyncio.create_task(sleeper(name, delay))
        for name, delay in [("late", 0.3), ("early", 0.1), ("mid", 0.2), ("tie", 0.2)]
    ]
    await asyncio.sleep(0)
    clock.advance(150)
    await asyncio.sleep(0)
    assert [name for name, _ in woke] == ["early"]
    clock.advance(1_000)
    await asyncio.gather(*tasks)
    assert [name for name, _ in woke] == ["early", "mid", "tie", "late"]
    assert clock.monotonic_ms() == 1_250


async def test_alarms_see_their_own_deadline_and_can_chain() -> None:
    clock = ManualClock()
    seen: list[int] = []

    def again() -> None:
        seen.append(clock.monotonic_ms())
        if len(seen) < 3:
            clock.call_at_ns(clock.monotonic_ns() + 10_000_000, again)

    clock.call_at_ns(5_000_000, again)
    clock.advance(100)
    assert seen == [5, 15, 25]


async def test_cancelled_alarm_does_not_run_and_time_never_goes_back() -> None:
    clock = ManualClock()
    ran: list[int] = []
    alarm = clock.call_at_ns(1_000_000, lambda: ran.append(1))
    alarm.cancel()
    clock.advance(5)
    assert ran == []
    with pytest.raises(ValueError, match="backwards"):
        clock.advance(-1)


def test_wall_time_moves_with_monotonic_time() -> None:
    clock = ManualClock(wall_offset_ms=1_000)
    clock.advance(42)
    assert clock.wall_ms() == 1_042
    system = SystemClock()
    assert system.monotonic_ms() <= system.monotonic_ms()
