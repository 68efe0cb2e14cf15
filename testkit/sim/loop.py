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
* **A node can be frozen, as by SIGSTOP.** Every callback belongs to the node named by the
  `NODE` context variable of the context it runs in (asyncio runs each handle in the context it
  was scheduled from; a task copies the context it is created in and runs every step there, and
  a future's done callbacks keep their adder's context). testkit/cluster.py starts each node's
  tasks in `node_context(name)`, so everything a node does is that node's. `freeze(node)` parks
  the node's handles: its ready callbacks (in order) and its timers, and whatever is scheduled
  for it later (a task of its woken by data arriving on its connection, a connection handler
  started by a peer's connect): nothing of it runs, nothing is sent by it, while the rest of the
  cluster goes on. `thaw(node)` is SIGCONT: the parked ready callbacks go back in order, the
  timers at their own deadlines, so those that expired meanwhile fire at once, in deadline order,
  after the ready ones (monotonic time jumped for the process). Callbacks of no node (the
  harness, the clients, the network's deliveries) are never frozen.

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

Freezing reaches into asyncio's internals (3.11's `BaseEventLoop`): `_ready` (the deque of
handles to run), `_scheduled` (the heap of timers), a handle's `_context` and a timer's
`_scheduled` flag. `_run_once` counts `_ready` before running a turn and pops that many, so a
freeze in mid-turn must not shorten it: a parked ready handle leaves a cancelled placeholder in
its place. A timer is parked with `_scheduled` cleared, so that cancelling it while parked does
not count it among the heap's cancelled timers (`_timer_handle_cancelled`), and a cancelled one
is dropped at the thaw. Handles added by `call_soon_threadsafe` bypass the check (nothing in a
simulation runs on another thread).

Ownership: one loop per simulation run, driven by `run_until_complete` on the caller's thread;
the fault injector is the one caller of `freeze` and `thaw`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import heapq
import math
import os
import random
import secrets
import selectors
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

from runtime.clock import NS_PER_MS, NS_PER_S, Alarm

T = TypeVar("T")

# Wall time at virtual zero: a fixed instant, so timestamps in logs replay too.
SIM_EPOCH_MS: Final = 1_700_000_000_000


# Whose work a callback is (module docstring): a node's name, None for the harness, the
# clients and the network.
NODE: Final[contextvars.ContextVar[str | None]] = contextvars.ContextVar("sim_node", default=None)


def node_context(node: str) -> contextvars.Context:
    """A copy of the current context in which the work is `node`'s: create the node's tasks in
    it (`loop.create_task(coro, context=node_context(name))`) and what they schedule is its too."""
    context = contextvars.copy_context()
    context.run(NODE.set, node)
    return context


def _node_of(handle: asyncio.Handle) -> str | None:
    context: contextvars.Context = handle._context  # type: ignore[attr-defined]
    return context.get(NODE)


def _nothing() -> None:
    pass


class SimulationStuck(RuntimeError):
    """Nothing is ready and no timer is set: no event can ever happen again."""


class _Parked:
    """A frozen node's handles: ready ones in the order they were to run, and timers."""

    __slots__ = ("ready", "timers")

    def __init__(self) -> None:
        self.ready: list[asyncio.Handle] = []
        self.timers: list[asyncio.TimerHandle] = []


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
            frozen = f" (frozen: {', '.join(loop.frozen)})" if loop.frozen else ""
            raise SimulationStuck(f"no callback is ready and no timer is set{frozen}")
        loop.advance(math.ceil(timeout * NS_PER_S))
        return []


class SimulatedLoop(asyncio.SelectorEventLoop):
    # BaseEventLoop's own (module docstring), declared for the type checker.
    _ready: deque[asyncio.Handle]
    _scheduled: list[asyncio.TimerHandle]
    _timer_cancelled_count: int  # the cancelled timers still in `_scheduled`

    def __init__(self) -> None:
        selector = _VirtualSelector()
        super().__init__(selector)
        selector.loop = self
        self._now_ns = 0
        self._on_advance: list[Callable[[int], None]] = []
        self.steps = 0  # time advances so far
        self._frozen: dict[str, _Parked] = {}
        # Stands in `_ready` for a handle parked in mid-turn: `_run_once` skips it.
        self._vacated = asyncio.Handle(_nothing, (), self)
        self._vacated.cancel()

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

    # -- freezing a node (module docstring) ---------------------------------------------------

    @property
    def frozen(self) -> list[str]:
        return list(self._frozen)

    def freeze(self, node: str) -> None:
        """SIGSTOP `node`: none of its callbacks or timers runs until `thaw(node)`. Freezing a
        frozen node, or one with no work, is harmless."""
        if node in self._frozen:
            return
        parked = self._frozen[node] = _Parked()
        ready = self._ready
        mine = [i for i, h in enumerate(ready) if not h.cancelled() and _node_of(h) == node]
        for index in mine:
            parked.ready.append(ready[index])
            ready[index] = self._vacated  # `_run_once` may be counting on the length
        kept: list[asyncio.TimerHandle] = []
        for timer in self._scheduled:
            if not timer.cancelled() and _node_of(timer) == node:
                _set_scheduled(timer, False)
                parked.timers.append(timer)
            else:
                kept.append(timer)  # a cancelled one too: the heap's tally counts it
        heapq.heapify(kept)
        self._scheduled[:] = kept

    def thaw(self, node: str) -> None:
        """SIGCONT `node`: its parked ready callbacks run next, in order, then its timers at
        their deadlines (those past fire at once, earliest first). A no-op unless frozen."""
        parked = self._frozen.pop(node, None)
        if parked is None:
            return
        self._ready.extend(h for h in parked.ready if not h.cancelled())
        for timer in parked.timers:
            if not timer.cancelled():
                _set_scheduled(timer, True)
                heapq.heappush(self._scheduled, timer)

    def call_soon(  # type: ignore[override]
        self,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        handle = super().call_soon(callback, *args, context=context)
        if self._frozen:  # else nothing to check: the common case stays cheap
            parked = self._parking_for(handle)
            if parked is not None:
                last = self._ready.pop()
                assert last is handle, "call_soon appends its handle to _ready"
                parked.ready.append(handle)
        return handle

    def call_at(  # type: ignore[override]
        self,
        when: float,
        callback: Callable[..., object],
        *args: Any,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        timer = super().call_at(when, callback, *args, context=context)
        if self._frozen:
            parked = self._parking_for(timer)
            if parked is not None:
                self._unschedule(timer)
                parked.timers.append(timer)
        return timer

    def _parking_for(self, handle: asyncio.Handle) -> _Parked | None:
        node = _node_of(handle)
        return None if node is None else self._frozen.get(node)

    def _unschedule(self, timer: asyncio.TimerHandle) -> None:
        # By identity: TimerHandle's == compares deadline and callback, not the object.
        scheduled = self._scheduled
        index = next(i for i, t in enumerate(scheduled) if t is timer)
        scheduled[index] = scheduled[-1]
        scheduled.pop()
        heapq.heapify(scheduled)
        _set_scheduled(timer, False)

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        future: asyncio.Future[T] = self.create_future()
        try:
            future.set_result(func(*args))
        except BaseException as error:
            future.set_exception(error)
        return future


def _set_scheduled(timer: asyncio.TimerHandle, scheduled: bool) -> None:
    # Whether the timer sits in the loop's heap: `_timer_handle_cancelled` counts a cancelled
    # one only then (module docstring).
    timer._scheduled = scheduled  # type: ignore[attr-defined]


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

    @property
    def loop(self) -> SimulatedLoop:
        return self._loop

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
