"""How many times Python copies a record set between the socket and the disk, counted.

Issue 21's data path promises that a produced record set reaches `pwritev` as a view of the buffer
the socket read it into, and that a fetched record set reaches the socket's vectored write as the
very buffer `pread` filled: the kernel's copies and nothing else. A copy in Python would show as a
large buffer that none of those buffers is. These tests watch the buffers a broker over real TCP
hands to the system calls (`receive_into`'s targets, `pwritev`'s chunks, `pread`'s results and
`send_buffers`' buffers, by identity of the object underneath each view) while one large record
set goes through, on each listener:

    Kafka Produce   socket -> frame buffer -> pwritev                 0 copies in Python
    Kafka Fetch     pread -> writelines                                0 copies in Python
    native Fetch    pread -> writelines (the answer's large bin lifted) 0 copies in Python
    native Produce  socket -> frame buffer -> msgpack bin -> pwritev   1 copy (msgpack's bin)

The native produce's copy is counted too, so a change that removes or adds one shows here.
"""

from __future__ import annotations

import asyncio
import os
import struct
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kio.static.constants import EntityType

from client.client import Client
from client.config import ConsumerConfig, ProducerConfig
from client.consumer import Consumer
from client.producer import Producer
from runtime.clock import ManualClock
from runtime.net.tcp import TcpStream, TcpTransport
from runtime.net.transport import Address, Buffer
from testkit.cluster import Cluster
from tests.unit.wire.kafka.helpers import request_frame, response_body
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.kafka.codec import schema
from wire.kafka.convert import to_kio
from wire.messages import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from wire.topic import TopicPartition

TOPIC = "copies"
TP = TopicPartition(TOPIC, 0)
VALUE_BYTES = 400 * 1024  # one record: below the frame decoder's anonymous-map threshold
LARGE = 256 * 1024  # any buffer this big during the test carries the record set
WAIT_S = 30.0


def _owner(buffer: Any) -> Any:
    """The object whose memory `buffer` is: a view's exporter, else the object itself."""
    return buffer.obj if isinstance(buffer, memoryview) else buffer


@dataclass
class Watch:
    """Large buffers seen at each system-call boundary, by the object that owns their memory."""

    received_into: list[Any] = field(default_factory=list)
    written: list[Any] = field(default_factory=list)
    read: list[Any] = field(default_factory=list)
    sent: list[Any] = field(default_factory=list)

    @staticmethod
    def has(owners: list[Any], owner: Any) -> bool:
        return any(seen is owner for seen in owners)

    def __repr__(self) -> str:  # counts and types: the buffers' bytes would drown the failure
        def kinds(owners: list[Any]) -> str:
            return "[" + ", ".join(f"{type(o).__name__}@{id(o):x}" for o in owners) + "]"

        return (
            f"Watch(received_into={kinds(self.received_into)}, written={kinds(self.written)}, "
            f"read={kinds(self.read)}, sent={kinds(self.sent)})"
        )


@pytest.fixture
def watch(monkeypatch: pytest.MonkeyPatch) -> Watch:
    seen = Watch()
    receive_into = TcpStream.receive_into
    send_buffers = TcpStream.send_buffers
    pwritev = os.pwritev
    pread = os.pread

    async def watched_receive_into(self: TcpStream, buffer: memoryview) -> int:
        if len(buffer) >= LARGE:
            seen.received_into.append(_owner(buffer))
        return await receive_into(self, buffer)

    async def watched_send_buffers(self: TcpStream, buffers: Sequence[Buffer]) -> None:
        seen.sent.extend(_owner(b) for b in buffers if len(b) >= LARGE)
        await send_buffers(self, buffers)

    def watched_pwritev(fd: int, chunks: Sequence[Buffer], offset: int, /) -> int:
        seen.written.extend(_owner(c) for c in chunks if len(c) >= LARGE)
        return pwritev(fd, chunks, offset)

    def watched_pread(fd: int, size: int, offset: int, /) -> bytes:
        data = pread(fd, size, offset)
        if len(data) >= LARGE:
            seen.read.append(data)
        return data

    monkeypatch.setattr(TcpStream, "receive_into", watched_receive_into)
    monkeypatch.setattr(TcpStream, "send_buffers", watched_send_buffers)
    monkeypatch.setattr(os, "pwritev", watched_pwritev)
    monkeypatch.setattr(os, "pread", watched_pread)
    return seen


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    cluster = Cluster(
        tmp_path,
        [0],
        clock=ManualClock(),
        transport_for=lambda name: TcpTransport(),
        address_for=lambda name: Address("127.0.0.1", 0),
        kafka_listener=True,
    )
    await cluster.drive(cluster.start())
    await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=1))
    try:
        yield cluster
    finally:
        await cluster.drive(cluster.stop())


def _batch() -> bytes:
    return build_batch([(b"k", os.urandom(VALUE_BYTES))])


def _kafka_address(cluster: Cluster) -> Address:
    server = cluster.node(0).kafka_server
    assert server is not None
    return server.address


async def _kafka_call(address: Address, api_key: int, version: int, native: Any) -> Any:
    """One Kafka request written as a Kafka client writes it; its kio answer body."""
    body = to_kio(native, schema(api_key, version, EntityType.request))
    frame = request_frame(api_key, version, body)
    reader, writer = await asyncio.wait_for(
        asyncio.open_connection(address.host, address.port), WAIT_S
    )
    try:
        writer.write(struct.pack(">i", len(frame)) + frame)
        await writer.drain()
        prefix = await asyncio.wait_for(reader.readexactly(4), WAIT_S)
        answer = prefix + await asyncio.wait_for(
            reader.readexactly(struct.unpack(">i", prefix)[0]), WAIT_S
        )
    finally:
        writer.close()
        await writer.wait_closed()
    _, response = response_body(answer, schema(api_key, version, EntityType.response))
    return response


def _fetch_request() -> FetchRequest:
    partition = FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=4 * VALUE_BYTES)
    return FetchRequest(
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=4 * VALUE_BYTES,
        topics=[FetchTopic(topic=TOPIC, partitions=[partition])],
    )


async def test_kafka_produce_and_fetch_copy_nothing_in_python(
    cluster: Cluster, watch: Watch
) -> None:
    batch = _batch()
    address = _kafka_address(cluster)
    produce = ProduceRequest(
        acks=1,
        timeout_ms=5_000,
        topic_data=[
            TopicProduceData(
                name=TOPIC, partition_data=[PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    answer = await cluster.drive(_kafka_call(address, 0, 9, produce))
    assert answer.responses[0].partition_responses[0].error_code.value == ErrorCode.NONE.value

    # The record set went to disk from the buffer the socket filled: no copy in between.
    assert len(watch.written) == 1, watch
    assert Watch.has(watch.received_into, watch.written[0]), watch
    assert not isinstance(watch.written[0], bytes), watch

    fetched = await cluster.drive(_kafka_call(address, 1, 12, _fetch_request()))
    records = fetched.responses[0].partitions[0].records
    # The client got the batch whole (but the partition leader epoch the broker stamped)...
    assert records[:12] + records[16:] == batch[:12] + batch[16:]
    # ...from the buffer pread filled, handed to the transport as it is.
    assert len(watch.read) == 1, watch
    assert Watch.has(watch.sent, watch.read[0]), watch


async def test_native_fetch_copies_nothing_and_native_produce_copies_once(
    cluster: Cluster, watch: Watch
) -> None:
    client = Client([cluster.node(0).address], transport=TcpTransport(), clock=cluster.clock)
    producer = Producer(client, config=ProducerConfig(acks=1, linger_ms=0))
    consumer = Consumer(
        client,
        config=ConsumerConfig(fetch_max_wait_ms=0, max_partition_fetch_bytes=4 * VALUE_BYTES),
    )
    value = os.urandom(VALUE_BYTES)
    try:
        future = await cluster.drive(producer.send(TOPIC, b"k", value, partition=0))
        assert (await cluster.drive(future)).offset == 0
        # msgpack decodes the request's bin into a bytes of its own: the one copy.
        assert len(watch.written) == 1, watch
        assert isinstance(watch.written[0], bytes), watch
        assert not Watch.has(watch.received_into, watch.written[0]), watch

        consumer.assign([TP])
        consumer.seek(TP, 0)
        got = await cluster.drive(consumer.poll(timeout_ms=2_000))
        assert [record.value for record in got] == [value]
        assert len(watch.read) == 1, watch
        assert Watch.has(watch.sent, watch.read[0]), watch
    finally:
        await cluster.drive(consumer.close())
        await cluster.drive(producer.close())
        await cluster.drive(client.close())
