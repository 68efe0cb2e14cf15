"""The record accumulator: batching by size and linger, muting, retries at the front, expiry."""

from __future__ import annotations

import asyncio

import pytest

from client.accumulator import (
    BATCH_HEADER_BYTES,
    PendingRecord,
    RecordAccumulator,
    RecordMetadata,
    estimate_record_bytes,
)
from wire.topic import TopicPartition

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)


def record(value: bytes = b"v") -> PendingRecord:
    future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
    return PendingRecord(None, value, 0, (), future)


def accumulator(*, batch_size: int = 1000, linger_ms: int = 10) -> RecordAccumulator:
    return RecordAccumulator(batch_size=batch_size, linger_ms=linger_ms, delivery_timeout_ms=500)


async def test_a_batch_is_ready_after_linger() -> None:
    acc = accumulator()
    assert not acc.append(TP, record(), now_ms=100)
    assert acc.ready(105) == ([], 110)
    assert acc.ready(110) == ([TP], None)


async def test_a_full_batch_is_ready_at_once_and_a_new_one_starts() -> None:
    size = estimate_record_bytes(None, bytes(100), ())
    acc = accumulator(batch_size=BATCH_HEADER_BYTES + 2 * size)
    assert not acc.append(TP, record(bytes(100)), now_ms=0)
    assert acc.append(TP, record(bytes(100)), now_ms=0)  # exactly full
    assert acc.append(TP, record(bytes(100)), now_ms=0)  # goes to a second batch
    assert [len(b.records) for b in acc.queued_batches(TP)] == [2, 1]
    assert acc.ready(0) == ([TP], None)


async def test_an_oversized_record_gets_a_batch_of_its_own() -> None:
    acc = accumulator(batch_size=100)
    acc.append(TP, record(bytes(500)), now_ms=0)
    acc.append(TP, record(b"small"), now_ms=0)
    assert [len(b.records) for b in acc.queued_batches(TP)] == [1, 1]


async def test_drain_mutes_the_partition_until_its_batch_settles() -> None:
    acc = accumulator(batch_size=10)
    acc.append(TP, record(), now_ms=0)
    acc.append(TP, record(), now_ms=0)
    (batch,) = acc.drain([TP])
    assert batch.attempts == 1
    assert acc.ready(100) == ([], None)  # the second batch waits: one in flight per partition
    acc.unmute(TP)
    assert acc.ready(100) == ([TP], None)


async def test_a_retried_batch_goes_first_after_its_backoff_and_stays_closed() -> None:
    acc = accumulator(linger_ms=0)
    acc.append(TP, record(b"first"), now_ms=0)
    (batch,) = acc.drain([TP])
    acc.append(TP, record(b"second"), now_ms=1)
    acc.reenqueue(batch, retry_at_ms=50)
    acc.append(TP, record(b"third"), now_ms=2)
    queued = acc.queued_batches(TP)
    assert queued[0] is batch
    assert [r.value for r in batch.records] == [b"first"]  # nothing was added to it
    assert acc.ready(49) == ([], 50)
    assert acc.ready(50) == ([TP], None)
    (again,) = acc.drain([TP])
    assert again is batch
    assert again.attempts == 2


async def test_flush_and_close_make_everything_ready() -> None:
    acc = accumulator(linger_ms=10_000)
    acc.append(TP, record(), now_ms=0)
    acc.append(OTHER, record(), now_ms=0)
    assert acc.ready(0)[0] == []
    acc.begin_flush()
    assert sorted(acc.ready(0)[0], key=str) == [TP, OTHER]
    acc.end_flush()
    assert acc.ready(0)[0] == []
    acc.close()
    assert len(acc.ready(0)[0]) == 2
    with pytest.raises(AssertionError):
        acc.end_flush()


async def test_expiry_fails_queued_batches_but_not_in_flight_ones() -> None:
    acc = accumulator(linger_ms=1000)
    acc.append(TP, record(), now_ms=0)
    acc.append(OTHER, record(), now_ms=100)
    (in_flight,) = acc.drain([TP])
    acc.append(TP, record(), now_ms=0)
    assert acc.next_expiry_ms() == 0 + 500
    assert acc.expire(499) == []
    expired = acc.expire(600)
    # TP is muted (a batch is in flight), so only OTHER's batch expires.
    assert [b.tp for b in expired] == [OTHER]
    assert acc.deadline_ms(in_flight) == 500


async def test_complete_and_fail_resolve_every_future() -> None:
    acc = accumulator()
    records = [record(), record()]
    for r in records:
        acc.append(TP, r, now_ms=0)
    (batch,) = acc.drain([TP])
    batch.complete(base_offset=40, log_append_time_ms=-1)
    assert [r.future.result().offset for r in records] == [40, 41]
    failing = record()
    acc.append(OTHER, failing, now_ms=0)
    assert acc.abort_all(RuntimeError("gone")) == 1
    with pytest.raises(RuntimeError, match="gone"):
        failing.future.result()


async def test_rejects_bad_settings() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        RecordAccumulator(batch_size=0, linger_ms=0, delivery_timeout_ms=1)
