from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import pytest

from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.errors import (
    InvalidOffsetError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from runtime.log.log import Log
from runtime.log.offsets import LogOffsetMetadata, TimestampAndOffset
from wire.batch_builder import build_batch
from wire.record_reader import iter_records
from wire.records import CompressionType, CorruptRecordError, iter_batches

from .helpers import WALL_MS, batch, batch_bases, kafka_python_batch, offsets_of

SMALL = LogConfig(segment_bytes=2048, index_interval_bytes=256)


def filled(log_dir: Path, clock: ManualClock, batches: int, config: LogConfig = SMALL) -> Log:
    log = Log.open(log_dir, config, clock)
    for i in range(batches):
        log.append_as_leader(batch(3, ts=WALL_MS + i, tag=i), leader_epoch=1)
    return log


def deleted_files(directory: Path) -> list[Path]:
    return list(directory.glob("*.deleted"))


def stored_bytes(log: Log) -> bytes:
    return b"".join(s.log_path.read_bytes() for s in log.segments)


def test_leader_append_assigns_offsets_and_stores_bytes_unchanged(
    log_dir: Path, clock: ManualClock
) -> None:
    log = Log.open(log_dir, SMALL, clock)
    first, second = batch(3, tag=1), kafka_python_batch(4)
    info = log.append_as_leader(first + second, leader_epoch=7)
    assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == (
        0,
        6,
        2,
        7,
    )
    assert log.log_end_offset == 7
    data = stored_bytes(log)
    assert batch_bases(data) == [0, 3]
    assert [h.partition_leader_epoch for _, h in iter_batches(data)] == [7, 7]
    # Only baseOffset (0-8) and partitionLeaderEpoch (12-16) differ from what was sent.
    sent = first + second
    for start in (0, len(first)):
        assert data[start + 8 : start + 12] == sent[start + 8 : start + 12]
        assert data[start + 16 : start + 61] == sent[start + 16 : start + 61]
    assert data[len(first) + 61 :] == second[61:]
    assert offsets_of(data) == list(range(7))
    assert log.epoch_cache.latest_epoch == 7


def test_callers_buffer_is_left_alone(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, SMALL, clock)
    log.append_as_leader(batch(2), 0)
    buf = bytearray(batch(2))
    original = bytes(buf)
    log.append_as_leader(buf, 3)
    assert buf == original
    stored = stored_bytes(log)[len(original) :]
    assert struct.unpack_from(">qii", stored, 0) == (2, len(original) - 12, 3)
    assert stored[16:] == original[16:]


def test_leader_rejects_corrupt_oversized_and_odd_batches(
    log_dir: Path, clock: ManualClock
) -> None:
    log = Log.open(log_dir, LogConfig(max_message_bytes=200), clock)
    good = bytearray(batch(1))
    good[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC"):
        log.append_as_leader(bytes(good), 0)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(batch(3, value_size=100), 0)
    odd = build_batch([(b"k", b"v")], last_offset_delta=5)
    with pytest.raises(InvalidRecordError):
        log.append_as_leader(odd, 0)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(batch(1) + b"\x00\x01", 0)
    assert log.log_end_offset == 0
    assert log.active_segment.size == 0


def test_compacted_topic_refuses_records_without_a_key(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, LogConfig(cleanup_policy="compact"), clock)
    keyed = build_batch([(b"k1", b"v"), (b"k2", None)])
    log.append_as_leader(keyed, 0)  # a tombstone has a key: fine
    keyless = build_batch([(b"k3", b"v"), (None, b"v")], compression=CompressionType.GZIP)
    with pytest.raises(InvalidRecordError, match="record 1: a compacted topic needs a key"):
        log.append_as_leader(keyed + keyless, 0)
    assert log.log_end_offset == 2  # nothing of the refused request was appended
    # The same records are fine once the topic no longer compacts.
    log.config = LogConfig(cleanup_policy="delete")
    log.append_as_leader(keyless, 0)
    assert log.log_end_offset == 4


def test_follower_append_keeps_offsets_and_checks_them(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, SMALL, clock)
    leader_batch = build_batch(
        [(b"a", b"1"), (b"b", b"2")], base_offset=0, partition_leader_epoch=3
    )
    info = log.append_as_follower(leader_batch)
    assert (info.first_offset, info.last_offset) == (0, 1)
    gap = build_batch([(b"c", b"3")], base_offset=5, partition_leader_epoch=4)
    log.append_as_follower(gap)  # gaps are fine (compacted leader)
    assert log.log_end_offset == 6
    assert stored_bytes(log) == leader_batch + gap
    assert [(e.epoch, e.start_offset) for e in log.epoch_cache.entries] == [(3, 0), (4, 5)]
    with pytest.raises(InvalidOffsetError):
        log.append_as_follower(build_batch([(b"d", b"4")], base_offset=5))
    backwards = build_batch([(b"e", b"5")], base_offset=9) + build_batch(
        [(b"f", b"6")], base_offset=8
    )
    with pytest.raises(InvalidOffsetError):
        log.append_as_follower(backwards)
    assert log.log_end_offset == 6


def test_read_whole_batches_min_one_and_max_offset(log_dir: Path, clock: ManualClock) -> None:
    log = filled(log_dir, clock, 4, LogConfig())
    size = len(batch(3))
    assert batch_bases(log.read(0, 10 * size).records) == [0, 3, 6, 9]
    assert batch_bases(log.read(4, 2 * size + 5).records) == [3, 6]  # never a partial batch
    assert batch_bases(log.read(0, 1, min_one=True).records) == [0]
    empty = log.read(0, 1, min_one=False)
    assert empty.records == b""
    assert empty.first_entry_incomplete
    assert batch_bases(log.read(0, 10 * size, max_offset=6).records) == [0, 3]
    assert log.read(6, 10 * size, max_offset=6).records == b""
    at_end = log.read(12, 100)
    assert at_end.records == b""
    assert at_end.fetch_offset_metadata == log.log_end_offset_metadata
    for bad in (-1, 13):
        with pytest.raises(OffsetOutOfRangeError):
            log.read(bad, 100)


def test_offset_metadata_positions(log_dir: Path, clock: ManualClock) -> None:
    log = filled(log_dir, clock, 3, LogConfig())
    size = len(batch(3))
    assert log.offset_metadata(4) == LogOffsetMetadata(4, 0, size)
    assert log.offset_metadata(9) == LogOffsetMetadata(9, 0, 3 * size)
    assert log.offset_metadata(7).position_diff(log.offset_metadata(1)) == 2 * size


def test_roll_by_size_and_reads_across_segments(log_dir: Path, clock: ManualClock) -> None:
    log = filled(log_dir, clock, 30, SMALL)
    assert len(log.segments) >= 3
    bases = [s.base_offset for s in log.segments]
    assert bases == sorted(bases)
    assert all(s.size <= SMALL.segment_bytes for s in log.segments[:-1])
    collected: list[int] = []
    offset = 0
    while offset < log.log_end_offset:
        data = log.read(offset, 700).records
        got = offsets_of(data)
        collected += got
        offset = got[-1] + 1
    assert collected == list(range(90))
    # Inactive segments' index files are trimmed to their entries.
    for segment in log.segments[:-1]:
        assert segment.offset_index.path.stat().st_size == segment.offset_index.entries * 8


def test_roll_by_time_uses_record_timestamps(log_dir: Path, clock: ManualClock) -> None:
    config = LogConfig(segment_ms=1000)
    log = Log.open(log_dir, config, clock)
    log.append_as_leader(batch(1, ts=WALL_MS), 0)
    log.append_as_leader(batch(1, ts=WALL_MS + 1000), 0)
    assert len(log.segments) == 1
    log.append_as_leader(batch(1, ts=WALL_MS + 1001), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_roll_when_index_is_full(log_dir: Path, clock: ManualClock) -> None:
    config = LogConfig(segment_index_bytes=24, index_interval_bytes=1)
    log = Log.open(log_dir, config, clock)
    for i in range(8):
        log.append_as_leader(batch(1, tag=i), 0)
    assert len(log.segments) >= 2
    assert all(s.offset_index.entries <= 3 for s in log.segments)


def test_truncate_to_and_fully(log_dir: Path, clock: ManualClock) -> None:
    log = filled(log_dir, clock, 30, SMALL)
    log.update_high_watermark(80)
    assert log.truncate_to(33)
    assert log.log_end_offset == 33
    assert log.high_watermark == 33
    assert offsets_of(log.read(30, 10_000).records) == [30, 31, 32]
    assert not log.truncate_to(40)
    log.append_as_leader(batch(2), 2)
    assert offsets_of(log.read(33, 10_000).records) == [33, 34]
    assert log.epoch_cache.latest_epoch == 2
    # Truncating inside a batch removes the whole batch: the LEO is what is really there.
    assert log.truncate_to(34)
    assert log.log_end_offset == 33
    log.truncate_fully_and_start_at(500)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (500, 500, 1)
    assert log.active_segment.base_offset == 500
    assert log.epoch_cache.entries == ()
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)


def test_retention_by_bytes_respects_hw_and_active_segment(
    log_dir: Path, clock: ManualClock
) -> None:
    log = filled(log_dir, clock, 30, SMALL.with_overrides({"retention.bytes": 0}))
    segments = len(log.segments)
    assert log.delete_old_segments() == 0  # HW still 0: nothing may go
    log.update_high_watermark(log.segments[2].base_offset)
    assert log.delete_old_segments() == 2
    assert log.log_start_offset == log.segments[0].base_offset
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == segments - 3
    assert len(log.segments) == 1  # the active segment always stays
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)


def test_retention_by_time(log_dir: Path, clock: ManualClock) -> None:
    config = SMALL.with_overrides({"retention.ms": 10_000})
    log = Log.open(log_dir, config, clock)
    for i in range(30):
        log.append_as_leader(batch(3, ts=WALL_MS + i * 1000, tag=i), 0)
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_old_segments() == 0
    clock.advance(25_000)  # now WALL_MS + 25 s: segments whose newest record is 10 s older go
    deleted = log.delete_old_segments()
    assert deleted > 0
    assert clock.wall_ms() - log.segments[0].largest_timestamp <= 10_000
    # Retired files are renamed .deleted and removed after file.delete.delay.ms.
    assert list(log_dir.glob("*.deleted"))
    assert log.take_deleted_segments() == []
    clock.advance(config.file_delete_delay_ms)
    retired = log.take_deleted_segments()
    assert len(retired) == deleted
    Log.delete_segment_files(retired)
    assert not list(log_dir.glob("*.deleted"))


def test_log_start_offset_increment(log_dir: Path, clock: ManualClock) -> None:
    log = filled(log_dir, clock, 30, SMALL)
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(10)  # above the HW
    log.update_high_watermark(60)
    assert log.maybe_increment_log_start_offset(40)
    assert not log.maybe_increment_log_start_offset(30)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(39, 100)
    assert log.delete_old_segments() > 0
    assert log.segments[0].base_offset <= 40
    assert offsets_of(log.read(40, 100).records)[0] <= 40


def test_flush_messages_one_fsyncs_every_append(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, LogConfig(flush_messages=1), clock)
    log.append_as_leader(batch(2), 0)
    assert log.recovery_point == 2
    lazy = Log.open(log_dir.with_name("lazy-0"), LogConfig(), clock)
    lazy.append_as_leader(batch(2), 0)
    assert lazy.recovery_point == 0
    lazy.flush()
    assert lazy.recovery_point == 2


async def test_flush_async_advances_recovery_point(log_dir: Path, clock: ManualClock) -> None:
    log = filled(log_dir, clock, 30, SMALL)
    await log.flush_async(log.segments[1].base_offset)
    assert log.recovery_point == log.segments[1].base_offset
    await log.flush_async()
    assert log.recovery_point == log.log_end_offset


async def test_open_in_a_worker_thread(log_dir: Path, clock: ManualClock) -> None:
    # The log manager opens logs off the event loop (LogManager.open_async).
    filled(log_dir, clock, 5).close()
    log = await asyncio.to_thread(Log.open, log_dir, SMALL, clock)
    assert log.log_end_offset == 15


def test_fetch_offset_by_timestamp(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, SMALL, clock)
    for i in range(30):
        records = [(b"k", b"v%d" % j) for j in range(3)]
        stamps = [WALL_MS + i * 100 + j * 10 for j in range(3)]
        log.append_as_leader(build_batch(records, timestamps=stamps), 0)
    assert log.fetch_offset_by_timestamp(WALL_MS + 1210) == TimestampAndOffset(WALL_MS + 1210, 37)
    assert log.fetch_offset_by_timestamp(WALL_MS + 1211) == TimestampAndOffset(WALL_MS + 1220, 38)
    assert log.fetch_offset_by_timestamp(WALL_MS + 99_999) is None
    assert log.fetch_offset_by_timestamp(-2) == TimestampAndOffset(-1, 0)
    assert log.fetch_offset_by_timestamp(-1) == TimestampAndOffset(-1, 90)
    # -3: the largest timestamp (batch 29's last record) at its batch's last offset.
    assert log.fetch_offset_by_timestamp(-3) == TimestampAndOffset(WALL_MS + 2920, 89)


def test_max_timestamp_is_found_in_an_earlier_segment(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, SMALL, clock)
    assert log.fetch_offset_by_timestamp(-3) is None  # an empty log has no records
    for i in range(30):
        # Batch 4 carries the largest timestamp; later batches go back in time (CreateTime).
        stamp = WALL_MS + (10_000 if i == 4 else i)
        log.append_as_leader(build_batch([(b"k", b"v"), (b"k", b"w")], timestamps=[stamp] * 2), 0)
    assert len(log.segments) > 1
    assert log.fetch_offset_by_timestamp(-3) == TimestampAndOffset(WALL_MS + 10_000, 9)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_kafka_python_batches_round_trip(log_dir: Path, clock: ManualClock, codec: int) -> None:
    log = Log.open(log_dir, SMALL, clock)
    log.append_as_leader(batch(2), 0)
    log.append_as_leader(kafka_python_batch(5, compression=codec), 0)
    data = log.read(2, 10_000).records
    ((pos, header),) = list(iter_batches(data))
    assert header.compression == CompressionType(codec)
    records = list(iter_records(data, pos))
    assert [(r.offset, r.key, r.value) for r in records] == [
        (2 + i, b"key-%d" % i, b"value-%d" % i) for i in range(5)
    ]
    assert records[0].headers == (("h", b"x"),)


def test_offset_overflow_rolls_a_new_segment(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, SMALL, clock)
    log.append_as_follower(build_batch([(b"a", b"1")], base_offset=0))
    far = 2**31 + 10
    log.append_as_follower(build_batch([(b"b", b"2")], base_offset=far))
    assert [s.base_offset for s in log.segments] == [0, far]
    assert offsets_of(log.read(1, 1000).records) == [far]  # the gap is skipped


def test_roll_jitter_comes_from_the_seeded_rng(log_dir: Path, clock: ManualClock) -> None:
    config = LogConfig(segment_ms=1000, segment_jitter_ms=500)
    first = Log.open(log_dir, config, clock)
    second = Log.open(log_dir.with_name("other-0"), config, clock)
    assert 0 <= first.active_segment.roll_jitter_ms < 500
    assert first.active_segment.roll_jitter_ms == second.active_segment.roll_jitter_ms


def test_log_offset_metadata_comparisons() -> None:
    a = LogOffsetMetadata(10, 0, 100)
    b = LogOffsetMetadata(20, 0, 300)
    c = LogOffsetMetadata(30, 25, 0)
    assert a.on_same_segment(b)
    assert b.on_older_segment(c)
    assert b.position_diff(a) == 200
    with pytest.raises(ValueError, match="different segments"):
        c.position_diff(a)
    with pytest.raises(ValueError, match="segment unknown"):
        LogOffsetMetadata(5).on_same_segment(a)


def test_read_skips_offsets_compacted_away(log_dir: Path, clock: ManualClock) -> None:
    log = Log.open(log_dir, SMALL, clock)
    log.append_as_follower(build_batch([(b"a", b"1")], base_offset=0))
    log.append_as_follower(build_batch([(b"b", b"2")], base_offset=7))
    log.roll(12)
    log.append_as_follower(build_batch([(b"c", b"3")], base_offset=12))
    assert offsets_of(log.read(2, 1000).records) == [7]
    # Offsets 8..11 exist in no batch: the read moves on to the next segment.
    info = log.read(9, 1000)
    assert offsets_of(info.records) == [12]
    assert info.fetch_offset_metadata.segment_base_offset == 12


async def test_retired_segments_are_unlinked_off_the_loop(
    log_dir: Path, clock: ManualClock
) -> None:
    log = filled(log_dir, clock, 30, SMALL.with_overrides({"file.delete.delay.ms": 0}))
    log.update_high_watermark(log.log_end_offset)
    assert log.maybe_increment_log_start_offset(60)
    deleted = log.delete_old_segments()
    retired = log.take_deleted_segments()
    assert len(retired) == deleted > 0
    await Log.delete_segment_files_async(retired)
    assert not deleted_files(log_dir)


def test_delete_removes_the_directory(log_dir: Path, clock: ManualClock) -> None:
    log = filled(log_dir, clock, 5, SMALL)
    log.delete()
    assert not log_dir.exists()


def test_retention_without_timestamps_uses_the_injected_clock(
    log_dir: Path, clock: ManualClock
) -> None:
    log = Log.open(log_dir, SMALL.with_overrides({"retention.ms": 1000}), clock)
    for i in range(20):
        records = [(b"k%d" % i, b"v" * 40)] * 3
        log.append_as_leader(build_batch(records, timestamps=[-1, -1, -1]), 0)
    log.update_high_watermark(log.log_end_offset)
    segments = len(log.segments)
    assert segments > 2
    assert log.delete_old_segments() == 0
    clock.advance(1001)
    assert log.delete_old_segments() == segments - 1
