"""The transaction index: the aborted transactions whose ABORT markers lie in one segment.

File ``<base offset, 20 digits>.txnindex`` (Kafka's format), a sequence of 34-byte entries,
big-endian::

    version             int16   0
    producer id         int64
    first offset        int64   the transaction's first offset (maybe in an earlier segment)
    last offset         int64   the offset of its ABORT marker, in this segment
    last stable offset  int64   the partition's LSO once the transaction had completed

One entry per aborted transaction, appended when its ABORT marker is, so last offsets strictly
increase. The file is created with its first entry: a segment without aborted transactions has
none. A read_committed fetch asks the segments from the one holding the fetch offset onwards for
the aborted transactions overlapping the fetched range (`collect_aborted`), until one answers
that the search is complete: it saw an entry whose last stable offset is at or past the range's
end, and since the LSO only grows, every transaction starting before that end had completed by
then, so no later segment can hold one (Kafka's TxnIndexSearchResult.isComplete).

Memory: only the entry count, the file length and the last entry's last offset are kept; the
entries stay in the file and are read in chunks of `_READ_ENTRIES` (from the page cache) when
asked for. Not an in-memory list like the offset and time indexes, because those hold one 8- or
12-byte entry per ``index.interval.bytes`` of log, while an aborted transaction costs as little
as one small batch and its ~80-byte marker, so a misbehaving producer can make this index a
sizeable fraction of its log, and every segment of every partition is opened at start. Kafka
reads it from the file as well. The common case, a segment without aborted transactions, costs
no system call at all.

Crash recovery: the index is derived from the log. Entries are written with `os.pwrite` as they
come and fsynced with their segment (`flush`), so a crash can lose the newest entries or tear
the last one; every segment past the recovery point is recovered, which `reset()`s this index,
and the log's producer-state replay appends its entries again. `sanity_check()` rejects a length
that is not whole entries, an unknown version, a last offset below the segment's base offset or
not above the previous one, and a first offset above the last offset; the loader then recovers
the segment.

Not thread-safe: owned by its `LogSegment`, hence by one `Log` and its actor.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from runtime.log.errors import CorruptIndexError

CURRENT_VERSION: Final = 0
_ENTRY: Final = struct.Struct(">hqqqq")
ENTRY_SIZE: Final = _ENTRY.size  # 34
_LAST_OFFSET: Final = struct.Struct(">q")
_LAST_OFFSET_AT: Final = 2 + 8 + 8  # version, producer id, first offset
# Entries read per pread when scanning: about 4 KB, one page-cache page's worth.
_READ_ENTRIES: Final = 120


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction: data from `first_offset`, ABORT marker at `last_offset`."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return _ENTRY.pack(
            CURRENT_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> AbortedTxn:
        """One 34-byte entry; ValueError for another length or an unknown version."""
        if len(data) != ENTRY_SIZE:
            raise ValueError(f"an aborted transaction entry is {ENTRY_SIZE} bytes, not {len(data)}")
        version, producer_id, first, last, stable = _ENTRY.unpack(data)
        if version != CURRENT_VERSION:
            raise ValueError(f"unknown aborted transaction entry version {version}")
        return cls(producer_id, first, last, stable)


class TransactionIndex:
    """One segment's ``.txnindex`` (layout, memory and crash policy in the module docstring)."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        # Opened by the first read (read-only, so that `ketch dump-log` needs no write access)
        # or write (read-write, creating the file); a read-only handle is replaced at the first
        # write, so a read-only handle also means nothing was written since the file was opened.
        self._fd: int | None = None
        self._writable = False
        try:
            self._file_size = path.stat().st_size
        except FileNotFoundError:
            self._file_size = 0
        # Whole entries only: a torn last entry (a crash) is not counted, and the next append
        # overwrites it; `sanity_check` reports it through the length.
        self._entries = self._file_size // ENTRY_SIZE
        self._last_offset: int | None = None
        if self._entries:
            fd = os.open(path, os.O_RDONLY)
            try:
                at = (self._entries - 1) * ENTRY_SIZE + _LAST_OFFSET_AT
                (self._last_offset,) = _LAST_OFFSET.unpack(os.pread(fd, _LAST_OFFSET.size, at))
            finally:
                os.close(fd)

    def __repr__(self) -> str:
        return f"TransactionIndex(path={self.path}, entries={self._entries})"

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def last_offset(self) -> int | None:
        """The last offset (ABORT marker) of the newest entry, None when there is none: what
        `append` compares against, without reading the file."""
        return self._last_offset

    @property
    def size_bytes(self) -> int:
        return self._entries * ENTRY_SIZE

    # -- writes ---------------------------------------------------------------------------------

    def _writer(self) -> int:
        if self._fd is not None and not self._writable:
            os.close(self._fd)
            self._fd = None
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            self._writable = True
        return self._fd

    def _reader(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
            self._writable = False
        return self._fd

    def append(self, entry: AbortedTxn) -> None:
        """Add `entry` after the others. ValueError (a caller bug) when its last offset is not
        above the newest entry's or lies below the segment's base offset."""
        last = self._last_offset
        if last is not None and entry.last_offset <= last:
            raise ValueError(
                f"{self.path}: aborted transaction ending at {entry.last_offset} is not after "
                f"the last entry's {last}"
            )
        if entry.last_offset < self.base_offset:
            raise ValueError(
                f"{self.path}: aborted transaction ending at {entry.last_offset} is below the "
                f"segment's base offset {self.base_offset}"
            )
        data = entry.encode()
        fd = self._writer()
        at = self._entries * ENTRY_SIZE
        written = 0
        while written < ENTRY_SIZE:  # a short write (disk nearly full, a signal): the rest
            written += os.pwrite(fd, data[written:], at + written)
        self._entries += 1
        self._file_size = max(self._file_size, at + ENTRY_SIZE)
        self._last_offset = entry.last_offset

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose last offset is >= `offset` (truncation of the log)."""
        last = self._last_offset
        if last is None or last < offset:
            return  # the usual case: nothing to drop, no I/O
        keep = 0
        previous: int | None = None
        for entry in self.iter_entries():
            if entry.last_offset >= offset:
                break
            keep += 1
            previous = entry.last_offset
        self._cut(keep, previous)

    def reset(self) -> None:
        """Drop every entry (the segment is being recovered; replay re-adds them). The file, if
        any, stays with no entries, as Kafka's reset leaves it."""
        if self._file_size:  # else there is no file, or an empty one: nothing to drop
            self._cut(0, None)

    def _cut(self, entries: int, last_offset: int | None) -> None:
        size = entries * ENTRY_SIZE
        os.ftruncate(self._writer(), size)
        self._entries = entries
        self._file_size = size
        self._last_offset = last_offset

    # -- reads ----------------------------------------------------------------------------------

    def iter_entries(self) -> Iterator[AbortedTxn]:
        """The entries in file order, read lazily; CorruptIndexError at an entry of an unknown
        version. Do not change the index while iterating."""
        count = self._entries
        if not count:
            return
        fd = self._reader()
        slot = 0
        while slot < count:
            want = min(_READ_ENTRIES, count - slot)
            chunk = os.pread(fd, want * ENTRY_SIZE, slot * ENTRY_SIZE)
            if len(chunk) != want * ENTRY_SIZE:
                raise CorruptIndexError(f"{self.path}: shorter than its {count} entries")
            for version, producer_id, first, last, stable in _ENTRY.iter_unpack(chunk):
                if version != CURRENT_VERSION:
                    raise CorruptIndexError(
                        f"{self.path}: entry {slot} has unknown version {version}"
                    )
                yield AbortedTxn(producer_id, first, last, stable)
                slot += 1

    def all_entries(self) -> list[AbortedTxn]:
        return list(self.iter_entries())

    def collect_aborted(
        self, fetch_offset: int, upper_bound_offset: int
    ) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)`` (last
        offset >= `fetch_offset`, first offset < `upper_bound_offset`), and whether the search
        may stop at this segment: an entry with last stable offset >= `upper_bound_offset` was
        met (Kafka's collectAbortedTxns, which stops reading at that entry, as this does)."""
        found: list[AbortedTxn] = []
        for entry in self.iter_entries():
            if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
                found.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    # -- checks ---------------------------------------------------------------------------------

    def sanity_check(self) -> None:
        """Raises CorruptIndexError for a torn or malformed file (no file is a valid, empty
        index). Reads every entry, which only segments with aborted transactions have."""
        if self._file_size % ENTRY_SIZE:
            raise CorruptIndexError(
                f"{self.path}: length {self._file_size} is not a multiple of the entry size "
                f"{ENTRY_SIZE}"
            )
        previous: int | None = None
        for slot, entry in enumerate(self.iter_entries()):
            if entry.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"{self.path}: entry {slot} ends at {entry.last_offset}, below the segment's "
                    f"base offset {self.base_offset}"
                )
            if entry.first_offset > entry.last_offset:
                raise CorruptIndexError(
                    f"{self.path}: entry {slot} starts at {entry.first_offset}, after its end "
                    f"{entry.last_offset}"
                )
            if previous is not None and entry.last_offset <= previous:
                raise CorruptIndexError(
                    f"{self.path}: entry {slot} ends at {entry.last_offset}, not after the "
                    f"previous entry's {previous}"
                )
            previous = entry.last_offset

    # -- durability and lifecycle ---------------------------------------------------------------

    def flush(self) -> None:
        """fsync what was written (every write goes through the writable handle, so without
        one nothing was written since the file was opened)."""
        if self._fd is not None and self._writable:
            os.fsync(self._fd)

    def dup_handle(self) -> int | None:
        """A duplicate of the writable handle for an fsync from a worker thread (the caller
        closes it), or None when nothing was written through this index since it was opened."""
        return os.dup(self._fd) if self._fd is not None and self._writable else None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            self._writable = False

    def rename(self, new_path: Path) -> None:
        """Move the file, if there is one, to `new_path` (suffix changes of the segment); the
        open handle, if any, stays valid."""
        with contextlib.suppress(FileNotFoundError):  # no file: no aborted transaction yet
            os.replace(self.path, new_path)
        self.path = new_path

    def delete(self) -> None:
        self.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
