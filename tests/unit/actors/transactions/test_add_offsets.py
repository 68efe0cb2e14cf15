"""AddOffsetsToTxn through the transaction coordinator: the group's `__consumer_offsets`
partition joins the transaction exactly as an AddPartitionsToTxn of that one partition would
(same rules, same errors), and its marker goes to it when the transaction ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from actors.transactions.config import TransactionConfig
from actors.transactions.coordinator import TransactionCoordinator
from actors.transactions.state import TransactionMetadata
from runtime.clock import ManualClock
from tests.unit.actors.group.shard_harness import MemoryOffsetsLog, until
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC
from wire.messages import (
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
    EndTxnRequest,
    InitProducerIdRequest,
)
from wire.topic import TopicPartition
from wire.transaction_log import TRANSACTION_STATE_TOPIC, TransactionState

TXN_ID = "eos-app"
OTHER_TXN_ID = "elsewhere"  # led by a partition this broker does not lead
PARTITIONS = 4
CONFIG = TransactionConfig(num_partitions=PARTITIONS, load_buffer_size=1)
OFFSETS_PARTITION = TopicPartition(OFFSETS_TOPIC, 7)  # the group's, by the group coordinator
FIRST_PRODUCER_ID = 500


@dataclass
class RecordedMarkers:
    """A marker sender that only records what it was asked to write; while `hold` is set, a
    send waits for it (as one waiting for the partitions' leaders)."""

    sent: list[tuple[int, bool, frozenset[TopicPartition]]] = field(default_factory=list)
    hold: asyncio.Event | None = None

    async def send(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        commit: bool,
        partitions: frozenset[TopicPartition],
    ) -> None:
        self.sent.append((producer_id, commit, partitions))
        if self.hold is not None:
            await self.hold.wait()


@dataclass
class Harness:
    coordinator: TransactionCoordinator
    state_log: MemoryOffsetsLog
    markers: RecordedMarkers
    producer_id: int = -1
    epoch: int = -1

    def add_offsets(
        self, *, producer_id: int | None = None, epoch: int | None = None, txn: str = TXN_ID
    ) -> AddOffsetsToTxnRequest:
        return AddOffsetsToTxnRequest(
            transactional_id=txn,
            producer_id=self.producer_id if producer_id is None else producer_id,
            producer_epoch=self.epoch if epoch is None else epoch,
            group_id="eos",
        )


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    ids = iter(range(FIRST_PRODUCER_ID, FIRST_PRODUCER_ID + 100))

    async def new_producer_id() -> int:
        return next(ids)

    state_log = MemoryOffsetsLog()  # one partition's log: only TXN_ID's partition is led
    markers = RecordedMarkers()
    coordinator = TransactionCoordinator(
        state_log,
        markers,
        CONFIG,
        clock=ManualClock(),
        new_producer_id=new_producer_id,
        coordinator_epoch=lambda partition: 3,
        state_partitions=lambda: PARTITIONS,
    )
    partition = coordinator.partition_of(TXN_ID)
    assert coordinator.partition_of(OTHER_TXN_ID) != partition, "pick another id"
    await coordinator.start()
    coordinator.on_leadership_change([TopicPartition(TRANSACTION_STATE_TOPIC, partition)], [])
    await until(
        lambda: partition in coordinator.shards and not coordinator.shards[partition].loading,
        "the transaction state partition loaded",
    )
    harness = Harness(coordinator, state_log, markers)
    initialized = await coordinator.init_producer_id(
        InitProducerIdRequest(transactional_id=TXN_ID, transaction_timeout_ms=60_000)
    )
    assert initialized.error_code == ErrorCode.NONE
    harness.producer_id, harness.epoch = initialized.producer_id, initialized.producer_epoch
    yield harness
    await coordinator.stop()


def metadata_of(harness: Harness) -> TransactionMetadata:
    shard = harness.coordinator.shards[harness.coordinator.partition_of(TXN_ID)]
    return shard.txns[TXN_ID]


async def test_the_groups_offsets_partition_joins_the_transaction(harness: Harness) -> None:
    coordinator = harness.coordinator
    answer = await coordinator.add_offsets_to_txn(harness.add_offsets(), OFFSETS_PARTITION)
    assert answer.error_code == ErrorCode.NONE
    txn = metadata_of(harness)
    assert txn.state is TransactionState.ONGOING
    assert txn.topic_partitions == {OFFSETS_PARTITION}
    appends = harness.state_log.appends

    again = await coordinator.add_offsets_to_txn(harness.add_offsets(), OFFSETS_PARTITION)
    assert again.error_code == ErrorCode.NONE
    assert harness.state_log.appends == appends, "already in the transaction: nothing written"

    # A data partition joins the same transaction beside it, as the producer's produce would.
    orders = TopicPartition("orders", 0)
    added = await coordinator.add_partitions_to_txn(
        AddPartitionsToTxnRequest(
            transactions=[
                AddPartitionsToTxnTransaction(
                    transactional_id=TXN_ID,
                    producer_id=harness.producer_id,
                    producer_epoch=harness.epoch,
                    topics=[AddPartitionsToTxnTopic(name="orders", partitions=[0])],
                )
            ]
        )
    )
    [result] = added.results_by_transaction
    assert result.topic_results[0].results_by_partition[0].partition_error_code == ErrorCode.NONE
    ended = await coordinator.end_txn(
        EndTxnRequest(
            transactional_id=TXN_ID,
            producer_id=harness.producer_id,
            producer_epoch=harness.epoch,
            committed=True,
        )
    )
    assert ended.error_code == ErrorCode.NONE
    await until(lambda: bool(harness.markers.sent), "markers sent")
    assert harness.markers.sent == [
        (harness.producer_id, True, frozenset({OFFSETS_PARTITION, orders}))
    ]


async def test_the_rules_and_errors_are_add_partitions_to_txn(harness: Harness) -> None:
    coordinator = harness.coordinator
    fenced = await coordinator.add_offsets_to_txn(
        harness.add_offsets(epoch=harness.epoch + 1),
        OFFSETS_PARTITION,  # any other epoch
    )
    assert fenced.error_code == ErrorCode.PRODUCER_FENCED
    unknown = await coordinator.add_offsets_to_txn(
        harness.add_offsets(producer_id=harness.producer_id + 50), OFFSETS_PARTITION
    )
    assert unknown.error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    elsewhere = await coordinator.add_offsets_to_txn(
        harness.add_offsets(txn=OTHER_TXN_ID), OFFSETS_PARTITION
    )
    assert elsewhere.error_code == ErrorCode.NOT_COORDINATOR
    assert metadata_of(harness).state is TransactionState.EMPTY, "nothing joined"

    # While the transaction ends, another AddOffsetsToTxn waits its turn.
    joined = await coordinator.add_offsets_to_txn(harness.add_offsets(), OFFSETS_PARTITION)
    assert joined.error_code == ErrorCode.NONE
    harness.markers.hold = asyncio.Event()
    ended = await coordinator.end_txn(
        EndTxnRequest(
            transactional_id=TXN_ID,
            producer_id=harness.producer_id,
            producer_epoch=harness.epoch,
            committed=False,
        )
    )
    assert ended.error_code == ErrorCode.NONE
    during = await coordinator.add_offsets_to_txn(harness.add_offsets(), OFFSETS_PARTITION)
    assert during.error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    harness.markers.hold.set()
    await until(lambda: metadata_of(harness).state is TransactionState.COMPLETE_ABORT, "aborted")
    after = await coordinator.add_offsets_to_txn(harness.add_offsets(), OFFSETS_PARTITION)
    assert after.error_code == ErrorCode.NONE, "the next transaction may begin"
