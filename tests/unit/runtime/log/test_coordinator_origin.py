"""A coordinator's appends (`AppendOrigin.COORDINATOR`, Kafka's AppendOrigin.COORDINATOR): the
group coordinator writes a producer's transactional offset commits with the producer's id and
epoch and base sequence 0, every time. As a client's batches they would read as retries or
break the sequence; as the coordinator's they are checked by epoch only, and a producer's own
batches keep every rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.errors import InvalidProducerStateError
from runtime.log.log import Log
from runtime.log.producer_state import ACCEPTED, AppendOrigin, Duplicate, ProducerStateManager
from wire.batch_builder import build_batch
from wire.errors import ErrorCode

from .helpers import WALL_MS

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=128)
PID = 7_000
COORDINATOR = AppendOrigin.COORDINATOR


def offsets_commit(tag: int, *, epoch: int = 1, count: int = 1) -> bytes:
    """A transactional offset commit as Kafka's group coordinator writes it: base sequence 0."""
    return build_batch(
        [(b"key-%d-%d" % (tag, i), b"offset-%d" % tag) for i in range(count)],
        base_timestamp=WALL_MS,
        producer_id=PID,
        producer_epoch=epoch,
        base_sequence=0,
        is_transactional=True,
    )


def test_the_check_skips_duplicates_and_sequences_only_for_the_coordinator(
    tmp_path: Path,
) -> None:
    psm = ProducerStateManager(tmp_path)
    psm.update(PID, 1, 0, 0, 0, 0, WALL_MS, is_transactional=True)
    as_client = psm.check(PID, 1, 0, 0, is_transactional=True)
    assert isinstance(as_client, Duplicate), "a client's same batch is a retry"
    assert psm.check(PID, 1, 0, 0, is_transactional=True, origin=COORDINATOR) is ACCEPTED
    assert psm.check(PID, 1, 0, 3, is_transactional=True, origin=COORDINATOR) is ACCEPTED
    assert psm.check(PID, 1, 5, 5, is_transactional=True) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert psm.check(PID, 2, 0, 0, is_transactional=True, origin=COORDINATOR) is ACCEPTED
    fenced = psm.check(PID, 0, 0, 0, is_transactional=True, origin=COORDINATOR)
    assert fenced is ErrorCode.INVALID_PRODUCER_EPOCH, "the epoch is still checked"


def test_each_commit_of_a_transaction_and_the_next_is_appended(
    log_dir: Path, clock: ManualClock
) -> None:
    log = Log.open(log_dir, SMALL, clock)
    first = log.append_as_leader(offsets_commit(1), leader_epoch=1, origin=COORDINATOR)
    second = log.append_as_leader(offsets_commit(2), leader_epoch=1, origin=COORDINATOR)
    assert (first.first_offset, second.first_offset) == (0, 1), "two commits, two records"
    log.append_end_txn_marker(PID, 1, 0, commit=True, leader_epoch=1)
    third = log.append_as_leader(offsets_commit(3, count=3), leader_epoch=1, origin=COORDINATOR)
    assert third.first_offset == 3
    assert log.log_end_offset == 6
    assert log.producer_state.first_unstable_offset() == 3, "the next transaction is open"


def test_as_a_clients_batch_the_second_commit_would_be_lost(
    log_dir: Path, clock: ManualClock
) -> None:
    """Why the origin exists: the same batches from a client read as a retry."""
    log = Log.open(log_dir, SMALL, clock)
    log.append_as_leader(offsets_commit(1), leader_epoch=1)
    retry = log.append_as_leader(offsets_commit(2), leader_epoch=1)
    assert retry.record_count == 0, "answered as a duplicate: nothing appended"
    assert log.log_end_offset == 1


def test_a_fenced_producers_late_commit_is_refused(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, SMALL, clock)
    log.append_as_leader(offsets_commit(1, epoch=1), leader_epoch=1, origin=COORDINATOR)
    # The coordinator fenced epoch 1 and aborted its transaction with epoch 2.
    log.append_end_txn_marker(PID, 2, 0, commit=False, leader_epoch=1)
    with pytest.raises(InvalidProducerStateError) as caught:
        log.append_as_leader(offsets_commit(2, epoch=1), leader_epoch=1, origin=COORDINATOR)
    assert caught.value.error is ErrorCode.INVALID_PRODUCER_EPOCH
    assert log.log_end_offset == 2
