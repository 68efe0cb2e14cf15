"""Several batches of a partition in flight (client/sender.py), and buffer.memory
(client/buffer_pool.py), against scripted brokers that check sequences as a broker's producer
state does, under a manual clock.

A gate in front of the scripted Produce handler holds every request until the test opens it, so
a test sees how many batches were in flight at once, and what the producer does when their
answers come back together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from client.buffer_pool import BufferExhaustedError
from client.config import ClientConfig, ProducerConfig
from client.errors import ProducerFencedError
from client.producer import Producer
from runtime.clock import ManualClock
from runtime.net.dialect import RequestContext
from tests.unit.client.scripted_cluster import (
    FIRST_PRODUCER_ID,
    ScriptedCluster,
    advance_until,
    batch_headers,
    settle,
)
from wire.errors import ErrorCode, KafkaError
from wire.messages import ApiKey, ProduceRequest
from wire.record_reader import iter_records
from wire.records import iter_batches
from wire.topic import TopicPartition

SEED = 21
P0 = TopicPartition("t", 0)
PID = FIRST_PRODUCER_ID
VALUE = bytes(50)  # with batch.size 100, one record per batch


class ProduceGate:
    """In front of the scripted Produce handler: from `hold()` it holds each request until
    `open()`, counting those that arrived meanwhile."""

    def __init__(self, cluster: ScriptedCluster) -> None:
        self._cluster = cluster
        self._open = asyncio.Event()
        self._open.set()
        self.arrived = 0
        cluster.overrides[ApiKey.PRODUCE] = self.handle

    async def handle(self, broker: int, request: ProduceRequest, ctx: RequestContext) -> Any:
        self.arrived += 1
        await self._open.wait()
        return await self._cluster.produce(broker, request, ctx)

    def hold(self) -> ProduceGate:
        self._open.clear()
        self.arrived = 0
        return self

    def open(self) -> None:
        self._open.set()


@pytest.fixture
def gate(cluster: ScriptedCluster) -> Iterator[ProduceGate]:
    """Opened when the test ends, whatever happened: the brokers' shutdown waits for every
    request they hold."""
    gate = ProduceGate(cluster)
    yield gate
    gate.open()


def make_producer(cluster: ScriptedCluster, *, max_in_flight: int = 5, **settings: Any) -> Producer:
    config = ClientConfig(retry_backoff_ms=100, max_in_flight_requests_per_connection=max_in_flight)
    client = cluster.client(config=config, seed=SEED)
    producer_config = ProducerConfig(linger_ms=0, batch_size=100, **settings)
    return Producer(client, config=producer_config, owns_client=True)


def logged_values(cluster: ScriptedCluster, tp: TopicPartition) -> list[bytes | None]:
    values: list[bytes | None] = []
    for _, data in cluster.logs[tp].batches:
        for pos, _header in iter_batches(data):
            values.extend(r.value for r in iter_records(data, pos))
    return values


def sequences(cluster: ScriptedCluster, tp: TopicPartition) -> list[tuple[int, int]]:
    """(epoch, base sequence) of every batch produced to `tp`, in arrival order."""
    return [(h.producer_epoch, h.base_sequence) for h in batch_headers(cluster, tp)]


async def acknowledged_first(cluster: ScriptedCluster, producer: Producer) -> None:
    """One batch of P0 acknowledged under the producer's epoch: P0 may pipeline from now on."""
    cluster.check_sequences = True
    assert (await producer.send_and_wait("t", None, b"first", partition=0)).offset == 0


async def send_values(producer: Producer, values: list[bytes]) -> list[asyncio.Future[Any]]:
    return [await producer.send("t", None, value, partition=0) for value in values]


# -- how many in flight -------------------------------------------------------------------------


async def test_a_partition_pipelines_its_batches_once_one_was_acknowledged(
    cluster: ScriptedCluster, clock: ManualClock, gate: ProduceGate
) -> None:
    cluster.check_sequences = True
    producer = make_producer(cluster)
    gate.hold()
    # No batch of the partition acknowledged yet: the broker may hold no state for the
    # producer and would take any sequence, so one goes alone.
    futures = await send_values(producer, [b"a", b"b", b"c"])
    await settle()
    assert gate.arrived == 1
    gate.open()
    await advance_until(clock, futures[0].done, step_ms=1, max_steps=10)
    # Acknowledged under this epoch: the rest go together (up to the window of 5).
    more = await send_values(producer, [b"d", b"e", b"f", b"g", b"h", b"i"])
    futures += more
    await advance_until(clock, lambda: all(f.done() for f in futures), step_ms=1, max_steps=10)
    assert [f.result().offset for f in futures] == list(range(9))
    assert logged_values(cluster, P0) == [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h", b"i"]
    assert [s for _, s in sequences(cluster, P0)] == list(range(9))
    await producer.close()


@pytest.mark.parametrize(("max_in_flight", "window"), [(3, 3), (8, 5)])
async def test_the_window_is_max_in_flight_capped_at_five(
    cluster: ScriptedCluster, max_in_flight: int, window: int, gate: ProduceGate
) -> None:
    producer = make_producer(cluster, max_in_flight=max_in_flight)
    await acknowledged_first(cluster, producer)
    gate.hold()
    futures = await send_values(producer, [bytes([i]) for i in range(7)])
    await settle()
    assert gate.arrived == window
    gate.open()
    await producer.flush()
    assert [f.result().offset for f in futures] == list(range(1, 8))
    await producer.close()


@pytest.mark.parametrize("settings", [{"acks": 1}, {"enable_idempotence": False}])
async def test_without_idempotence_one_batch_per_partition_is_in_flight(
    cluster: ScriptedCluster, settings: dict[str, Any], gate: ProduceGate
) -> None:
    producer = make_producer(cluster, **settings)
    assert (await producer.send_and_wait("t", None, b"first", partition=0)).offset == 0
    gate.hold()
    futures = await send_values(producer, [b"a", b"b", b"c"])
    await settle()
    assert gate.arrived == 1  # the order of a partition's records rests on the producer alone
    gate.open()
    await producer.flush()
    assert [f.result().offset for f in futures] == [1, 2, 3]
    await producer.close()


# -- failures with several in flight -------------------------------------------------------------


async def test_batches_behind_a_retried_one_are_resent_after_it_in_order(
    cluster: ScriptedCluster, clock: ManualClock, gate: ProduceGate
) -> None:
    """The first batch in flight is refused before the append (retriable); the two behind it
    get OUT_OF_ORDER_SEQUENCE_NUMBER for its missing sequence: all three are resent, oldest
    first, under the same epoch."""
    producer = make_producer(cluster)
    await acknowledged_first(cluster, producer)
    gate.hold()
    cluster.produce_errors[P0] = [ErrorCode.NOT_ENOUGH_REPLICAS]
    futures = await send_values(producer, [b"a", b"b", b"c"])
    await settle()
    assert gate.arrived == 3
    gate.open()
    await advance_until(clock, lambda: all(f.done() for f in futures), step_ms=10, max_steps=100)
    assert [f.result().offset for f in futures] == [1, 2, 3]
    assert logged_values(cluster, P0) == [b"first", b"a", b"b", b"c"]
    assert sequences(cluster, P0) == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 1), (0, 2), (0, 3)]
    assert cluster.count(ApiKey.INIT_PRODUCER_ID) == 1  # no epoch bump
    await producer.close()


async def test_a_sequence_error_on_the_first_batch_renumbers_the_ones_behind_it(
    cluster: ScriptedCluster, clock: ManualClock, gate: ProduceGate
) -> None:
    """The broker's sequence differs from ours at the first batch in flight: the epoch is bumped
    and that batch resent at sequence 0; the batches behind it were not written (their
    sequences follow the refused one) and are resent at 1 and 2 of the new epoch, never under
    the old one (which the broker would now refuse as fenced)."""
    producer = make_producer(cluster)
    await acknowledged_first(cluster, producer)
    gate.hold()
    cluster.produce_errors[P0] = [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER]
    futures = await send_values(producer, [b"a", b"b", b"c"])
    await settle()
    assert gate.arrived == 3
    gate.open()
    await advance_until(clock, lambda: all(f.done() for f in futures), step_ms=10, max_steps=100)
    assert [f.result().offset for f in futures] == [1, 2, 3]
    assert logged_values(cluster, P0) == [b"first", b"a", b"b", b"c"]
    assert sequences(cluster, P0) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2)]
    bump = cluster.init_producer_id_requests[1]
    assert (bump.producer_id, bump.producer_epoch) == (PID, 0)
    assert cluster.count(ApiKey.INIT_PRODUCER_ID) == 2
    await producer.close()


async def test_a_rejected_batch_in_flight_restarts_the_ones_behind_it_under_a_new_epoch(
    cluster: ScriptedCluster, clock: ManualClock, gate: ProduceGate
) -> None:
    producer = make_producer(cluster)
    await acknowledged_first(cluster, producer)
    gate.hold()
    cluster.produce_errors[P0] = [ErrorCode.INVALID_RECORD]
    futures = await send_values(producer, [b"bad", b"b", b"c"])
    await settle()
    gate.open()
    await advance_until(clock, lambda: all(f.done() for f in futures), step_ms=10, max_steps=100)
    error = futures[0].exception()
    assert isinstance(error, KafkaError)
    assert error.code is ErrorCode.INVALID_RECORD
    assert [f.result().offset for f in futures[1:]] == [1, 2]
    assert logged_values(cluster, P0) == [b"first", b"b", b"c"]
    assert sequences(cluster, P0) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1)]
    await producer.close()


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH])
async def test_fencing_settles_batches_in_flight_by_their_answers(
    cluster: ScriptedCluster, clock: ManualClock, code: ErrorCode, gate: ProduceGate
) -> None:
    producer = make_producer(cluster)
    await acknowledged_first(cluster, producer)
    gate.hold()
    cluster.produce_errors[P0] = [code]
    futures = await send_values(producer, [b"a", b"b", b"c"])
    await settle()
    assert gate.arrived == 3
    gate.open()
    await advance_until(clock, lambda: all(f.done() for f in futures), step_ms=10, max_steps=10)
    # The first is fenced; the others, refused for its missing sequence, fail with the fatal
    # error instead of being resent.
    for future in futures:
        error = future.exception()
        assert isinstance(error, ProducerFencedError)
        assert error.code is code
    assert cluster.count(ApiKey.PRODUCE) == 4
    late = await producer.send("t", None, b"late", partition=0)
    with pytest.raises(ProducerFencedError):
        await late
    assert cluster.count(ApiKey.PRODUCE) == 4
    assert logged_values(cluster, P0) == [b"first"]
    await producer.close()


# -- buffer.memory -------------------------------------------------------------------------------


def small_buffer_producer(cluster: ScriptedCluster, buffer_memory: int) -> Producer:
    client = cluster.client(config=ClientConfig(retry_backoff_ms=100), seed=SEED)
    config = ProducerConfig(linger_ms=0, batch_size=100, max_block_ms=500)
    return Producer(client, config=config, owns_client=True, buffer_memory=buffer_memory)


async def test_send_waits_for_buffer_memory_then_fails_after_max_block_ms(
    cluster: ScriptedCluster, clock: ManualClock, gate: ProduceGate
) -> None:
    # Each record counts 36 + 50 bytes: two fit in 200.
    producer = small_buffer_producer(cluster, buffer_memory=200)
    await producer.send_and_wait("t", None, b"warm", partition=0)  # metadata, producer id
    gate.hold()
    held = await send_values(producer, [VALUE, VALUE])
    blocked = asyncio.create_task(producer.send("t", None, VALUE, partition=0))
    await settle()
    assert not blocked.done()
    clock.advance(499)
    await settle()
    assert not blocked.done()
    clock.advance(1)
    await settle()
    with pytest.raises(BufferExhaustedError):
        blocked.result()
    gate.open()
    await producer.flush()
    assert [f.result().offset for f in held] == [1, 2]
    # Acknowledged records gave their memory back.
    future = await producer.send("t", None, VALUE, partition=0)
    await producer.flush()
    assert future.result().offset == 3
    await producer.close()


async def test_a_waiting_send_goes_on_when_a_batch_gives_its_memory_back(
    cluster: ScriptedCluster, gate: ProduceGate
) -> None:
    producer = small_buffer_producer(cluster, buffer_memory=200)
    await producer.send_and_wait("t", None, b"warm", partition=0)
    gate.hold()
    held = await send_values(producer, [VALUE, VALUE])
    blocked = asyncio.create_task(producer.send("t", None, b"third", partition=0))
    await settle()
    assert not blocked.done()
    gate.open()
    await settle()
    third = await blocked
    await producer.flush()
    assert [f.result().offset for f in [*held, third]] == [1, 2, 3]
    assert logged_values(cluster, P0)[-1] == b"third"
    await producer.close()


async def test_a_record_bigger_than_buffer_memory_is_refused_at_once(
    cluster: ScriptedCluster,
) -> None:
    producer = small_buffer_producer(cluster, buffer_memory=100)
    with pytest.raises(KafkaError) as info:
        await producer.send("t", None, bytes(100), partition=0)
    assert info.value.code is ErrorCode.MESSAGE_TOO_LARGE
    assert "buffer.memory=100" in str(info.value)
    await producer.close()


async def test_close_fails_a_send_waiting_for_memory(
    cluster: ScriptedCluster, clock: ManualClock, gate: ProduceGate
) -> None:
    producer = small_buffer_producer(cluster, buffer_memory=200)
    await producer.send_and_wait("t", None, b"warm", partition=0)
    gate.hold()  # not opened before close: the records stay unacknowledged
    await send_values(producer, [VALUE, VALUE])
    blocked = asyncio.create_task(producer.send("t", None, VALUE, partition=0))
    await settle()
    closing = asyncio.create_task(producer.close(timeout_ms=10))
    await advance_until(clock, closing.done, step_ms=5, max_steps=10)
    await settle()
    assert blocked.done()
    error = blocked.exception()
    assert error is not None
    assert "closed" in str(error)
