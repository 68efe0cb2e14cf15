"""The data path (actors/replication/request_path.py) against partitions a real ReplicaManager
hosts:
produce with acks 0/1/all (followers simulated by their fetches), NOT_ENOUGH_REPLICAS, timeouts,
the consumer long-poll waking in the tick of the HW advance, ListOffsets and
OffsetForLeaderEpoch."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from actors.views import Role
from tests.unit.actors.replication.replica_manager_harness import (
    BROKER_ID,
    TP,
    WALL_MS,
    Broker,
    advance,
    batch,
    close_broker,
    fail_writes,
    fetch_request,
    only_fetch_answer,
    only_produce_answer,
    open_broker,
    partition_state,
    produce_request,
    settle,
    update_metadata,
)
from wire.errors import ErrorCode
from wire.messages import EpochEndOffset as WireEpochEndOffset
from wire.messages import (
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsTopic,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from wire.topic import TopicPartition

REPLICAS = (0, 1, 2)
EPOCH = 3


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    opened = await open_broker(tmp_path)
    yield opened
    await close_broker(opened)


async def lead_rf3(broker: Broker, isr: tuple[int, ...] = REPLICAS) -> None:
    await broker.update_metadata(update_metadata(REPLICAS))
    response = await broker.leader_and_isr(
        partition_state(BROKER_ID, EPOCH, isr, replicas=REPLICAS)
    )
    assert response.partition_errors[0].error_code == 0


# -- Produce -----------------------------------------------------------------------------------


async def test_acks_1_and_0_answer_after_the_leader_append(broker: Broker) -> None:
    await lead_rf3(broker)
    one = only_produce_answer(await broker.path.produce(produce_request(batch(2), acks=1)))
    assert (one.error_code, one.base_offset) == (0, 0)
    zero = only_produce_answer(await broker.path.produce(produce_request(batch(), acks=0)))
    assert (zero.error_code, zero.base_offset) == (0, 2)
    assert broker.delayed.delayed == (0, 0)


async def test_acks_all_with_one_replica_completes_at_once(broker: Broker) -> None:
    await broker.leader_and_isr(partition_state(BROKER_ID, EPOCH, [BROKER_ID]))
    answer = only_produce_answer(await broker.path.produce(produce_request(batch(3), acks=-1)))
    assert (answer.error_code, answer.base_offset) == (0, 0)
    assert broker.delayed.delayed == (0, 0)


async def test_acks_all_completes_when_follower_fetches_advance_the_hw(broker: Broker) -> None:
    await lead_rf3(broker)
    produce = asyncio.create_task(broker.path.produce(produce_request(batch(2), acks=-1)))
    await settle(lambda: broker.delayed.delayed[0] == 1)
    await broker.follower_fetch(1, 2, epoch=EPOCH)
    for _ in range(20):
        await asyncio.sleep(0)
    assert not produce.done()  # replica 2 has not got it yet
    await broker.follower_fetch(2, 2, epoch=EPOCH)
    await settle(produce.done)
    answer = only_produce_answer(produce.result())
    assert (answer.error_code, answer.base_offset) == (0, 0)
    # No time passed: the HW advance itself completed the produce.
    assert broker.clock.monotonic_ms() == 0


async def test_acks_all_waits_through_a_leader_epoch_bump_while_this_broker_leads(
    broker: Broker,
) -> None:
    """The controller takes replica 2 out of the replica set, which bumps the leader epoch, but
    this broker stays leader: the waiting produce is acknowledged once the HW reaches it, as
    Kafka's DelayedProduce (which never compares epochs) does; it is not failed and retried."""
    await lead_rf3(broker)
    produce = asyncio.create_task(broker.path.produce(produce_request(batch(2), acks=-1)))
    await settle(lambda: broker.delayed.delayed[0] == 1)
    await broker.follower_fetch(1, 2, epoch=EPOCH)  # replica 2 never fetches: it holds the HW
    for _ in range(20):
        await asyncio.sleep(0)
    assert not produce.done()
    response = await broker.leader_and_isr(
        partition_state(BROKER_ID, EPOCH + 1, [0, 1], replicas=(0, 1), partition_epoch=1)
    )
    assert response.partition_errors[0].error_code == 0
    await settle(produce.done)
    answer = only_produce_answer(produce.result())
    assert (answer.error_code, answer.base_offset) == (ErrorCode.NONE, 0)


async def test_acks_all_times_out_without_the_followers(broker: Broker) -> None:
    await lead_rf3(broker)
    produce = asyncio.create_task(
        broker.path.produce(produce_request(batch(), acks=-1, timeout_ms=1_000))
    )
    await settle(lambda: broker.delayed.delayed[0] == 1)
    await broker.follower_fetch(1, 1, epoch=EPOCH)
    await advance(broker.clock, 999)
    assert not produce.done()
    await advance(broker.clock, 2)
    await settle(produce.done)
    answer = only_produce_answer(produce.result())
    assert answer.error_code == ErrorCode.REQUEST_TIMED_OUT


async def test_not_enough_replicas_before_the_append(tmp_path: Path) -> None:
    opened = await open_broker(tmp_path, min_insync_replicas=2)
    try:
        await lead_rf3(opened, isr=(BROKER_ID,))
        refused = only_produce_answer(await opened.path.produce(produce_request(batch(), acks=-1)))
        assert refused.error_code == ErrorCode.NOT_ENOUGH_REPLICAS
        # acks=1 does not care about min.insync.replicas.
        accepted = only_produce_answer(await opened.path.produce(produce_request(batch(), acks=1)))
        assert accepted.error_code == 0
        assert accepted.base_offset == 0  # the refused batch was never appended
    finally:
        await close_broker(opened)


async def test_produce_errors_are_values(tmp_path: Path) -> None:
    opened = await open_broker(tmp_path, message_max_bytes=200)
    try:
        unknown = only_produce_answer(await opened.path.produce(produce_request(batch(), acks=1)))
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        await opened.leader_and_isr(partition_state(BROKER_ID, EPOCH, [BROKER_ID]))
        large = only_produce_answer(await opened.path.produce(produce_request(batch(20), acks=-1)))
        assert large.error_code == ErrorCode.MESSAGE_TOO_LARGE
        bad_acks = only_produce_answer(await opened.path.produce(produce_request(batch(), acks=2)))
        assert bad_acks.error_code == ErrorCode.INVALID_REQUIRED_ACKS
    finally:
        await close_broker(opened)


# -- Fetch -------------------------------------------------------------------------------------


async def test_consumer_long_poll_completes_in_the_tick_of_the_hw_advance(broker: Broker) -> None:
    await lead_rf3(broker)
    poll = asyncio.create_task(broker.path.fetch(fetch_request(0, max_wait_ms=500)))
    await settle(lambda: broker.delayed.delayed[1] == 1)
    await broker.path.produce(produce_request(batch(2), acks=1))
    await broker.follower_fetch(1, 2, epoch=EPOCH)
    for _ in range(20):
        await asyncio.sleep(0)
    assert not poll.done()  # appended, but not committed: a consumer sees nothing yet
    await broker.follower_fetch(2, 2, epoch=EPOCH)
    await settle(poll.done)
    answer = only_fetch_answer(poll.result())
    assert answer.error_code == 0
    assert answer.high_watermark == 2
    assert answer.records
    assert broker.clock.monotonic_ms() == 0


async def test_long_poll_expires_with_what_is_there(broker: Broker) -> None:
    await broker.leader_and_isr(partition_state(BROKER_ID, EPOCH, [BROKER_ID]))
    poll = asyncio.create_task(broker.path.fetch(fetch_request(0, max_wait_ms=500)))
    await settle(lambda: broker.delayed.delayed[1] == 1)
    await advance(broker.clock, 499)
    assert not poll.done()
    await advance(broker.clock, 2)
    await settle(poll.done)
    answer = only_fetch_answer(poll.result())
    assert (answer.error_code, answer.records, answer.high_watermark) == (0, b"", 0)


async def test_follower_fetch_waits_for_a_leader_append(broker: Broker) -> None:
    await lead_rf3(broker)
    poll = asyncio.create_task(
        broker.path.fetch(
            fetch_request(0, replica_id=1, max_wait_ms=500, current_leader_epoch=EPOCH)
        )
    )
    await settle(lambda: broker.delayed.delayed[1] == 1)
    await broker.path.produce(produce_request(batch(), acks=1))
    await settle(poll.done)
    answer = only_fetch_answer(poll.result())
    assert answer.error_code == 0
    assert answer.records  # followers read up to the LEO, past the HW
    assert answer.high_watermark == 0


async def test_fetch_errors_answer_at_once(broker: Broker) -> None:
    await lead_rf3(broker)
    fenced = only_fetch_answer(
        await broker.path.fetch(
            fetch_request(0, replica_id=1, max_wait_ms=500, current_leader_epoch=EPOCH - 1)
        )
    )
    assert fenced.error_code == ErrorCode.FENCED_LEADER_EPOCH
    out_of_range = only_fetch_answer(await broker.path.fetch(fetch_request(5, max_wait_ms=500)))
    assert out_of_range.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert broker.delayed.delayed == (0, 0)


# -- ListOffsets and OffsetForLeaderEpoch ------------------------------------------------------


async def list_offset(broker: Broker, timestamp: int) -> ListOffsetsPartitionResponse:
    request = ListOffsetsRequest(
        topics=[
            ListOffsetsTopic(
                name=TP.topic,
                partitions=[
                    ListOffsetsPartition(partition_index=TP.partition, timestamp=timestamp)
                ],
            )
        ]
    )
    response = await broker.path.list_offsets(request)
    [topic] = response.topics
    [answer] = topic.partitions
    return answer


async def test_list_offsets_earliest_latest_and_by_timestamp(broker: Broker) -> None:
    await lead_rf3(broker)
    for i in range(3):
        await broker.path.produce(
            produce_request(batch(2, tag=i, base_timestamp=WALL_MS + 1000 * i), acks=1)
        )
    # Consumers see up to the HW: nothing is committed yet.
    latest = await list_offset(broker, -1)
    assert (latest.error_code, latest.offset, latest.leader_epoch) == (0, 0, EPOCH)
    by_time = await list_offset(broker, WALL_MS + 1000)
    assert (by_time.error_code, by_time.offset) == (0, -1)
    for follower in (1, 2):
        await broker.follower_fetch(follower, 4, epoch=EPOCH)
    latest = await list_offset(broker, -1)
    assert latest.offset == 4
    earliest = await list_offset(broker, -2)
    assert (earliest.error_code, earliest.offset) == (0, 0)
    by_time = await list_offset(broker, WALL_MS + 500)
    assert (by_time.error_code, by_time.offset, by_time.timestamp) == (0, 2, WALL_MS + 1000)
    assert by_time.leader_epoch == EPOCH
    beyond_hw = await list_offset(broker, WALL_MS + 1500)
    assert beyond_hw.offset == -1  # at offset 4, not committed


async def test_list_offsets_errors(broker: Broker) -> None:
    unknown = await list_offset(broker, -1)
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    await broker.update_metadata(update_metadata(REPLICAS))
    await broker.leader_and_isr(partition_state(1, EPOCH, [1, 0], replicas=REPLICAS))
    follower = await list_offset(broker, -1)
    assert follower.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


async def epoch_end(
    broker: Broker, leader_epoch: int, current_leader_epoch: int = -1, replica_id: int = 1
) -> WireEpochEndOffset:
    request = OffsetForLeaderEpochRequest(
        replica_id=replica_id,
        topics=[
            OffsetForLeaderTopic(
                topic=TP.topic,
                partitions=[
                    OffsetForLeaderPartition(
                        partition=TP.partition,
                        current_leader_epoch=current_leader_epoch,
                        leader_epoch=leader_epoch,
                    )
                ],
            )
        ],
    )
    response = await broker.path.offset_for_leader_epoch(request)
    [topic] = response.topics
    [answer] = topic.partitions
    return answer


async def test_offset_for_leader_epoch(broker: Broker) -> None:
    assert (await epoch_end(broker, 1)).error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID]))
    await broker.path.produce(produce_request(batch(3), acks=1))
    await broker.leader_and_isr(partition_state(BROKER_ID, 4, [BROKER_ID]))
    await broker.path.produce(produce_request(batch(2), acks=1))
    first = await epoch_end(broker, 1, current_leader_epoch=4)
    assert (first.error_code, first.leader_epoch, first.end_offset) == (0, 1, 3)
    between = await epoch_end(broker, 2, current_leader_epoch=4)
    assert (between.leader_epoch, between.end_offset) == (1, 3)
    current = await epoch_end(broker, 4, current_leader_epoch=4)
    assert (current.leader_epoch, current.end_offset) == (4, 5)
    fenced = await epoch_end(broker, 1, current_leader_epoch=3)
    assert fenced.error_code == ErrorCode.FENCED_LEADER_EPOCH


async def test_a_partition_named_twice_is_refused(broker: Broker) -> None:
    await broker.leader_and_isr(partition_state(BROKER_ID, EPOCH, [BROKER_ID]))
    twice = ProduceRequest(
        acks=-1,
        timeout_ms=1_000,
        topic_data=[
            TopicProduceData(
                name=TP.topic,
                partition_data=[
                    PartitionProduceData(index=TP.partition, records=batch(tag=1)),
                    PartitionProduceData(index=TP.partition, records=batch(tag=2)),
                ],
            )
        ],
    )
    response = await broker.path.produce(twice)
    [topic] = response.responses
    assert [a.error_code for a in topic.partition_responses] == [ErrorCode.INVALID_REQUEST] * 2
    actor = broker.manager.partition(TP)
    assert actor is not None
    assert actor.view.log_end_offset.message_offset == 0
    request = fetch_request(0, max_wait_ms=500)
    doubled = replace(
        request, topics=[replace(request.topics[0], partitions=request.topics[0].partitions * 2)]
    )
    fetched = await broker.path.fetch(doubled)
    [fetched_topic] = fetched.responses
    assert [p.error_code for p in fetched_topic.partitions] == [ErrorCode.INVALID_REQUEST] * 2
    assert broker.delayed.delayed == (0, 0)


async def test_list_offsets_latest_waits_for_a_new_leaders_hw(broker: Broker) -> None:
    await lead_rf3(broker)
    await broker.path.produce(produce_request(batch(2), acks=1))
    # A new epoch of the same leader starts at offset 2; its HW is still 0.
    await broker.leader_and_isr(partition_state(BROKER_ID, EPOCH + 1, REPLICAS, replicas=REPLICAS))
    assert (await list_offset(broker, -1)).error_code == ErrorCode.OFFSET_NOT_AVAILABLE
    for follower in (1, 2):
        await broker.follower_fetch(follower, 2, epoch=EPOCH + 1)
    latest = await list_offset(broker, -1)
    assert (latest.error_code, latest.offset, latest.leader_epoch) == (0, 2, EPOCH + 1)


async def test_fetch_max_bytes_keeps_the_first_data_and_drops_what_does_not_fit(
    broker: Broker,
) -> None:
    tp1 = TopicPartition(TP.topic, 1)
    await broker.leader_and_isr(
        partition_state(BROKER_ID, EPOCH, [BROKER_ID]),
        partition_state(BROKER_ID, EPOCH, [BROKER_ID], tp=tp1),
    )
    big = batch(5)
    for tp in (TP, tp1):
        request = produce_request(big, acks=1)
        request = replace(
            request,
            topic_data=[
                replace(
                    request.topic_data[0],
                    partition_data=[
                        replace(request.topic_data[0].partition_data[0], index=tp.partition)
                    ],
                )
            ],
        )
        assert only_produce_answer(await broker.path.produce(request)).error_code == 0
    one = fetch_request(0)
    both = replace(
        one,
        max_bytes=len(big) + 10,  # room for one partition's batch only
        topics=[
            replace(
                one.topics[0],
                partitions=[
                    one.topics[0].partitions[0],
                    replace(one.topics[0].partitions[0], partition=1),
                ],
            )
        ],
    )
    fetched = await broker.path.fetch(both)
    [topic] = fetched.responses
    assert [len(p.records) for p in topic.partitions] == [len(big), 0]
    assert [p.high_watermark for p in topic.partitions] == [5, 5]
    # A max_bytes below one batch still returns that batch (the consumer must progress).
    tiny = only_fetch_answer(await broker.path.fetch(replace(one, max_bytes=1)))
    assert len(tiny.records) == len(big)


# -- log failure -----------------------------------------------------------------------------------


async def test_a_log_failure_takes_the_partition_offline(broker: Broker) -> None:
    """Kafka's offline partition: the write that hits the failing disk and every request after it
    get KAFKA_STORAGE_ERROR; the partition leaves the fetchers and its delayed operations."""
    await broker.leader_and_isr(partition_state(BROKER_ID, EPOCH, [BROKER_ID]))
    first = only_produce_answer(await broker.path.produce(produce_request(batch(), acks=1)))
    assert first.error_code == ErrorCode.NONE
    fail_writes(broker, TP)
    failed = only_produce_answer(await broker.path.produce(produce_request(batch(), acks=1)))
    assert failed.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    actor = broker.manager.partition(TP)
    assert actor is not None
    await settle(lambda: actor.failure is not None and not actor.running)
    again = only_produce_answer(await broker.path.produce(produce_request(batch(), acks=1)))
    assert again.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    fetched = only_fetch_answer(await broker.path.fetch(fetch_request(0)))
    assert fetched.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    assert actor.view.role is Role.OFFLINE
