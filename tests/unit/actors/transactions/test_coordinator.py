"""The broker's transaction coordinator router: a shard per led `__transaction_state` partition,
requests for an id routed to its partition's shard (NOT_COORDINATOR where the partition is led
elsewhere, COORDINATOR_LOAD_IN_PROGRESS while it loads), the id's partition counted with the
topic's partition count in the metadata, and Kafka's requests turned into the shard's messages
and back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from actors.transactions.coordinator import TransactionCoordinator
from runtime.clock import ManualClock
from tests.unit.actors.transactions.shard_harness import (
    CONFIG,
    FIRST_PRODUCER_ID,
    TIMEOUT_MS,
    TP_A,
    TP_B,
    TP_C,
    FakeMarkerSender,
    MarkerCall,
    MemoryTransactionLog,
    ProducerIdSource,
    coordinator_epoch,
    turns,
    until,
)
from wire.errors import ErrorCode
from wire.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
    EndTxnRequest,
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from wire.topic import TopicPartition
from wire.transaction_log import TRANSACTION_STATE_TOPIC, TransactionState, partition_for

S = TransactionState
PID = FIRST_PRODUCER_ID
OTHER_TOPIC = TopicPartition("orders", 3)  # a partition number this test does not lead


def state_partition(partition: int) -> TopicPartition:
    return TopicPartition(TRANSACTION_STATE_TOPIC, partition)


def id_in(partition: int, partitions: int = CONFIG.num_partitions) -> str:
    """The first of txn-0, txn-1, ... that belongs to the partition."""
    return next(
        tid
        for tid in (f"txn-{i}" for i in range(1_000))
        if partition_for(tid, partitions) == partition
    )


@dataclass(slots=True)
class Rig:
    router: TransactionCoordinator
    clock: ManualClock
    log: MemoryTransactionLog
    markers: FakeMarkerSender
    producer_ids: ProducerIdSource
    # The partition count of __transaction_state in the broker's metadata (None: no topic yet).
    metadata_partitions: int | None = CONFIG.num_partitions

    async def lead(self, partition: int) -> None:
        self.router.on_leadership_change([state_partition(partition)], [])
        await until(lambda: self.loaded(partition), f"partition {partition} loaded")

    def loaded(self, partition: int) -> bool:
        shard = self.router.shards.get(partition)
        return shard is not None and not shard.loading

    async def init(self, tid: str) -> InitProducerIdResponse:
        return await self.router.init_producer_id(
            InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=TIMEOUT_MS)
        )

    async def add(
        self, tid: str, producer_epoch: int, *, verify_only: bool = False
    ) -> AddPartitionsToTxnResponse:
        return await self.router.add_partitions_to_txn(
            AddPartitionsToTxnRequest(
                transactions=[
                    AddPartitionsToTxnTransaction(
                        transactional_id=tid,
                        producer_id=PID,
                        producer_epoch=producer_epoch,
                        verify_only=verify_only,
                        topics=[
                            AddPartitionsToTxnTopic(name="orders", partitions=[0, 1]),
                            AddPartitionsToTxnTopic(name="payments", partitions=[3]),
                        ],
                    )
                ]
            )
        )

    async def end(self, tid: str, producer_epoch: int, *, commit: bool) -> ErrorCode:
        response = await self.router.end_txn(
            EndTxnRequest(
                transactional_id=tid,
                producer_id=PID,
                producer_epoch=producer_epoch,
                committed=commit,
            )
        )
        return response.error


def partition_errors(response: AddPartitionsToTxnResponse) -> dict[TopicPartition, ErrorCode]:
    [result] = response.results_by_transaction
    return {
        TopicPartition(topic.name, p.partition_index): ErrorCode.from_code(p.partition_error_code)
        for topic in result.topic_results
        for p in topic.results_by_partition
    }


def every(error: ErrorCode) -> dict[TopicPartition, ErrorCode]:
    return dict.fromkeys((TP_A, TP_B, TP_C), error)


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    clock, log, markers, ids = (
        ManualClock(),
        MemoryTransactionLog(),
        FakeMarkerSender(),
        ProducerIdSource(),
    )
    holder: list[Rig] = []
    router = TransactionCoordinator(
        log,
        markers,
        CONFIG,
        clock=clock,
        new_producer_id=ids,
        coordinator_epoch=coordinator_epoch,
        state_partitions=lambda: holder[0].metadata_partitions,
    )
    holder.append(Rig(router, clock, log, markers, ids))
    await router.start()
    yield holder[0]
    await router.stop()


async def test_leading_a_transaction_state_partition_starts_its_shard(rig: Rig) -> None:
    rig.router.on_leadership_change([state_partition(1), OTHER_TOPIC], [])
    await until(lambda: rig.loaded(1), "partition 1 loaded")
    assert set(rig.router.shards) == {1}, "only __transaction_state partitions get a shard"
    shard = rig.router.shards[1]
    assert (shard.partition, shard.coordinator_epoch) == (1, coordinator_epoch(1))

    tid = id_in(1)
    answer = await rig.init(tid)
    assert (answer.error, answer.producer_id, answer.producer_epoch) == (ErrorCode.NONE, PID, 0)
    assert rig.log.states(tid, partition=1) == [S.EMPTY]


async def test_a_transaction_through_the_router(rig: Rig) -> None:
    await rig.lead(2)
    tid = id_in(2)
    await rig.init(tid)
    assert partition_errors(await rig.add(tid, 0)) == every(ErrorCode.NONE)
    assert partition_errors(await rig.add(tid, 1)) == every(ErrorCode.PRODUCER_FENCED)
    assert await rig.end(tid, 0, commit=True) is ErrorCode.NONE
    await until(lambda: rig.log.states(tid, 2)[-1:] == [S.COMPLETE_COMMIT], "committed")
    assert rig.log.states(tid, 2) == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    epoch = coordinator_epoch(2)
    assert rig.markers.calls == [MarkerCall(PID, 0, epoch, True, frozenset({TP_A, TP_B, TP_C}))]


async def test_an_id_whose_partition_is_not_led_here_answers_not_coordinator(rig: Rig) -> None:
    await rig.lead(1)
    tid = id_in(2)
    assert (await rig.init(tid)).error is ErrorCode.NOT_COORDINATOR
    assert partition_errors(await rig.add(tid, 0)) == every(ErrorCode.NOT_COORDINATOR)
    assert await rig.end(tid, 0, commit=True) is ErrorCode.NOT_COORDINATOR
    assert (rig.log.records(1), rig.log.records(2), rig.producer_ids.issued) == ([], [], [])


async def test_a_partition_no_longer_led_stops_its_shard_and_answers_not_coordinator(
    rig: Rig,
) -> None:
    await rig.lead(1)
    tid = id_in(1)
    assert (await rig.init(tid)).error is ErrorCode.NONE
    shard = rig.router.shards[1]
    rig.router.on_leadership_change([], [state_partition(1)])
    await until(lambda: 1 not in rig.router.shards and not shard.running, "shard stopped")
    assert (await rig.init(tid)).error is ErrorCode.NOT_COORDINATOR
    assert await rig.end(tid, 0, commit=True) is ErrorCode.NOT_COORDINATOR


async def test_a_partition_loading_answers_coordinator_load_in_progress(rig: Rig) -> None:
    tid = id_in(1)
    rig.log.committed_gate = gate = asyncio.Event()
    rig.router.on_leadership_change([state_partition(1)], [])
    # Led, the shard not even started yet (the router's wake-up is queued).
    assert (await rig.init(tid)).error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    await until(lambda: 1 in rig.router.shards, "shard started")
    await turns()
    assert (await rig.init(tid)).error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert partition_errors(await rig.add(tid, 0)) == every(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    assert await rig.end(tid, 0, commit=True) is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    gate.set()
    await until(lambda: rig.loaded(1), "loaded")
    assert (await rig.init(tid)).error is ErrorCode.NONE


async def test_partition_of_uses_the_metadata_partition_count_when_given(rig: Rig) -> None:
    # An id whose partition differs between 5 partitions and the configured count.
    tid = next(
        f"txn-{i}"
        for i in range(1_000)
        if partition_for(f"txn-{i}", 5) != partition_for(f"txn-{i}", CONFIG.num_partitions)
    )
    rig.metadata_partitions = 5
    assert rig.router.partition_of(tid) == partition_for(tid, 5)
    await rig.lead(partition_for(tid, 5))
    assert (await rig.init(tid)).error is ErrorCode.NONE

    rig.metadata_partitions = None  # no such topic in the metadata: the configured count
    assert rig.router.partition_of(tid) == partition_for(tid, CONFIG.num_partitions)
    assert (await rig.init(tid)).error is ErrorCode.NOT_COORDINATOR


async def test_a_verify_only_add_partitions_is_unsupported(rig: Rig) -> None:
    await rig.lead(1)
    tid = id_in(1)
    await rig.init(tid)
    response = await rig.add(tid, 0, verify_only=True)
    assert partition_errors(response) == every(ErrorCode.UNSUPPORTED_VERSION)
    assert rig.log.states(tid, 1) == [S.EMPTY]


async def test_a_request_reaching_a_shard_that_is_stopping_answers_not_coordinator(
    rig: Rig,
) -> None:
    await rig.lead(1)
    tid = id_in(1)
    shard = rig.router.shards[1]
    rig.log.append_gate = gate = asyncio.Event()
    first = asyncio.ensure_future(rig.init(tid))  # held in its write
    try:
        await until(lambda: rig.log.held_appends == 1, "the first request writing")
        stopping = asyncio.ensure_future(shard.stop())  # the mailbox closes, the write goes on
        await turns(5)
        assert shard.running, "still finishing the write"
        assert (await rig.init(tid)).error is ErrorCode.NOT_COORDINATOR
    finally:
        gate.set()  # so that the shard and the router can stop, whatever failed
    assert (await first).error is ErrorCode.NONE
    await stopping
