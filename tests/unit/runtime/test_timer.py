"""The Timer driver under a manual clock: exactly once, never early, at most one tick late."""

from __future__ import annotations

import asyncio
import random

import pytest

from runtime.clock import ManualClock, SystemClock
from runtime.timer import CallbackTask, Timer, TimerTask


class Recorder:
    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.fired: list[tuple[str, int]] = []

    def task(self, name: str) -> CallbackTask:
        return CallbackTask(0, lambda: self.fired.append((name, self.clock.monotonic_ms())))


async def test_tasks_fire_at_their_deadline_in_order() -> None:
    clock = ManualClock(start_ms=1_000)
    timer = Timer(clock)
    rec = Recorder(clock)
    for name, delay in [("c", 450), ("a", 5), ("b", 25), ("d", 8_000)]:
        timer.add(rec.task(name), delay)
    assert timer.pending == 4
    clock.advance(4)
    assert rec.fired == []
    clock.advance(10_000)
    assert rec.fired == [("a", 1_005), ("b", 1_025), ("c", 1_450), ("d", 9_000)]
    assert timer.pending == 0


async def test_random_schedule_fires_each_task_once_on_time() -> None:
    seed = 20261122
    rng = random.Random(seed)
    clock = ManualClock()
    timer = Timer(clock)
    deadlines: dict[int, int] = {}
    fired: dict[int, int] = {}
    cancelled: set[int] = set()
    tasks: dict[int, TimerTask] = {}

    def make(i: int) -> CallbackTask:
        def run() -> None:
            assert i not in fired, f"task {i} fired twice (seed {seed})"
            fired[i] = clock.monotonic_ms()

        return CallbackTask(0, run)

    for i in range(2_000):
        delay = rng.choice([rng.randrange(0, 30), rng.randrange(0, 5_000), rng.randrange(0, 10**6)])
        tasks[i] = make(i)
        timer.add(tasks[i], delay)
        deadlines[i] = clock.monotonic_ms() + delay
        if rng.random() < 0.2:
            victim = rng.randrange(0, i + 1)
            if victim not in fired:
                tasks[victim].cancel()
                cancelled.add(victim)
        await asyncio.sleep(0)  # let due-on-add tasks (delay 0) run, as the loop would
        clock.advance(rng.randrange(0, 3))
    clock.advance(2 * 10**6)
    await asyncio.sleep(0)
    assert set(fired) == set(deadlines) - cancelled, f"seed {seed}"
    for i, at in fired.items():
        assert deadlines[i] <= at <= deadlines[i] + 1, f"task {i} at {at}: {deadlines[i]}, {seed}"
    assert timer.pending == 0


async def test_zero_delay_runs_soon_but_not_inside_add() -> None:
    clock = ManualClock()
    timer = Timer(clock)
    rec = Recorder(clock)
    timer.add(rec.task("now"), 0)
    assert rec.fired == []
    assert timer.pending == 1
    await asyncio.sleep(0)
    assert rec.fired == [("now", 0)]
    assert timer.pending == 0


async def test_cancelled_tasks_never_fire_and_leave_the_count() -> None:
    clock = ManualClock()
    timer = Timer(clock)
    rec = Recorder(clock)
    soon, later = rec.task("soon"), rec.task("later")
    timer.add(soon, 0)
    timer.add(later, 50)
    soon.cancel()
    later.cancel()
    assert timer.pending == 0
    await asyncio.sleep(0)
    clock.advance(100)
    assert rec.fired == []
    assert clock.pending_alarms == 0, "the alarm is dropped when nothing is left"


async def test_a_task_is_added_once_only() -> None:
    timer = Timer(ManualClock())
    task = CallbackTask(0, lambda: None)
    timer.add(task, 10)
    with pytest.raises(ValueError, match="already"):
        timer.add(task, 20)


async def test_a_failing_task_does_not_stop_the_others(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    timer = Timer(clock)
    rec = Recorder(clock)

    def boom() -> None:
        raise RuntimeError("boom")

    timer.call_later(5, boom)
    timer.add(rec.task("after"), 6)
    clock.advance(10)
    assert rec.fired == [("after", 6)]
    assert "boom" in caplog.text


async def test_close_cancels_everything() -> None:
    clock = ManualClock()
    timer = Timer(clock)
    rec = Recorder(clock)
    timer.add(rec.task("x"), 10)
    timer.add(rec.task("y"), 0)
    timer.close()
    clock.advance(100)
    await asyncio.sleep(0)
    assert rec.fired == []
    assert timer.pending == 0
    with pytest.raises(RuntimeError, match="closed"):
        timer.add(rec.task("z"), 1)


async def test_system_clock_drives_the_timer() -> None:
    timer = Timer(SystemClock())
    done = asyncio.Event()
    timer.call_later(2, done.set)
    await asyncio.wait_for(done.wait(), timeout=5)
    assert timer.pending == 0


async def test_a_task_added_after_an_idle_spell_fires_on_time() -> None:
    # The wheel moves only on alarms; with none armed it lags the clock, and a task placed
    # against the stale time would land in an already expired bucket and fire late.
    clock = ManualClock()
    timer = Timer(clock)
    rec = Recorder(clock)
    clock.advance(20)
    timer.add(rec.task("after-idle"), 8)
    clock.advance(1_000)
    assert rec.fired == [("after-idle", 28)]


async def test_tasks_due_while_the_wheel_lagged_still_fire() -> None:
    clock = ManualClock()
    timer = Timer(clock)
    rec = Recorder(clock)
    timer.add(rec.task("early"), 5)
    # Move the clock past the deadline without letting the alarm run, then add: the catch-up
    # inside add must not lose the task that fell due meanwhile.
    clock._now_ns = 50 * 1_000_000
    timer.add(rec.task("late"), 10)
    await asyncio.sleep(0)
    clock.advance(100)
    assert [name for name, _ in rec.fired] == ["early", "late"]
    assert timer.pending == 0
