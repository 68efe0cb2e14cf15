"""Delayed operations and the purgatory that holds them (Kafka's `DelayedOperation` contract).

A `DelayedOperation` is a request that cannot be answered yet: a produce with acks=all waiting
for the high watermark, a fetch waiting for min_bytes. It completes exactly once, either because
a watched condition became true (`try_complete()` -> `force_complete()`) or because its timeout
passed (the timer calls `run()` -> `force_complete()` -> `on_expiration()`). `on_complete()` runs
in both cases, exactly once, and is where the response is sent.

`Purgatory.try_complete_else_watch(op, keys)` tries the operation once and, if it cannot complete
yet, adds it to the watcher list of every key (e.g. one per topic-partition it touches) and to the
timer. When something changes for a key, its owner calls `check_and_complete(key)`, which retries
every operation watching that key.

Ownership and why there are no locks: Kafka guards each operation with a lock because completion
(from request threads) and expiry (from the reaper thread) race. Here the purgatory, its timer and
every caller run on the event-loop thread, and none of these methods awaits, so each one runs to
its end before anything else can touch the same state. `force_complete()` reads and sets the
`completed` flag with no await in between; whichever of completion or expiry gets there first
wins, and the loser sees the flag. For the same reason Kafka's second `try_complete` after
registering watchers (which closes a window where another thread completed the condition) is not
needed: no other code can run between the first try and the registration.

Completed operations are removed from the watcher list they were completed through at once, but
an operation watching several keys lingers in the other keys' lists until those keys are checked.
The purgatory counts exactly how many entries belong to completed operations (each operation
knows how many lists hold it) and sweeps every list once that number passes `purge_interval`
(Kafka's purgeInterval, which Kafka compares against an estimate), so memory stays bounded by the
live operations even if some keys are never checked again, and no sweep runs while nothing is
stale.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable
from typing import Any, Generic, TypeVar

from runtime.clock import Clock
from runtime.timer import Timer, TimerTask

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)

DEFAULT_PURGE_INTERVAL = 1000


class DelayedOperation(TimerTask):
    """One delayed request. Subclasses implement try_complete, on_complete and on_expiration."""

    __slots__ = ("_completed", "_purgatory", "_watch_count", "delay_ms")

    def __init__(self, delay_ms: int) -> None:
        super().__init__()
        self.delay_ms = delay_ms
        self._completed = False
        # Set while watched: the purgatory and the number of watcher lists holding this
        # operation, so that completing it tells the purgatory how many entries went stale.
        self._purgatory: Purgatory[Any, Any] | None = None
        self._watch_count = 0

    @property
    def is_completed(self) -> bool:
        return self._completed

    def force_complete(self) -> bool:
        """Complete now unless already completed; True only for the call that completed it."""
        if self._completed:
            return False
        self._completed = True
        # Leaving the timer at once keeps the timer's pending count equal to live operations.
        self.cancel()
        if self._purgatory is not None:
            self._purgatory._live_entries -= self._watch_count
        self.on_complete()
        return True

    def try_complete(self) -> bool:
        """Check the condition; if it holds, call and return `force_complete()`."""
        raise NotImplementedError

    def on_complete(self) -> None:
        """Send the response. Runs exactly once."""
        raise NotImplementedError

    def on_expiration(self) -> None:
        """Runs after `on_complete()` when completion was caused by the timeout."""
        raise NotImplementedError

    def run(self) -> None:
        if self.force_complete():
            self.on_expiration()


Op = TypeVar("Op", bound=DelayedOperation)


class Purgatory(Generic[K, Op]):
    """Watcher lists by key plus a timer for expiry. Owned by the event-loop thread."""

    def __init__(
        self,
        name: str,
        clock: Clock,
        *,
        purge_interval: int = DEFAULT_PURGE_INTERVAL,
    ) -> None:
        self.name = name
        # A timer of its own, as in Kafka, so that its pending count is this purgatory's
        # number of delayed operations.
        self._timer = Timer(clock, name=f"{name}-timer")
        self._purge_interval = purge_interval
        self._watchers: dict[K, list[Op]] = {}
        # Entries over all watcher lists, and those of them belonging to operations not yet
        # completed; the difference is exactly the stale entries a sweep would remove.
        self._entries = 0
        self._live_entries = 0

    def try_complete_else_watch(self, op: Op, keys: Iterable[K]) -> bool:
        """Complete `op` now if it can; otherwise watch it under every key until it completes
        or expires. Returns True if it completed here."""
        if op.try_complete():
            return True
        if op._purgatory is not None:
            raise ValueError(f"{self.name}: {op!r} is already watched")
        watched = 0
        for key in keys:
            watchers = self._watchers.get(key)
            if watchers is None:
                self._watchers[key] = [op]
            else:
                watchers.append(op)
            watched += 1
        if watched == 0:
            raise ValueError(f"{self.name}: a delayed operation needs at least one key")
        op._purgatory = self
        op._watch_count = watched
        self._entries += watched
        self._live_entries += watched
        self._timer.add(op, op.delay_ms)
        if self._entries - self._live_entries > self._purge_interval:
            purged = self.purge_completed()
            log.debug("%s: purged %d completed operations from watcher lists", self.name, purged)
        return False

    def check_and_complete(self, key: K) -> int:
        """Retry the operations watching `key`; returns how many completed now."""
        watchers = self._watchers.pop(key, None)
        if watchers is None:
            return 0
        completed = 0
        remaining: list[Op] = []
        for op in watchers:
            if op.is_completed:
                continue
            if op.try_complete():
                completed += 1
            else:
                remaining.append(op)
        self._entries -= len(watchers) - len(remaining)
        # on_complete may have watched new operations under this key meanwhile; keep them.
        added = self._watchers.pop(key, None)
        if added:
            remaining.extend(added)
        if remaining:
            self._watchers[key] = remaining
        return completed

    @property
    def watched(self) -> int:
        """Entries over all watcher lists (an operation under three keys counts three times)."""
        return self._entries

    @property
    def delayed(self) -> int:
        """Operations neither completed nor expired."""
        return self._timer.pending

    @property
    def timer(self) -> Timer:
        return self._timer

    def purge_completed(self) -> int:
        """Drop completed operations from every watcher list; returns how many entries went."""
        purged = 0
        for key in list(self._watchers):
            ops = self._watchers[key]
            live = [op for op in ops if not op.is_completed]
            purged += len(ops) - len(live)
            if live:
                self._watchers[key] = live
            else:
                del self._watchers[key]
        self._entries -= purged
        return purged

    def close(self) -> None:
        """Stop expiring; pending operations are dropped without completing."""
        self._timer.close()
        self._watchers.clear()
        self._entries = self._live_entries = 0
