"""`Gate`: the FIFO semaphore of `BrokerConnection`'s request path (in-flight slots, writes).

Used from the event loop thread only, which is its lock.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Gate:
    """A FIFO semaphore whose uncontended entry is a plain call, not a coroutine.

    Every request passes two of these (an in-flight slot and the right to write), so the
    common case, a free gate, must cost next to nothing. A unit released while tasks wait is
    handed straight to the oldest waiter, which keeps the order of arrival.
    """

    __slots__ = ("_free", "_waiters")

    def __init__(self, capacity: int) -> None:
        assert capacity > 0
        self._free = capacity
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_enter(self) -> bool:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return True
        return False

    async def enter(self) -> None:
        if self.try_enter():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.leave()  # handed a unit, then cancelled: pass it on
            raise

    def leave(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():  # cancelled waiters stay queued until skipped here
                waiter.set_result(None)
                return
        self._free += 1
