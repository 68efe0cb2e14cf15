"""Crash simulation: whatever a crash leaves, reopening keeps exactly the longest valid prefix."""

from __future__ import annotations

import io
import shutil
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.dump import dump_log_files
from runtime.log.log import Log
from wire.batch_builder import build_batch
from wire.records import iter_batches

from .helpers import WALL_MS, batch, offsets_of

CONFIG = LogConfig(segment_bytes=800, index_interval_bytes=150, segment_index_bytes=1200)
BATCHES = 16


def crash(log: Log) -> None:
    """Like kill -9: file handles go, nothing is trimmed, pending index entries are lost."""
    for segment in log.segments:
        segment.close_handles()


def build(directory: Path, clock: ManualClock) -> list[tuple[int, int]]:
    """A log of BATCHES batches over several segments; returns (segment base, size) per batch."""
    log = Log.open(directory, CONFIG, clock)
    for i in range(BATCHES):
        log.append_as_leader(batch(3, ts=WALL_MS + i * 10, tag=i), leader_epoch=1 + i // 6)
    layout = []
    for segment in log.segments:
        data = segment.log_path.read_bytes()
        layout += [(segment.base_offset, h.size_bytes) for _, h in iter_batches(data)]
    assert len(log.segments) >= 3
    crash(log)
    return layout


def read_all(log: Log, start: int | None = None) -> list[int]:
    """Every offset from `start` (default: the log start) to the LEO, one read per segment."""
    offsets: list[int] = []
    position = log.log_start_offset if start is None else start
    while position < log.log_end_offset:
        got = offsets_of(log.read(position, 1000).records)
        assert got, f"no data at {position}"
        offsets += got
        position = got[-1] + 1
    return offsets


def assert_consistent(log: Log, expected_batches: int) -> None:
    """The log holds exactly batches [0, expected_batches) and its indexes agree with it."""
    assert log.log_end_offset == 3 * expected_batches
    assert read_all(log) == list(range(3 * expected_batches))
    for offset in range(log.log_end_offset):
        assert offsets_of(log.read(offset, 1, min_one=True).records)[0] == offset - offset % 3
    out = io.StringIO()
    assert dump_log_files([log.directory], out, verify_index=True) == 0, out.getvalue()
    epochs = [(e.epoch, e.start_offset) for e in log.epoch_cache.entries]
    assert epochs == [(1 + i // 6, i * 3) for i in range(0, expected_batches, 6)]


def test_truncation_at_every_byte(tmp_path: Path, clock: ManualClock) -> None:
    original = tmp_path / "orig-0"
    layout = build(original, clock)
    last_base = layout[-1][0]
    last_batches = [size for base, size in layout if base == last_base]
    first_in_last = len(layout) - len(last_batches)
    log_file = original / f"{last_base:020d}.log"
    full = log_file.read_bytes()
    # Cut anywhere inside the last two batches (and at the very end).
    start = sum(last_batches[:-2])
    for cut in range(start, len(full) + 1):
        work = tmp_path / f"cut{cut}-0"
        shutil.copytree(original, work)
        with open(work / log_file.name, "r+b") as f:
            f.truncate(cut)
        log = Log.open(work, CONFIG, clock, recovery_point=last_base)
        whole, consumed = 0, 0
        for size in last_batches:
            if consumed + size > cut:
                break
            consumed += size
            whole += 1
        assert_consistent(log, first_in_last + whole)
        assert log.recovery_report.truncated_bytes == cut - consumed
        log.close()
        shutil.rmtree(work)


@settings(max_examples=40)
@given(data=st.data())
def test_flipped_byte_truncates_at_the_damaged_batch(data: st.DataObject) -> None:
    clock = ManualClock()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "flip-0"
        layout = build(directory, clock)
        victim = data.draw(st.integers(0, len(layout) - 1), label="batch")
        base, size = layout[victim]
        position_in_segment = sum(s for b, s in layout[:victim] if b == base)
        # Any byte the batch's checks cover: length, magic, CRC, and attributes..end (CRC'd).
        # baseOffset (0-8) and partitionLeaderEpoch (12-16) are outside the CRC by design.
        field = data.draw(st.sampled_from(["length", "magic", "crc", "body"]), label="field")
        ranges = {"length": (8, 12), "magic": (16, 17), "crc": (17, 21), "body": (21, size)}
        low, high = ranges[field]
        byte = data.draw(st.integers(low, high - 1), label="byte")
        flip = data.draw(st.integers(1, 255), label="xor")
        path = directory / f"{base:020d}.log"
        raw = bytearray(path.read_bytes())
        raw[position_in_segment + byte] ^= flip
        path.write_bytes(bytes(raw))
        log = Log.open(directory, CONFIG, clock, recovery_point=0)
        assert_consistent(log, victim)
        truncation = log.recovery_report.truncation
        assert truncation is not None
        assert (truncation.segment_base_offset, truncation.position) == (base, position_in_segment)
        log.close()


@settings(max_examples=30)
@given(
    which=st.sampled_from(["index", "timeindex"]),
    damage=st.sampled_from(["delete", "partial", "garbage", "zeros", "append"]),
    segment_choice=st.integers(0, 10),
    noise=st.binary(min_size=1, max_size=64),
)
def test_damaged_index_files_are_rebuilt_after_clean_shutdown(
    which: str, damage: str, segment_choice: int, noise: bytes
) -> None:
    clock = ManualClock()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "idx-0"
        build(directory, clock)
        log = Log.open(directory, CONFIG, clock, recovery_point=0)
        log.close()
        bases = sorted(p.name for p in directory.glob("*.log"))
        name = bases[segment_choice % len(bases)].replace(".log", f".{which}")
        path = directory / name
        original = path.read_bytes()
        if damage == "delete":
            path.unlink()
        elif damage == "partial":
            path.write_bytes(original + noise[:1] if len(original) % 2 else original[:-1])
        elif damage == "garbage":
            path.write_bytes((noise * 64)[: max(len(original), 8)])
        elif damage == "zeros":
            path.write_bytes(bytes(max(len(original), 24)))
        else:
            path.write_bytes(original + (noise * 12)[:12])
        reopened = Log.open(directory, CONFIG, clock, had_clean_shutdown=True)
        assert_consistent(reopened, BATCHES)
        if damage in ("delete", "partial"):
            assert reopened.recovery_report.rebuilt_indexes
        reopened.close()


def test_clean_shutdown_opens_without_scanning(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "clean-0"
    build(directory, clock)
    log = Log.open(directory, CONFIG, clock)
    assert log.recovery_report.segments_recovered == len(log.segments)
    log.close()
    clean = Log.open(directory, CONFIG, clock, had_clean_shutdown=True)
    assert clean.recovery_report.segments_recovered == 0
    assert clean.recovery_point == clean.log_end_offset
    assert_consistent(clean, BATCHES)
    clean.close()


def test_recovery_starts_at_the_recovery_point_segment(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "rp-0"
    layout = build(directory, clock)
    bases = sorted({base for base, _ in layout})
    log = Log.open(directory, CONFIG, clock, recovery_point=bases[-1] + 1)
    assert log.recovery_report.segments_recovered == 1
    assert log.recovery_point == bases[-1] + 1  # not advanced: recovered bytes are not fsynced
    log.close()


def test_corrupt_middle_segment_drops_every_later_segment(
    tmp_path: Path, clock: ManualClock
) -> None:
    directory = tmp_path / "mid-0"
    layout = build(directory, clock)
    bases = sorted({base for base, _ in layout})
    middle = directory / f"{bases[1]:020d}.log"
    raw = bytearray(middle.read_bytes())
    raw[70] ^= 0xFF
    middle.write_bytes(bytes(raw))
    log = Log.open(directory, CONFIG, clock)
    assert log.recovery_report.deleted_segments == tuple(bases[2:])
    assert [s.base_offset for s in log.segments] == bases[:2]
    assert not (directory / f"{bases[2]:020d}.log").exists()
    assert log.log_end_offset == bases[1]
    log.append_as_leader(batch(1), 9)  # the log keeps working after recovery
    assert log.log_end_offset == bases[1] + 1
    log.close()


def test_stray_files_are_removed(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "stray-0"
    build(directory, clock)
    (directory / "00000000000000000999.log.deleted").write_bytes(b"x")
    (directory / "00000000000000000999.index.deleted").write_bytes(b"x")
    (directory / "00000000000000000777.index").write_bytes(bytes(8))  # no .log
    log = Log.open(directory, CONFIG, clock)
    removed = set(log.recovery_report.removed_files)
    assert removed == {
        "00000000000000000999.log.deleted",
        "00000000000000000999.index.deleted",
        "00000000000000000777.index",
    }
    assert_consistent(log, BATCHES)
    log.close()


def test_empty_directory_starts_at_log_start_offset(tmp_path: Path, clock: ManualClock) -> None:
    log = Log.open(tmp_path / "new-0", CONFIG, clock, log_start_offset=42)
    assert (log.log_start_offset, log.log_end_offset) == (42, 42)
    assert log.active_segment.log_path.name == "00000000000000000042.log"
    log.close()


def test_log_end_below_log_start_restarts_the_log(tmp_path: Path, clock: ManualClock) -> None:
    directory = tmp_path / "behind-0"
    build(directory, clock)
    log = Log.open(directory, CONFIG, clock, log_start_offset=500)
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (500, 500, 1)
    log.close()


# -- the swap protocol ---------------------------------------------------------------------------


def _write_compacted(directory: Path, suffix: str, base: int, offsets: list[int]) -> None:
    """An offline compaction output replacing segments from `base`: one batch per kept offset."""
    data = b"".join(
        build_batch(
            [(b"kept", b"%d" % o)],
            base_offset=o,
            partition_leader_epoch=1,
            base_timestamp=WALL_MS + o,
        )
        for o in offsets
    )
    (directory / f"{base:020d}.log{suffix}").write_bytes(data)


def _swap_setup(tmp_path: Path, clock: ManualClock) -> tuple[Path, list[int]]:
    directory = tmp_path / "swap-0"
    build(directory, clock)
    log = Log.open(directory, CONFIG, clock)
    bases = [s.base_offset for s in log.segments]
    log.close()
    return directory, bases


def _kept(bases: list[int]) -> list[int]:
    return list(range(bases[0], bases[2], 5))


def test_unfinished_cleaning_is_rolled_back(tmp_path: Path, clock: ManualClock) -> None:
    directory, bases = _swap_setup(tmp_path, clock)
    _write_compacted(directory, ".cleaned", bases[0], _kept(bases))
    log = Log.open(directory, CONFIG, clock, had_clean_shutdown=True)
    assert_consistent(log, BATCHES)
    assert not list(directory.glob("*.cleaned"))
    log.close()


def _assert_swapped(log: Log, bases: list[int]) -> None:
    first = offsets_of(log.read(bases[0], 100_000, max_offset=bases[2]).records)
    assert first == _kept(bases)
    assert read_all(log, bases[2]) == list(range(bases[2], 3 * BATCHES))
    assert not list(log.directory.glob("*.swap"))
    assert not list(log.directory.glob("*.deleted"))


def test_swap_is_completed_before_old_segments_were_renamed(
    tmp_path: Path, clock: ManualClock
) -> None:
    directory, bases = _swap_setup(tmp_path, clock)
    _write_compacted(directory, ".swap", bases[0], _kept(bases))
    log = Log.open(directory, CONFIG, clock, had_clean_shutdown=True)
    assert log.recovery_report.swaps_completed == (bases[0],)
    _assert_swapped(log, bases)
    log.close()


def test_swap_is_completed_with_old_segments_half_deleted(
    tmp_path: Path, clock: ManualClock
) -> None:
    directory, bases = _swap_setup(tmp_path, clock)
    _write_compacted(directory, ".swap", bases[0], _kept(bases))
    for ext in ("log", "index", "timeindex"):
        old = directory / f"{bases[1]:020d}.{ext}"
        old.rename(old.with_name(old.name + ".deleted"))
    log = Log.open(directory, CONFIG, clock, had_clean_shutdown=False)
    _assert_swapped(log, bases)
    log.close()


def test_swap_split_leftovers_above_a_cleaned_file_are_discarded(
    tmp_path: Path, clock: ManualClock
) -> None:
    directory, bases = _swap_setup(tmp_path, clock)
    _write_compacted(directory, ".cleaned", bases[0], _kept(bases))
    _write_compacted(directory, ".swap", bases[1], [bases[1]])
    log = Log.open(directory, CONFIG, clock, had_clean_shutdown=True)
    assert_consistent(log, BATCHES)
    log.close()
