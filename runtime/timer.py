"""Hierarchical timing wheel (Kafka's `TimingWheel` / `SystemTimer` design) and its driver.

The wheel
---------
A wheel has `wheel_size` buckets, each spanning `tick_ms`; together they span
`interval_ms = tick_ms * wheel_size`. Its `current_ms` is always a multiple of `tick_ms`. A task
goes into the bucket of its *virtual id* `deadline // tick_ms`, at index
`virtual_id % wheel_size`, provided the virtual id lies within `wheel_size` ticks of the current
one; the bucket's expiration becomes `virtual_id * tick_ms`. A deadline at or before the current
time is due now. A later one goes to the overflow wheel, created on demand, whose tick is this
wheel's whole interval. Wheels are thus 1 ms, 20 ms, 400 ms, 8 s, 160 s, ... per bucket, and
adding a task is O(1) whatever its deadline. A coarse bucket covers `[expiration, expiration +
tick)`; when its expiration passes, its tasks are re-inserted and land in finer wheels.

Worked example (tick 1 ms, size 20, start 0). Add deadlines 5, 19, 25 and 410:

* 5 and 19 fall in the first wheel ([1, 20)): buckets 5 and 19, expirations 5 and 19.
* 25 overflows to the 20 ms wheel ([20, 400)): virtual id 1, bucket 1, expiration 20.
* 410 overflows twice, to the 400 ms wheel: virtual id 1, bucket 1, expiration 400.

Only buckets are ordered, never tasks: each bucket whose expiration is set goes on one shared
min-heap (Kafka uses a DelayQueue of buckets). `advance_clock(25)` pops bucket 5, bucket 19 (their
tasks are due) and the 20 ms wheel's bucket 1 (expiration 20): the first wheel moves to 20 and the
task with deadline 25 is re-inserted there, into bucket 25 % 20 = 5 with expiration 25, which is
also <= 25 and is popped in the same call. At 400 the task with deadline 410 cascades down to the
20 ms wheel, then at 400 again to the 1 ms wheel, and fires at 410. The heap never holds more
than `wheel_size` entries per level, so its cost does not grow with the number of tasks.

Buckets are insertion-ordered dicts keyed by task: adding and cancelling are single C-level dict
operations (O(1), memory released at once), and a task knows its bucket so it can remove itself.
The wheel is pure: it never reads a clock; `advance_clock(now_ms)` returns the due tasks.

The driver
----------
`Timer` drives a wheel from an injected `Clock`. Instead of a reaper task that polls, it keeps one
clock alarm armed at the earliest bucket expiration and re-arms it after each expiry and when an
earlier task is added; the alarm callback advances the wheel and runs the due tasks. Under a
`ManualClock` the alarm runs inside `clock.advance()`, so a task fires in the advance that passes
its deadline: never early, and at most one tick late. Everything runs on the event-loop thread;
the wheel and the timer are not thread-safe and need no lock.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Callable, Iterator

from runtime.clock import NS_PER_MS, Alarm, Clock

log = logging.getLogger(__name__)

DEFAULT_TICK_MS = 1
DEFAULT_WHEEL_SIZE = 20

# A task's states, as module constants: they are read on every add and cancel.
_PENDING = 0
_FIRED = 1
_CANCELLED = 2


class TimerTask:
    """Something to run once at `deadline_ms`. Subclasses implement `run()`."""

    __slots__ = ("_bucket", "_state", "_timer", "deadline_ms")

    def __init__(self, deadline_ms: int = 0) -> None:
        self.deadline_ms = deadline_ms
        self._bucket: _Bucket | None = None
        self._state = _PENDING
        # The Timer holding this task, so that cancelling keeps its pending count exact.
        self._timer: Timer | None = None

    def run(self) -> None:
        raise NotImplementedError

    def cancel(self) -> None:
        """Never run this task. Idempotent; a no-op once it has fired."""
        if self._state == _PENDING:
            self._state = _CANCELLED
            timer = self._timer
            if timer is not None:
                timer._pending -= 1
        bucket = self._bucket
        if bucket is not None:
            del bucket[self]
            self._bucket = None

    @property
    def cancelled(self) -> bool:
        return self._state == _CANCELLED

    @property
    def fired(self) -> bool:
        return self._state == _FIRED


class CallbackTask(TimerTask):
    """A timer task that calls a function (the `call_later` shape)."""

    __slots__ = ("callback",)

    def __init__(self, deadline_ms: int, callback: Callable[[], object]) -> None:
        # Fields set directly rather than via super().__init__: this is on the add path.
        self.deadline_ms = deadline_ms
        self._bucket = None
        self._state = _PENDING
        self._timer = None
        self.callback = callback

    def run(self) -> None:
        self.callback()


class _Bucket(dict[TimerTask, None]):
    """The tasks of one slot; `expiration` is -1 while the bucket is not on the heap."""

    __slots__ = ("expiration",)

    def __init__(self) -> None:
        super().__init__()
        self.expiration = -1


# Heap entries order buckets by expiration; the sequence number breaks ties so that buckets
# themselves (dicts) are never compared.
_HeapEntry = tuple[int, int, _Bucket]


class TimingWheel:
    """One level of the hierarchy; the root level is the wheel callers use."""

    __slots__ = (
        "_heap",
        "_overflow",
        "_seq",
        "buckets",
        "current_ms",
        "interval_ms",
        "limit_ms",
        "now_ms",
        "tick_ms",
        "wheel_size",
    )

    def __init__(
        self,
        tick_ms: int = DEFAULT_TICK_MS,
        wheel_size: int = DEFAULT_WHEEL_SIZE,
        start_ms: int = 0,
        *,
        _heap: list[_HeapEntry] | None = None,
        _seq: Iterator[int] | None = None,
    ) -> None:
        if tick_ms < 1 or wheel_size < 2:
            raise ValueError(f"need tick_ms >= 1 and wheel_size >= 2, not {tick_ms}, {wheel_size}")
        self.tick_ms = tick_ms
        self.wheel_size = wheel_size
        self.interval_ms = tick_ms * wheel_size
        self.current_ms = start_ms - start_ms % tick_ms
        # Deadlines from here on belong to coarser wheels; kept with current_ms so that the add
        # path compares once per level instead of dividing.
        self.limit_ms = self.current_ms + self.interval_ms
        # The exact time of the last advance (current_ms is it rounded down to a tick); only
        # the root wheel uses it, to decide what is due.
        self.now_ms = start_ms
        self.buckets = [_Bucket() for _ in range(wheel_size)]
        self._heap: list[_HeapEntry] = [] if _heap is None else _heap
        self._seq = itertools.count() if _seq is None else _seq
        self._overflow: TimingWheel | None = None

    def add(self, task: TimerTask) -> bool:
        """Place `task` by its deadline. False if it is not pending or already due (then the
        caller runs it)."""
        if task._state != _PENDING:
            return False
        deadline = task.deadline_ms
        if deadline <= self.now_ms:
            old = task._bucket
            if old is not None:
                del old[task]
                task._bucket = None
            return False
        wheel = self
        if deadline < wheel.limit_ms:
            # Root buckets expire at the *last* millisecond of their tick, so that with a root
            # tick above 1 ms a task still never fires early. With a 1 ms root tick this is
            # Kafka's placement exactly.
            virtual_id = deadline // wheel.tick_ms
            expiration = virtual_id * wheel.tick_ms + wheel.tick_ms - 1
        else:
            # Climb to the level whose span holds the deadline (a loop, not recursion: this is
            # the add path). Coarser buckets expire at their first millisecond, so that they
            # cascade into finer wheels in time.
            while deadline >= wheel.limit_ms:
                overflow = wheel._overflow
                if overflow is None:
                    overflow = wheel._overflow = TimingWheel(
                        wheel.interval_ms,
                        wheel.wheel_size,
                        wheel.current_ms,
                        _heap=wheel._heap,
                        _seq=wheel._seq,
                    )
                wheel = overflow
            virtual_id = deadline // wheel.tick_ms
            expiration = virtual_id * wheel.tick_ms
        bucket = wheel.buckets[virtual_id % wheel.wheel_size]
        old = task._bucket
        if old is not None and old is not bucket:
            del old[task]
        bucket[task] = None
        task._bucket = bucket
        if bucket.expiration != expiration:
            bucket.expiration = expiration
            heapq.heappush(wheel._heap, (expiration, next(wheel._seq), bucket))
        return True

    def advance_clock(self, now_ms: int) -> list[TimerTask]:
        """Move time to `now_ms`; return every task whose deadline is <= now_ms, in deadline order
        of their buckets. Tasks in coarser buckets cascade into finer wheels on the way."""
        due: list[TimerTask] = []
        if now_ms > self.now_ms:
            self.now_ms = now_ms
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            expiration, _, bucket = heapq.heappop(heap)
            if bucket.expiration != expiration:
                continue
            bucket.expiration = -1
            self._advance_to(expiration)
            tasks = list(bucket)
            bucket.clear()
            for task in tasks:
                task._bucket = None
                if not self.add(task):
                    due.append(task)
        self._advance_to(now_ms)
        return due

    def next_expiration_ms(self) -> int | None:
        """The earliest expiration of a non-empty bucket, or None when nothing is pending."""
        heap = self._heap
        while heap:
            expiration, _, bucket = heap[0]
            if bucket.expiration == expiration and bucket:
                return expiration
            # A bucket emptied by cancellations: drop its entry so the driver sleeps longer.
            heapq.heappop(heap)
            if bucket.expiration == expiration:
                bucket.expiration = -1
        return None

    def clear(self) -> list[TimerTask]:
        """Remove and return every pending task, over all levels."""
        removed: list[TimerTask] = []
        wheel: TimingWheel | None = self
        while wheel is not None:
            for bucket in wheel.buckets:
                for task in bucket:
                    task._bucket = None
                removed.extend(bucket)
                bucket.clear()
                bucket.expiration = -1
            wheel = wheel._overflow
        self._heap.clear()
        return removed

    def __len__(self) -> int:
        """Exact count of pending tasks, over all levels (at most wheel_size buckets each)."""
        count = sum(len(bucket) for bucket in self.buckets)
        if self._overflow is not None:
            count += len(self._overflow)
        return count

    @property
    def levels(self) -> int:
        return 1 if self._overflow is None else 1 + self._overflow.levels

    def _advance_to(self, time_ms: int) -> None:
        wheel: TimingWheel | None = self
        while wheel is not None and time_ms >= wheel.current_ms + wheel.tick_ms:
            wheel.current_ms = time_ms - time_ms % wheel.tick_ms
            wheel.limit_ms = wheel.current_ms + wheel.interval_ms
            wheel = wheel._overflow


class Timer:
    """Runs timer tasks at their deadlines, driven by one alarm on the injected clock."""

    def __init__(
        self,
        clock: Clock,
        *,
        tick_ms: int = DEFAULT_TICK_MS,
        wheel_size: int = DEFAULT_WHEEL_SIZE,
        name: str = "timer",
    ) -> None:
        self._clock = clock
        self._now_ms = clock.monotonic_ms
        self._wheel = TimingWheel(tick_ms, wheel_size, clock.monotonic_ms())
        self._ready: list[TimerTask] = []
        self._alarm: Alarm | None = None
        self._alarm_at_ms: int | None = None
        self._closed = False
        self._pending = 0
        self.name = name

    @property
    def clock(self) -> Clock:
        return self._clock

    def add(self, task: TimerTask, delay_ms: int) -> None:
        """Run `task` once, `delay_ms` from now (0 or less: soon, never inside this call)."""
        if task._timer is not None or task._state != _PENDING or self._closed:
            if self._closed:
                raise RuntimeError(f"{self.name} is closed")
            raise ValueError(f"{task!r} was already added to a timer, or cancelled")
        now_ms = self._now_ms()
        wheel = self._wheel
        if now_ms > wheel.now_ms:
            # The wheel only moves on alarms, so after an idle spell it lags the clock; placing a
            # task against a stale current time could put it in a bucket that has already
            # expired. Catch up first (at most once per millisecond, so cheap on this path).
            caught_up = wheel.advance_clock(now_ms)
            if caught_up:
                self._ready.extend(caught_up)
                self._arm()
        deadline_ms = now_ms + delay_ms if delay_ms > 0 else now_ms
        task.deadline_ms = deadline_ms
        task._timer = self
        self._pending += 1
        if wheel.add(task):
            alarm_at_ms = self._alarm_at_ms
            if alarm_at_ms is None or deadline_ms < alarm_at_ms:
                self._arm()
        else:
            self._ready.append(task)
            self._arm()

    def call_later(self, delay_ms: int, callback: Callable[[], object]) -> TimerTask:
        task = CallbackTask(0, callback)
        self.add(task, delay_ms)
        return task

    @property
    def pending(self) -> int:
        """Tasks added and neither fired nor cancelled."""
        return self._pending

    def close(self) -> None:
        """Cancel every pending task and the alarm. Tasks never fire after this."""
        self._closed = True
        if self._alarm is not None:
            self._alarm.cancel()
            self._alarm = None
            self._alarm_at_ms = None
        for task in [*self._ready, *self._wheel.clear()]:
            task.cancel()
        self._ready.clear()

    def _arm(self) -> None:
        target = self._clock.monotonic_ms() if self._ready else self._wheel.next_expiration_ms()
        if target == self._alarm_at_ms:
            return
        if self._alarm is not None:
            self._alarm.cancel()
            self._alarm = None
        self._alarm_at_ms = target
        if target is not None:
            self._alarm = self._clock.call_at_ns(target * NS_PER_MS, self._on_alarm)

    def _on_alarm(self) -> None:
        self._alarm = None
        self._alarm_at_ms = None
        due = self._ready
        self._ready = []
        due.extend(self._wheel.advance_clock(self._clock.monotonic_ms()))
        for task in due:
            if task._state != _PENDING:
                continue
            task._state = _FIRED
            self._pending -= 1
            try:
                task.run()
            except Exception:
                log.exception("%s: timer task %r failed", self.name, task)
        if not self._closed:
            self._arm()
