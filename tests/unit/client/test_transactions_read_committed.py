"""read_committed in ketch's consumer: dropping aborted transactions' records from fetched bytes
(`decode_fetched` with the answer's aborted transactions), and a consumer that asks for isolation
level 1 against scripted brokers."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from client.config import ClientConfig, ConsumerConfig
from client.consumer import Consumer
from client.fetched_records import decode_fetched
from runtime.clock import ManualClock
from runtime.log.producer_replay import end_txn_marker_batch
from runtime.net.dialect import RequestContext
from tests.unit.client.scripted_cluster import ScriptedCluster
from wire.batch_builder import build_batch
from wire.messages import FetchAbortedTransaction, FetchRequest, FetchResponse
from wire.records import patch_batch
from wire.topic import TopicPartition

SEED = 447
TP = TopicPartition("t", 0)
PLAIN = -1


def data(
    base_offset: int, producer_id: int, count: int = 2, *, transactional: bool = True
) -> bytes:
    """A batch of `count` records valued by their offsets."""
    built = bytearray(
        build_batch(
            [(None, b"%d" % (base_offset + i)) for i in range(count)],
            base_timestamp=0,
            producer_id=producer_id,
            producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=0 if producer_id >= 0 else -1,
            is_transactional=transactional and producer_id >= 0,
        )
    )
    patch_batch(built, 0, base_offset=base_offset, partition_leader_epoch=0)
    return bytes(built)


def marker(offset: int, producer_id: int, *, commit: bool) -> bytes:
    return end_txn_marker_batch(
        producer_id, 0, 0, commit=commit, base_offset=offset, leader_epoch=0, timestamp=0
    )


def aborted(*pairs: tuple[int, int]) -> list[FetchAbortedTransaction]:
    return [FetchAbortedTransaction(producer_id=p, first_offset=f) for p, f in pairs]


def offsets(fetched: bytes, position: int, aborted_list: Any) -> tuple[list[int], int]:
    records, end = decode_fetched(
        TP, position, fetched, limit=len(fetched), aborted_transactions=aborted_list
    )
    assert all(r.value == b"%d" % r.offset for r in records)
    return [r.offset for r in records], end


# Producer 1's transaction (0-1) aborts, producer 2's (2-3) commits, a plain batch (4) between
# the markers, then producer 1 again (7-8): its ABORT marker ended the aborted transaction.
LOG = (
    data(0, 1)
    + data(2, 2)
    + data(4, PLAIN, 1)
    + marker(5, 1, commit=False)
    + marker(6, 2, commit=True)
    + data(7, 1)
)


def test_read_committed_drops_aborted_transactions_until_their_marker() -> None:
    assert offsets(LOG, 0, aborted((1, 0))) == ([2, 3, 4, 7, 8], 9)


def test_read_uncommitted_keeps_everything_but_the_markers() -> None:
    assert offsets(LOG, 0, None) == ([0, 1, 2, 3, 4, 7, 8], 9)


def test_an_empty_aborted_list_drops_nothing() -> None:
    assert offsets(LOG, 0, []) == ([0, 1, 2, 3, 4, 7, 8], 9)


def test_a_fetch_starting_inside_an_aborted_transaction_drops_its_rest() -> None:
    log = data(0, 1) + data(2, 1) + marker(4, 1, commit=False) + data(5, PLAIN, 1)
    # The answer names the transaction although it started before the fetch offset.
    assert offsets(log[len(data(0, 1)) :], 2, aborted((1, 0))) == ([5], 6)


def test_only_the_aborted_producers_transactional_batches_are_dropped() -> None:
    # Producer 3 writes idempotent (non-transactional) records after its aborted transaction
    # ended; producer 4's transaction is listed with a first offset after this answer.
    log = data(0, 3) + marker(2, 3, commit=False) + data(3, 3, transactional=False) + data(5, 4)
    listed = aborted((4, 99), (3, 0))  # in any order
    assert offsets(log, 0, listed) == ([3, 4, 5, 6], 7)


def test_interleaved_transactions_of_two_aborted_producers() -> None:
    log = (
        data(0, 1)
        + data(2, 2)
        + data(4, 1)
        + marker(6, 1, commit=False)
        + data(7, 2)
        + marker(9, 2, commit=False)
        + data(10, 2)
    )
    assert offsets(log, 0, aborted((2, 2), (1, 0))) == ([10, 11], 12)
    # Read in two halves (the second answer names only what overlaps it), the same records.
    first, position = offsets(log[: len(data(0, 1)) * 3], 0, aborted((1, 0), (2, 2)))
    second, end = offsets(log[len(data(0, 1)) * 3 :], position, aborted((1, 0), (2, 2)))
    assert (first + second, position, end) == ([10, 11], 6, 12)


# -- configuration ---------------------------------------------------------------------------------


def test_isolation_level_is_validated() -> None:
    assert ConsumerConfig().isolation_level == "read_uncommitted"
    assert not ConsumerConfig().read_committed
    config = ConsumerConfig.from_properties({"isolation.level": "read_committed"})
    assert config.read_committed
    with pytest.raises(ValueError, match=r"isolation\.level"):
        ConsumerConfig(isolation_level="READ_COMMITTED")


# -- the consumer ----------------------------------------------------------------------------------


@pytest.mark.parametrize("isolation_level", ["read_committed", "read_uncommitted"])
async def test_the_consumer_fetches_with_its_isolation_level(
    cluster: ScriptedCluster, clock: ManualClock, isolation_level: str
) -> None:
    cluster.logs[TP].append(data(0, 1) + data(2, 2) + marker(4, 1, commit=False))
    levels: list[int] = []

    async def fetch(broker: int, request: FetchRequest, ctx: RequestContext) -> FetchResponse:
        levels.append(request.isolation_level)
        response = await cluster.fetch(broker, request, ctx)
        if request.isolation_level == 0:
            return response  # the broker sends no list then (Kafka's null)
        return dataclasses.replace(
            response,
            responses=[
                dataclasses.replace(
                    topic,
                    partitions=[
                        dataclasses.replace(p, aborted_transactions=aborted((1, 0)))
                        for p in topic.partitions
                    ],
                )
                for topic in response.responses
            ],
        )

    cluster.overrides[FetchRequest.API_KEY] = fetch
    consumer = Consumer(
        cluster.client(config=ClientConfig(), seed=SEED),
        config=ConsumerConfig(auto_offset_reset="earliest", isolation_level=isolation_level),
        owns_client=True,
    )
    consumer.assign([TP])
    records = await consumer.poll(1_000)
    committed = isolation_level == "read_committed"
    assert [r.offset for r in records] == ([2, 3] if committed else [0, 1, 2, 3])
    assert await consumer.position(TP) == 5
    assert set(levels) == {1 if committed else 0}
    await consumer.close()
