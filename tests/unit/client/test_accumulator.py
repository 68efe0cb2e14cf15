"""The record accumulator: batching by size and linger, muting, retries at the front, expiry,
several batches of a partition in flight."""

from __future__ import annotations

import asyncio

import pytest

from client.accumulator import (
    BATCH_HEADER_BYTES,
    PendingRecord,
    ProducerBatch,
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


# -- several batches of a partition in flight ------------------------------------------------------


def windowed(max_in_flight: int = 3) -> RecordAccumulator:
    # batch.size 10: every record gets a batch of its own.
    return RecordAccumulator(
        batch_size=10, linger_ms=0, delivery_timeout_ms=500, max_in_flight=max_in_flight
    )


async def test_up_to_max_in_flight_batches_of_a_partition_are_drained() -> None:
    acc = windowed(3)
    for _ in range(5):
        acc.append(TP, record(), now_ms=0)
    drained = [acc.drain([TP]) for _ in range(4)]
    assert [len(d) for d in drained] == [1, 1, 1, 0]
    assert acc.ready(0) == ([], None)  # the window is full: an answer wakes the sender
    first = drained[0][0]
    acc.settled(first)
    assert acc.ready(0) == ([TP], None)
    assert list(acc.in_flight(TP)) == [drained[1][0], drained[2][0]]


async def test_a_retry_goes_back_by_creation_order_and_only_alone() -> None:
    acc = windowed(3)
    for _ in range(4):
        acc.append(TP, record(), now_ms=0)
    a, b, c = (acc.drain([TP])[0] for _ in range(3))
    # Answers in any order: each goes back ahead of the batches created after it.
    acc.reenqueue(b, retry_at_ms=0)
    acc.reenqueue(a, retry_at_ms=0)
    queued = acc.queued_batches(TP)
    assert [queued[0], queued[1]] == [a, b]
    assert acc.has_earlier_unresolved(c)
    assert not acc.has_earlier_unresolved(a)
    # `a` is a retry: it waits until nothing else of the partition is in flight.
    assert acc.ready(0) == ([], None)
    assert acc.drain([TP]) == []
    acc.settled(c)
    assert acc.ready(0) == ([TP], None)
    assert acc.drain([TP]) == [a]
    assert acc.drain([TP]) == []  # `b` is a retry too: after `a`
    assert acc.queued_resends(TP) == [b]
    acc.settled(a)
    assert acc.drain([TP]) == [b]
    assert acc.queued_resends(TP) == []


async def test_only_a_first_queued_batch_never_sent_is_popped_as_unsent() -> None:
    acc = windowed(3)
    acc.append(TP, record(), now_ms=0)
    acc.append(TP, record(), now_ms=0)
    sent = acc.drain([TP])[0]
    sent.set_producer_state(1, 0, 0)
    assert acc.pop_unsent(TP) is None  # something of TP is in flight
    acc.reenqueue(sent, retry_at_ms=0)
    assert acc.pop_unsent(TP) is None  # the first holds a sequence
    acc.drain([TP])
    acc.settled(sent)
    unsent = acc.pop_unsent(TP)
    assert unsent is not None
    assert not unsent.has_sequence
    assert acc.pop_unsent(TP) is None


async def test_append_tells_whether_it_started_or_filled_a_batch() -> None:
    size = estimate_record_bytes(None, bytes(100), ())
    acc = accumulator(batch_size=BATCH_HEADER_BYTES + 2 * size)
    acc.append(TP, record(bytes(100)), now_ms=0)
    assert (acc.started, acc.filled) == (True, False)
    acc.append(TP, record(bytes(100)), now_ms=0)
    assert (acc.started, acc.filled) == (False, True)  # exactly full
    acc.append(TP, record(bytes(100)), now_ms=0)
    assert (acc.started, acc.filled) == (True, False)
    acc.append(TP, record(bytes(200)), now_ms=0)  # does not fit: closes the second batch
    assert (acc.started, acc.filled) == (True, True)


async def test_a_batch_gives_its_bytes_back_once_done() -> None:
    released: list[int] = []
    acc = RecordAccumulator(
        batch_size=1000,
        linger_ms=0,
        delivery_timeout_ms=500,
        on_batch_done=lambda batch: released.append(batch.records_bytes),
    )
    acc.append(TP, record(bytes(10)), now_ms=0)
    acc.append(TP, record(bytes(20)), now_ms=0)
    (batch,) = acc.drain([TP])
    batch.complete(base_offset=0)
    batch.fail(RuntimeError("late"))  # already done: no second release
    assert released == [
        estimate_record_bytes(None, bytes(10), ()) + estimate_record_bytes(None, bytes(20), ())
    ]


async def test_a_batch_reads_back_its_records_and_columns() -> None:
    records = [record(b"a"), record(b"b"), record(b"c")]
    batch = ProducerBatch(TP, created_ms=0, records=records)
    assert len(batch) == 3
    assert list(batch.records) == records
    assert batch.records[-1] == records[2]
    assert list(batch.records[1:]) == records[1:]
    keys, values, timestamps, headers = batch.columns()
    assert (keys, values, timestamps, headers) == (
        [None] * 3,
        [b"a", b"b", b"c"],
        [0] * 3,
        [()] * 3,
    )
    assert batch.futures() == [r.future for r in records]
    with pytest.raises(IndexError):
        batch.records[3]
