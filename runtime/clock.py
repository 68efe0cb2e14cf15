"""Injected time: every component that reads time or waits takes a `Clock`.

Two implementations:

* `SystemClock` reads `time.monotonic_ns()` / `time.time_ns()` and schedules alarms on the running
  event loop.
* `ManualClock` only moves when a test calls `advance()`. Alarms whose deadline the advance passes
  run synchronously inside `advance()`, in deadline order (ties in scheduling order), with the
  clock reading exactly each alarm's deadline while it runs, so "never early, at most one tick
  late" can be asserted to the millisecond. `sleep()` is an alarm that resolves a future, so
  sleepers wake in deadline order too.

The single scheduling primitive is `call_at_ns(deadline_ns, callback) -> Alarm`; `sleep()` is
built on it, and so is the timing wheel's driver (`runtime.timer.Timer`), which therefore needs no
task of its own.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Protocol

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


class Alarm(Protocol):
    """A scheduled callback; `cancel()` is idempotent and safe after it ran."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    def monotonic_ns(self) -> int:
        """Monotonic time for durations and deadlines (not related to wall time)."""
        ...

    def monotonic_ms(self) -> int: ...

    def wall_ms(self) -> int:
        """Wall-clock milliseconds since the epoch, for record timestamps and log.roll.ms."""
        ...

    def call_at_ns(self, deadline_ns: int, callback: Callable[[], None]) -> Alarm:
        """Run `callback` on the event loop once `monotonic_ns()` reaches `deadline_ns`."""
        ...

    async def sleep(self, delay_s: float) -> None: ...


def _delay_to_ns(delay_s: float) -> int:
    return max(0, round(delay_s * NS_PER_S))


async def _sleep_on(clock: Clock, delay_s: float) -> None:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def wake() -> None:
        if not future.done():
            future.set_result(None)

    alarm = clock.call_at_ns(clock.monotonic_ns() + _delay_to_ns(delay_s), wake)
    try:
        await future
    finally:
        alarm.cancel()


class SystemClock:
    """The real clock. Alarms go on the running loop (asyncio or uvloop)."""

    def monotonic_ns(self) -> int:
        return time.monotonic_ns()

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // NS_PER_MS

    def wall_ms(self) -> int:
        return time.time_ns() // NS_PER_MS

    def call_at_ns(self, deadline_ns: int, callback: Callable[[], None]) -> Alarm:
        # The loop's own clock may differ in base and resolution (uvloop caches a millisecond
        # clock per iteration), so translate to a relative delay rather than an absolute time.
        delay_s = max(0, deadline_ns - time.monotonic_ns()) / NS_PER_S
        return asyncio.get_running_loop().call_later(delay_s, callback)

    async def sleep(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)


class _ManualAlarm:
    __slots__ = ("callback", "cancelled", "deadline_ns")

    def __init__(self, deadline_ns: int, callback: Callable[[], None]) -> None:
        self.deadline_ns = deadline_ns
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that moves only when `advance()` is called. For deterministic tests."""

    def __init__(self, start_ms: int = 0, *, wall_offset_ms: int = 1_700_000_000_000) -> None:
        self._now_ns = start_ms * NS_PER_MS
        self._wall_offset_ms = wall_offset_ms
        self._alarms: list[tuple[int, int, _ManualAlarm]] = []
        self._seq = itertools.count()

    def monotonic_ns(self) -> int:
        return self._now_ns

    def monotonic_ms(self) -> int:
        return self._now_ns // NS_PER_MS

    def wall_ms(self) -> int:
        return self._wall_offset_ms + self._now_ns // NS_PER_MS

    def call_at_ns(self, deadline_ns: int, callback: Callable[[], None]) -> Alarm:
        alarm = _ManualAlarm(deadline_ns, callback)
        if deadline_ns <= self._now_ns:
            # Already due: behave like a real loop and run it soon, never inside this call.
            asyncio.get_running_loop().call_soon(self._fire, alarm)
        else:
            heapq.heappush(self._alarms, (deadline_ns, next(self._seq), alarm))
        return alarm

    async def sleep(self, delay_s: float) -> None:
        await _sleep_on(self, delay_s)

    @property
    def pending_alarms(self) -> int:
        return sum(1 for _, _, alarm in self._alarms if not alarm.cancelled)

    def advance(self, delta_ms: float) -> None:
        """Move time forward by `delta_ms`, running every alarm that falls due on the way."""
        if delta_ms < 0:
            raise ValueError(f"time cannot move backwards (delta_ms={delta_ms})")
        self.advance_to_ns(self._now_ns + round(delta_ms * NS_PER_MS))

    def advance_to_ns(self, target_ns: int) -> None:
        if target_ns < self._now_ns:
            raise ValueError(f"time cannot move backwards ({target_ns} < {self._now_ns})")
        # Alarms scheduled by callbacks for deadlines inside the window run in this call too.
        while self._alarms and self._alarms[0][0] <= target_ns:
            deadline_ns, _, alarm = heapq.heappop(self._alarms)
            self._now_ns = max(self._now_ns, deadline_ns)
            self._fire(alarm)
        self._now_ns = target_ns

    @staticmethod
    def _fire(alarm: _ManualAlarm) -> None:
        if not alarm.cancelled:
            alarm.cancelled = True
            alarm.callback()
