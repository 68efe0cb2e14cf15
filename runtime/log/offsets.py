"""Values the log hands to its callers: offset metadata for fetch planning, read and append results.

`LogOffsetMetadata` pins an offset to a physical place (segment base offset + byte position), as
Kafka's class does, so DelayedFetch can tell how many bytes lie between a fetch position and the
high watermark or LEO without touching the disk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple

UNKNOWN_OFFSET: Final = -1
UNKNOWN_SEGMENT_BASE_OFFSET: Final = -1
UNKNOWN_POSITION: Final = -1


@dataclass(frozen=True, slots=True)
class LogOffsetMetadata:
    message_offset: int
    segment_base_offset: int = UNKNOWN_SEGMENT_BASE_OFFSET
    relative_position: int = UNKNOWN_POSITION

    @property
    def message_offset_only(self) -> bool:
        return self.segment_base_offset == UNKNOWN_SEGMENT_BASE_OFFSET

    def on_older_segment(self, other: LogOffsetMetadata) -> bool:
        self._require_known(other)
        return self.segment_base_offset < other.segment_base_offset

    def on_same_segment(self, other: LogOffsetMetadata) -> bool:
        self._require_known(other)
        return self.segment_base_offset == other.segment_base_offset

    def position_diff(self, other: LogOffsetMetadata) -> int:
        """Bytes from `other` to this position; both must be on the same segment."""
        if not self.on_same_segment(other):
            raise ValueError(f"{self} and {other} are on different segments")
        return self.relative_position - other.relative_position

    def _require_known(self, other: LogOffsetMetadata) -> None:
        if self.message_offset_only or other.message_offset_only:
            raise ValueError(f"segment unknown in {self} or {other}")


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """What a read returns: where it started and whole batches (possibly none)."""

    fetch_offset_metadata: LogOffsetMetadata
    # A view of the bytes read when the read was cut to whole batches (no copy of the prefix).
    records: bytes | memoryview
    first_entry_incomplete: bool = False  # the first batch did not fit and min_one was off


class LogAppendInfo(NamedTuple):
    """Result of an append: offsets assigned (leader) or found (follower), and sizes.

    A NamedTuple rather than a frozen dataclass because one is built per append on the produce
    path, where a frozen dataclass's field-by-field `object.__setattr__` costs about a microsecond.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    valid_bytes: int
    batch_count: int
    record_count: int

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
