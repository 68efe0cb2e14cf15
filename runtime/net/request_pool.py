"""The memory a node lets requests hold while they are read and served: `queued.max.request.bytes`.

Kafka's SocketServer can bound the bytes of requests in flight with one pool for all of a
broker's listeners (its `MemoryPool`, sized by queued.max.request.bytes); a connection whose next
request does not fit is muted, not read, until memory comes back. Kafka leaves the pool unbounded
by default; ketch does not: without a bound, a few clients announcing maximum-size frames and
sending them slowly make a broker hold all of those bytes at once (seen: 8 connections of 90 MiB
took a broker from 70 MB to 830 MB).

How the server uses it (runtime/net/server.py): once a frame's length is known and its body has
not all arrived, the connection reserves the frame's size before it reads on, waiting in FIFO
order while the pool is short (the socket is then not read, so TCP's window pushes back on the
client); a frame that arrived whole in one read is charged when it is cut, even if that takes the
pool below zero for a moment (at most one receive buffer per connection: the bound stays a
bound). The reservation is given back when the request's handler has answered.

One pool serves one node's servers, all on the node's event loop; nothing here is thread-safe.
"""

from __future__ import annotations

import asyncio
from collections import deque

DEFAULT_QUEUED_MAX_REQUEST_BYTES = 256 * 1024 * 1024
"""ketch's default for queued.max.request.bytes (Kafka's, -1, is unbounded): room for two
requests of the largest size socket.request.max.bytes allows by default, and more."""


class RequestMemoryPool:
    """Bytes of requests in flight, bounded by `capacity`."""

    __slots__ = ("_available", "_capacity", "_waiters")

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError(f"queued.max.request.bytes must be positive, got {capacity}")
        self._capacity = capacity
        self._available = capacity
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def available(self) -> int:
        """What is left (negative while whole frames charged after the fact overdraw it)."""
        return self._available

    @property
    def waiting(self) -> int:
        """How many connections wait for memory (muted)."""
        return len(self._waiters)

    async def reserve(self, size: int) -> None:
        """Take `size` bytes, waiting behind earlier waiters while the pool is short. A
        cancelled wait takes nothing."""
        if size > self._capacity:
            raise ValueError(f"a request of {size} bytes can never fit a pool of {self._capacity}")
        if not self._waiters and self._available >= size:
            self._available -= size
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((size, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(size)  # granted just as the wait was cancelled: give it back
            else:
                self._waiters = deque(entry for entry in self._waiters if entry[1] is not waiter)
                self._grant()  # a waiter behind this one may fit now
            raise

    def charge(self, size: int) -> None:
        """Take `size` bytes that are already held (a frame that arrived whole)."""
        self._available -= size

    def release(self, size: int) -> None:
        self._available += size
        self._grant()

    def _grant(self) -> None:
        waiters = self._waiters
        while waiters:
            size, waiter = waiters[0]
            if waiter.done():
                waiters.popleft()
                continue
            if self._available < size:
                return  # FIFO: a large request is not starved by smaller ones behind it
            waiters.popleft()
            self._available -= size
            waiter.set_result(None)
