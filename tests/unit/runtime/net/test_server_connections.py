"""The request server's connections over time, on a manual clock: max.connections, idle
connections closed on the clock (busy ones kept), and a graceful stop() that lets in-flight
requests finish, bounded by server.shutdown.timeout.ms.

Harness and raw clients: tests/unit/runtime/net/server_harness.py.
"""

from __future__ import annotations

import asyncio

import pytest

from runtime.net.server import ServerConfig
from tests.unit.runtime.net.server_harness import ADDRESS, Gate, Harness, until
from wire.messages import ApiKey, ApiVersionsRequest, MetadataRequest


async def test_max_connections_closes_the_excess() -> None:
    async with Harness({}, ServerConfig(max_connections=2)) as h:
        first, second = await h.connect(), await h.connect()
        third = await h.connect()
        assert await third.response() is None
        assert (await first.call(1, ApiVersionsRequest()))["error_code"] == 0
        assert (await second.call(1, ApiVersionsRequest()))["error_code"] == 0


async def test_idle_connections_close_on_the_clock_but_busy_ones_do_not() -> None:
    gate = Gate()
    config = ServerConfig(connections_max_idle_ms=1000)
    async with Harness({ApiKey.METADATA: gate}, config) as h:
        idle = await h.connect()
        busy = await h.connect()
        await busy.send(1, MetadataRequest())
        await until(lambda: gate.started == [1], "busy request running")
        h.clock.advance(999)
        await until(lambda: True, "")
        assert h.server.connection_count == 2
        h.clock.advance(1)
        assert await idle.response() is None
        await until(lambda: h.server.connection_count == 1, "idle connection closed")
        h.clock.advance(5000)  # the busy one owes a response: it stays
        await asyncio.sleep(0)
        assert h.server.connection_count == 1
        gate.open(1)
        assert (await busy.response()) is not None
        h.clock.advance(1000)
        assert await busy.response() is None


async def test_activity_postpones_the_idle_timeout() -> None:
    config = ServerConfig(connections_max_idle_ms=1000)
    async with Harness({}, config) as h:
        client = await h.connect()
        for cid in range(5):
            h.clock.advance(600)
            assert (await client.call(cid, ApiVersionsRequest()))["error_code"] == 0
        assert h.server.connection_count == 1


async def test_stop_lets_in_flight_requests_finish_then_closes() -> None:
    gate = Gate()
    h = Harness({ApiKey.METADATA: gate})
    await h.server.start()
    client = await h.connect()
    await client.send(1, MetadataRequest())
    await until(lambda: gate.started == [1], "request running")
    stopping = asyncio.ensure_future(h.server.stop())
    await until(lambda: h.server.stopping, "stop begun")
    with pytest.raises(ConnectionRefusedError):
        await h.network.transport("late").connect(ADDRESS, timeout_s=1.0)
    assert not stopping.done()
    await client.send(2, MetadataRequest())  # arrives after stop began: never dispatched
    gate.open(2)
    gate.open(1)
    envelope = await client.response()
    assert envelope is not None
    assert envelope.correlation_id == 1
    assert await client.response() is None
    await stopping
    assert gate.started == [1]


async def test_stop_gives_up_on_stuck_handlers_after_the_shutdown_timeout() -> None:
    gate = Gate()
    h = Harness({ApiKey.METADATA: gate}, ServerConfig(server_shutdown_timeout_ms=2000))
    await h.server.start()
    client = await h.connect()
    await client.send(1, MetadataRequest())
    await until(lambda: gate.started == [1], "request running")
    stopping = asyncio.ensure_future(h.server.stop())
    await until(lambda: h.server.stopping, "stop begun")
    h.clock.advance(1999)
    await until(lambda: True, "")
    assert not stopping.done()
    h.clock.advance(1)
    await stopping
    assert await client.response() is None
    assert gate.finished == []
