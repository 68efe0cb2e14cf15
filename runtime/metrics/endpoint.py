"""The metrics HTTP endpoint (`MetricsHttpServer`): `GET /metrics` over HTTP/1.x.

It runs on the node's own event loop, not in a thread. The collectors read state that belongs
to the loop (routing tables, views, mailbox lengths, purgatory counters); read from another
thread they could see a dict change size mid-iteration. On the loop a scrape is one synchronous
step between two tasks' steps, so it sees a consistent picture and needs no lock. The step is
short (a few hundred samples: well under a millisecond for a broker of a few hundred
partitions), and scrapes come every few seconds at most, so the loop barely notices. Each
connection is one request (`Connection: close`) with a bounded header size and a deadline on
the node's clock; the number of open connections is bounded too.

Owned by its node; every method runs on the node's loop thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Final

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from runtime.clock import NS_PER_MS, Alarm, Clock
from runtime.metrics.registry import NodeMetrics

log = logging.getLogger(__name__)

# Bounds on the HTTP endpoint: one small GET per connection.
MAX_HEADER_BYTES: Final = 8 * 1024
MAX_CONNECTIONS: Final = 16
REQUEST_DEADLINE_MS: Final = 10_000


class MetricsHttpServer:
    """`GET /metrics` over HTTP/1.x on the node's loop; `start()` / `stop()`."""

    def __init__(self, metrics: NodeMetrics, host: str, port: int, *, clock: Clock) -> None:
        self._metrics = metrics
        self._host = host
        self._port = port
        self._clock = clock
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()
        self.scrapes = 0

    @property
    def port(self) -> int:
        """The bound port (the real one when 0 was asked for)."""
        if self._server is None or not self._server.sockets:
            raise RuntimeError("metrics server not started")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("metrics server already started")
        self._server = await asyncio.start_server(
            self._serve, self._host, self._port, limit=MAX_HEADER_BYTES
        )
        log.info("metrics at http://%s:%d/metrics", self._host, self.port)

    async def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._handlers) >= MAX_CONNECTIONS:
            writer.close()
            return
        self._handlers.add(task)
        # A client that never finishes its request must not hold a connection slot for ever.
        deadline: Alarm = self._clock.call_at_ns(
            self._clock.monotonic_ns() + REQUEST_DEADLINE_MS * NS_PER_MS, writer.transport.abort
        )
        try:
            await self._answer(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            log.debug("metrics request failed: %s", exc)
        finally:
            deadline.cancel()
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        method, target = _request_line(head)
        if not method:
            status, body, content_type = "400 Bad Request", b"not an HTTP request\n", "text/plain"
        elif method not in ("GET", "HEAD"):
            status, body, content_type = "405 Method Not Allowed", b"use GET\n", "text/plain"
        elif target.split("?", 1)[0] != "/metrics":
            status, body, content_type = "404 Not Found", b"try /metrics\n", "text/plain"
        else:
            body = await self._metrics.scrape()
            status, content_type = "200 OK", CONTENT_TYPE_PLAIN_0_0_4
            self.scrapes += 1
        header = (
            f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode("ascii")
        writer.write(header if method == "HEAD" else header + body)
        await writer.drain()


def _request_line(head: bytes) -> tuple[str, str]:
    """(method, target) of an HTTP request head; ("", "") when it is not one."""
    line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return "", ""
    return parts[0], parts[1]
