"""queued.max.request.bytes (runtime/net/request_pool.py): the pool on its own, and a server
that mutes a connection whose next request does not fit while it keeps serving the others;
max.connections.per.ip and its overrides.

Harness and raw clients: tests/unit/runtime/net/server_harness.py.
"""

from __future__ import annotations

import asyncio

import pytest

from runtime.net.request_pool import RequestMemoryPool
from runtime.net.server import ServerConfig
from tests.unit.runtime.net.server_harness import ADDRESS, Gate, Harness, RawClient, until
from wire.envelope import RequestEnvelope, encode_request
from wire.frames import encode_frame
from wire.messages import ApiKey, ApiVersionsRequest, MetadataRequest, MetadataRequestTopic


async def test_pool_grants_in_order_and_a_cancelled_wait_takes_nothing() -> None:
    pool = RequestMemoryPool(100)
    await pool.reserve(60)
    first = asyncio.ensure_future(pool.reserve(50))
    second = asyncio.ensure_future(pool.reserve(10))  # would fit, but waits its turn
    await until(lambda: pool.waiting == 2, "both waiting")
    assert not first.done()
    assert not second.done()
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await second  # the one ahead left: this one fits
    assert pool.available == 30
    pool.charge(50)  # a frame that arrived whole overdraws
    assert pool.available == -20
    third = asyncio.ensure_future(pool.reserve(10))
    await until(lambda: pool.waiting == 1, "waiting while overdrawn")
    pool.release(60)
    await third
    assert pool.available == 30
    with pytest.raises(ValueError, match="can never fit"):
        await pool.reserve(101)


def test_the_pool_must_hold_the_largest_request() -> None:
    with pytest.raises(ValueError, match=r"queued\.max\.request\.bytes"):
        ServerConfig(socket_request_max_bytes=1000, queued_max_request_bytes=1000)
    ServerConfig(socket_request_max_bytes=1000, queued_max_request_bytes=1004)


def _metadata_frame(correlation_id: int, topics: int) -> bytes:
    request = MetadataRequest(topics=[MetadataRequestTopic(name="t" * 200) for _ in range(topics)])
    envelope = RequestEnvelope(
        ApiKey.METADATA, request.API_VERSION, correlation_id, "pool-test", request.to_body()
    )
    return encode_frame(encode_request(envelope))


async def test_a_request_that_does_not_fit_mutes_its_connection_only() -> None:
    """Two large requests, room for one: the second connection is not read until the first
    request has been answered, while a third connection's small requests are served."""
    frame_a, frame_b = _metadata_frame(1, 300), _metadata_frame(2, 300)
    size = len(frame_a)
    config = ServerConfig(socket_request_max_bytes=size, queued_max_request_bytes=size + 100)
    gate = Gate()
    async with Harness({ApiKey.METADATA: gate}, config) as h:
        pool = h.server.request_pool
        a, b, c = await h.connect(), await h.connect(), await h.connect()
        await a.stream.send(frame_a[: size // 2])
        await until(lambda: pool.available == 100, "the first request's memory reserved")
        await b.stream.send(frame_b[: size // 2])
        await until(lambda: pool.waiting == 1, "the second connection muted")
        await b.stream.send(frame_b[size // 2 :])  # sits unread in the network
        assert (await c.call(7, ApiVersionsRequest()))["error_code"] == 0
        await a.stream.send(frame_a[size // 2 :])
        await until(lambda: gate.started == [1], "the first request served")
        await asyncio.sleep(0)
        assert pool.waiting == 1
        assert gate.started == [1]  # the muted request was not read meanwhile
        gate.open(1)
        gate.open(2)
        response_a = await a.response()
        assert response_a is not None
        response_b = await b.response()
        assert response_b is not None
        assert response_b.correlation_id == 2
        await until(lambda: pool.available == pool.capacity, "every byte given back")


async def test_memory_comes_back_when_a_connection_dies_mid_frame() -> None:
    frame = _metadata_frame(1, 300)
    async with Harness({}, ServerConfig()) as h:
        pool = h.server.request_pool
        client = await h.connect()
        await client.stream.send(frame[: len(frame) // 2])
        await until(lambda: pool.available < pool.capacity, "reserved")
        await client.stream.aclose()
        await until(lambda: pool.available == pool.capacity, "released on close")


async def _connect_from(h: Harness, node: str) -> RawClient:
    return RawClient(await h.network.transport(node).connect(ADDRESS, timeout_s=1.0))


async def test_max_connections_per_ip_and_its_overrides() -> None:
    config = ServerConfig(max_connections_per_ip=2, max_connections_per_ip_overrides="vip:3")
    async with Harness({}, config) as h:
        first, second = await _connect_from(h, "app"), await _connect_from(h, "app")
        third = await _connect_from(h, "app")
        assert await third.response() is None  # closed at once
        assert (await first.call(1, ApiVersionsRequest()))["error_code"] == 0
        assert (await second.call(1, ApiVersionsRequest()))["error_code"] == 0
        vips = [await _connect_from(h, "vip") for _ in range(4)]
        assert await vips[3].response() is None
        for vip in vips[:3]:
            assert (await vip.call(2, ApiVersionsRequest()))["error_code"] == 0
        await first.stream.aclose()  # a slot comes back when a connection goes
        await until(lambda: h.server.connection_count == 4, "the first one forgotten")
        again = await _connect_from(h, "app")
        assert (await again.call(3, ApiVersionsRequest()))["error_code"] == 0


@pytest.mark.parametrize("bad", ["vip", "vip:x", ":3", "a:1,b"])
def test_malformed_overrides_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="host:count"):
        ServerConfig(max_connections_per_ip_overrides=bad)


async def test_stop_ends_a_connection_waiting_for_memory() -> None:
    """A muted connection is not being read, so nothing but the server's close can end its
    wait: stop() must still finish, and give every byte back."""
    frame_a, frame_b = _metadata_frame(1, 300), _metadata_frame(2, 300)
    size = len(frame_a)
    config = ServerConfig(
        socket_request_max_bytes=size,
        queued_max_request_bytes=size + 100,
        server_shutdown_timeout_ms=1000,
    )
    gate = Gate()
    h = Harness({ApiKey.METADATA: gate}, config)
    await h.server.start()
    pool = h.server.request_pool
    a, b = await h.connect(), await h.connect()
    await a.stream.send(frame_a[: size // 2])
    await until(lambda: pool.available == 100, "the first request's memory reserved")
    await b.stream.send(frame_b[: size // 2])
    await until(lambda: pool.waiting == 1, "the second connection muted")
    stopping = asyncio.ensure_future(h.server.stop())
    await until(lambda: h.server.stopping, "stop begun")
    h.clock.advance(1000)  # the shutdown timeout: nothing outstanding is answered
    async with asyncio.timeout(5):
        await stopping
    assert pool.waiting == 0
    assert pool.available == pool.capacity
