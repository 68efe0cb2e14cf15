"""buffer.memory: the bound on the bytes a producer holds for records not yet acknowledged.

Kafka's producer allocates each batch from a `BufferPool` of `buffer.memory` bytes and blocks
`send()` up to `max.block.ms` when the pool is empty, failing it then with
`BufferExhaustedException` (a `TimeoutException`). Here the pool counts each record's estimated
size (client/accumulator.py's `estimate_record_bytes`, the figure batching uses), taken in
`send()` before the record is queued and given back when its batch is done (acknowledged or
failed, through `ProducerBatch.on_done`).

    pool = BufferPool(33_554_432, clock)
    if not pool.try_allocate(size):
        await pool.allocate(size, max_block_ms=60_000)   # or BufferExhaustedError
    ...
    pool.release(size)

Waiters are served first come, first served, as Kafka's `BufferPool` serves its waiters: a
release wakes the oldest waiter whose request fits, and `try_allocate` refuses while anyone waits,
so a stream of small records cannot starve a large one. A wait's deadline is an alarm on the
injected clock, so simulated time bounds it as real time does.

Owned by one producer and touched only from the event loop: no locks.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

from client.errors import ClientError
from runtime.clock import NS_PER_MS, Clock


class BufferExhaustedError(ClientError, TimeoutError):
    """A record could not get buffer.memory within max.block.ms (Kafka's
    BufferExhaustedException)."""


@dataclass(slots=True, eq=False)
class _Waiter:
    size: int
    future: asyncio.Future[None]


class BufferPool:
    def __init__(self, total_bytes: int, clock: Clock) -> None:
        if total_bytes <= 0:
            raise ValueError(f"buffer.memory must be positive, got {total_bytes}")
        self.total_bytes = total_bytes
        self._clock = clock
        self._used = 0
        self._waiters: deque[_Waiter] = deque()

    @property
    def used_bytes(self) -> int:
        return self._used

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_allocate(self, size: int) -> bool:
        """Take `size` bytes now if they are free and nobody waits before us."""
        if self._waiters or self._used + size > self.total_bytes:
            return False
        self._used += size
        return True

    async def allocate(self, size: int, *, max_block_ms: float) -> None:
        """Take `size` bytes, waiting up to `max_block_ms` for them (`BufferExhaustedError`)."""
        if size > self.total_bytes:
            raise ValueError(f"{size} bytes can never fit buffer.memory={self.total_bytes}")
        if self.try_allocate(size):
            return
        waiter = _Waiter(size, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)

        def expire() -> None:
            if not waiter.future.done():
                waiter.future.set_exception(
                    BufferExhaustedError(
                        f"{size} bytes not free in buffer.memory={self.total_bytes} within "
                        f"max.block.ms={max_block_ms}"
                    )
                )

        deadline_ns = self._clock.monotonic_ns() + round(max_block_ms * NS_PER_MS)
        alarm = self._clock.call_at_ns(deadline_ns, expire)
        try:
            await waiter.future
        except BaseException:
            if waiter.future.done() and not waiter.future.cancelled():
                if waiter.future.exception() is None:
                    self.release(size)  # granted, then cancelled: give it back
            else:
                waiter.future.cancel()
            raise
        finally:
            alarm.cancel()
            if waiter in self._waiters:
                self._waiters.remove(waiter)
                self._grant()  # a waiter that gave up may have been blocking smaller ones

    def release(self, size: int) -> None:
        assert 0 <= size <= self._used, (size, self._used)
        self._used -= size
        self._grant()

    def _grant(self) -> None:
        waiters = self._waiters
        while waiters:
            head = waiters[0]
            if head.future.done():
                waiters.popleft()  # expired or cancelled
                continue
            if self._used + head.size > self.total_bytes:
                return
            waiters.popleft()
            self._used += head.size
            head.future.set_result(None)
