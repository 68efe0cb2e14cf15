"""runtime/log/time_index.py: entry layout, lookup by timestamp, monotonicity, truncation."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.log.errors import CorruptIndexError, InvalidOffsetError
from runtime.log.time_index import TimeIndex, TimestampOffset


def test_time_index_layout_lookup_and_monotonicity(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000050.timeindex"
    index = TimeIndex(path, 50, 120)
    assert index.lookup(5) == TimestampOffset(-1, 50)
    index.maybe_append(1000, 55)
    index.maybe_append(1000, 57)  # not larger: ignored
    index.maybe_append(999, 58)  # smaller: ignored
    index.maybe_append(2000, 60)
    assert index.entries == 2
    assert index.lookup(1500) == TimestampOffset(1000, 55)
    assert index.lookup(2000) == TimestampOffset(2000, 60)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(3000, 59)
    index.close()
    assert path.read_bytes() == bytes.fromhex("00000000000003e8 00000005 00000000000007d0 0000000a")
    reopened = TimeIndex(path, 50, 120)
    reopened.sanity_check(next_offset=61)
    with pytest.raises(CorruptIndexError, match="past the segment"):
        reopened.sanity_check(next_offset=60)


def test_time_index_truncate(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "x.timeindex", 0, 120)
    for i in range(1, 5):
        index.maybe_append(i * 100, i * 10)
    index.truncate_to(25)
    assert index.last_entry == TimestampOffset(200, 20)
