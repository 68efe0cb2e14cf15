"""What the offset index and the time index share: a file of fixed-size big-endian entries.

Kafka memory-maps its index files. Here the entries live in two typed arrays in memory (a few bytes
per entry, binary-searched with `bisect`) and the file is written from them:

* A writable (active) index file is preallocated to ``segment.index.bytes`` rounded down to a
  whole entry, as Kafka does, so the file shows its capacity; `trim()` (on roll and on close) cuts
  it back to the valid entries.
* Appends only touch memory; `flush()` writes the entries not yet on disk and fsyncs. This is the
  same durability as Kafka's mmap, whose dirty pages also reach the disk only on flush or
  write-back: an index is derived data, and every segment past the recovery point is rebuilt from
  its log after an unclean shutdown.
* Truncation overwrites the dropped entries with zeros, so a crash cannot resurrect stale entries
  that happen to look ordered; zeros after a real entry fail `sanity_check()`.

On open, the whole entries of the file are loaded except a tail of zero entries, which is the
unused part of a preallocated file that a crash left untrimmed (an all-zero entry is never a real
one). Zero entries followed by real ones are loaded and fail the sanity check.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import struct
from array import array
from pathlib import Path
from typing import ClassVar

from runtime.log.errors import CorruptIndexError, OffsetOverflowError

INT32_MAX = 2**31 - 1


def read_written(path: Path) -> tuple[bytes, int]:
    """The file's bytes up to where its trailing hole starts, and its size (b"", 0 if absent).

    A preallocated index is extended with ftruncate, so its unused tail is a hole on file
    systems that have them (ext4, xfs, tmpfs): reading and scanning it would cost ~10 ms per
    10 MB index at every start after a crash, for nothing but zeros. If data follows the first
    hole (never written so by this module, but possible in a damaged file), or the file system
    cannot say, the whole file is read, so such data still fails the sanity check."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return b"", 0
    try:
        size = os.fstat(fd).st_size
        end = size
        with contextlib.suppress(OSError):  # no SEEK_HOLE here: read it all
            hole = os.lseek(fd, 0, os.SEEK_HOLE)
            try:
                os.lseek(fd, hole, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after the hole, which runs to the end
                end = hole
        os.lseek(fd, 0, os.SEEK_SET)  # the probes above moved the offset
        with os.fdopen(os.dup(fd), "rb") as file:
            return file.read(end), size
    finally:
        os.close(fd)


class IndexFile:
    """Base of `OffsetIndex` and `TimeIndex`: entries are ``(key, value)`` pairs in two arrays.

    Not thread-safe: one owner (the log's actor, or a loader thread before the log is published).
    """

    entry: ClassVar[struct.Struct]
    key_code: ClassVar[str]
    value_code: ClassVar[str]

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._max_entries = max(1, max_index_size // self.entry.size)
        self._keys: array[int] = array(self.key_code)
        self._values: array[int] = array(self.value_code)
        self._on_disk = 0  # entries [0, _on_disk) are written to the file
        self._fd: int | None = None
        self._file_size = 0
        raw, size = read_written(path)
        self._raw_size = size
        # Skip the zero tail of a preallocated file that was never trimmed (a crash): a zero
        # entry is never a real one (position 0 is never indexed, see the subclasses), and
        # unpacking megabytes of zeros would cost more than the rest of loading.
        used = len(raw.rstrip(b"\0"))
        used += -used % self.entry.size
        whole = min(used, size - size % self.entry.size)
        for key, value in self.entry.iter_unpack(raw[:whole]):
            self._keys.append(key)
            self._values.append(value)
        self._on_disk = len(self._keys)
        self._file_size = size

    # -- sizes -------------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return len(self._keys)

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def is_full(self) -> bool:
        return len(self._keys) >= self._max_entries

    @property
    def size_bytes(self) -> int:
        """Bytes of valid entries (the file may be larger while preallocated)."""
        return len(self._keys) * self.entry.size

    def relative(self, offset: int) -> int:
        rel = offset - self.base_offset
        if not 0 <= rel <= INT32_MAX:
            raise OffsetOverflowError(
                f"offset {offset} does not fit a relative offset of segment {self.base_offset}"
            )
        return rel

    # -- file handling -------------------------------------------------------------------------

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        return self._fd

    def preallocate(self, max_index_size: int) -> None:
        """Make this the active segment's index: capacity from `max_index_size`, file that big."""
        self._max_entries = max(1, max_index_size // self.entry.size)
        target = max(self._max_entries, len(self._keys)) * self.entry.size
        fd = self._open()
        if self._file_size != target:
            self._write_pending(fd)
            os.ftruncate(fd, target)
            self._file_size = target

    def _write_pending(self, fd: int) -> None:
        count = len(self._keys)
        if self._on_disk >= count:
            return
        pack = self.entry.pack
        chunk = b"".join(pack(self._keys[i], self._values[i]) for i in range(self._on_disk, count))
        os.pwrite(fd, chunk, self._on_disk * self.entry.size)
        self._file_size = max(self._file_size, count * self.entry.size)
        self._on_disk = count

    def flush(self) -> None:
        """Write entries not yet on disk and fsync (no-op when nothing changed)."""
        if self._fd is None and self._on_disk == len(self._keys) and self.path.exists():
            return
        fd = self._open()
        self._write_pending(fd)
        os.fsync(fd)

    def write_pending(self) -> None:
        """Write entries not yet on disk, without fsync."""
        self._write_pending(self._open())

    def dup_handle(self) -> int:
        return os.dup(self._open())

    def trim(self) -> None:
        """Cut the file to its valid entries (on roll and close) and write what is pending."""
        fd = self._open()
        self._write_pending(fd)
        valid = len(self._keys) * self.entry.size
        if self._file_size != valid:
            os.ftruncate(fd, valid)
            self._file_size = valid
        self._max_entries = max(self._max_entries, len(self._keys))

    def close(self) -> None:
        self.trim()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close_handle(self) -> None:
        """Drop the file handle without trimming (for a file about to be deleted or renamed)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename_to(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close_handle()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    # -- mutation ---------------------------------------------------------------------------

    def _append(self, key: int, value: int) -> None:
        self._keys.append(key)
        self._values.append(value)

    def _truncate_to_entries(self, count: int) -> None:
        if count >= len(self._keys):
            return
        del self._keys[count:]
        del self._values[count:]
        if self._on_disk > count:
            # Zero the dropped entries on disk: stale entries must not survive a crash.
            fd = self._open()
            os.pwrite(fd, bytes((self._on_disk - count) * self.entry.size), count * self.entry.size)
            self._on_disk = count

    def reset(self) -> None:
        """Drop every entry (before a rebuild from the log)."""
        self._truncate_to_entries(0)
        # The rebuilt file is our own writing; the length of the file as found no longer counts.
        self._raw_size = 0

    # -- checks -------------------------------------------------------------------------------

    def _check_file_length(self) -> None:
        if self._raw_size % self.entry.size:
            raise CorruptIndexError(
                f"{self.path}: length {self._raw_size} is not a multiple of the "
                f"entry size {self.entry.size}"
            )

    @staticmethod
    def _strictly_increasing(values: array[int]) -> bool:
        return all(a < b for a, b in itertools.pairwise(values))

    @staticmethod
    def _non_decreasing(values: array[int]) -> bool:
        return all(a <= b for a, b in itertools.pairwise(values))
