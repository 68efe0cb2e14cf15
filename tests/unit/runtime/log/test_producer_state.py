from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from runtime.log.producer_state import (
    ACCEPTED,
    CONTROL_TYPE_ABORT,
    CONTROL_TYPE_COMMIT,
    NUM_BATCHES_TO_RETAIN,
    BatchMetadata,
    CompletedTxn,
    Duplicate,
    ProducerStateManager,
    SequenceCheck,
    increment_sequence,
)
from wire.errors import ErrorCode
from wire.records import CONTROL_BIT, TRANSACTIONAL_BIT, BatchHeader

INT32_MAX = 2**31 - 1
TS = 1_700_000_000_000
PID = 1000


def append(
    psm: ProducerStateManager,
    first_seq: int,
    count: int = 1,
    *,
    pid: int = PID,
    epoch: int = 0,
    txn: bool = False,
    ts: int = TS,
) -> tuple[int, int]:
    """Fold in a batch of `count` records at the map end offset; its (first, last) offsets."""
    first = psm.map_end_offset
    last = first + count - 1
    psm.update(
        pid,
        epoch,
        first_seq,
        increment_sequence(first_seq, count - 1),
        first,
        last,
        ts,
        is_transactional=txn,
    )
    return first, last


def check(
    psm: ProducerStateManager,
    first_seq: int,
    count: int = 1,
    *,
    pid: int = PID,
    epoch: int = 0,
    txn: bool = False,
) -> SequenceCheck:
    last_seq = increment_sequence(first_seq, count - 1)
    return psm.check(pid, epoch, first_seq, last_seq, is_transactional=txn)


@pytest.fixture
def psm(tmp_path: Path) -> ProducerStateManager:
    return ProducerStateManager(tmp_path)


# -- check: one rule each -------------------------------------------------------------------------


def test_non_idempotent_batch_is_always_accepted(psm: ProducerStateManager) -> None:
    append(psm, 0, pid=-1)
    assert psm.last_entry(-1) is None
    assert check(psm, 77, pid=-1) is ACCEPTED


def test_unknown_producer_accepts_any_sequence(psm: ProducerStateManager) -> None:
    assert check(psm, 12345, epoch=3) is ACCEPTED


def test_next_sequence_is_accepted(psm: ProducerStateManager) -> None:
    append(psm, 0, 3)
    assert check(psm, 3, 2) is ACCEPTED


def test_sequence_gap_is_out_of_order(psm: ProducerStateManager) -> None:
    append(psm, 0, 3)
    assert check(psm, 4) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_overlapping_range_that_is_not_a_retained_batch_is_out_of_order(
    psm: ProducerStateManager,
) -> None:
    append(psm, 0, 3)
    assert check(psm, 0, 2) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER  # same first, other last
    assert check(psm, 1, 2) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_older_epoch_is_invalid_producer_epoch(psm: ProducerStateManager) -> None:
    append(psm, 0, epoch=4)
    assert check(psm, 1, epoch=3) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_retry_from_an_older_epoch_is_fenced_not_a_duplicate(psm: ProducerStateManager) -> None:
    append(psm, 0, epoch=3)
    append(psm, 0, epoch=4)
    assert check(psm, 0, epoch=3) == ErrorCode.INVALID_PRODUCER_EPOCH


def test_newer_epoch_must_start_at_sequence_zero(psm: ProducerStateManager) -> None:
    append(psm, 0, 5, epoch=1)
    assert check(psm, 5, epoch=2) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert check(psm, 0, epoch=2) is ACCEPTED


def test_entry_without_batches_requires_sequence_zero(psm: ProducerStateManager) -> None:
    psm.complete_txn(PID, 2, 0, marker_offset=0, timestamp=TS, is_aborted=True)
    assert check(psm, 3, epoch=2) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert check(psm, 0, epoch=2) is ACCEPTED


def test_entry_without_an_epoch_fences_nothing(psm: ProducerStateManager) -> None:
    """As in Kafka, where an absent producer is an entry with epoch -1: any sequence goes."""
    append(psm, 3, epoch=-1)
    assert check(psm, 17, epoch=0) is ACCEPTED


def test_sequence_wraps_to_zero_after_int32_max(psm: ProducerStateManager) -> None:
    append(psm, INT32_MAX - 1, 2)
    assert psm.last_entry(PID) is not None
    assert check(psm, 0, 3) is ACCEPTED
    assert check(psm, INT32_MAX) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert check(psm, 1) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_batch_spanning_the_wrap_ends_at_a_small_sequence(psm: ProducerStateManager) -> None:
    append(psm, INT32_MAX - 1, 4)  # sequences MAX-1, MAX, 0, 1
    entry = psm.last_entry(PID)
    assert entry is not None
    assert entry.last_seq == 1
    assert check(psm, 2) is ACCEPTED
    assert isinstance(check(psm, INT32_MAX - 1, 4), Duplicate)


def test_non_transactional_batch_during_a_transaction_is_invalid_txn_state(
    psm: ProducerStateManager,
) -> None:
    append(psm, 0, txn=True)
    assert check(psm, 1) == ErrorCode.INVALID_TXN_STATE
    assert check(psm, 1, txn=True) is ACCEPTED


@pytest.mark.parametrize("back", range(NUM_BATCHES_TO_RETAIN))
def test_retry_of_each_of_the_last_five_batches_is_a_duplicate(
    psm: ProducerStateManager, back: int
) -> None:
    offsets = [append(psm, 2 * i, 2, epoch=1) for i in range(8)]
    i = 7 - back
    result = check(psm, 2 * i, 2, epoch=1)
    first, last = offsets[i]
    assert result == Duplicate(BatchMetadata(2 * i, 2 * i + 1, last, 1, TS))
    assert isinstance(result, Duplicate)
    assert (result.metadata.first_offset, result.metadata.last_offset) == (first, last)


def test_retry_of_the_sixth_last_batch_is_out_of_order(psm: ProducerStateManager) -> None:
    for i in range(NUM_BATCHES_TO_RETAIN + 1):
        append(psm, 2 * i, 2)
    assert check(psm, 0, 2) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert isinstance(check(psm, 2, 2), Duplicate)


def test_duplicate_wins_over_transaction_state(psm: ProducerStateManager) -> None:
    append(psm, 0, txn=True)
    assert isinstance(check(psm, 0), Duplicate)


def test_check_changes_nothing(psm: ProducerStateManager) -> None:
    append(psm, 0, 2)
    entry = psm.last_entry(PID)
    assert entry is not None
    before = (entry.producer_epoch, tuple(entry.batch_metadata), psm.map_end_offset)
    for seq, epoch in [(2, 0), (9, 0), (0, 1), (5, 1), (0, 0)]:
        check(psm, seq, epoch=epoch)
    assert (entry.producer_epoch, tuple(entry.batch_metadata), psm.map_end_offset) == before


# -- update ---------------------------------------------------------------------------------------


def test_update_keeps_the_last_five_batches_oldest_first(psm: ProducerStateManager) -> None:
    for i in range(7):
        append(psm, i)
    entry = psm.last_entry(PID)
    assert entry is not None
    assert [b.first_seq for b in entry.batch_metadata] == [2, 3, 4, 5, 6]
    assert psm.map_end_offset == 7


def test_epoch_bump_resets_the_batches(psm: ProducerStateManager) -> None:
    for i in range(3):
        append(psm, i, epoch=1)
    append(psm, 0, epoch=2)
    entry = psm.last_entry(PID)
    assert entry is not None
    assert entry.producer_epoch == 2
    assert [b.first_seq for b in entry.batch_metadata] == [0]
    assert check(psm, 1, epoch=1) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert check(psm, 1, epoch=2) is ACCEPTED


def test_replicated_batches_are_never_rejected(psm: ProducerStateManager) -> None:
    """A follower folds in whatever the leader appended, even what a leader check would refuse."""
    append(psm, 0, epoch=5)
    append(psm, 40, epoch=5)  # a gap
    append(psm, 7, epoch=4)  # an older epoch
    entry = psm.last_entry(PID)
    assert entry is not None
    assert (entry.producer_epoch, entry.last_seq) == (4, 7)


def test_non_idempotent_update_only_advances_the_map_end_offset(
    psm: ProducerStateManager,
) -> None:
    append(psm, -1, 3, pid=-1)
    assert psm.map_end_offset == 3
    assert dict(psm.active_producers) == {}


def test_map_end_offset_never_moves_back(psm: ProducerStateManager) -> None:
    psm.update_map_end_offset(10)
    psm.update_map_end_offset(4)
    assert psm.map_end_offset == 10


def test_active_producers_is_read_only(psm: ProducerStateManager) -> None:
    append(psm, 0)
    producers = psm.active_producers
    assert list(producers) == [PID]
    with pytest.raises(TypeError):
        producers[1] = producers[PID]  # type: ignore[index]


# -- transactions ---------------------------------------------------------------------------------


def test_transaction_start_and_first_unstable_offset(psm: ProducerStateManager) -> None:
    assert psm.first_unstable_offset() is None
    append(psm, 0, 2, pid=1)  # not transactional
    append(psm, 0, 2, pid=2, txn=True)  # offsets 2-3
    append(psm, 0, pid=3, txn=True)  # offset 4
    append(psm, 2, pid=2, txn=True)  # same transaction: first offset stays 2
    entry = psm.last_entry(2)
    assert entry is not None
    assert entry.current_txn_first_offset == 2
    assert psm.first_unstable_offset() == 2


def test_commit_completes_the_transaction(psm: ProducerStateManager) -> None:
    append(psm, 0, 2, pid=2, txn=True)  # 0-1
    append(psm, 0, pid=3, txn=True)  # 2
    completed = psm.complete_txn(2, 0, 7, marker_offset=3, timestamp=TS + 1, is_aborted=False)
    assert completed == CompletedTxn(2, 0, 3, is_aborted=False)
    entry = psm.last_entry(2)
    assert entry is not None
    assert (entry.current_txn_first_offset, entry.coordinator_epoch) == (None, 7)
    assert entry.last_timestamp == TS + 1
    assert psm.first_unstable_offset() == 2
    assert psm.map_end_offset == 4
    assert check(psm, 2, pid=2) is ACCEPTED  # no transaction left to break


def test_marker_without_an_open_transaction_completes_nothing(psm: ProducerStateManager) -> None:
    append(psm, 0)
    assert psm.complete_txn(PID, 0, 1, marker_offset=1, timestamp=TS, is_aborted=True) is None
    entry = psm.last_entry(PID)
    assert entry is not None
    assert entry.coordinator_epoch == 1
    assert len(entry.batch_metadata) == 1


def test_marker_with_a_newer_epoch_resets_batches(psm: ProducerStateManager) -> None:
    append(psm, 0, 3, txn=True)
    completed = psm.complete_txn(PID, 1, 0, marker_offset=3, timestamp=TS, is_aborted=True)
    assert completed == CompletedTxn(PID, 0, 3, is_aborted=True)
    entry = psm.last_entry(PID)
    assert entry is not None
    assert (entry.producer_epoch, len(entry.batch_metadata)) == (1, 0)


def test_end_txn_marker_checks(psm: ProducerStateManager) -> None:
    assert psm.check_end_txn_marker(PID, 0, 0) is None
    append(psm, 0, epoch=3, txn=True)
    psm.complete_txn(PID, 3, 5, marker_offset=1, timestamp=TS, is_aborted=False)
    assert psm.check_end_txn_marker(PID, 2, 5) == ErrorCode.INVALID_PRODUCER_EPOCH
    assert psm.check_end_txn_marker(PID, 3, 4) == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert psm.check_end_txn_marker(PID, 3, 5) is None


def header(
    base_offset: int,
    *,
    count: int = 1,
    pid: int = PID,
    epoch: int = 0,
    base_seq: int = 0,
    attributes: int = 0,
    ts: int = TS,
) -> BatchHeader:
    return BatchHeader(
        base_offset, 100, 0, 2, 0, attributes, count - 1, ts, ts, pid, epoch, base_seq, count
    )


def test_update_from_data_batch_header(psm: ProducerStateManager) -> None:
    psm.update_from_batch(header(10, count=3, base_seq=INT32_MAX, attributes=TRANSACTIONAL_BIT))
    entry = psm.last_entry(PID)
    assert entry is not None
    assert list(entry.batch_metadata) == [BatchMetadata(INT32_MAX, 1, 12, 2, TS)]
    assert entry.current_txn_first_offset == 10
    assert psm.map_end_offset == 13


def test_update_from_control_batch_header(psm: ProducerStateManager) -> None:
    psm.update_from_batch(header(0, count=2, attributes=TRANSACTIONAL_BIT))
    marker = header(2, attributes=TRANSACTIONAL_BIT | CONTROL_BIT, base_seq=-1)
    completed = psm.update_from_batch(marker, CONTROL_TYPE_COMMIT, coordinator_epoch=4)
    assert completed == CompletedTxn(PID, 0, 2, is_aborted=False)
    assert psm.first_unstable_offset() is None
    assert psm.map_end_offset == 3
    psm.update_from_batch(header(3, attributes=TRANSACTIONAL_BIT, base_seq=2))
    marker = header(4, attributes=TRANSACTIONAL_BIT | CONTROL_BIT, base_seq=-1)
    assert psm.update_from_batch(marker, CONTROL_TYPE_ABORT, 4) == CompletedTxn(PID, 3, 4, True)


def test_update_from_emptied_control_batch_only_advances(psm: ProducerStateManager) -> None:
    psm.update_from_batch(header(0, attributes=TRANSACTIONAL_BIT))
    assert psm.update_from_batch(header(1, attributes=TRANSACTIONAL_BIT | CONTROL_BIT)) is None
    assert psm.first_unstable_offset() == 0
    assert psm.map_end_offset == 2


def test_update_from_non_idempotent_batch_only_advances(psm: ProducerStateManager) -> None:
    psm.update_from_batch(header(0, count=4, pid=-1, epoch=-1, base_seq=-1))
    assert psm.map_end_offset == 4
    assert dict(psm.active_producers) == {}


def test_update_from_control_batch_rejects_an_unknown_type(psm: ProducerStateManager) -> None:
    with pytest.raises(ValueError, match="not a transaction marker"):
        psm.update_from_batch(header(0, attributes=CONTROL_BIT), 2, coordinator_epoch=0)
    with pytest.raises(ValueError, match="not a transaction marker"):
        psm.update_from_batch(header(0, attributes=CONTROL_BIT), CONTROL_TYPE_COMMIT)


# -- expiry ---------------------------------------------------------------------------------------


def test_remove_expired_keeps_recent_producers_and_ongoing_transactions(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    append(psm, 0, pid=1, ts=TS)  # idle exactly the expiration at TS + 1000: expired
    append(psm, 0, pid=2, ts=TS + 1)  # idle 999 ms: kept
    append(psm, 0, pid=3, ts=TS - 5000, txn=True)  # old but in a transaction: kept
    assert psm.remove_expired(TS + 1000, 1000) == 1
    assert sorted(psm.active_producers) == [2, 3]
    assert check(psm, 42, pid=1) is ACCEPTED  # forgotten: any sequence again
    assert psm.remove_expired(TS + 1001, 1000) == 1
    assert sorted(psm.active_producers) == [3]


# -- snapshots ------------------------------------------------------------------------------------


def test_take_snapshot_names_the_file_by_map_end_offset(
    psm: ProducerStateManager, tmp_path: Path
) -> None:
    append(psm, 0, 3)
    path = psm.take_snapshot()
    assert path == tmp_path / "00000000000000000003.snapshot"
    assert path.exists()
    assert psm.take_snapshot() is None  # one exists at that offset
    append(psm, 3)
    psm.take_snapshot()
    assert (psm.oldest_snapshot_offset(), psm.latest_snapshot_offset()) == (3, 4)


def test_snapshot_round_trip_keeps_last_batch_and_transaction_state(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    for i in range(4):
        append(psm, 2 * i, 2, pid=1, epoch=2)  # offsets 0-7
    append(psm, 0, pid=2, txn=True, ts=TS + 5)  # offset 8
    psm.complete_txn(3, 1, 6, marker_offset=9, timestamp=TS + 9, is_aborted=True)
    psm.take_snapshot()

    reloaded = ProducerStateManager(tmp_path)
    assert reloaded.truncate_and_reload(0, 10) == 10
    assert reloaded.map_end_offset == 10
    one, two, three = (reloaded.last_entry(p) for p in (1, 2, 3))
    assert one is not None
    assert two is not None
    assert three is not None
    assert (one.producer_epoch, list(one.batch_metadata)) == (2, [BatchMetadata(6, 7, 7, 1, TS)])
    assert (two.current_txn_first_offset, two.last_timestamp) == (8, TS + 5)
    assert (three.producer_epoch, three.coordinator_epoch, len(three.batch_metadata)) == (1, 6, 0)
    assert reloaded.first_unstable_offset() == 8
    # Only the last batch survives a reload, so only it is recognised as a duplicate.
    assert isinstance(check(reloaded, 6, 2, pid=1, epoch=2), Duplicate)
    assert check(reloaded, 4, 2, pid=1, epoch=2) == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert check(reloaded, 8, pid=1, epoch=2) is ACCEPTED


def test_corrupt_latest_snapshot_is_deleted_and_an_older_one_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    psm = ProducerStateManager(tmp_path)
    append(psm, 0, pid=1)
    psm.take_snapshot()  # at 1
    append(psm, 0, pid=2)
    newest = psm.take_snapshot()  # at 2
    assert newest is not None
    data = bytearray(newest.read_bytes())
    data[-1] ^= 0xFF
    newest.write_bytes(bytes(data))

    reloaded = ProducerStateManager(tmp_path)
    with caplog.at_level(logging.WARNING, logger="runtime.log.producer_state"):
        assert reloaded.truncate_and_reload(0, 2) == 1
    assert "CRC" in caplog.text
    assert not newest.exists()
    assert reloaded.snapshots.offsets == (1,)
    assert sorted(reloaded.active_producers) == [1]


def test_short_snapshot_falls_back_to_none(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    append(psm, 0, 5)
    path = psm.take_snapshot()
    assert path is not None
    path.write_bytes(path.read_bytes()[:7])
    assert ProducerStateManager(tmp_path).truncate_and_reload(2, 5) == 2


def test_truncate_and_reload_deletes_snapshots_outside_the_log(tmp_path: Path) -> None:
    psm = ProducerStateManager(tmp_path)
    for offset in (5, 10, 20, 30):
        psm.update_map_end_offset(offset)
        psm.take_snapshot()
    assert psm.truncate_and_reload(10, 25) == 20
    assert psm.snapshots.offsets == (10, 20)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "00000000000000000010.snapshot",
        "00000000000000000020.snapshot",
    ]


def test_truncate_and_reload_without_snapshot_replays_from_log_start(
    psm: ProducerStateManager,
) -> None:
    append(psm, 0, 10)
    assert psm.truncate_and_reload(4, 10) == 4
    assert psm.map_end_offset == 4
    assert dict(psm.active_producers) == {}


def test_truncate_and_reload_clears_state_above_the_snapshot_then_replay_rebuilds(
    psm: ProducerStateManager,
) -> None:
    append(psm, 0, 2)  # 0-1
    psm.take_snapshot()  # at 2
    append(psm, 2, 2)  # 2-3
    append(psm, 4, 2)  # 4-5
    assert psm.truncate_and_reload(0, 4) == 2  # the log was truncated to 4
    assert check(psm, 2, 2) is ACCEPTED
    psm.update_from_batch(header(2, count=2, base_seq=2))  # replay of what the log still holds
    assert isinstance(check(psm, 0, 2), Duplicate)
    assert isinstance(check(psm, 2, 2), Duplicate)
    assert check(psm, 4, 2) is ACCEPTED
    assert psm.map_end_offset == 4


def test_truncate_and_reload_drops_producers_whose_batches_are_below_log_start(
    tmp_path: Path,
) -> None:
    psm = ProducerStateManager(tmp_path)
    append(psm, 0, 3, pid=1)  # 0-2
    append(psm, 0, pid=2, txn=True)  # 3, still open
    psm.complete_txn(3, 0, 0, marker_offset=4, timestamp=TS, is_aborted=True)  # marker only
    append(psm, 0, 2, pid=4)  # 5-6
    psm.take_snapshot()  # at 7
    assert psm.truncate_and_reload(5, 7) == 7
    assert sorted(psm.active_producers) == [2, 3, 4]
    assert psm.first_unstable_offset() == 3


def test_truncate_and_reload_rejects_start_above_end(psm: ProducerStateManager) -> None:
    with pytest.raises(ValueError, match="above"):
        psm.truncate_and_reload(5, 4)


def test_delete_snapshots_below_keeps_the_latest(psm: ProducerStateManager) -> None:
    for offset in (3, 6, 9):
        psm.update_map_end_offset(offset)
        psm.take_snapshot()
    assert psm.delete_snapshots_below(7) == 2
    assert psm.snapshots.offsets == (9,)
    assert psm.delete_snapshots_below(100) == 0
    assert psm.snapshots.offsets == (9,)


def test_truncate_fully_and_start_at(psm: ProducerStateManager, tmp_path: Path) -> None:
    append(psm, 0, txn=True)
    psm.take_snapshot()
    psm.truncate_fully_and_start_at(50)
    assert psm.map_end_offset == 50
    assert dict(psm.active_producers) == {}
    assert psm.first_unstable_offset() is None
    assert psm.latest_snapshot_offset() is None
    assert list(tmp_path.iterdir()) == []


# -- property: check against a reference model ---------------------------------------------------


@dataclass
class ModelProducer:
    """Every batch of the current epoch, and from which index the broker can still see them."""

    epoch: int
    batches: list[tuple[int, int, int, int]] = field(default_factory=list)  # seqs, offsets
    visible_from: int = 0


def model_check(
    model: dict[int, ModelProducer], pid: int, epoch: int, first: int, last: int
) -> SequenceCheck | tuple[int, int]:
    """Kafka's rules, stated over the full history: (first, last offset) for a duplicate."""
    p = model.get(pid)
    if p is None:
        return ACCEPTED
    visible = p.batches[max(p.visible_from, len(p.batches) - NUM_BATCHES_TO_RETAIN) :]
    if epoch == p.epoch:
        for b_first, b_last, first_offset, last_offset in visible:
            if (b_first, b_last) == (first, last):
                return first_offset, last_offset
    if epoch < p.epoch:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if epoch > p.epoch:
        return ACCEPTED if first == 0 else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    expected = (p.batches[-1][1] + 1) % 2**31 if p.batches else 0
    return ACCEPTED if first == expected else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def random_request(
    rng: random.Random, model: dict[int, ModelProducer], pid: int
) -> tuple[int, int, int]:
    """(epoch, first_seq, record count), biased toward the interesting cases."""
    p = model.get(pid)
    count = rng.randint(1, 4)
    if p is None:  # a new (or expired) producer may start anywhere: often just below the wrap
        return rng.randint(0, 3), rng.choice([0, rng.randint(0, 40), INT32_MAX - count]), count
    epoch, roll = p.epoch, rng.random()
    if roll < 0.08:
        return epoch + 1, rng.choice([0, 0, 0, rng.randint(1, 40)]), count
    if roll < 0.12 and epoch > 0:
        epoch -= 1
    roll = rng.random()
    if p.batches and roll < 0.6:
        first = (p.batches[-1][1] + 1) % 2**31
    elif p.batches and roll < 0.85:
        b_first, b_last, _, _ = rng.choice(p.batches[-8:])  # inside and beyond the window
        return epoch, b_first, (b_last - b_first) % 2**31 + 1
    else:
        first = rng.randint(0, 40)
    return epoch, first, count


EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default


@pytest.mark.parametrize("seed", range(25))
def test_check_agrees_with_reference_model(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    psm = ProducerStateManager(tmp_path)
    model: dict[int, ModelProducer] = {}
    for step in range(300):
        where = f"seed={seed} step={step}"
        roll = rng.random()
        if roll < 0.01:  # every producer idle past producer.id.expiration.ms
            psm.remove_expired(TS + EXPIRATION_MS, EXPIRATION_MS)
            model.clear()
            continue
        if roll < 0.04:  # snapshot + reload: only the last batch stays visible
            psm.take_snapshot()
            end = psm.map_end_offset
            assert psm.truncate_and_reload(0, end) == end, where
            for producer in model.values():
                producer.visible_from = max(producer.visible_from, len(producer.batches) - 1)
            continue
        pid = rng.randint(1, 3)
        epoch, first, count = random_request(rng, model, pid)
        last = increment_sequence(first, count - 1)
        expected = model_check(model, pid, epoch, first, last)
        got = psm.check(pid, epoch, first, last, is_transactional=False)
        if isinstance(got, Duplicate):
            got_offsets = (got.metadata.first_offset, got.metadata.last_offset)
            assert got_offsets == expected, where
            continue
        assert got == expected, where
        if got is not ACCEPTED:
            continue
        first_offset, last_offset = append(psm, first, count, pid=pid, epoch=epoch)
        p = model.get(pid)
        if p is None or p.epoch != epoch:
            p = model[pid] = ModelProducer(epoch)
        p.batches.append((first, last, first_offset, last_offset))
