"""Idempotent producers in the log (issue 19): the leader's sequence checks, duplicates answered
with the first copy's offsets, the follower building the same state, and the state surviving a
clean or unclean restart, truncation and a segment roll."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.errors import InvalidProducerStateError, InvalidRecordError
from runtime.log.log import Log
from runtime.log.segment import file_name_prefix
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.records import iter_batches

from .helpers import WALL_MS

SMALL = LogConfig(segment_bytes=512, index_interval_bytes=128)
PID = 4_000


def idem(sequence: int, count: int = 2, *, epoch: int = 0, pid: int = PID, tag: int = 0) -> bytes:
    records = [(b"k%d" % i, b"v%d-%d" % (tag, i)) for i in range(count)]
    return build_batch(
        records,
        base_timestamp=WALL_MS,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
    )


def refused(log: Log, records: bytes) -> ErrorCode:
    end = log.log_end_offset
    with pytest.raises(InvalidProducerStateError) as caught:
        log.append_as_leader(records, leader_epoch=1)
    assert log.log_end_offset == end, "a refused batch appends nothing"
    return caught.value.error


def test_a_retried_batch_is_answered_with_the_first_copys_offsets(
    log_dir: Path, clock: ManualClock
) -> None:
    log = Log.open(log_dir, SMALL, clock)
    first = log.append_as_leader(idem(0), leader_epoch=1)
    log.append_as_leader(idem(2), leader_epoch=1)
    retry = log.append_as_leader(idem(0), leader_epoch=1)
    assert (retry.first_offset, retry.last_offset) == (first.first_offset, first.last_offset)
    assert retry.record_count == 0
    assert log.log_end_offset == 4, "nothing appended for the retry"


def test_only_the_last_five_batches_are_recognised(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, SMALL, clock)
    for i in range(6):
        log.append_as_leader(idem(2 * i), leader_epoch=1)
    assert log.append_as_leader(idem(2), leader_epoch=1).first_offset == 2
    # The first batch fell out of the window: its retry is out of order, not a duplicate.
    assert refused(log, idem(0)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_sequence_rules(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, SMALL, clock)
    # No state for the producer: any first sequence is accepted (KIP-360).
    log.append_as_leader(idem(10, epoch=3), leader_epoch=1)
    assert refused(log, idem(13, epoch=3)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert refused(log, idem(12, epoch=2)) is ErrorCode.INVALID_PRODUCER_EPOCH
    assert refused(log, idem(5, epoch=4)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    log.append_as_leader(idem(0, epoch=4), leader_epoch=1)
    log.append_as_leader(idem(2, epoch=4), leader_epoch=1)
    # Producers without an id are never checked.
    log.append_as_leader(build_batch([(b"k", b"v")]), leader_epoch=1)
    log.append_as_leader(build_batch([(b"k", b"v")]), leader_epoch=1)


def test_an_idempotent_batch_must_be_alone_in_its_request(
    log_dir: Path, clock: ManualClock
) -> None:
    log = Log.open(log_dir, SMALL, clock)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(idem(0) + idem(2), leader_epoch=1)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(build_batch([(b"k", b"v")]) + idem(0), leader_epoch=1)
    assert log.log_end_offset == 0


def test_a_follower_builds_the_leaders_state(tmp_path: Path, clock: ManualClock) -> None:
    """As the next leader it recognises the retry of a write the old leader took."""
    leader = Log.open(tmp_path / "leader" / "t-0", SMALL, clock)
    first = leader.append_as_leader(idem(0), leader_epoch=1)
    leader.append_as_leader(idem(2), leader_epoch=1)
    follower = Log.open(tmp_path / "follower" / "t-0", SMALL, clock)
    follower.append_as_follower(bytes(leader.read(0, 1 << 20).records))
    retry = follower.append_as_leader(idem(0), leader_epoch=2)
    assert retry.first_offset == first.first_offset
    assert follower.log_end_offset == 4
    assert refused(follower, idem(7)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "unclean"])
def test_the_state_survives_a_restart(log_dir: Path, clock: ManualClock, clean: bool) -> None:
    log = Log.open(log_dir, SMALL, clock)
    for i in range(20):  # several segments: snapshots at the rolls
        log.append_as_leader(idem(2 * i, tag=i), leader_epoch=1)
    assert len(log.segments) > 2
    if clean:
        log.close()
    else:
        log.flush()  # the data is on disk; no snapshot at the end, so the tail is replayed
    reopened = Log.open(log_dir, SMALL, clock, had_clean_shutdown=clean)
    retry = reopened.append_as_leader(idem(38, tag=19), leader_epoch=1)
    assert (retry.first_offset, retry.record_count) == (38, 0), "the last batch is a duplicate"
    assert refused(reopened, idem(50)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert reopened.append_as_leader(idem(40), leader_epoch=1).record_count == 2


def test_snapshots_are_written_at_rolls_and_close_under_kafka_names(
    log_dir: Path, clock: ManualClock
) -> None:
    log = Log.open(log_dir, SMALL, clock)
    for i in range(20):
        log.append_as_leader(idem(2 * i, tag=i), leader_epoch=1)
    rolled = {s.base_offset for s in log.segments[1:]}
    log.close()
    names = sorted(p.name for p in log_dir.glob("*.snapshot"))
    assert names[-1] == "00000000000000000040.snapshot", "close snapshots at the log end"
    assert {file_name_prefix(o) + ".snapshot" for o in rolled} <= set(names)


def test_truncation_forgets_the_truncated_batches(log_dir: Path, clock: ManualClock) -> None:
    """A follower that cuts its log must not keep the cut batches' sequences: the new leader
    never had them, and the producer's retry of them is a new write here too."""
    log = Log.open(log_dir, SMALL, clock)
    for i in range(20):
        log.append_as_leader(idem(2 * i, tag=i), leader_epoch=1)
    log.truncate_to(10)
    assert log.log_end_offset == 10
    retry = log.append_as_leader(idem(10, tag=5), leader_epoch=2)
    assert retry.first_offset == 10, "appended again, not taken for a duplicate"
    assert retry.record_count == 2
    assert refused(log, idem(38)) is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_truncating_fully_forgets_every_producer(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, SMALL, clock)
    log.append_as_leader(idem(0), leader_epoch=1)
    log.truncate_fully_and_start_at(100)
    assert not list(log_dir.glob("*.snapshot")) or all(
        int(p.name.split(".")[0]) >= 100 for p in log_dir.glob("*.snapshot")
    )
    # No state: any sequence is accepted.
    assert log.append_as_leader(idem(50), leader_epoch=1).first_offset == 100


def test_stored_batches_keep_the_producers_fields(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, SMALL, clock)
    log.append_as_leader(idem(7, epoch=2), leader_epoch=1)
    ((_, header),) = list(iter_batches(bytes(log.read(0, 1 << 20).records)))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, 2, 7)
