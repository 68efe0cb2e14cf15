"""DescribeProducers: a partition actor's snapshot of its log's producer state
(`GetActiveProducers`) on a leader and on a follower, and the request path's answer per
partition (the snapshot, NOT_LEADER_OR_FOLLOWER for a partition hosted elsewhere or a stopped
replica, UNKNOWN_TOPIC_OR_PARTITION for one the cluster does not have)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final

import pytest

from actors.replication.partition_messages import (
    ActiveProducer,
    ActiveProducerState,
    AppendAsLeader,
    AppendTxnMarker,
    BecomeFollower,
    BecomeLeader,
    GetActiveProducers,
)
from runtime.clock import ManualClock
from tests.unit.actors.replication.partition_harness import (
    WALL_MS,
    Brokers,
    Replica,
    batch,
    replicate,
    state,
)
from tests.unit.actors.replication.replica_manager_harness import (
    BROKER_ID,
    TP,
    Broker,
    close_broker,
    only_produce_answer,
    open_broker,
    partition_state,
    produce_request,
    update_metadata,
)
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.messages import (
    DescribedProducer,
    DescribeProducersPartitionResponse,
    DescribeProducersRequest,
    DescribeProducersTopic,
)
from wire.topic import TopicPartition

TXN_PID: Final = 7_000  # a transactional producer
IDEMPOTENT_PID: Final = 7_001  # an idempotent one, never in a transaction
EPOCH: Final = 2
COORDINATOR_EPOCH: Final = 11


def producer_batch(
    producer_id: int, base_sequence: int, count: int, *, transactional: bool, ts_ms: int = WALL_MS
) -> bytes:
    """`count` records of one producer; their timestamps go up by 1 ms from `ts_ms`."""
    return build_batch(
        [(b"k%d" % i, b"v%d" % i) for i in range(count)],
        timestamps=[ts_ms + i for i in range(count)],
        producer_id=producer_id,
        producer_epoch=EPOCH,
        base_sequence=base_sequence,
        is_transactional=transactional,
    )


async def append(replica: Replica, records: bytes) -> int:
    """Appended as leader; the batch's first offset."""
    result = await replica.actor.ask(AppendAsLeader(records, 1))
    assert result.error is ErrorCode.NONE, result
    assert result.info is not None, result
    return result.info.first_offset


@pytest.fixture
async def brokers(tmp_path: Path) -> AsyncIterator[Brokers]:
    opened = Brokers(tmp_path, ManualClock(start_ms=1_000_000))
    yield opened
    await opened.close()


async def leader_with_producers(brokers: Brokers) -> tuple[Replica, int]:
    """Broker 1 leads (ISR 1, 2): a plain batch, then the idempotent producer's two batches and
    the transactional producer's two, its transaction left open. Answers the offset of the
    transaction's first batch."""
    leader = await brokers.open(1)
    assert (await leader.actor.ask(BecomeLeader(state(1, 0, (1, 2), replicas=(1, 2))))).changed
    await append(leader, batch(2))  # no producer id: no state kept for it
    await append(leader, producer_batch(IDEMPOTENT_PID, 0, 3, transactional=False))
    txn_start = await append(leader, producer_batch(TXN_PID, 0, 2, transactional=True))
    later = WALL_MS + 50
    await append(leader, producer_batch(IDEMPOTENT_PID, 3, 1, transactional=False, ts_ms=later))
    await append(leader, producer_batch(TXN_PID, 2, 4, transactional=True, ts_ms=WALL_MS + 100))
    return leader, txn_start


def expected_open(txn_start: int) -> ActiveProducerState:
    """The leader_with_producers state, by producer id: last sequences 5 (2 + 4 records from
    0) and 3, each last batch's max timestamp, no marker yet (coordinator epoch -1)."""
    return ActiveProducerState(
        ErrorCode.NONE,
        (
            ActiveProducer(TXN_PID, EPOCH, 5, WALL_MS + 103, -1, txn_start),
            ActiveProducer(IDEMPOTENT_PID, EPOCH, 3, WALL_MS + 50, -1, -1),
        ),
    )


async def test_a_leader_describes_each_producer_its_log_keeps_state_for(brokers: Brokers) -> None:
    leader, txn_start = await leader_with_producers(brokers)
    assert txn_start == 5  # after the plain batch (2) and the idempotent one (3)
    described = await leader.actor.ask(GetActiveProducers())
    assert described == expected_open(txn_start)


async def test_the_snapshot_is_a_copy_and_a_marker_closes_the_transaction(
    brokers: Brokers,
) -> None:
    leader, txn_start = await leader_with_producers(brokers)
    before = await leader.actor.ask(GetActiveProducers())
    marker = await leader.actor.ask(AppendTxnMarker(TXN_PID, EPOCH, COORDINATOR_EPOCH, commit=True))
    assert marker.error is ErrorCode.NONE, marker
    after = await leader.actor.ask(GetActiveProducers())
    assert before == expected_open(txn_start), "an earlier answer never changes"
    [txn, idempotent] = after.producers
    assert (txn.producer_id, txn.current_txn_start_offset, txn.coordinator_epoch) == (
        TXN_PID,
        -1,
        COORDINATOR_EPOCH,
    )
    assert txn.last_sequence == 5, "the marker keeps the producer's sequence"
    assert idempotent == before.producers[1]


async def test_a_follower_describes_the_producers_it_replicated(brokers: Brokers) -> None:
    leader, txn_start = await leader_with_producers(brokers)
    follower = await brokers.open(2)
    assert (await follower.actor.ask(BecomeFollower(state(1, 0, (1, 2), replicas=(1, 2))))).changed
    await replicate(leader, follower)
    assert await follower.actor.ask(GetActiveProducers()) == expected_open(txn_start)


async def test_a_replica_neither_leading_nor_following_answers_not_leader_or_follower(
    brokers: Brokers,
) -> None:
    created = await brokers.open(3)  # no LeaderAndIsr yet
    assert await created.actor.ask(GetActiveProducers()) == ActiveProducerState(
        ErrorCode.NOT_LEADER_OR_FOLLOWER
    )


# -- the request path ---------------------------------------------------------------------------

ELSEWHERE: Final = TopicPartition("orders", 1)  # in the cluster's metadata, hosted elsewhere
UNKNOWN: Final = TopicPartition("nowhere", 0)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    opened = await open_broker(tmp_path)
    await opened.update_metadata(update_metadata([BROKER_ID]))
    led = await opened.leader_and_isr(partition_state(BROKER_ID, 1, (BROKER_ID,)))
    assert led.partition_errors[0].error_code == ErrorCode.NONE
    yield opened
    await close_broker(opened)


def request(*tps: TopicPartition) -> DescribeProducersRequest:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return DescribeProducersRequest(
        topics=[
            DescribeProducersTopic(name=topic, partition_indexes=partitions)
            for topic, partitions in by_topic.items()
        ]
    )


async def describe(broker: Broker, *tps: TopicPartition) -> dict[TopicPartition, object]:
    response = await broker.path.describe_producers(
        request(*tps), known=lambda tp: tp in (TP, ELSEWHERE)
    )
    return {
        TopicPartition(topic.name, p.partition_index): p
        for topic in response.topics
        for p in topic.partitions
    }


async def test_the_request_path_answers_each_partition(broker: Broker) -> None:
    produced = only_produce_answer(
        await broker.path.produce(
            produce_request(producer_batch(TXN_PID, 0, 3, transactional=True), acks=1)
        )
    )
    assert produced.error_code == 0, produced
    answers = await describe(broker, TP, ELSEWHERE, UNKNOWN)
    assert answers == {
        TP: DescribeProducersPartitionResponse(
            partition_index=0,
            active_producers=[
                DescribedProducer(
                    producer_id=TXN_PID,
                    producer_epoch=EPOCH,
                    last_sequence=2,
                    last_timestamp=WALL_MS + 2,
                    coordinator_epoch=-1,
                    current_txn_start_offset=0,
                )
            ],
        ),
        ELSEWHERE: DescribeProducersPartitionResponse(
            partition_index=1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER
        ),
        UNKNOWN: DescribeProducersPartitionResponse(
            partition_index=0, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        ),
    }


async def test_a_stopped_replica_answers_not_leader_or_follower(broker: Broker) -> None:
    stopped = await broker.stop_replica(delete=False)
    assert stopped.error_code == 0
    assert await describe(broker, TP) == {
        TP: DescribeProducersPartitionResponse(
            partition_index=0, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER
        )
    }
