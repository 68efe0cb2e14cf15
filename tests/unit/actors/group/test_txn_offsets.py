"""Transactional offset commits through the shard (txn_offsets.py) on a manual clock: pending
offsets invisible until their transaction's marker, committed by COMMIT and dropped by ABORT,
fetched as UNSTABLE_OFFSET_COMMIT by a consumer asking for stable offsets, checked against the
group's members when the producer names one (KIP-447), and loaded back from a log holding
committed, aborted and still-open transactions exactly as the live shard had them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from actors.group.coordinator import GroupCoordinator
from actors.group.metadata import GroupState
from actors.group.shard import FetchOffsets, GroupShard, RemoveOffsets, TxnCommit, TxnCompleted
from runtime.clock import ManualClock
from runtime.log.producer_replay import end_txn_marker_batch
from tests.unit.actors.group.shard_harness import (
    CONFIG,
    MemoryOffsetsLog,
    commit,
    committed,
    result,
    stable_group,
    start_shard,
    until,
)
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC, OffsetKey, OffsetValue, decode_key, decode_value
from wire.messages import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from wire.record_reader import iter_records
from wire.records import iter_batches
from wire.topic import TopicPartition

PRODUCER = 4_000
EPOCH = 2
COORDINATOR_EPOCH = 5


def txn_commit(
    offsets: dict[int, int],
    *,
    producer_id: int = PRODUCER,
    group: str = "g",
    generation: int = -1,
    member_id: str = "",
    instance_id: str | None = None,
    metadata: str | None = None,
) -> TxnCommit:
    return TxnCommit(
        TxnOffsetCommitRequest(
            transactional_id=f"txn-{producer_id}",
            group_id=group,
            producer_id=producer_id,
            producer_epoch=EPOCH,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=instance_id,
            topics=[
                TxnOffsetCommitRequestTopic(
                    name="orders",
                    partitions=[
                        TxnOffsetCommitRequestPartition(
                            partition_index=p, committed_offset=o, committed_metadata=metadata
                        )
                        for p, o in offsets.items()
                    ],
                )
            ],
        )
    )


async def txn_errors(shard: GroupShard, message: TxnCommit) -> list[int]:
    answer = await result(await shard.ask(message))
    return [p.error_code for t in answer.topics for p in t.partitions]


async def fetch(
    shard: GroupShard, partitions: list[int], *, stable: bool, group: str = "g"
) -> dict[int, tuple[int, int]]:
    """partition -> (committed offset, error code)."""
    response = await shard.ask(
        FetchOffsets(
            OffsetFetchRequest(
                group_id=group,
                topics=[OffsetFetchRequestTopic(name="orders", partition_indexes=partitions)],
                require_stable=stable,
            )
        )
    )
    return {
        p.partition_index: (p.committed_offset, p.error_code)
        for t in response.topics
        for p in t.partitions
    }


async def write_marker(offsets_log: MemoryOffsetsLog, producer_id: int, *, commit: bool) -> None:
    """The partition leader appends the transaction's marker (WriteTxnMarkers)."""
    marker = end_txn_marker_batch(
        producer_id,
        EPOCH,
        COORDINATOR_EPOCH,
        commit=commit,
        base_offset=0,
        leader_epoch=0,
        timestamp=0,
    )
    assert await offsets_log.append(0, marker) is ErrorCode.NONE


async def end_txn(
    shard: GroupShard, offsets_log: MemoryOffsetsLog, producer_id: int, *, commit: bool
) -> None:
    """The marker is written, then the broker tells the shard (as WriteTxnMarkers does)."""
    await write_marker(offsets_log, producer_id, commit=commit)
    await shard.tell(TxnCompleted(producer_id, commit))


# -- pending, committed, aborted ----------------------------------------------------------------


async def test_pending_offsets_are_invisible_until_the_commit_marker(
    shard: GroupShard, offsets_log: MemoryOffsetsLog
) -> None:
    assert await txn_errors(shard, txn_commit({0: 10, 1: 11})) == [0, 0]
    assert await committed(shard) == {}, "pending: not committed yet"
    assert await fetch(shard, [0, 1, 2], stable=False) == {0: (-1, 0), 1: (-1, 0), 2: (-1, 0)}
    unstable = ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert await fetch(shard, [0, 1, 2], stable=True) == {
        0: (-1, unstable),
        1: (-1, unstable),
        2: (-1, 0),
    }
    assert shard.groups["g"].state is GroupState.EMPTY, "a new group, created Empty"

    await end_txn(shard, offsets_log, PRODUCER, commit=True)
    assert await committed(shard) == {0: 10, 1: 11}
    assert await fetch(shard, [0, 1], stable=True) == {0: (10, 0), 1: (11, 0)}
    assert shard.pending_txn == {}


async def test_abort_drops_the_pending_offsets(
    shard: GroupShard, offsets_log: MemoryOffsetsLog
) -> None:
    await result(await shard.ask(commit(-1, "", {0: 5})))
    assert await txn_errors(shard, txn_commit({0: 50, 3: 53})) == [0, 0]
    await end_txn(shard, offsets_log, PRODUCER, commit=False)
    assert await committed(shard) == {0: 5}, "the earlier commit stays"
    assert await fetch(shard, [0, 3], stable=True) == {0: (5, 0), 3: (-1, 0)}
    # A marker of another producer ends nothing of this one's next transaction.
    assert await txn_errors(shard, txn_commit({0: 60})) == [0]
    await end_txn(shard, offsets_log, PRODUCER + 1, commit=True)
    assert await committed(shard) == {0: 5}
    await end_txn(shard, offsets_log, PRODUCER, commit=True)
    assert await committed(shard) == {0: 60}


async def test_a_later_plain_commit_wins_over_an_earlier_transactional_one(
    shard: GroupShard, offsets_log: MemoryOffsetsLog
) -> None:
    """Kafka's olderThan: the transaction's record is earlier in the log than the plain
    commit's, so its COMMIT marker does not replace the plain commit."""
    assert await txn_errors(shard, txn_commit({0: 10, 1: 11})) == [0, 0]
    await result(await shard.ask(commit(-1, "", {1: 99})))
    await end_txn(shard, offsets_log, PRODUCER, commit=True)
    assert await committed(shard) == {0: 10, 1: 99}


async def test_the_batch_is_the_producers_transactional_batch(
    shard: GroupShard, offsets_log: MemoryOffsetsLog
) -> None:
    assert await txn_errors(shard, txn_commit({2: 7})) == [0]
    [(position, header)] = list(iter_batches(bytes(offsets_log.log)))
    assert header.producer_id == PRODUCER
    assert header.producer_epoch == EPOCH
    assert header.base_sequence == 0, "Kafka's coordinator writes base sequence 0"
    assert header.is_transactional
    assert not header.is_control
    [record] = list(iter_records(bytes(offsets_log.log), position))
    assert record.key is not None
    key = decode_key(record.key)
    assert key == OffsetKey("g", "orders", 2)
    value = decode_value(key, record.value)
    assert isinstance(value, OffsetValue)
    assert value.offset == 7


async def test_failed_writes_leave_nothing_pending(
    shard: GroupShard, offsets_log: MemoryOffsetsLog
) -> None:
    offsets_log.fail_with = ErrorCode.NOT_ENOUGH_REPLICAS
    assert await txn_errors(shard, txn_commit({0: 1})) == [ErrorCode.COORDINATOR_NOT_AVAILABLE]
    offsets_log.fail_with = ErrorCode.INVALID_PRODUCER_EPOCH  # the leader fenced the producer
    assert await txn_errors(shard, txn_commit({0: 1})) == [ErrorCode.INVALID_PRODUCER_EPOCH]
    assert shard.pending_txn == {}
    assert await fetch(shard, [0], stable=True) == {0: (-1, 0)}
    offsets_log.fail_with = ErrorCode.NONE
    too_large = "x" * 5_000
    assert await txn_errors(shard, txn_commit({0: 1}, metadata=too_large)) == [
        ErrorCode.OFFSET_METADATA_TOO_LARGE
    ]
    assert offsets_log.appends == 0


# -- who may commit -------------------------------------------------------------------------------


async def test_members_are_checked_when_the_producer_names_one(
    shard: GroupShard, clock: ManualClock
) -> None:
    generation, (a, _b) = await stable_group(shard, clock, ["a", "b"])
    named = txn_commit({0: 1}, generation=generation, member_id=a)
    assert await txn_errors(shard, named) == [0]
    stale = txn_commit({0: 2}, generation=generation - 1, member_id=a)
    assert await txn_errors(shard, stale) == [ErrorCode.ILLEGAL_GENERATION]
    stranger = txn_commit({0: 3}, generation=generation, member_id="zombie")
    assert await txn_errors(shard, stranger) == [ErrorCode.UNKNOWN_MEMBER_ID]
    static = txn_commit({0: 4}, generation=generation, member_id=a, instance_id="i-1")
    assert await txn_errors(shard, static) == [ErrorCode.UNKNOWN_MEMBER_ID]
    # Without a member (TxnOffsetCommit v0-2) nothing is checked, even in a Stable group.
    assert await txn_errors(shard, txn_commit({0: 5})) == [0]
    assert await txn_errors(shard, txn_commit({0: 6}, group="")) == [ErrorCode.INVALID_GROUP_ID]
    assert shard.pending_txn["g"][PRODUCER][("orders", 0)].value.offset == 5


# -- loading --------------------------------------------------------------------------------------


async def test_a_load_reads_committed_aborted_and_open_transactions(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    """One history, live and then loaded by a new shard: the same offsets either way."""
    a, b, c = PRODUCER, PRODUCER + 1, PRODUCER + 2
    await result(await shard.ask(commit(-1, "", {0: 1})))
    assert await txn_errors(shard, txn_commit({0: 10, 1: 11}, producer_id=a)) == [0, 0]
    await result(await shard.ask(commit(-1, "", {1: 5})))  # after a's record: it wins
    assert await txn_errors(shard, txn_commit({2: 20}, producer_id=b)) == [0]
    assert await txn_errors(shard, txn_commit({4: 40}, producer_id=c, group="other")) == [0]
    await end_txn(shard, offsets_log, a, commit=True)
    await end_txn(shard, offsets_log, b, commit=False)
    assert await txn_errors(shard, txn_commit({3: 30}, producer_id=c)) == [0]
    live = await committed(shard)
    assert live == {0: 10, 1: 5}
    live_pending = {g: set(by_producer) for g, by_producer in shard.pending_txn.items()}
    assert live_pending == {"g": {c}, "other": {c}}

    loaded = await start_shard(clock, offsets_log)
    try:
        assert await committed(loaded) == live
        assert {g: set(p) for g, p in loaded.pending_txn.items()} == live_pending
        assert await fetch(loaded, [2, 3], stable=True) == {
            2: (-1, 0),
            3: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
        }
        assert "other" in loaded.groups, "a group with only pending offsets is known"
        # The open transaction's marker comes after the load, through the broker.
        await end_txn(loaded, offsets_log, c, commit=True)
        assert await committed(loaded) == {0: 10, 1: 5, 3: 30}
        assert await committed(loaded, "other") == {4: 40}
        assert loaded.pending_txn == {}
    finally:
        await loaded.stop()
    again = await start_shard(clock, offsets_log)
    try:
        assert await committed(again) == {0: 10, 1: 5, 3: 30}, "the marker, loaded"
        assert again.pending_txn == {}
    finally:
        await again.stop()


async def test_pending_offsets_keep_their_group_and_go_with_deleted_partitions(
    shard: GroupShard, clock: ManualClock, offsets_log: MemoryOffsetsLog
) -> None:
    assert await txn_errors(shard, txn_commit({0: 1, 1: 2}, group="quiet")) == [0, 0]
    clock.advance(CONFIG.offsets_retention_ms + 2 * CONFIG.offsets_retention_check_interval_ms)
    await committed(shard, "quiet")  # a turn of the mailbox after the expiry checks
    assert "quiet" in shard.groups, "not forgotten while its transaction is open"
    await shard.tell(RemoveOffsets(frozenset({("orders", 0)})))
    assert await fetch(shard, [0, 1], stable=True, group="quiet") == {
        0: (-1, 0),
        1: (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT),
    }
    await end_txn(shard, offsets_log, PRODUCER, commit=True)
    assert await committed(shard, "quiet") == {1: 2}


# -- through the router ------------------------------------------------------------------------


@pytest.fixture
async def router(offsets_log: MemoryOffsetsLog) -> AsyncIterator[GroupCoordinator]:
    coordinator = GroupCoordinator(
        offsets_log, CONFIG, clock=ManualClock(), offsets_partitions=lambda: 1
    )
    await coordinator.start()
    yield coordinator
    await coordinator.stop()


async def test_the_router_routes_commits_and_marker_news(
    router: GroupCoordinator, offsets_log: MemoryOffsetsLog
) -> None:
    request = txn_commit({0: 8}).request
    refused = await router.txn_offset_commit(request)
    assert refused.topics[0].partitions[0].error_code == ErrorCode.NOT_COORDINATOR
    router.on_leadership_change([TopicPartition(OFFSETS_TOPIC, 0)], [])
    await until(lambda: 0 in router.shards and not router.shards[0].loading, "loaded")
    stored = await router.txn_offset_commit(request)
    assert stored.topics[0].partitions[0].error_code == ErrorCode.NONE
    shard = router.shards[0]
    await write_marker(offsets_log, PRODUCER, commit=True)
    # Markers of other partitions (data, or offsets partitions not led here) change nothing.
    await router.on_transaction_completed(
        PRODUCER,
        [TopicPartition("orders", 0), TopicPartition(OFFSETS_TOPIC, 3)],
        commit=True,
    )
    assert await committed(shard) == {}
    await router.on_transaction_completed(PRODUCER, [TopicPartition(OFFSETS_TOPIC, 0)], commit=True)
    assert await committed(shard) == {0: 8}
