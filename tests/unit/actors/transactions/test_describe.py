"""DescribeTransactions and ListTransactions (KIP-664) on the transaction coordinator: the shard's
read-only snapshots of its ids (`DescribeTransaction`, `ListTransactionStates` and its filters)
and the router's answers (routing errors, TRANSACTIONAL_ID_NOT_FOUND, Kafka's state names, the
listing over every shard here, COORDINATOR_LOAD_IN_PROGRESS while one loads). On a manual clock
over the in-memory `__transaction_state` of shard_harness."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import pytest

from actors.transactions.coordinator import TransactionCoordinator
from actors.transactions.shard import (
    DescribeTransaction,
    InitAnswer,
    ListTransactionStates,
    TransactionDescription,
)
from runtime.clock import ManualClock
from tests.unit.actors.transactions.shard_harness import (
    CONFIG,
    FIRST_PRODUCER_ID,
    TIMEOUT_MS,
    TP_A,
    TP_B,
    TP_C,
    FakeMarkerSender,
    MemoryTransactionLog,
    ProducerIdSource,
    ShardHarness,
    coordinator_epoch,
    new_shard,
    start_loaded,
    turns,
    until,
)
from wire.errors import ErrorCode
from wire.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
    DescribedTransaction,
    DescribedTransactionTopic,
    DescribeTransactionsRequest,
    InitProducerIdRequest,
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from wire.topic import TopicPartition
from wire.transaction_log import TRANSACTION_STATE_TOPIC, TransactionState, partition_for

S = TransactionState
PID: Final = FIRST_PRODUCER_ID
RUNNING_MS: Final = 500  # how long the test lets a transaction run (below the cleanup interval)


# -- the shard ----------------------------------------------------------------------------------


@pytest.fixture
async def harness() -> AsyncIterator[ShardHarness]:
    started = await start_loaded(
        new_shard(ManualClock(), MemoryTransactionLog(), FakeMarkerSender(), ProducerIdSource())
    )
    yield started
    await started.shard.stop()


async def begin(harness: ShardHarness, tid: str, *tps: TopicPartition) -> tuple[int, int]:
    """InitProducerId, then AddPartitions if `tps`: the id's (producer id, start time)."""
    answer = await harness.init(tid)
    assert answer.error is ErrorCode.NONE, answer
    if tps:
        assert await harness.add(answer.producer_id, 0, *tps, tid=tid) is ErrorCode.NONE
    return answer.producer_id, harness.clock.wall_ms()


async def listed(harness: ShardHarness, query: ListTransactionStates) -> list[str]:
    return [found.transactional_id for found in await harness.shard.ask(query)]


async def test_an_unknown_id_is_described_as_none(harness: ShardHarness) -> None:
    assert await harness.shard.ask(DescribeTransaction("never-seen")) is None


async def test_an_ongoing_transaction_is_described_and_nothing_is_written(
    harness: ShardHarness,
) -> None:
    producer_id, started_ms = await begin(harness, "t", TP_A, TP_C)
    appends = harness.log.appends
    harness.clock.advance(RUNNING_MS)
    described = await harness.shard.ask(DescribeTransaction("t"))
    assert described == TransactionDescription(
        "t", S.ONGOING, producer_id, 0, TIMEOUT_MS, started_ms, frozenset({TP_A, TP_C})
    )
    metadata = harness.shard.txns["t"]
    assert (harness.log.appends, metadata.pending, metadata.state) == (appends, None, S.ONGOING)


async def test_an_empty_id_has_no_start_time(harness: ShardHarness) -> None:
    producer_id, _ = await begin(harness, "t")
    described = await harness.shard.ask(DescribeTransaction("t"))
    assert described == TransactionDescription(
        "t", S.EMPTY, producer_id, 0, TIMEOUT_MS, -1, frozenset()
    )


async def test_an_ending_transaction_is_described_in_its_prepare_state(
    harness: ShardHarness,
) -> None:
    harness.markers.hold = True  # the markers are still being written
    producer_id, started_ms = await begin(harness, "t", TP_B)
    assert await harness.end(producer_id, 0, commit=True) is ErrorCode.NONE
    await until(lambda: harness.markers.held == 1, "markers sent")
    described = await harness.shard.ask(DescribeTransaction("t"))
    assert described is not None
    assert (described.state, described.txn_start_timestamp, described.topic_partitions) == (
        S.PREPARE_COMMIT,
        started_ms,
        frozenset({TP_B}),
    )
    harness.markers.release()
    await harness.until_written(S.COMPLETE_COMMIT)
    completed = await harness.shard.ask(DescribeTransaction("t"))
    assert completed is not None
    assert completed.state is S.COMPLETE_COMMIT


async def test_a_dead_id_is_neither_described_nor_listed(harness: ShardHarness) -> None:
    await begin(harness, "t")
    await begin(harness, "kept")
    # Dead is the state of an id whose metadata is being expired (Kafka's transient state);
    # set by hand, as this coordinator does not expire ids yet.
    harness.shard.txns["t"].state = S.DEAD
    assert await harness.shard.ask(DescribeTransaction("t")) is None
    assert await listed(harness, ListTransactionStates()) == ["kept"]
    assert await listed(harness, ListTransactionStates(states=frozenset({S.DEAD}))) == []


async def test_listing_filters_by_state_producer_id_and_duration(harness: ShardHarness) -> None:
    old_pid, _ = await begin(harness, "old", TP_A)
    harness.clock.advance(RUNNING_MS)
    new_pid, _ = await begin(harness, "new", TP_B)
    idle_pid, _ = await begin(harness, "idle")  # Empty: no transaction open
    assert (old_pid, new_pid, idle_pid) == (PID, PID + 1, PID + 2)

    assert await listed(harness, ListTransactionStates()) == ["idle", "new", "old"]
    ongoing = frozenset({S.ONGOING})
    assert await listed(harness, ListTransactionStates(states=ongoing)) == ["new", "old"]
    assert await listed(harness, ListTransactionStates(states=frozenset())) == []
    by_pid = ListTransactionStates(producer_ids=frozenset({old_pid, idle_pid}))
    assert await listed(harness, by_pid) == ["idle", "old"]
    # Open longer than RUNNING_MS - 1 ms: only "old"; "idle" has no transaction to be old.
    longer = ListTransactionStates(duration_filter_ms=RUNNING_MS - 1)
    assert await listed(harness, longer) == ["old"]
    exactly = ListTransactionStates(duration_filter_ms=RUNNING_MS)
    assert await listed(harness, exactly) == [], "Kafka's filter is strictly longer"
    both = ListTransactionStates(states=ongoing, producer_ids=frozenset({new_pid}))
    assert await listed(harness, both) == ["new"]
    [found] = await harness.shard.ask(both)
    assert (found.state, found.producer_id) == (S.ONGOING, new_pid)


# -- the router ---------------------------------------------------------------------------------


def id_in(partition: int, skip: int = 0) -> str:
    """The (skip+1)-th of txn-0, txn-1, ... that belongs to the partition."""
    ids = (f"txn-{i}" for i in range(1_000))
    return [t for t in ids if partition_for(t, CONFIG.num_partitions) == partition][skip]


@dataclass(slots=True)
class Rig:
    router: TransactionCoordinator
    clock: ManualClock
    log: MemoryTransactionLog

    async def lead(self, partition: int) -> None:
        self.router.on_leadership_change([TopicPartition(TRANSACTION_STATE_TOPIC, partition)], [])
        await until(lambda: self.loaded(partition), f"partition {partition} loaded")

    def loaded(self, partition: int) -> bool:
        shard = self.router.shards.get(partition)
        return shard is not None and not shard.loading

    async def begin(self, tid: str, *tps: TopicPartition) -> InitAnswer:
        init = await self.router.init_producer_id(
            InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=TIMEOUT_MS)
        )
        assert init.error is ErrorCode.NONE, init
        if tps:
            added = await self.router.add_partitions_to_txn(
                AddPartitionsToTxnRequest(
                    transactions=[
                        AddPartitionsToTxnTransaction(
                            transactional_id=tid,
                            producer_id=init.producer_id,
                            producer_epoch=init.producer_epoch,
                            topics=[
                                AddPartitionsToTxnTopic(name=tp.topic, partitions=[tp.partition])
                                for tp in tps
                            ],
                        )
                    ]
                )
            )
            [result] = added.results_by_transaction
            errors = {
                p.partition_error_code for t in result.topic_results for p in t.results_by_partition
            }
            assert errors == {0}, added
        return InitAnswer(ErrorCode.NONE, init.producer_id, init.producer_epoch)

    async def describe(self, *tids: str) -> list[DescribedTransaction]:
        response = await self.router.describe_transactions(
            DescribeTransactionsRequest(transactional_ids=list(tids))
        )
        return response.transaction_states

    async def list_txns(
        self,
        *,
        states: tuple[str, ...] = (),
        producer_ids: tuple[int, ...] = (),
        duration_ms: int = -1,
    ) -> ListTransactionsResponse:
        return await self.router.list_transactions(
            ListTransactionsRequest(
                state_filters=list(states),
                producer_id_filters=list(producer_ids),
                duration_filter=duration_ms,
            )
        )


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    clock, log = ManualClock(), MemoryTransactionLog()
    router = TransactionCoordinator(
        log,
        FakeMarkerSender(),
        CONFIG,
        clock=clock,
        new_producer_id=ProducerIdSource(),
        coordinator_epoch=coordinator_epoch,
        state_partitions=lambda: CONFIG.num_partitions,
    )
    await router.start()
    yield Rig(router, clock, log)
    await router.stop()


def error_of(described: DescribedTransaction) -> ErrorCode:
    return ErrorCode.from_code(described.error_code)


async def test_describe_transactions_answers_each_id(rig: Rig) -> None:
    await rig.lead(1)
    ongoing, empty, unknown, elsewhere = id_in(1), id_in(1, 1), id_in(1, 2), id_in(2)
    started_ms = rig.clock.wall_ms()
    first = await rig.begin(ongoing, TP_C, TP_B, TP_A)
    second = await rig.begin(empty)
    answers = await rig.describe(ongoing, empty, unknown, elsewhere, "")
    assert answers == [
        DescribedTransaction(
            transactional_id=ongoing,
            transaction_state="Ongoing",
            transaction_timeout_ms=TIMEOUT_MS,
            transaction_start_time_ms=started_ms,
            producer_id=first.producer_id,
            producer_epoch=0,
            topics=[
                DescribedTransactionTopic(topic="orders", partitions=[0, 1]),
                DescribedTransactionTopic(topic="payments", partitions=[3]),
            ],
        ),
        DescribedTransaction(
            transactional_id=empty,
            transaction_state="Empty",
            transaction_timeout_ms=TIMEOUT_MS,
            transaction_start_time_ms=-1,
            producer_id=second.producer_id,
            producer_epoch=0,
        ),
        DescribedTransaction(
            error_code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND, transactional_id=unknown
        ),
        DescribedTransaction(error_code=ErrorCode.NOT_COORDINATOR, transactional_id=elsewhere),
        DescribedTransaction(error_code=ErrorCode.INVALID_REQUEST, transactional_id=""),
    ]


async def test_describe_while_loading_answers_coordinator_load_in_progress(rig: Rig) -> None:
    rig.log.committed_gate = gate = asyncio.Event()
    rig.router.on_leadership_change([TopicPartition(TRANSACTION_STATE_TOPIC, 1)], [])
    [queued] = await rig.describe(id_in(1))  # led, the shard not started yet
    await until(lambda: 1 in rig.router.shards, "shard started")
    [loading] = await rig.describe(id_in(1))
    assert (error_of(queued), error_of(loading)) == (
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    )
    gate.set()
    await until(lambda: rig.loaded(1), "loaded")
    [loaded] = await rig.describe(id_in(1))
    assert error_of(loaded) is ErrorCode.TRANSACTIONAL_ID_NOT_FOUND


async def test_list_transactions_lists_every_shard_here_with_kafka_state_names(rig: Rig) -> None:
    await rig.lead(1)
    await rig.lead(3)
    a, b, c = id_in(1), id_in(3), id_in(1, 1)
    pid_a = (await rig.begin(a, TP_A)).producer_id
    rig.clock.advance(RUNNING_MS)
    pid_b = (await rig.begin(b, TP_B)).producer_id
    pid_c = (await rig.begin(c)).producer_id

    everything = await rig.list_txns()
    assert everything.error is ErrorCode.NONE
    assert sorted(everything.transaction_states, key=lambda t: t.transactional_id) == sorted(
        [
            ListedTransaction(transactional_id=a, producer_id=pid_a, transaction_state="Ongoing"),
            ListedTransaction(transactional_id=b, producer_id=pid_b, transaction_state="Ongoing"),
            ListedTransaction(transactional_id=c, producer_id=pid_c, transaction_state="Empty"),
        ],
        key=lambda t: t.transactional_id,
    )
    filtered = await rig.list_txns(states=("Empty", "Hanging", "ongoing"))
    assert filtered.unknown_state_filters == ["Hanging", "ongoing"], "names are case-sensitive"
    assert [t.transactional_id for t in filtered.transaction_states] == [c]
    only_unknown = await rig.list_txns(states=("Hanging",))
    assert (only_unknown.unknown_state_filters, only_unknown.transaction_states) == (
        ["Hanging"],
        [],
    )
    by_pid = await rig.list_txns(producer_ids=(pid_b, pid_c))
    assert sorted(t.transactional_id for t in by_pid.transaction_states) == sorted([b, c])
    longer = await rig.list_txns(duration_ms=RUNNING_MS - 1)
    assert [t.transactional_id for t in longer.transaction_states] == [a]


async def test_list_transactions_while_a_partition_loads_answers_load_in_progress(
    rig: Rig,
) -> None:
    await rig.lead(1)
    await rig.begin(id_in(1), TP_A)
    rig.log.committed_gate = gate = asyncio.Event()
    rig.router.on_leadership_change([TopicPartition(TRANSACTION_STATE_TOPIC, 2)], [])
    queued = await rig.list_txns()  # partition 2 led, its shard not started yet
    await until(lambda: 2 in rig.router.shards, "shard started")
    await turns()
    loading = await rig.list_txns()
    for response in (queued, loading):
        assert response == ListTransactionsResponse(
            error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        )
    gate.set()
    await until(lambda: rig.loaded(2), "loaded")
    assert [t.transactional_id for t in (await rig.list_txns()).transaction_states] == [id_in(1)]


async def test_a_broker_leading_no_partition_lists_nothing(rig: Rig) -> None:
    assert await rig.list_txns(states=("Ongoing",)) == ListTransactionsResponse()
