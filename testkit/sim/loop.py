"""The simulation's event loop and clock: virtual time, no threads, no entropy from outside.

Why a loop of its own: asyncio itself is deterministic in what it runs next (ready callbacks in
FIFO order, timers by deadline), but three things around it are not. Timers fire by the real
monotonic clock (`loop.time()`), so which timeout wins a race depends on how fast the machine
ran; `asyncio.to_thread` work completes on a thread pool at a time the OS picks; and a run that
waits for timers waits in real time. `SimulatedLoop` is asyncio's selector loop with those three
replaced:

* **Virtual time.** `time()` reads a counter of nanoseconds. When no callback is ready, the
  selector's `select(timeout)` does not sleep: it advances the counter to the next timer's
  deadline at once (it polls no real descriptor: `_VirtualSelector.select`), so a simulated
  minute of heartbeats and timeouts runs as fast as the CPU handles its events, and the same
  program reaches the same deadlines in the same order on every machine. A loop with nothing
  ready and no timer is stuck for good: `SimulationStuck`.
* **No worker threads.** `run_in_executor` (so `asyncio.to_thread`) runs the function inline and
  returns a finished future: file work (segment deletes, fsyncs, snapshots) completes at a
  deterministic point of the run.
* **A hook per time step.** `on_advance(now_ns)` callbacks run each time virtual time moves
  (every quiescent point of the cluster: all ready work done). The simulation samples its
  invariants there.

`SimClock` is ketch's `Clock` on that loop: monotonic time is the loop's, wall time a fixed
epoch plus the monotonic time plus an offset the fault plan can jump (a wall-clock step, as NTP
makes; monotonic time never jumps), alarms are the loop's timers.

`deterministic_entropy(seed)` replaces, for the duration of a run, what ketch draws from the OS:
`os.urandom` (and so `uuid.uuid4`), `secrets.token_bytes`/`token_hex`, the `random` module's
global generator, and the seed of every `random.Random()` made without one (CPython seeds those
from the OS in C, out of reach: `random.Random` itself is swapped for a subclass that seeds
from the run's generator), each from one `random.Random(seed)`. String hashing is the interpreter's
(PYTHONHASHSEED): fixed within a process, so a seed replays exactly in the process that ran it;
the runner (`python -m tests.sim`) pins PYTHONHASHSEED so a seed printed by one run replays in
another.

Ownership: one loop per simulation run, driven by `run_until_complete` on the caller's thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import secrets
import selectors
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

from runtime.clock import NS_PER_MS, NS_PER_S, Alarm

T = TypeVar("T")

# Wall time at virtual zero: a fixed instant, so timestamps in logs replay too.
SIM_EPOCH_MS: Final = 1_700_000_000_000


class SimulationStuck(RuntimeError):
    """Nothing is ready and no timer is set: no event can ever happen again."""


class _VirtualSelector(selectors.DefaultSelector):
    """Polls nothing; a wait becomes a jump of virtual time."""

    def __init__(self) -> None:
        super().__init__()
        self.loop: SimulatedLoop | None = None

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        # No real descriptor is polled: nothing in a simulation runs on another thread
        # (executors run inline), so the loop's self-pipe never carries a wake-up that
        # `_ready` does not already hold, and a poll per loop turn cost a tenth of a run.
        if timeout == 0:
            return []
        loop = self.loop
        assert loop is not None
        if timeout is None:
            raise SimulationStuck("no callback is ready and no timer is set")
        loop.advance(math.ceil(timeout * NS_PER_S))
        return []


class SimulatedLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._now_ns = 0
        self._on_advance: list[Callable[[int], None]] = []
        self.steps = 0  # time advances so far

    def time(self) -> float:
        return self._now_ns / NS_PER_S

    @property
    def now_ns(self) -> int:
        return self._now_ns

    def advance(self, delta_ns: int) -> None:
        if delta_ns <= 0:
            return
        self._now_ns += delta_ns
        self.steps += 1
        for hook in self._on_advance:
            hook(self._now_ns)

    def on_advance(self, hook: Callable[[int], None]) -> Callable[[], None]:
        """Call `hook(now_ns)` each time virtual time moves; returns the function that removes
        it."""
        self._on_advance.append(hook)
        return lambda: self._on_advance.remove(hook)

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        future: asyncio.Future[T] = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as error:
            future.set_exception(error)
        return future


class _LoopAlarm:
    __slots__ = ("_handle",)

    def __init__(self, handle: asyncio.TimerHandle) -> None:
        self._handle = handle

    def cancel(self) -> None:
        self._handle.cancel()


class SimClock:
    """ketch's `Clock` on a `SimulatedLoop`'s virtual time."""

    def __init__(self, loop: SimulatedLoop, *, epoch_ms: int = SIM_EPOCH_MS) -> None:
        self._loop = loop
        self._epoch_ms = epoch_ms
        self.wall_offset_ms = 0  # moved by clock-jump faults

    def monotonic_ns(self) -> int:
        return self._loop.now_ns

    def monotonic_ms(self) -> int:
        return self._loop.now_ns // NS_PER_MS

    def wall_ms(self) -> int:
        return self._epoch_ms + self._loop.now_ns // NS_PER_MS + self.wall_offset_ms

    def call_at_ns(self, deadline_ns: int, callback: Callable[[], None]) -> Alarm:
        return _LoopAlarm(self._loop.call_at(deadline_ns / NS_PER_S, callback))

    async def sleep(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)

    def jump_wall(self, delta_ms: int) -> None:
        """Step the wall clock (forward or back); monotonic time is untouched."""
        self.wall_offset_ms += delta_ms


@contextlib.contextmanager
def deterministic_entropy(seed: int) -> Iterator[random.Random]:
    """Replace the process's entropy sources with one seeded generator (the module docstring
    says which) until the block ends; yields that generator."""
    rng = random.Random(f"entropy-{seed}")
    saved = (os.urandom, secrets.token_bytes, secrets.token_hex, random.getstate())
    unseeded = random.Random

    class SeededRandom(unseeded):  # type: ignore[valid-type,misc]
        def __init__(self, x: Any = None) -> None:
            super().__init__(rng.getrandbits(64) if x is None else x)

    def urandom(size: int) -> bytes:
        return rng.randbytes(size)

    def token_bytes(nbytes: int | None = None) -> bytes:
        return rng.randbytes(32 if nbytes is None else nbytes)

    def token_hex(nbytes: int | None = None) -> str:
        return token_bytes(nbytes).hex()

    os.urandom = urandom
    secrets.token_bytes = token_bytes
    secrets.token_hex = token_hex
    random.seed(f"global-{seed}")
    random.Random = SeededRandom  # type: ignore[misc]
    try:
        yield rng
    finally:
        os.urandom, secrets.token_bytes, secrets.token_hex, state = saved
        random.setstate(state)
        random.Random = unseeded  # type: ignore[misc]
