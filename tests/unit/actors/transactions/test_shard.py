"""The transaction coordinator of one `__transaction_state` partition, on a manual clock over an
in-memory log that keeps real record batches: InitProducerId, AddPartitionsToTxn and EndTxn with
what each writes, the markers and the completion after them, fencing zombies, aborting timed-out
transactions, loading a partition a previous coordinator wrote, and unloading."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from actors.transactions.shard import LOAD_RETRY_BACKOFF_MS, InitAnswer
from runtime.clock import ManualClock
from tests.unit.actors.transactions.shard_harness import (
    CLEANUP_INTERVAL_MS,
    CONFIG,
    FIRST_LOAD_RETRY_MS,
    FIRST_PRODUCER_ID,
    TIMEOUT_MS,
    TP_A,
    TP_B,
    TP_C,
    FakeMarkerSender,
    MarkerCall,
    MemoryTransactionLog,
    ProducerIdSource,
    ShardHarness,
    coordinator_epoch,
    log_value,
    new_shard,
    start_loaded,
    turns,
    until,
)
from wire.errors import ErrorCode
from wire.topic import TopicPartition
from wire.transaction_log import TransactionState

S = TransactionState
PID = FIRST_PRODUCER_ID
EPOCH = coordinator_epoch(0)  # the coordinator epoch of partition 0's shard
MAX_TIMEOUT_MS = CONFIG.transaction_max_timeout_ms


def fresh() -> ShardHarness:
    return new_shard(ManualClock(), MemoryTransactionLog(), FakeMarkerSender(), ProducerIdSource())


@pytest.fixture
async def harness() -> AsyncIterator[ShardHarness]:
    started = await start_loaded(fresh())
    yield started
    await started.shard.stop()


async def ongoing(harness: ShardHarness, *tps: TopicPartition) -> None:
    """InitProducerId (epoch 0) then AddPartitions: an ongoing transaction of "t"."""
    assert await harness.init() == InitAnswer(ErrorCode.NONE, PID, 0)
    assert await harness.add(PID, 0, *tps) is ErrorCode.NONE


# -- InitProducerId ---------------------------------------------------------------------------


async def test_init_producer_id_for_a_new_id_writes_one_record_and_answers_epoch_0(
    harness: ShardHarness,
) -> None:
    assert await harness.init("t") == InitAnswer(ErrorCode.NONE, PID, 0)
    [value] = harness.log.values("t")
    assert value == log_value(S.EMPTY, PID, 0, update_ms=harness.clock.wall_ms())
    assert harness.producer_ids.issued == [PID]
    metadata = harness.shard.txns["t"]
    assert (metadata.state, metadata.producer_epoch, metadata.pending) == (S.EMPTY, 0, None)


async def test_a_second_init_producer_id_bumps_the_epoch_under_the_same_producer_id(
    harness: ShardHarness,
) -> None:
    await harness.init()
    assert await harness.init() == InitAnswer(ErrorCode.NONE, PID, 1)
    assert [v.producer_epoch for v in harness.log.values("t")] == [0, 1]
    assert harness.producer_ids.issued == [PID], "an epoch bump needs no new producer id"


@pytest.mark.parametrize(
    ("timeout_ms", "expected"),
    [
        pytest.param(0, ErrorCode.INVALID_TRANSACTION_TIMEOUT, id="zero"),
        pytest.param(-1, ErrorCode.INVALID_TRANSACTION_TIMEOUT, id="negative"),
        pytest.param(MAX_TIMEOUT_MS + 1, ErrorCode.INVALID_TRANSACTION_TIMEOUT, id="above-max"),
        pytest.param(MAX_TIMEOUT_MS, ErrorCode.NONE, id="max"),
        pytest.param(1, ErrorCode.NONE, id="one"),
    ],
)
async def test_the_timeout_must_be_positive_and_at_most_transaction_max_timeout_ms(
    harness: ShardHarness, timeout_ms: int, expected: ErrorCode
) -> None:
    answer = await harness.init("t", timeout_ms)
    assert answer.error is expected
    assert len(harness.log.values("t")) == (expected is ErrorCode.NONE)


async def test_an_empty_transactional_id_is_invalid_request(harness: ShardHarness) -> None:
    assert (await harness.init("")).error is ErrorCode.INVALID_REQUEST
    assert (harness.log.records(), harness.producer_ids.issued) == ([], [])


async def test_a_producer_id_without_its_epoch_is_invalid_request(harness: ShardHarness) -> None:
    assert (await harness.init("t", producer_id=5)).error is ErrorCode.INVALID_REQUEST
    assert (await harness.init("t", producer_epoch=0)).error is ErrorCode.INVALID_REQUEST
    assert harness.log.records() == []


async def test_a_failed_write_for_a_new_id_then_a_retry_answers_epoch_0(
    harness: ShardHarness,
) -> None:
    harness.log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    assert (await harness.init()).error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert harness.log.records() == []
    # What stays is Kafka's placeholder: the id with its producer id and no epoch yet, nothing
    # pending, so the retry writes epoch 0 under the same producer id (none is wasted).
    kept = harness.shard.txns["t"]
    assert (kept.state, kept.producer_epoch, kept.pending) == (S.EMPTY, -1, None)

    harness.log.fail_with = ErrorCode.NONE
    assert await harness.init() == InitAnswer(ErrorCode.NONE, PID, 0)
    assert [v.producer_epoch for v in harness.log.values("t")] == [0]
    assert harness.producer_ids.issued == [PID]


async def test_a_failed_epoch_bump_leaves_the_epoch_as_it_was(harness: ShardHarness) -> None:
    await harness.init()
    harness.log.fail_with = ErrorCode.REQUEST_TIMED_OUT
    assert (await harness.init()).error is ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert (harness.shard.txns["t"].producer_epoch, harness.shard.txns["t"].pending) == (0, None)
    harness.log.fail_with = ErrorCode.NONE
    assert await harness.init() == InitAnswer(ErrorCode.NONE, PID, 1)


@pytest.mark.parametrize(
    ("append_error", "answered"),
    [
        (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.KAFKA_STORAGE_ERROR, ErrorCode.NOT_COORDINATOR),
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.REQUEST_TIMED_OUT, ErrorCode.COORDINATOR_NOT_AVAILABLE),
        (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.UNKNOWN_SERVER_ERROR),
    ],
    ids=lambda code: code.name,
)
async def test_a_failed_write_answers_kafkas_coordinator_error(
    harness: ShardHarness, append_error: ErrorCode, answered: ErrorCode
) -> None:
    """Kafka's TransactionStateManager.appendTransactionToLog mapping (and the group
    coordinator's, actors/group/state.py store_error): the client retries or finds the
    coordinator again, where an UNKNOWN_SERVER_ERROR would be fatal to it."""
    harness.log.fail_with = append_error
    assert (await harness.init()).error is answered


async def test_no_producer_id_to_be_had_answers_its_error_and_keeps_nothing(
    harness: ShardHarness,
) -> None:
    harness.producer_ids.error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert (await harness.init()).error is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert ("t" not in harness.shard.txns, harness.log.records()) == (True, [])


# -- AddPartitionsToTxn, EndTxn and the markers -----------------------------------------------


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
async def test_end_txn_writes_prepare_then_markers_then_complete(
    harness: ShardHarness, commit: bool
) -> None:
    prepare, complete = (
        (S.PREPARE_COMMIT, S.COMPLETE_COMMIT) if commit else (S.PREPARE_ABORT, S.COMPLETE_ABORT)
    )
    await ongoing(harness, TP_A, TP_B)
    ongoing_value = harness.log.values("t")[-1]
    assert ongoing_value == log_value(
        S.ONGOING,
        PID,
        0,
        frozenset({TP_A, TP_B}),
        start_ms=harness.clock.wall_ms(),
        update_ms=harness.clock.wall_ms(),
    )
    harness.markers.hold = True
    assert await harness.end(PID, 0, commit=commit) is ErrorCode.NONE
    assert harness.states() == [S.EMPTY, S.ONGOING, prepare]
    await until(lambda: harness.markers.held == 1, "markers sent")
    assert harness.markers.calls == [MarkerCall(PID, 0, EPOCH, commit, frozenset({TP_A, TP_B}))]
    await turns()
    assert harness.states()[-1] is prepare, "complete only once the markers are written"

    harness.markers.release()
    await harness.until_written(complete)
    metadata = harness.shard.txns["t"]
    assert (metadata.state, metadata.topic_partitions, metadata.pending) == (complete, set(), None)
    assert (metadata.producer_id, metadata.producer_epoch) == (PID, 0)


async def test_requests_while_markers_are_outstanding_answer_concurrent_transactions(
    harness: ShardHarness,
) -> None:
    await ongoing(harness, TP_A)
    harness.markers.hold = True
    await harness.end(PID, 0, commit=True)
    await until(lambda: harness.markers.held == 1, "markers sent")

    assert (await harness.init()).error is ErrorCode.CONCURRENT_TRANSACTIONS
    assert await harness.add(PID, 0, TP_C) is ErrorCode.CONCURRENT_TRANSACTIONS
    assert await harness.end(PID, 0, commit=True) is ErrorCode.CONCURRENT_TRANSACTIONS
    assert await harness.end(PID, 0, commit=False) is ErrorCode.CONCURRENT_TRANSACTIONS
    assert harness.states() == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT]

    harness.markers.release()
    await harness.until_written(S.COMPLETE_COMMIT)
    assert await harness.add(PID, 0, TP_C) is ErrorCode.NONE, "the next transaction may start"


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
async def test_a_retried_end_txn_after_completion_answers_none_and_the_other_end_invalid(
    harness: ShardHarness, commit: bool
) -> None:
    await ongoing(harness, TP_A)
    await harness.end(PID, 0, commit=commit)
    await harness.until_written(S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
    written = len(harness.log.records())
    assert await harness.end(PID, 0, commit=commit) is ErrorCode.NONE
    assert await harness.end(PID, 0, commit=not commit) is ErrorCode.INVALID_TXN_STATE
    assert len(harness.log.records()) == written
    assert len(harness.markers.calls) == 1


async def test_adding_partitions_already_in_the_transaction_writes_nothing(
    harness: ShardHarness,
) -> None:
    await ongoing(harness, TP_A, TP_B)
    assert await harness.add(PID, 0, TP_B) is ErrorCode.NONE
    assert harness.states() == [S.EMPTY, S.ONGOING]
    assert await harness.add(PID, 0, TP_C) is ErrorCode.NONE
    assert harness.shard.txns["t"].topic_partitions == {TP_A, TP_B, TP_C}
    assert harness.states() == [S.EMPTY, S.ONGOING, S.ONGOING]


async def test_requests_for_an_unknown_id_or_producer_are_invalid_producer_id_mapping(
    harness: ShardHarness,
) -> None:
    await harness.init()
    assert await harness.add(PID, 0, TP_A, tid="other") is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert await harness.add(PID + 1, 0, TP_A) is ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert await harness.end(PID + 1, 0, commit=True) is ErrorCode.INVALID_PRODUCER_ID_MAPPING


async def test_end_txn_with_no_transaction_is_invalid_txn_state(harness: ShardHarness) -> None:
    await harness.init()
    assert await harness.end(PID, 0, commit=True) is ErrorCode.INVALID_TXN_STATE
    assert (harness.states(), harness.markers.calls) == ([S.EMPTY], [])


async def test_a_failed_complete_write_sends_the_markers_again_after_a_backoff(
    harness: ShardHarness,
) -> None:
    await ongoing(harness, TP_A)
    harness.markers.hold = True
    await harness.end(PID, 0, commit=True)
    await until(lambda: harness.markers.held == 1, "markers sent")
    harness.log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    harness.markers.release()
    await turns()
    assert len(harness.markers.calls) == 1, "the completion is retried only after a backoff"
    harness.clock.advance(LOAD_RETRY_BACKOFF_MS)
    await until(lambda: harness.markers.held == 1, "markers sent again")
    assert harness.markers.calls == [MarkerCall(PID, 0, EPOCH, True, frozenset({TP_A}))] * 2
    assert harness.states()[-1] is S.PREPARE_COMMIT

    harness.log.fail_with = ErrorCode.NONE
    harness.markers.release()
    await harness.until_written(S.COMPLETE_COMMIT)


# -- fencing ----------------------------------------------------------------------------------


async def test_a_zombie_with_the_old_epoch_is_fenced(harness: ShardHarness) -> None:
    await harness.init()
    assert await harness.init() == InitAnswer(ErrorCode.NONE, PID, 1)
    assert await harness.add(PID, 0, TP_A) is ErrorCode.PRODUCER_FENCED
    assert await harness.end(PID, 0, commit=True) is ErrorCode.PRODUCER_FENCED
    assert harness.states() == [S.EMPTY, S.EMPTY]
    assert await harness.add(PID, 1, TP_A) is ErrorCode.NONE


async def test_init_producer_id_during_a_transaction_aborts_it_with_a_bumped_epoch(
    harness: ShardHarness,
) -> None:
    await ongoing(harness, TP_A, TP_B)
    harness.markers.hold = True
    assert (await harness.init()).error is ErrorCode.CONCURRENT_TRANSACTIONS
    [*_, aborting] = harness.log.values("t")
    assert (aborting.transaction_status, aborting.producer_epoch) == (S.PREPARE_ABORT, 1)
    await until(lambda: harness.markers.held == 1, "abort markers sent")
    assert harness.markers.calls == [MarkerCall(PID, 1, EPOCH, False, frozenset({TP_A, TP_B}))]
    # The old producer is fenced, and the new one waits for the abort.
    assert await harness.end(PID, 0, commit=True) is ErrorCode.PRODUCER_FENCED
    assert (await harness.init()).error is ErrorCode.CONCURRENT_TRANSACTIONS

    harness.markers.release()
    await harness.until_written(S.COMPLETE_ABORT)
    assert harness.log.values("t")[-1].producer_epoch == 1
    answer = await harness.init()
    assert (answer.error, answer.producer_id) == (ErrorCode.NONE, PID)
    assert answer.producer_epoch > 1, "never the epoch the abort fenced with"


# -- timeouts ---------------------------------------------------------------------------------


async def test_a_transaction_past_its_timeout_is_aborted_by_the_sweep_with_the_epoch_bumped(
    harness: ShardHarness,
) -> None:
    await ongoing(harness, TP_A)
    # The sweep runs every CLEANUP_INTERVAL_MS; until the timeout has passed it finds nothing.
    for _ in range(TIMEOUT_MS // CLEANUP_INTERVAL_MS):
        harness.clock.advance(CLEANUP_INTERVAL_MS)
        await turns()
    assert (harness.states()[-1], harness.markers.calls) == (S.ONGOING, [])

    harness.clock.advance(CLEANUP_INTERVAL_MS)
    await harness.until_written(S.COMPLETE_ABORT)
    [*_, aborting, aborted] = harness.log.values("t")
    assert (aborting.transaction_status, aborting.producer_epoch) == (S.PREPARE_ABORT, 1)
    assert aborted.producer_epoch == 1
    assert harness.markers.calls == [MarkerCall(PID, 1, EPOCH, False, frozenset({TP_A}))]
    assert await harness.end(PID, 0, commit=True) is ErrorCode.PRODUCER_FENCED


# -- loading and unloading ----------------------------------------------------------------------


async def test_a_new_shard_loads_what_the_previous_one_wrote(harness: ShardHarness) -> None:
    await ongoing(harness, TP_A)
    await harness.init("done")
    await harness.add(PID + 1, 0, TP_B, tid="done")
    await harness.end(PID + 1, 0, commit=True, tid="done")
    await harness.until_written(S.COMPLETE_COMMIT, tid="done")
    await harness.shard.stop()

    successor = new_shard(
        harness.clock, harness.log, FakeMarkerSender(), harness.producer_ids, partition=0
    )
    await start_loaded(successor)
    try:
        before = {tid: harness.log.values(tid)[-1] for tid in ("t", "done")}
        for tid, value in before.items():
            loaded = successor.shard.txns[tid]
            assert (loaded.state, loaded.producer_id, loaded.producer_epoch) == (
                value.transaction_status,
                value.producer_id,
                value.producer_epoch,
            )
        assert successor.shard.txns["t"].topic_partitions == {TP_A}
        assert successor.shard.coordinator_epoch == EPOCH
        # And it serves them: the ongoing transaction commits, the finished id bumps.
        assert await successor.end(PID, 0, commit=True) is ErrorCode.NONE
        assert await successor.init("done") == InitAnswer(ErrorCode.NONE, PID + 1, 1)
        await successor.until_written(S.COMPLETE_COMMIT)
    finally:
        await successor.shard.stop()


async def test_loading_applies_records_in_order_and_a_tombstone_removes_the_id() -> None:
    harness = fresh()
    await harness.log.preload(
        0,
        [
            ("kept", log_value(S.EMPTY, 5, 2)),
            ("gone", log_value(S.EMPTY, 6, 0)),
            ("kept", log_value(S.ONGOING, 5, 3, frozenset({TP_C}), start_ms=40)),
        ],
    )
    await harness.log.preload(0, [("gone", None)])
    await start_loaded(harness)
    try:
        assert set(harness.shard.txns) == {"kept"}
        kept = harness.shard.txns["kept"]
        assert (kept.state, kept.producer_epoch, kept.topic_partitions) == (S.ONGOING, 3, {TP_C})
        assert kept.txn_start_timestamp == 40
        assert harness.markers.calls == [], "an ongoing transaction owes no markers"
    finally:
        await harness.shard.stop()


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
async def test_a_loaded_decided_transaction_gets_its_markers_again_and_completes(
    commit: bool,
) -> None:
    prepare, complete = (
        (S.PREPARE_COMMIT, S.COMPLETE_COMMIT) if commit else (S.PREPARE_ABORT, S.COMPLETE_ABORT)
    )
    partition = 3  # its coordinator epoch differs from partition 0's
    harness = new_shard(
        ManualClock(), MemoryTransactionLog(), FakeMarkerSender(), ProducerIdSource(), partition
    )
    tps = frozenset({TP_A, TP_C})
    await harness.log.preload(partition, [("t", log_value(prepare, 9, 4, tps, start_ms=1))])
    await start_loaded(harness)
    try:
        await harness.until_written(complete)
        epoch = coordinator_epoch(partition)
        assert harness.markers.calls == [MarkerCall(9, 4, epoch, commit, tps)]
        assert harness.shard.txns["t"].state is complete
        assert await harness.end(9, 4, commit=commit) is ErrorCode.NONE
    finally:
        await harness.shard.stop()


async def test_loading_is_true_until_the_high_watermark_covers_the_log() -> None:
    harness = fresh()
    await harness.log.preload(0, [("t", log_value(S.EMPTY, 5, 0))])
    harness.log.committed_gate = gate = asyncio.Event()
    await harness.shard.start()
    try:
        await turns()
        assert harness.shard.loading
        assert harness.shard.txns == {}, "nothing is read before the HW covers the log"
        gate.set()
        await until(lambda: not harness.shard.loading, "loaded")
        assert set(harness.shard.txns) == {"t"}
    finally:
        await harness.shard.stop()


async def test_a_failed_load_is_retried_after_the_backoff() -> None:
    harness = fresh()
    await harness.log.preload(0, [("t", log_value(S.EMPTY, 5, 0))])
    harness.log.committed_errors = [ErrorCode.OFFSET_NOT_AVAILABLE]
    await harness.shard.start()
    try:
        await turns()
        assert (harness.shard.loading, harness.log.committed_waits) == (True, 1)
        harness.clock.advance(FIRST_LOAD_RETRY_MS - 1)
        await turns()
        assert harness.log.committed_waits == 1, "not before the backoff"
        harness.clock.advance(1)
        await until(lambda: not harness.shard.loading, "loaded on the retry")
        assert (harness.log.committed_waits, set(harness.shard.txns)) == (2, {"t"})
    finally:
        await harness.shard.stop()


async def test_a_corrupt_batch_fails_the_load_attempt_and_it_is_retried() -> None:
    harness = fresh()
    await harness.log.preload(0, [("t", log_value(S.EMPTY, 5, 0))])
    harness.log.corrupt_last_byte(0)
    await harness.shard.start()
    try:
        await turns()
        assert (harness.shard.loading, harness.log.committed_waits) == (True, 1)
        harness.clock.advance(FIRST_LOAD_RETRY_MS)
        await until(lambda: harness.log.committed_waits == 2, "the load retried")
        assert harness.shard.loading
    finally:
        await harness.shard.stop()


async def test_unloading_cancels_the_marker_sends_and_forgets_the_ids(
    harness: ShardHarness,
) -> None:
    await ongoing(harness, TP_A)
    harness.markers.hold = True
    await harness.end(PID, 0, commit=True)
    await until(lambda: harness.markers.held == 1, "markers sent")
    await harness.shard.stop()
    assert (harness.markers.cancelled, harness.shard.txns) == (1, {})
    assert harness.states()[-1] is S.PREPARE_COMMIT, "the next coordinator owes the markers"
