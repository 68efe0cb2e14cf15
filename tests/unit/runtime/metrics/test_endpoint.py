"""runtime/metrics/endpoint.py: the HTTP endpoint over 127.0.0.1 (real sockets, the node's
ManualClock): GET /metrics in the text format, other paths and methods refused, an oversized
request head and a silent client cut off."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable

import pytest

from runtime.clock import ManualClock
from runtime.metrics.endpoint import REQUEST_DEADLINE_MS, MetricsHttpServer
from tests.unit.runtime.metrics.helpers import broker_metrics, samples, stats, value


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[MetricsHttpServer, ManualClock]]:
    clock = ManualClock()
    metrics = broker_metrics([("Partition", stats("p", 3))])
    server = MetricsHttpServer(metrics, "127.0.0.1", 0, clock=clock)
    await server.start()
    try:
        yield server, clock
    finally:
        await server.stop()
    await asyncio.sleep(0)
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def http(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        raw = await reader.read()  # the server closes after one response
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split(" ")[1]), headers, body


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()


async def test_get_metrics_serves_the_text_format(
    endpoint: tuple[MetricsHttpServer, ManualClock],
) -> None:
    server, _ = endpoint
    status, headers, body = await http(server.port, get("/metrics"))
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert int(headers["Content-Length"]) == len(body)
    parsed = samples(body)
    assert value(parsed, "kafka_server_replicamanager_underreplicatedpartitions") == 2
    assert value(parsed, "ketch_actor_mailbox_depth", kind="Partition") == 3
    assert server.scrapes == 1


async def test_other_paths_and_methods_are_refused(
    endpoint: tuple[MetricsHttpServer, ManualClock],
) -> None:
    server, _ = endpoint
    assert (await http(server.port, get("/")))[0] == 404
    post = b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
    assert (await http(server.port, post))[0] == 405
    assert (await http(server.port, b"garbage\r\n\r\n"))[0] == 400
    status, headers, body = await http(server.port, b"HEAD /metrics HTTP/1.0\r\n\r\n")
    assert (status, body) == (200, b"")
    assert int(headers["Content-Length"]) > 0
    assert server.scrapes == 1


async def test_an_oversized_request_head_closes_the_connection(
    endpoint: tuple[MetricsHttpServer, ManualClock],
) -> None:
    server, _ = endpoint
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /metrics HTTP/1.1\r\nX-Pad: " + b"a" * 20_000 + b"\r\n\r\n")
    await writer.drain()
    assert await reader.read() == b""  # closed without an answer
    writer.close()
    await writer.wait_closed()
    assert server.scrapes == 0


async def wait_for(condition: Awaitable[object] | None = None, *, rounds: int = 200) -> None:
    for _ in range(rounds):
        await asyncio.sleep(0)
    if condition is not None:
        await condition


async def test_a_silent_client_is_cut_at_the_deadline_on_the_nodes_clock(
    endpoint: tuple[MetricsHttpServer, ManualClock],
) -> None:
    server, clock = endpoint
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /metr")  # never finished
    await writer.drain()
    closed = asyncio.ensure_future(reader.read())
    await wait_for()
    assert not closed.done()
    clock.advance(REQUEST_DEADLINE_MS - 1)
    await wait_for()
    assert not closed.done()
    clock.advance(1)
    # Real sockets: allow the close to travel (bounded by the read's own completion).
    await asyncio.wait_for(closed, timeout=5)
    assert closed.result() == b""
    writer.close()
    await writer.wait_closed()
