"""Transactions in the log (issue 19): the last stable offset, COMMIT/ABORT markers, the aborted
transactions a read_committed fetch names, and all of it on followers, across restarts and
truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.errors import InvalidProducerStateError
from runtime.log.log import Log
from runtime.log.transaction_index import AbortedTxn
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.records import iter_batches

from .helpers import WALL_MS

SMALL = LogConfig(segment_bytes=600, index_interval_bytes=128)
TXN_PID = 900
PLAIN_PID = 901


def txn_batch(sequence: int, *, pid: int = TXN_PID, epoch: int = 0, count: int = 2) -> bytes:
    return build_batch(
        [(b"k", b"t%d-%d" % (sequence, i)) for i in range(count)],
        base_timestamp=WALL_MS,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )


def plain_batch(tag: int) -> bytes:
    return build_batch([(b"k", b"p%d" % tag)], base_timestamp=WALL_MS)


def marker(
    log: Log, *, commit: bool, pid: int = TXN_PID, epoch: int = 0, coordinator: int = 0
) -> int:
    info = log.append_end_txn_marker(pid, epoch, coordinator, commit=commit, leader_epoch=1)
    return info.first_offset


def committed(log: Log) -> None:
    log.update_high_watermark(log.log_end_offset)


def test_an_open_transaction_holds_the_last_stable_offset(
    log_dir: Path, clock: ManualClock
) -> None:
    log = Log.open(log_dir, SMALL, clock)
    log.append_as_leader(plain_batch(0), leader_epoch=1)  # offset 0
    log.append_as_leader(txn_batch(0), leader_epoch=1)  # 1-2, the transaction begins at 1
    log.append_as_leader(plain_batch(1), leader_epoch=1)  # 3
    committed(log)
    assert log.high_watermark == 4
    assert log.last_stable_offset == 1
    at = marker(log, commit=True)
    assert at == 4
    # Decided, but the marker is not below the HW yet: still unstable.
    assert log.last_stable_offset == 1
    committed(log)
    assert log.last_stable_offset == log.high_watermark == 5
    assert log.collect_aborted_transactions(0, 5) == []


def test_an_aborted_transaction_is_indexed_and_collected(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, SMALL, clock)
    log.append_as_leader(txn_batch(0), leader_epoch=1)  # 0-1
    log.append_as_leader(plain_batch(0), leader_epoch=1)  # 2
    log.append_as_leader(txn_batch(2), leader_epoch=1)  # 3-4
    at = marker(log, commit=False)  # 5
    committed(log)
    assert log.last_stable_offset == 6
    expected = AbortedTxn(TXN_PID, 0, at, 6)
    assert log.collect_aborted_transactions(0, 6) == [expected]
    assert log.collect_aborted_transactions(3, 6) == [expected]
    assert log.collect_aborted_transactions(6, 6) == []
    # The marker batch: a transactional control batch of the producer, ABORT (type 0).
    ((_, header),) = [
        (p, h) for p, h in iter_batches(bytes(log.read(at, 1 << 20).records)) if h.is_control
    ]
    assert (header.producer_id, header.is_transactional, header.base_offset) == (TXN_PID, True, at)


def test_markers_are_fenced_by_producer_and_coordinator_epochs(
    log_dir: Path, clock: ManualClock
) -> None:
    log = Log.open(log_dir, SMALL, clock)
    log.append_as_leader(txn_batch(0, epoch=3), leader_epoch=1)
    marker(log, commit=True, epoch=3, coordinator=5)
    with pytest.raises(InvalidProducerStateError) as stale_producer:
        marker(log, commit=False, epoch=2, coordinator=5)
    assert stale_producer.value.error is ErrorCode.INVALID_PRODUCER_EPOCH
    with pytest.raises(InvalidProducerStateError) as stale_coordinator:
        marker(log, commit=False, epoch=3, coordinator=4)
    assert stale_coordinator.value.error is ErrorCode.TRANSACTION_COORDINATOR_FENCED


def test_a_plain_batch_of_a_producer_in_a_transaction_is_refused(
    log_dir: Path, clock: ManualClock
) -> None:
    log = Log.open(log_dir, SMALL, clock)
    log.append_as_leader(txn_batch(0), leader_epoch=1)
    plain = build_batch([(b"k", b"v")], producer_id=TXN_PID, producer_epoch=0, base_sequence=2)
    with pytest.raises(InvalidProducerStateError) as refused:
        log.append_as_leader(plain, leader_epoch=1)
    assert refused.value.error is ErrorCode.INVALID_TXN_STATE


def test_a_follower_builds_the_same_transactions(tmp_path: Path, clock: ManualClock) -> None:
    leader = Log.open(tmp_path / "leader" / "t-0", SMALL, clock)
    leader.append_as_leader(txn_batch(0), leader_epoch=1)
    at = marker(leader, commit=False)
    leader.append_as_leader(txn_batch(0, pid=PLAIN_PID), leader_epoch=1)  # a second, still open
    follower = Log.open(tmp_path / "follower" / "t-0", SMALL, clock)
    follower.append_as_follower(bytes(leader.read(0, 1 << 20).records))
    committed(follower)
    assert follower.last_stable_offset == at + 1
    assert follower.collect_aborted_transactions(0, at + 1) == [AbortedTxn(TXN_PID, 0, at, at + 1)]


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_transactions_survive_a_restart(log_dir: Path, clock: ManualClock, clean: bool) -> None:
    log = Log.open(log_dir, SMALL, clock)
    aborted = []
    for i in range(6):  # several segments, each with an aborted transaction
        log.append_as_leader(txn_batch(2 * i, count=2), leader_epoch=1)
        log.append_as_leader(plain_batch(i), leader_epoch=1)
        aborted.append(marker(log, commit=False))
    log.append_as_leader(txn_batch(0, pid=PLAIN_PID), leader_epoch=1)  # left open
    open_at = log.log_end_offset - 2
    committed(log)
    assert len(log.segments) > 2
    before = log.collect_aborted_transactions(0, log.log_end_offset)
    if clean:
        log.close()
    else:
        for segment in log.segments:
            segment.close_handles()  # a crash: the whole log is recovered from offset 0
    reopened = Log.open(log_dir, SMALL, clock, had_clean_shutdown=clean)
    reopened.update_high_watermark(reopened.log_end_offset)
    assert reopened.last_stable_offset == open_at
    assert reopened.collect_aborted_transactions(0, reopened.log_end_offset) == before
    assert [t.last_offset for t in before] == aborted


def test_truncation_reopens_a_transaction_and_drops_its_abort(
    log_dir: Path, clock: ManualClock
) -> None:
    log = Log.open(log_dir, SMALL, clock)
    log.append_as_leader(txn_batch(0), leader_epoch=1)
    at = marker(log, commit=False)
    log.truncate_to(at)  # the marker goes: the transaction is open again
    committed(log)
    assert log.last_stable_offset == 0
    assert log.collect_aborted_transactions(0, at + 1) == []
    at = marker(log, commit=True)
    committed(log)
    assert log.last_stable_offset == at + 1
