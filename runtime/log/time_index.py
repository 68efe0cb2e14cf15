"""The time index: a sparse map from timestamp to offset in one segment.

File ``<base offset, 20 digits>.timeindex``, a sequence of 12-byte entries, big-endian::

    timestamp        int64   the largest batch max-timestamp seen in the segment so far
    relative offset  int32   (offset of the batch holding that timestamp) - segment base offset

An entry is added together with each offset index entry, and once more when the segment stops
being active, but only when its timestamp is larger than the last entry's, so timestamps are
strictly increasing and offsets non-decreasing. `lookup(ts)` answers the entry with the largest
timestamp <= `ts`, or ``(-1, base offset)`` when there is none: where to start scanning for the
first record with timestamp >= `ts`.

Crash recovery: derived from the log, like the offset index; `sanity_check()` rejects partial
entries, non-increasing timestamps, decreasing or negative offsets (trailing zeros of a
preallocated file), and the loader rebuilds.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from typing import ClassVar

from runtime.log.errors import CorruptIndexError, InvalidOffsetError
from runtime.log.index_file import IndexFile

NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp: int
    offset: int


class TimeIndex(IndexFile):
    entry: ClassVar[struct.Struct] = struct.Struct(">qi")
    key_code: ClassVar[str] = "q"
    value_code: ClassVar[str] = "i"

    @property
    def last_entry(self) -> TimestampOffset:
        if not self._keys:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(self._keys[-1], self.base_offset + self._values[-1])

    def entry_at(self, slot: int) -> TimestampOffset:
        return TimestampOffset(self._keys[slot], self.base_offset + self._values[slot])

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)`` if `timestamp` is above the last entry's.

        Callers check `is_full` before appending in the normal path; the final entry written when
        a segment becomes inactive may exceed the capacity by one (the file is trimmed anyway).
        """
        keys = self._keys
        if not keys:
            if timestamp > NO_TIMESTAMP:
                self._append(timestamp, self.relative(offset))
            return
        relative = offset - self.base_offset
        if relative < self._values[-1]:
            raise InvalidOffsetError(
                f"time index {self.path}: offset {offset} below the last entry "
                f"{self.last_entry.offset}"
            )
        if timestamp > keys[-1]:
            self._append(timestamp, self.relative(offset))

    def lookup(self, timestamp: int) -> TimestampOffset:
        slot = bisect.bisect_right(self._keys, timestamp) - 1
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self.entry_at(slot)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= `offset`."""
        self._truncate_to_entries(bisect.bisect_left(self._values, offset - self.base_offset))

    def sanity_check(self, next_offset: int | None = None) -> None:
        self._check_file_length()
        if not self._keys:
            return
        if self._values[0] < 0:
            raise CorruptIndexError(f"{self.path}: negative relative offset")
        if not (self._strictly_increasing(self._keys) and self._non_decreasing(self._values)):
            raise CorruptIndexError(f"{self.path}: entries are out of order")
        if next_offset is not None and self.base_offset + self._values[-1] >= next_offset:
            raise CorruptIndexError(
                f"{self.path}: last entry names offset {self.base_offset + self._values[-1]}, "
                f"past the segment's end {next_offset}"
            )
