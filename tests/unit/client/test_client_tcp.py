"""The client, producer and consumer over real TCP on 127.0.0.1 with the system clock."""

from __future__ import annotations

import asyncio

from client.client import Client
from client.config import ClientConfig, ConsumerConfig, ProducerConfig
from client.consumer import Consumer
from client.producer import Producer
from runtime.clock import SystemClock
from runtime.net.server import Server
from runtime.net.tcp import TcpTransport
from runtime.net.transport import Address
from tests.unit.client.scripted_cluster import ScriptedCluster


async def test_produce_and_consume_over_tcp() -> None:
    clock = SystemClock()
    # Only the scripted handlers are used, served by one TCP server on the system clock.
    script = ScriptedCluster(clock, brokers=1)
    script.create_topic("t", [0])
    transport = TcpTransport()
    server = Server(transport, Address("127.0.0.1", 0), script.handlers(0), clock=clock)
    await server.start()
    script.addresses[0] = server.address
    config = ClientConfig(request_timeout_ms=5000, socket_connection_setup_timeout_ms=2000)
    client = Client([server.address], transport=transport, clock=clock, config=config)
    producer = Producer(client, config=ProducerConfig(linger_ms=1, request_timeout_ms=5000))
    consumer = Consumer(
        client, config=ConsumerConfig(auto_offset_reset="earliest", fetch_max_wait_ms=50)
    )
    try:
        futures = [await producer.send("t", f"k{i}".encode(), f"v{i}".encode()) for i in range(50)]
        await producer.flush()
        assert [f.result().offset for f in futures] == list(range(50))
        consumer.assign([("t", 0)])
        seen: list[bytes | None] = []
        for _ in range(100):
            seen += [r.value for r in await consumer.poll(1000)]
            if len(seen) >= 50:
                break
        assert seen == [f"v{i}".encode() for i in range(50)]
    finally:
        await asyncio.wait_for(consumer.close(), 5)
        await asyncio.wait_for(producer.close(), 5)
        await asyncio.wait_for(client.close(), 5)
        await asyncio.wait_for(server.stop(), 5)
