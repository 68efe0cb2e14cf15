"""The offset index: a sparse map from offset to byte position in one segment's `.log` file.

File ``<base offset, 20 digits>.index``, a sequence of 8-byte entries, big-endian::

    relative offset  int32   offset - segment base offset
    position         int32   byte position in the .log file of the batch holding that offset

An entry is added when more than ``index.interval.bytes`` were appended since the previous one; it
holds the *last* offset of the batch and the position where that batch starts (Kafka's choice, so
a lookup of any offset at or above the entry can start scanning at that position). Entries are
strictly increasing in both fields. No entry ever points at position 0 (an entry is only added
after more than index.interval.bytes >= 0 bytes precede the batch), so an all-zero entry is
unused preallocated space.

`lookup(offset)` answers the entry with the largest offset <= the target, or
``(base offset, 0)`` when there is none: the place to start scanning the log.

Crash recovery: the index is derived from the log. `sanity_check()` rejects a file whose length is
not whole entries, negative or non-increasing fields (as trailing zeros of a preallocated file left
by a crash are), and an entry past the end of the log; the loader then rebuilds the index.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from runtime.log.errors import CorruptIndexError, InvalidOffsetError
from runtime.log.index_file import INT32_MAX, IndexFile


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    offset: int
    position: int


class OffsetIndex(IndexFile):
    entry: ClassVar[struct.Struct] = struct.Struct(">ii")
    key_code: ClassVar[str] = "i"
    value_code: ClassVar[str] = "i"

    @property
    def last_offset(self) -> int:
        """Offset of the last entry, or the base offset when empty (as Kafka's lastOffset)."""
        return self.base_offset + self._keys[-1] if self._keys else self.base_offset

    @property
    def last_position(self) -> int:
        return self._values[-1] if self._values else 0

    def entry_at(self, slot: int) -> OffsetPosition:
        return OffsetPosition(self.base_offset + self._keys[slot], self._values[slot])

    def append(self, offset: int, position: int) -> None:
        keys = self._keys
        relative = offset - self.base_offset
        if keys and relative <= keys[-1]:
            raise InvalidOffsetError(
                f"index {self.path}: offset {offset} is not above the last entry {self.last_offset}"
            )
        if not 0 <= relative <= INT32_MAX:
            self.relative(offset)  # raises OffsetOverflowError with the details
        values = self._values
        assert not values or position > values[-1], (position, self.last_position)
        keys.append(relative)
        values.append(position)

    def unchecked_appenders(self) -> tuple[Callable[[int], None], Callable[[int], None]]:
        """The bound ``append`` of the relative-offset array and of the position array, for the
        segment's fast append path: it checks the range itself, and order holds there by
        construction (offsets and positions only grow between the checked appends that arm
        it). An entry is added on nearly every produce request, where `append`'s checks and
        call cost more than the entry. The arrays live as long as the index (truncation
        deletes in place), so the bound methods stay valid."""
        return self._keys.append, self._values.append

    def lookup(self, offset: int) -> OffsetPosition:
        slot = bisect.bisect_right(self._keys, offset - self.base_offset) - 1
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self.entry_at(slot)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= `offset`."""
        self._truncate_to_entries(bisect.bisect_left(self._keys, offset - self.base_offset))

    def sanity_check(self, log_size: int) -> None:
        self._check_file_length()
        if not self._keys:
            return
        if self._keys[0] < 0 or self._values[0] < 0:
            raise CorruptIndexError(f"{self.path}: negative first entry")
        if not (self._strictly_increasing(self._keys) and self._strictly_increasing(self._values)):
            raise CorruptIndexError(f"{self.path}: entries are not strictly increasing")
        if self._values[-1] >= log_size:
            raise CorruptIndexError(
                f"{self.path}: last entry points at byte {self._values[-1]}, "
                f"past the log's {log_size} bytes"
            )
