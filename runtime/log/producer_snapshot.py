"""Kafka's producer state snapshot file (``<offset>.snapshot``), version 1: layout and codec.

One file per snapshot, in the partition directory, named by the producer state's map end offset
(``%020d.snapshot``: one past the last offset folded into the state). All integers big-endian::

    offset  size  field
    0       2     Version            int16, always 1
    2       4     Crc                uint32, CRC-32C (Castagnoli) of every byte from offset 6 on
    6       4     ProducerEntries    int32 count, then that many 46-byte entries:
      +0    8       ProducerId             int64
      +8    2       Epoch                  int16
      +10   4       LastSequence           int32 (-1 when the producer has no data batch)
      +14   8       LastOffset             int64 (-1 likewise)
      +22   4       OffsetDelta            int32, last offset - first offset of that batch
      +26   8       Timestamp              int64, the producer's last timestamp
      +34   4       CoordinatorEpoch       int32 (-1 unknown)
      +38   8       CurrentTxnFirstOffset  int64 (-1 when no transaction is ongoing)

Only each producer's last batch is stored, as Kafka does; after a reload the duplicate window is
that batch plus whatever the log replays above the snapshot offset.

Crash policy: `write_snapshot_file` writes ``<name>.tmp``, fsyncs it, renames it over the final
name and fsyncs the directory (as `runtime.log.checkpoints` does), so a snapshot either exists
whole or not at all. Decoding checks the version, the CRC and the exact length and raises
`CorruptSnapshotError` otherwise; the producer state manager then deletes the file and falls back
to an older snapshot.

`SnapshotFiles` lists a partition directory's snapshot files by offset and writes, reads and
deletes them (blocking file I/O); it belongs to the producer state manager that owns it. The
codec functions are pure.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from crc32c import crc32c

from runtime.log.checkpoints import TMP_SUFFIX, fsync_dir
from runtime.log.errors import CorruptSnapshotError

SNAPSHOT_SUFFIX: Final = ".snapshot"
SNAPSHOT_VERSION: Final = 1
NO_OFFSET: Final = -1

_HEADER: Final = struct.Struct(">hI")  # Version, Crc
_COUNT: Final = struct.Struct(">i")
_ENTRY: Final = struct.Struct(">qhiqiqiq")
CRC_OFFSET: Final = 2
ENTRIES_OFFSET: Final = _HEADER.size  # where the CRC-covered bytes start
ENTRY_SIZE: Final = _ENTRY.size
assert ENTRIES_OFFSET == 6
assert ENTRY_SIZE == 46


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    """One producer as the snapshot file stores it (sentinels -1 as in the layout above)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    """The file's bytes. Raises struct.error if a field does not fit its type (a caller bug)."""
    items = list(entries)
    body = bytearray(_COUNT.pack(len(items)))
    for e in items:
        body += _ENTRY.pack(
            e.producer_id,
            e.producer_epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
    return _HEADER.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes | bytearray | memoryview) -> list[SnapshotEntry]:
    """Parse a whole snapshot file; CorruptSnapshotError on any deviation from the layout."""
    view = memoryview(data)
    if len(view) < ENTRIES_OFFSET + _COUNT.size:
        raise CorruptSnapshotError(f"snapshot of {len(view)} bytes is shorter than its header")
    version, stored_crc = _HEADER.unpack_from(view, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    computed_crc = crc32c(view[ENTRIES_OFFSET:])
    if computed_crc != stored_crc:
        raise CorruptSnapshotError(
            f"snapshot CRC mismatch: stored {stored_crc:#010x}, computed {computed_crc:#010x}"
        )
    # The CRC only proves the bytes are those written; the length checks below still guard
    # against a writer bug, and they keep struct.error from escaping.
    (count,) = _COUNT.unpack_from(view, ENTRIES_OFFSET)
    entries_start = ENTRIES_OFFSET + _COUNT.size
    expected = entries_start + count * ENTRY_SIZE
    if count < 0 or expected > len(view):
        raise CorruptSnapshotError(
            f"snapshot announces {count} entries but holds {len(view) - entries_start} bytes"
        )
    if expected < len(view):
        raise CorruptSnapshotError(f"{len(view) - expected} trailing bytes after the entries")
    entries = [
        SnapshotEntry(*_ENTRY.unpack_from(view, entries_start + i * ENTRY_SIZE))
        for i in range(count)
    ]
    for entry in entries:
        _check_entry(entry)
    return entries


def _check_entry(entry: SnapshotEntry) -> None:
    """Values no writer produces: reject them here rather than build impossible state."""
    if entry.producer_id < 0:
        raise CorruptSnapshotError(f"negative producer id in {entry}")
    if entry.last_offset < NO_OFFSET or entry.current_txn_first_offset < NO_OFFSET:
        raise CorruptSnapshotError(f"negative offset in {entry}")
    if entry.offset_delta < 0 or (entry.last_offset >= 0 and entry.last_sequence < 0):
        raise CorruptSnapshotError(f"impossible batch in {entry}")


def write_snapshot_file(path: Path, entries: Iterable[SnapshotEntry]) -> None:
    """Write `path` atomically (tmp, fsync, rename, fsync dir). Blocking."""
    data = encode_snapshot(entries)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += os.write(fd, view[written:])
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_snapshot_file(path: Path) -> list[SnapshotEntry]:
    """Decode `path`; CorruptSnapshotError names the file. FileNotFoundError passes through."""
    data = path.read_bytes()
    try:
        return decode_snapshot(data)
    except CorruptSnapshotError as exc:
        raise CorruptSnapshotError(f"{path}: {exc}") from None


class SnapshotFiles:
    """The ``%020d.snapshot`` files of one directory, by offset, kept in step with the disk."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._offsets = self._scan()  # ascending

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(self._offsets)

    def path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def __contains__(self, offset: int) -> bool:
        index = bisect.bisect_left(self._offsets, offset)
        return index < len(self._offsets) and self._offsets[index] == offset

    def write(self, offset: int, entries: Iterable[SnapshotEntry]) -> Path:
        path = self.path(offset)
        write_snapshot_file(path, entries)
        if offset not in self:
            bisect.insort(self._offsets, offset)
        return path

    def read(self, offset: int) -> list[SnapshotEntry]:
        return read_snapshot_file(self.path(offset))

    def delete(self, offset: int) -> None:
        # Not fsynced: a deletion a crash undoes is redone by the next reload's range check.
        self._offsets.remove(offset)
        with contextlib.suppress(FileNotFoundError):
            self.path(offset).unlink()

    def _scan(self) -> list[int]:
        """Offsets of the snapshot files; a stale .tmp of a write cut by a crash is removed."""
        offsets: list[int] = []
        if not self.directory.is_dir():
            return offsets
        for path in self.directory.iterdir():
            name = path.name
            if name.endswith(SNAPSHOT_SUFFIX + TMP_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                continue
            prefix = name[: -len(SNAPSHOT_SUFFIX)]
            if name.endswith(SNAPSHOT_SUFFIX) and len(prefix) == 20 and prefix.isdigit():
                offsets.append(int(prefix))
        return sorted(offsets)
