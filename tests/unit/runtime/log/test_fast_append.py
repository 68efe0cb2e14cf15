"""The leader append's fast path leaves exactly the state the full checks leave.

`LogSegment.append_unless_roll` skips `should_roll`'s and `append`'s slowly changing checks while
it is armed (`_fast_append_room` > 0). These tests replay the same seeded sequence of operations
— appends of one or several batches with timestamps that grow, repeat, go back or are absent;
rolls by size, time, index capacity and offset range; follower appends with offset gaps;
truncations; explicit rolls; rejected batches; clock steps — once normally and once with the
fast path disabled, and compare every answer, every exception and the bytes of every file left
behind. (About two thirds of the appends in these scripts take the fast path.)
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.log import Log
from runtime.log.segment import LogSegment
from tests.unit.runtime.log.helpers import WALL_MS
from wire.batch_builder import build_batch
from wire.records import CorruptRecordError, patch_batch, validate_batch

CONFIGS = [
    LogConfig(segment_bytes=40_000, segment_index_bytes=96, index_interval_bytes=0),
    LogConfig(segment_bytes=30_000, segment_ms=5_000, index_interval_bytes=1_000),
    LogConfig(segment_index_bytes=120, index_interval_bytes=3_000, segment_ms=2_000),
    LogConfig(),
]


def random_batch(rng: random.Random, ts: int) -> bytes:
    count = rng.randint(1, 4)
    size = rng.choice([0, 10, 500, 3_000, 5_000])
    records = [(b"k%d" % i, bytes([97 + i]) * size) for i in range(count)]
    if ts < 0:
        return build_batch(records, timestamps=[-1] * count)
    return build_batch(records, base_timestamp=ts)


def run_script(directory: Path, config: LogConfig, seed: int) -> list[object]:
    """Apply the seeded script to a fresh log; returns every answer, then the files' bytes."""
    rng = random.Random(seed)
    clock = ManualClock()
    log = Log.open(directory, config, clock)
    out: list[object] = []
    ts = WALL_MS
    epoch = 0
    for _ in range(150):
        action = rng.random()
        if action < 0.03 and log.log_end_offset > 0:
            target = rng.randint(0, log.log_end_offset)
            out.append(("truncate", log.truncate_to(target), log.log_end_offset))
            continue
        if action < 0.05:
            out.append(("roll", log.roll().base_offset))
            continue
        if action < 0.08:
            clock.advance(rng.randint(0, 3_000))
        ts_move = rng.random()
        if ts_move < 0.1:
            batch_ts = -1  # no timestamps: the segment's age then comes from the clock
        elif ts_move < 0.2:
            batch_ts = ts - rng.randint(0, 5_000)  # an older timestamp
        else:
            ts += rng.choice([0, 0, 1, 700, 2_500])
            batch_ts = ts
        if rng.random() < 0.05:
            epoch += 1
        if action > 0.9:  # a follower append, offsets as given (with gaps, as after compaction)
            base = log.log_end_offset + rng.randint(0, 3)
            records = [(b"f", b"x" * rng.choice([0, 900, 6_000]))] * rng.randint(1, 3)
            replica = build_batch(
                records,
                base_offset=base,
                partition_leader_epoch=epoch,
                timestamps=[max(batch_ts, -1)] * len(records),
            )
            out.append(("follower", tuple(log.append_as_follower(replica))))
            continue
        data = b"".join(random_batch(rng, batch_ts) for _ in range(rng.choice([1, 1, 1, 2, 3])))
        if rng.random() < 0.04:  # a corrupt last byte: rejected, nothing appended
            data = data[:-1] + bytes([data[-1] ^ 1])
        try:
            info = log.append_as_leader(data, epoch)
        except ValueError as error:
            out.append(("error", type(error).__name__, str(error)))
        else:
            out.append(("append", tuple(info)))
        segments = [(s.base_offset, s.last_modified_ms) for s in log.segments]
        out.append(("state", log.log_end_offset, segments))
    out.append(("lookup", [log.offset_metadata(o) for o in range(0, log.log_end_offset, 7)]))
    out.append(("max ts", [(s.max_timestamp_so_far, s.largest_timestamp) for s in log.segments]))
    log.close()
    out.extend((path.name, path.read_bytes()) for path in sorted(directory.iterdir()))
    return out


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("seed", range(6))
def test_fast_path_matches_full_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: LogConfig, seed: int
) -> None:
    fast = run_script(tmp_path / "fast-0", config, seed)

    def never_armed(self: LogSegment) -> int:
        return 0

    monkeypatch.setattr(LogSegment, "_fast_append_room", never_armed)
    slow = run_script(tmp_path / "slow-0", config, seed)
    assert len(fast) == len(slow), f"seed {seed}"
    for step, (a, b) in enumerate(zip(fast, slow, strict=True)):
        assert a == b, f"seed {seed}, step {step}: fast {a!r} != full checks {b!r}"


def test_fast_path_is_taken_and_disarmed_by_changes(tmp_path: Path) -> None:
    """Guards the test above against comparing the slow path with itself."""
    clock = ManualClock()
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0), clock)
    for i in range(3):
        log.append_as_leader(build_batch([(b"k", b"v")], base_timestamp=WALL_MS + i), 0)
    segment = log.active_segment
    room = segment._fast_index_room
    assert room > 0
    log.append_as_leader(build_batch([(b"k", b"v")], base_timestamp=WALL_MS + 9), 0)
    assert segment._fast_index_room == room - 1  # one index entry, taken on the fast path
    log.truncate_to(2)
    assert segment._fast_index_room == 0
    log.append_as_leader(build_batch([(b"k", b"v")], base_timestamp=WALL_MS + 10), 0)
    assert segment._fast_index_room > 0  # re-armed by the full checks


def expected_append(data: bytes, leo: int, epoch: int) -> tuple[tuple[int, ...], bytes]:
    """What a leader append must answer and store, computed plainly from `validate_batch`."""
    offset, max_ts, offset_of_max_ts, stored = leo, -1, leo, b""
    position = count = batches = 0
    while position < len(data):
        header = validate_batch(data, position)
        patched = bytearray(data[position : position + header.size_bytes])
        patch_batch(patched, 0, base_offset=offset, partition_leader_epoch=epoch)
        stored += patched
        offset += header.records_count
        if header.max_timestamp > max_ts:
            max_ts, offset_of_max_ts = header.max_timestamp, offset - 1
        count += header.records_count
        batches += 1
        position += header.size_bytes
    return (leo, offset - 1, max_ts, offset_of_max_ts, len(data), batches, count), stored


@pytest.mark.parametrize("seed", range(20))
def test_single_and_multi_batch_requests_match_a_plain_model(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    log = Log.open(tmp_path / "m-0", LogConfig(), ManualClock())
    stored = b""
    for _ in range(30):
        parts = []
        for _ in range(rng.choice([1, 1, 2, 4])):
            count = rng.randint(1, 3)
            stamps = [rng.choice([-1, -7, WALL_MS, WALL_MS + rng.randint(-50, 50)])] * count
            parts.append(
                build_batch([(b"k", b"v" * rng.randint(0, 40))] * count, timestamps=stamps)
            )
        data = b"".join(parts)
        epoch = rng.choice([-1, 0, 3])
        want, patched = expected_append(data, log.log_end_offset, epoch)
        assert tuple(log.append_as_leader(memoryview(data), epoch)) == want, f"seed {seed}"
        stored += patched
    bad = bytearray(build_batch([(b"k", b"v")], base_timestamp=WALL_MS) * 2)
    bad[-1] ^= 1  # the second batch is corrupt: the whole request is refused
    with pytest.raises(CorruptRecordError, match="CRC mismatch") as caught:
        log.append_as_leader(bad, 0)
    assert caught.value.position == len(bad) // 2
    assert log.read(0, 1 << 30).records == stored, f"seed {seed}"
    log.close()
