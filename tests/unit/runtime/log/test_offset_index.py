"""runtime/log/offset_index.py (on runtime/log/index_file.py): the 8-byte big-endian entry
layout, largest-lower-bound lookup, rejected offsets, preallocation and trim, the sanity check,
and truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.log.errors import CorruptIndexError, InvalidOffsetError, OffsetOverflowError
from runtime.log.index_file import read_written
from runtime.log.offset_index import OffsetIndex, OffsetPosition


def test_offset_index_entries_are_8_bytes_big_endian(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000100.index"
    index = OffsetIndex(path, 100, 1024)
    index.append(105, 4096)
    index.append(110, 8200)
    index.close()
    assert path.read_bytes() == bytes.fromhex("00000005 00001000 0000000a 00002008")


def test_offset_index_lookup_is_largest_lower_bound(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 100, 1024)
    for offset, position in [(110, 100), (120, 200), (130, 300)]:
        index.append(offset, position)
    assert index.lookup(99) == OffsetPosition(100, 0)
    assert index.lookup(109) == OffsetPosition(100, 0)
    assert index.lookup(110) == OffsetPosition(110, 100)
    assert index.lookup(125) == OffsetPosition(120, 200)
    assert index.lookup(10_000) == OffsetPosition(130, 300)


def test_offset_index_rejects_non_increasing_and_overflowing_offsets(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 100, 1024)
    index.append(110, 100)
    with pytest.raises(InvalidOffsetError):
        index.append(110, 200)
    with pytest.raises(OffsetOverflowError):
        index.append(100 + 2**31, 300)


def test_preallocate_then_trim_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 80)
    index.preallocate(80)
    assert path.stat().st_size == 80
    assert index.max_entries == 10
    index.append(3, 50)
    index.append(7, 90)
    index.flush()
    assert path.stat().st_size == 80  # still preallocated; entries written in place
    index.trim()
    assert path.stat().st_size == 16
    index.close()
    reopened = OffsetIndex(path, 0, 80)
    assert reopened.entries == 2
    assert reopened.lookup(8) == OffsetPosition(7, 90)
    reopened.sanity_check(log_size=100)


def test_untrimmed_preallocated_tail_is_skipped_on_load(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 80)
    index.preallocate(80)
    index.append(3, 50)
    index.flush()
    index.close_handle()  # a crash: no trim
    assert path.stat().st_size == 80
    reopened = OffsetIndex(path, 0, 80)
    assert reopened.entries == 1
    reopened.sanity_check(log_size=100)


def test_a_large_preallocated_index_reads_only_what_was_written(tmp_path: Path) -> None:
    """The unused tail of a preallocated index is a hole: loading reads the written part only
    (where the file system reports holes), and data written after a hole is still read."""
    path = tmp_path / "00000000000000000000.index"
    size = 10 * 1024 * 1024
    index = OffsetIndex(path, 0, size)
    index.preallocate(size)
    index.append(3, 50)
    index.flush()
    index.close_handle()  # a crash: no trim
    raw, file_size = read_written(path)
    assert file_size == size
    assert len(raw) < size, "the 10 MB hole was read"
    assert raw[:8] == bytes.fromhex("00000003 00000032")
    assert OffsetIndex(path, 0, size).entries == 1
    with path.open("r+b") as file:  # a stray entry far past the hole: the whole file is read
        file.seek(size - 8)
        file.write(bytes.fromhex("00000009 00000063"))
    raw, _ = read_written(path)
    assert len(raw) == size
    with pytest.raises(CorruptIndexError, match="not strictly increasing"):
        OffsetIndex(path, 0, size).sanity_check(log_size=1_000)


def test_zero_entries_before_real_ones_fail_sanity_check(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(bytes(16) + bytes.fromhex("00000003 00000032"))
    with pytest.raises(CorruptIndexError, match="not strictly increasing"):
        OffsetIndex(path, 0, 80).sanity_check(log_size=100)


def test_sanity_check_rejects_partial_entries_and_positions_past_the_log(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(bytes.fromhex("00000001 00000010 0000"))
    with pytest.raises(CorruptIndexError, match="multiple"):
        OffsetIndex(path, 0, 80).sanity_check(log_size=1000)
    path.write_bytes(bytes.fromhex("00000001 00000010"))
    with pytest.raises(CorruptIndexError, match="past the log"):
        OffsetIndex(path, 0, 80).sanity_check(log_size=16)


def test_truncate_zeroes_dropped_entries_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, 0, 80)
    index.preallocate(80)
    for i in range(1, 6):
        index.append(i * 10, i * 100)
    index.flush()
    index.truncate_to(30)
    assert index.entries == 2
    assert index.lookup(45) == OffsetPosition(20, 200)
    index.close_handle()
    raw = path.read_bytes()
    assert raw[16:40] == bytes(24), "stale entries must not survive on disk"
