"""One log segment: a `.log` file of record batches and its offset, time and transaction indexes.

Long because one segment's file, its indexes and the produce fast path's cached limits are
one piece of state: every method that changes the segment must disarm that fast path
(`_fast_index_room = 0`) or re-arm it, which can only be checked with all of them in one class.
The index files (`offset_index`, `time_index`, `transaction_index`) and the batch walk over
the file (`file_batches`) already live apart.

Files, named by the segment's base offset as 20 zero-padded digits (``00000000000000000042``):

* ``.log`` — RecordBatch v2 batches (layout in `wire.records`), concatenated, nothing else. The
  base offset is <= the first offset in the file and > every offset of the previous segment.
* ``.index`` — see `runtime.log.offset_index`; ``.timeindex`` — see `runtime.log.time_index`.
* ``.txnindex`` — the aborted transactions whose ABORT markers lie in this segment, see
  `runtime.log.transaction_index`; written by the `Log` (which knows the LSO), created with the
  first entry, so most segments have none. Every operation on all of a segment's files (suffix
  changes, truncation, flush, close, deletion, recovery, sanity check) covers it here.

During swaps and deletion every file of a segment carries one more suffix: ``.cleaned``,
``.swap`` or ``.deleted`` (handled by `runtime.log.recovery`).

Appends add one offset index entry (and maybe a time index entry) when more than
``index.interval.bytes`` were written since the last one, as Kafka's LogSegment does. A segment
holds at most 2^31-1 bytes and relative offsets up to 2^31-1, the limits of the 4-byte index
fields. The produce path appends through `append_unless_roll`, whose fast path skips the checks
that cannot have changed since the last full one (see there). Crash policy: `recover()`
re-validates every batch, truncates at the first bad or torn one and rebuilds the offset and time
indexes (the transaction index it empties, see there); `sanity_check()` is the cheap test a
cleanly closed segment must pass.

Not thread-safe: owned by one `Log`, hence one actor (or a loader thread before publication).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from runtime.clock import Clock
from runtime.log.config import LogConfig
from runtime.log.epoch_cache import LeaderEpochCache
from runtime.log.errors import CorruptIndexError
from runtime.log.file_batches import FileBatches
from runtime.log.index_file import INT32_MAX
from runtime.log.offset_index import OffsetIndex
from runtime.log.offsets import FetchDataInfo, LogOffsetMetadata, TimestampAndOffset
from runtime.log.time_index import NO_TIMESTAMP, TimeIndex
from runtime.log.transaction_index import TransactionIndex
from wire.record_reader import iter_records
from wire.records import LOG_OVERHEAD, BatchHeader

LOG_SUFFIX: Final = ".log"
INDEX_SUFFIX: Final = ".index"
TIME_INDEX_SUFFIX: Final = ".timeindex"
TXN_INDEX_SUFFIX: Final = ".txnindex"
DELETED_SUFFIX: Final = ".deleted"
CLEANED_SUFFIX: Final = ".cleaned"
SWAP_SUFFIX: Final = ".swap"
_LENGTH_AT: Final = 8


def file_name_prefix(base_offset: int) -> str:
    return f"{base_offset:020d}"


def offset_from_file_name(name: str) -> int:
    """Base offset from a segment file name; raises ValueError for other names."""
    prefix = name.split(".", 1)[0]
    if len(prefix) != 20 or not prefix.isdigit():
        raise ValueError(f"{name!r} is not a segment file name")
    return int(prefix)


def whole_batches_prefix(data: bytes | memoryview) -> int:
    """Length of the longest prefix of `data` made of complete batches (by their length fields)."""
    pos = 0
    while pos + LOG_OVERHEAD <= len(data):
        size = int.from_bytes(data[pos + _LENGTH_AT : pos + LOG_OVERHEAD], "big") + LOG_OVERHEAD
        if pos + size > len(data):
            break
        pos += size
    return pos


@dataclass(frozen=True, slots=True)
class SegmentRecovery:
    truncated_bytes: int
    reason: str | None  # why the scan stopped early, None when the whole file was valid
    position: int | None


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        clock: Clock,
        *,
        suffix: str = "",
        roll_jitter_ms: int = 0,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.suffix = suffix
        self._config = config
        self._clock = clock
        self._roll_jitter_ms = roll_jitter_ms
        # Fixed for the segment's life (its config never changes), read on every append.
        self._roll_after_ms = config.segment_ms - roll_jitter_ms
        self._segment_bytes = config.segment_bytes
        self._index_interval_bytes = config.index_interval_bytes
        prefix = directory / file_name_prefix(base_offset)
        self.log_path = Path(f"{prefix}{LOG_SUFFIX}{suffix}")
        self.offset_index = OffsetIndex(
            Path(f"{prefix}{INDEX_SUFFIX}{suffix}"), base_offset, config.segment_index_bytes
        )
        self.time_index = TimeIndex(
            Path(f"{prefix}{TIME_INDEX_SUFFIX}{suffix}"), base_offset, config.segment_index_bytes
        )
        self.txn_index = TransactionIndex(Path(f"{prefix}{TXN_INDEX_SUFFIX}{suffix}"), base_offset)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        self._created_ms = clock.wall_ms()
        # For retention of a segment without record timestamps: the file's mtime when opened,
        # then the injected clock at each such append (so simulated time governs it too).
        self._last_modified_ms = (
            os.fstat(self._fd).st_mtime_ns // 1_000_000 if self._size else self._created_ms
        )
        self._bytes_since_last_index_entry = self._size - self.offset_index.last_position
        self._max_ts: int | None = None  # largest batch max-timestamp; loaded lazily
        self._offset_of_max_ts = base_offset
        self._rolling_based_ts: int | None = None
        self._rolling_ts_loaded = False
        # Positive only while every condition `append_unless_roll` skips is known to hold (see
        # there): then it is a lower bound of the free entries in either index, spent by one per
        # index entry. Any other change to the segment zeroes it, and the next append, through
        # the full checks, re-arms it. Zero is always safe.
        self._fast_index_room = 0
        self._fast_timestamp_limit = -1
        self._fast_offset_limit = -1
        self._fast_time_indexed_ts = NO_TIMESTAMP
        self._fast_size_limit = -1
        self._fast_max_ts = NO_TIMESTAMP
        self._fast_append_index_offset, self._fast_append_index_position = (
            self.offset_index.unchecked_appenders()
        )

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, size={self._size}, path={self.log_path})"
        )

    # -- sizes and offsets ----------------------------------------------------------------------

    @property
    def size(self) -> int:
        return self._size

    @property
    def roll_jitter_ms(self) -> int:
        return self._roll_jitter_ms

    def read_next_offset(self) -> int:
        """One past the last offset in the segment (the base offset when empty).

        Scans batch headers from the last offset index entry to the end of the file.
        """
        next_offset = self.base_offset
        scan = FileBatches(self._fd, self.offset_index.last_position, self._size, validate=False)
        for _, header, _ in scan:
            next_offset = header.next_offset
        return next_offset

    def _load_max_timestamp(self) -> None:
        last = self.time_index.last_entry
        max_ts, offset_of_max = last.timestamp, last.offset
        scan = FileBatches(self._fd, self.offset_index.last_position, self._size, validate=False)
        for _, header, _ in scan:
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, header.last_offset
        self._max_ts, self._offset_of_max_ts = max_ts, offset_of_max

    @property
    def max_timestamp_so_far(self) -> int:
        if self._max_ts is None:
            self._load_max_timestamp()
        assert self._max_ts is not None
        return self._max_ts

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        if self._max_ts is None:
            self._load_max_timestamp()
        return self._offset_of_max_ts

    @property
    def largest_timestamp(self) -> int:
        """Largest record timestamp, or the file's modification time when no batch has one."""
        max_ts = self.max_timestamp_so_far
        return max_ts if max_ts >= 0 else self.last_modified_ms

    @property
    def last_modified_ms(self) -> int:
        return self._last_modified_ms

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= INT32_MAX

    # -- append ---------------------------------------------------------------------------------

    def append(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        chunks: Sequence[bytes | bytearray | memoryview],
        size: int,
    ) -> None:
        """Append whole batches given as `chunks` (`size` bytes in all), written with one
        vectored write; the caller has validated them and assigned their offsets."""
        if not size:
            return
        position = self._size
        assert 0 <= largest_offset - self.base_offset <= INT32_MAX, (largest_offset, self)
        assert position + size <= INT32_MAX, "segment larger than an index position allows"
        if position == 0:
            self._rolling_based_ts = largest_timestamp
            self._rolling_ts_loaded = True
        if largest_timestamp < 0:
            self._last_modified_ms = self._clock.wall_ms()
        self._write(chunks, size, position)
        max_ts = self._max_ts
        if max_ts is None:
            max_ts = self.max_timestamp_so_far
        if largest_timestamp > max_ts:
            max_ts = self._max_ts = largest_timestamp
            self._offset_of_max_ts = offset_of_max_timestamp
        if self._bytes_since_last_index_entry > self._index_interval_bytes:
            self._add_index_entries(largest_offset, position, size)
        else:
            self._bytes_since_last_index_entry += size
        self._fast_index_room = self._fast_append_room()

    def append_unless_roll(
        self,
        largest_offset: int,
        largest_timestamp: int,
        offset_of_max_timestamp: int,
        chunks: Sequence[bytes | bytearray | memoryview],
        size: int,
    ) -> bool:
        """`should_roll`, then `append` when no roll is due; False (nothing appended) when the
        segment must roll first.

        Why this exists: it is the produce hot path, where `should_roll` + `append` cost more
        Python than the CRC of a 16 KB batch. The conditions that only change when an index
        entry is added or the segment is otherwise changed (non-empty, rolling timestamp and
        max timestamp loaded and usable, room in the indexes) are folded into
        `_fast_index_room` and limits set when it is armed, so an append checks only what each
        batch can change (size, relative offset, age by timestamp) and writes. Anything else
        takes the full checks; both paths leave the segment in the same state (tested).
        """
        position = self._size
        if not (
            self._fast_index_room > 0
            and 0 <= largest_timestamp <= self._fast_timestamp_limit
            and position <= self._fast_size_limit - size
            and self.base_offset <= largest_offset <= self._fast_offset_limit
        ):
            if self.should_roll(size, largest_timestamp, largest_offset, self._clock):
                return False
            self.append(largest_offset, largest_timestamp, offset_of_max_timestamp, chunks, size)
            return True
        written = os.pwritev(self._fd, chunks, position)
        if written < size:
            self._finish_write(chunks, written, size, position)
        self._size = position + size
        max_ts = self._fast_max_ts
        if largest_timestamp > max_ts:
            self._max_ts = self._fast_max_ts = max_ts = largest_timestamp
            self._offset_of_max_ts = offset_of_max_timestamp
        if self._bytes_since_last_index_entry > self._index_interval_bytes:
            # `_add_index_entries`, inlined (with 16 KB batches and Kafka's 4 KB interval, every
            # append adds an entry). The time index call is skipped when it would add nothing:
            # since arming, this path is the only writer of the time index, so the time index's
            # last timestamp is `_fast_time_indexed_ts`.
            self._fast_append_index_offset(largest_offset - self.base_offset)
            self._fast_append_index_position(position)
            if max_ts > self._fast_time_indexed_ts:
                self.time_index.maybe_append(max_ts, self._offset_of_max_ts)
                self._fast_time_indexed_ts = max_ts
            self._bytes_since_last_index_entry = size
            self._fast_index_room -= 1
        else:
            self._bytes_since_last_index_entry += size
        return True

    def _fast_append_room(self) -> int:
        """Arm `append_unless_roll`'s fast path: returns the free entries in the fuller index when
        the slowly changing part of `should_roll` is false and `append`'s branches are the
        common ones (non-empty, rolling and max timestamps loaded and >= 0), else 0; sets the
        limits the fast path compares against."""
        rolling = self._rolling_based_ts
        max_ts = self._max_ts
        if not (
            self._size > 0
            and self._rolling_ts_loaded
            and rolling is not None
            and rolling >= 0
            and max_ts is not None
        ):
            return 0
        # should_roll's age test, `timestamp - rolling > roll_after_ms`, turned into a limit.
        self._fast_timestamp_limit = rolling + self._roll_after_ms
        self._fast_offset_limit = self.base_offset + INT32_MAX
        # Past INT32_MAX `append` asserts; the full path gets there, the fast one never does.
        self._fast_size_limit = min(self._segment_bytes, INT32_MAX)
        self._fast_max_ts = max_ts  # `_max_ts` without its None (the fast path keeps both)
        self._fast_time_indexed_ts = self.time_index.last_entry.timestamp
        offsets, times = self.offset_index, self.time_index
        self._fast_append_index_offset, self._fast_append_index_position = (
            offsets.unchecked_appenders()
        )
        return max(0, min(offsets.max_entries - offsets.entries, times.max_entries - times.entries))

    def _write(self, chunks: Sequence[bytes | bytearray | memoryview], size: int, at: int) -> None:
        written = os.pwritev(self._fd, chunks, at)
        if written < size:
            self._finish_write(chunks, written, size, at)
        self._size = at + size

    def _finish_write(
        self, chunks: Sequence[bytes | bytearray | memoryview], written: int, size: int, at: int
    ) -> None:
        """After a short write (disk full, signal): write the rest from a joined copy."""
        joined = memoryview(b"".join(chunks))
        while written < size:
            written += os.pwrite(self._fd, joined[written:], at + written)

    def _add_index_entries(self, largest_offset: int, position: int, size: int) -> None:
        """An offset index entry for the batches just written at `position` (and a time index
        entry when the max timestamp grew): more than index.interval.bytes preceded them."""
        self.offset_index.append(largest_offset, position)
        self.time_index.maybe_append(self.max_timestamp_so_far, self._offset_of_max_ts)
        self._bytes_since_last_index_entry = size

    # -- lookups ------------------------------------------------------------------------------

    def translate_offset(self, offset: int, starting_position: int = 0) -> tuple[int, int] | None:
        """``(position, size)`` of the first batch whose last offset is >= `offset`, or None."""
        start = max(self.offset_index.lookup(offset).position, starting_position)
        for position, header, _ in FileBatches(self._fd, start, self._size, validate=False):
            if header.last_offset >= offset:
                return position, header.size_bytes
        return None

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_position: int | None = None,
        min_one: bool = False,
    ) -> FetchDataInfo | None:
        """Whole batches from the first one holding an offset >= `start_offset`.

        At most `max_bytes` (but the first batch regardless when `min_one`), never past
        `max_position`. None when no batch of this segment reaches `start_offset`.
        """
        if max_bytes < 0:
            raise ValueError(f"negative max_bytes {max_bytes}")
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        position, first_size = found
        metadata = LogOffsetMetadata(start_offset, self.base_offset, position)
        limit = self._size if max_position is None else min(max_position, self._size)
        budget = max(max_bytes, first_size) if min_one else max_bytes
        want = min(limit - position, budget)
        if want <= 0:
            return FetchDataInfo(metadata, b"", first_entry_incomplete=budget < first_size)
        data = os.pread(self._fd, want, position)
        end = whole_batches_prefix(data)
        records = memoryview(data)[:end] if end < len(data) else data
        return FetchDataInfo(metadata, records, budget < first_size)

    def batch_headers_from(self, offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch whose last offset is >= `offset`, headers only."""
        start = self.offset_index.lookup(offset).position
        for position, header, _ in FileBatches(self._fd, start, self._size, validate=False):
            if header.last_offset >= offset:
                yield position, header

    def read_batch_at(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def find_offset_by_timestamp(
        self, timestamp: int, starting_offset: int
    ) -> TimestampAndOffset | None:
        """The first record with timestamp >= `timestamp` and offset >= `starting_offset`."""
        hint = self.time_index.lookup(timestamp)
        start = self.offset_index.lookup(max(hint.offset, starting_offset)).position
        for position, header, _ in FileBatches(self._fd, start, self._size, validate=False):
            if header.max_timestamp < timestamp or header.last_offset < starting_offset:
                continue
            batch = self.read_batch_at(position, header.size_bytes)
            for record in iter_records(batch, verify_crc=False):
                if record.timestamp >= timestamp and record.offset >= starting_offset:
                    return TimestampAndOffset(record.timestamp, record.offset)
        return None

    # -- rolling --------------------------------------------------------------------------------

    def _rolling_based_timestamp(self) -> int | None:
        if not self._rolling_ts_loaded:
            self._rolling_ts_loaded = True
            for _, header, _ in FileBatches(self._fd, 0, self._size, validate=False):
                self._rolling_based_ts = header.max_timestamp
                break
        return self._rolling_based_ts

    def time_waited_for_roll(self, clock: Clock, message_timestamp: int) -> int:
        """Age of the segment for segment.ms: by record timestamps when they exist (as Kafka),
        else by the injected clock since the segment was opened."""
        rolling = self._rolling_based_ts if self._rolling_ts_loaded else None
        if rolling is None:
            rolling = self._rolling_based_timestamp()
        if rolling is not None and rolling >= 0:
            return message_timestamp - rolling
        return clock.wall_ms() - self._created_ms

    def should_roll(
        self, batch_bytes: int, max_timestamp: int, max_offset: int, clock: Clock
    ) -> bool:
        size = self._size
        relative = max_offset - self.base_offset
        if size == 0:
            # An empty segment takes any batch, even one larger than segment.bytes.
            return not 0 <= relative <= INT32_MAX
        config = self._config
        return (
            size > config.segment_bytes - batch_bytes
            or not 0 <= relative <= INT32_MAX
            or self.offset_index.is_full
            or self.time_index.is_full
            or self.time_waited_for_roll(clock, max_timestamp) > self._roll_after_ms
        )

    def on_become_inactive(self) -> None:
        """Roll: record the final max timestamp and trim both indexes to their entries."""
        self._fast_index_room = 0
        self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far)
        self.offset_index.trim()
        self.time_index.trim()

    def make_active(self) -> None:
        self._fast_index_room = 0
        self.offset_index.preallocate(self._config.segment_index_bytes)
        self.time_index.preallocate(self._config.segment_index_bytes)

    # -- recovery and truncation ------------------------------------------------------------------

    def recover(self, epoch_cache: LeaderEpochCache | None = None) -> SegmentRecovery:
        """Revalidate every batch, truncate at the first bad one, rebuild the offset and time
        indexes, and empty the transaction index.

        The transaction index is emptied, not rebuilt, as Kafka resets it when recovering a
        segment: its entries need the LSO after each abort, which only the producer state knows.
        The `Log` replays the recovered segments into its producer state after loading, and that
        replay appends their aborted transactions again.
        """
        self._fast_index_room = 0
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()
        valid = 0
        last_index_entry = 0
        max_ts, offset_of_max = NO_TIMESTAMP, self.base_offset
        next_offset = self.base_offset
        scan = FileBatches(self._fd, 0, self._size, validate=True)
        reason: str | None = None
        stop_at: int | None = None
        for position, header, _ in scan:
            if header.base_offset < next_offset or not self.can_convert_to_relative_offset(
                header.last_offset
            ):
                reason = (
                    f"batch offsets {header.base_offset}..{header.last_offset} out of order "
                    f"(expected >= {next_offset} within segment {self.base_offset})"
                )
                stop_at = position
                break
            if header.max_timestamp > max_ts:
                max_ts, offset_of_max = header.max_timestamp, header.last_offset
            if valid - last_index_entry > self._config.index_interval_bytes:
                self.offset_index.append(header.last_offset, valid)
                self.time_index.maybe_append(max_ts, offset_of_max)
                last_index_entry = valid
            valid += header.size_bytes
            next_offset = header.next_offset
            epoch = header.partition_leader_epoch
            if epoch_cache is not None and epoch >= 0:
                latest = epoch_cache.latest_epoch
                if latest is None or epoch > latest:
                    epoch_cache.assign(epoch, header.base_offset)
        if reason is None and scan.error is not None:
            reason, stop_at = scan.error, scan.error_position
        truncated = self._size - valid
        if truncated:
            os.ftruncate(self._fd, valid)
            self._size = valid
        self._max_ts, self._offset_of_max_ts = max_ts, offset_of_max
        self._bytes_since_last_index_entry = valid - last_index_entry
        self._rolling_ts_loaded = False
        self.time_index.maybe_append(max_ts, offset_of_max)
        self.offset_index.trim()
        self.time_index.trim()
        return SegmentRecovery(truncated, reason, stop_at)

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= `offset`; returns the bytes removed."""
        self._fast_index_room = 0
        found = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        # The aborted transactions whose markers are cut off go too.
        self.txn_index.truncate_to(offset)
        if found is None:
            return 0
        position = found[0]
        truncated = self._size - position
        os.ftruncate(self._fd, position)
        self._size = position
        self._bytes_since_last_index_entry = self._size - self.offset_index.last_position
        self._max_ts = None
        self._rolling_ts_loaded = False
        self._rolling_based_ts = None
        return truncated

    def sanity_check(self) -> None:
        """Cheap checks for a cleanly closed segment; raises CorruptIndexError.

        Beyond the indexes' own checks, the first and last offset index entries must each point
        at a batch whose last offset they name, and the batches after the last entry must parse.
        A missing transaction index is an empty one (it is created with its first entry).
        """
        if not self.offset_index.path.exists() or not self.time_index.path.exists():
            raise CorruptIndexError(f"index files of {self.log_path} are missing")
        self.offset_index.sanity_check(self._size)
        self.time_index.sanity_check()
        self.txn_index.sanity_check()
        index = self.offset_index
        if index.entries:
            self._check_entry_points_at_batch(index.entry_at(0).offset, index.entry_at(0).position)
        scan = FileBatches(self._fd, index.last_position, self._size, validate=False)
        next_offset = self.base_offset
        for position, header, _ in scan:
            at_last_entry = index.entries > 0 and position == index.last_position
            if at_last_entry and header.last_offset != index.last_offset:
                raise CorruptIndexError(
                    f"{index.path}: last entry names offset {index.last_offset}, the batch "
                    f"at byte {position} ends at {header.last_offset}"
                )
            next_offset = header.next_offset
        if scan.error is not None:
            raise CorruptIndexError(f"{self.log_path}: {scan.error} at byte {scan.error_position}")
        self.time_index.sanity_check(next_offset)

    def _check_entry_points_at_batch(self, offset: int, position: int) -> None:
        for _, header, _ in FileBatches(self._fd, position, self._size, validate=False):
            if header.last_offset == offset:
                return
            break
        raise CorruptIndexError(
            f"{self.offset_index.path}: entry {offset} -> byte {position} names no batch"
        )

    # -- durability and lifecycle -----------------------------------------------------------------

    def flush(self) -> None:
        os.fsync(self._fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def prepare_flush(self) -> list[int]:
        """Write pending index entries and return duplicated handles of the segment's files to
        fsync from a worker thread; the caller closes them. Duplicates keep the files alive even
        if the segment is deleted meanwhile. The transaction index writes its entries as they
        come; it has a handle only when it was written since it was opened."""
        self.offset_index.write_pending()
        self.time_index.write_pending()
        handles = [os.dup(self._fd)]
        handles.extend(index.dup_handle() for index in (self.offset_index, self.time_index))
        txn_handle = self.txn_index.dup_handle()
        if txn_handle is not None:
            handles.append(txn_handle)
        return handles

    def close(self) -> None:
        self._fast_index_room = 0
        if self._fd < 0:
            return
        if self._size:
            self.time_index.maybe_append(
                self.max_timestamp_so_far, self.offset_of_max_timestamp_so_far
            )
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        os.close(self._fd)
        self._fd = -1

    def close_handles(self) -> None:
        """Release file handles without trimming (before deleting the files)."""
        self._fast_index_room = 0
        self.offset_index.close_handle()
        self.time_index.close_handle()
        self.txn_index.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def change_suffix(self, old: str, new: str) -> None:
        """Rename all the segment's files from suffix `old` to `new` (e.g. "" -> ".deleted")."""
        assert self.suffix == old, (self.suffix, old)
        for index in (self.offset_index, self.time_index):
            renamed = _replace_suffix(index.path, old, new)
            if index.path.exists():
                index.rename_to(renamed)
            else:
                index.path = renamed
        self.txn_index.rename(_replace_suffix(self.txn_index.path, old, new))
        renamed_log = _replace_suffix(self.log_path, old, new)
        os.replace(self.log_path, renamed_log)
        self.log_path = renamed_log
        self.suffix = new

    def delete_files(self) -> None:
        self.close_handles()
        for path in (self.log_path, self.offset_index.path, self.time_index.path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self.txn_index.delete()


def _replace_suffix(path: Path, old: str, new: str) -> Path:
    name = path.name
    assert name.endswith(old), (name, old)
    return path.with_name(name[: len(name) - len(old)] + new)
