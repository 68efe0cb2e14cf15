"""The controller's durable metadata log: append-only commits of msgpack records, plus snapshots.

The controller (actors/controller/controller.py) turns every change of its metadata — brokers,
topics,
assignments, leader/ISR, epochs — into records (msgpack-able dicts whose meaning only it knows),
commits them here before acting on them, and after a restart replays `load()`'s records to
rebuild its state. This module knows nothing about what the records say.

Directory layout (one directory, owned by one controller process)::

    .lock                              flock(LOCK_EX | LOCK_NB) while open: a second controller
                                       on the same directory gets LogDirLockedError
    00000000000000000000.log           segment, named by the offset of its first record
    00000000000000001234.log           the last segment is the active one (appends go there)
    00000000000000001200.snapshot      snapshot holding the state as of offsets < 1200
    *.tmp                              a snapshot being written; stale ones are deleted at load

Every record has an offset, 0, 1, 2, ... A segment is a sequence of frames::

    [length u32 BE][crc32c u32 BE][body: `length` bytes of msgpack]

with the CRC32C (Castagnoli) computed over the body. A segment frame's body is the map
``{"offset": <offset of its first record>, "records": [<record>, ...]}`` (at least one record).
One frame is written per disk write: the commits that queued up while the previous write was
being fsync'd are written together as one frame (group commit), so a frame is all-or-nothing
and a commit is never replayed in part. A frame's `offset` must be the offset following the
previous frame (the first frame's: the segment's base offset), so a misplaced frame is caught.

A snapshot file is exactly one frame whose body is
``{"version": 0, "last_offset": <L>, "records": [<record>, ...]}``, named ``<L + 1>.snapshot``;
its records are the controller's state as of offset L, replayed instead of every record <= L.

Durability and crash policy:

* `append()` returns only after its frame is written and fsync'd (in a worker thread).
* Only one write is ever outstanding (the worker writes the next frame only after the previous
  fsync returned), so a crash can damage only the last frame of the last segment. At load, a bad
  frame there (length past the end of the file, CRC mismatch, undecodable body, wrong offset) is
  a **torn tail**: the segment is truncated before it, and the truncation is logged and counted
  (`torn_tail_truncations`, `truncated_bytes`); its records are never replayed. Any bad frame
  elsewhere — in an earlier segment, or one followed by a frame that is still valid — is damage
  to data that was fsync'd, and `load()` raises `MetadataLogCorruptError` rather than silently
  dropping acknowledged records. So does a gap between segments, or between a snapshot and the
  first segment after it.
* `snapshot()` writes ``<L + 1>.snapshot.tmp``, fsyncs it, renames it into place and fsyncs the
  directory, so a crash leaves the old set of snapshots or the new one. Only then are segments
  wholly covered (every offset <= L) and older snapshots deleted. When L is the last offset
  written, the active segment is rolled first so that it, too, is wholly covered. A crash before
  the deletions leaves covered segments behind; load skips them and the next snapshot deletes
  them. A snapshot that fails its check is skipped (counted in `corrupt_snapshots`) and an older
  one is used — which fails with `MetadataLogCorruptError` if the segments it needs are gone.
* An I/O error while writing fails the log: the pending and every later append raise
  `MetadataLogFailedError`. Whether the failed write reached the disk is unknown (and after a
  failed fsync the kernel may have dropped the dirty pages), so the only safe continuation is the
  controller's: stop, and let a new process `load()` what is really on disk.

Ownership and why no lock: the event loop side (`append`, `snapshot`, `close`) only assigns
offsets and queues operations; one worker task executes them in order, each in a worker thread
(`asyncio.to_thread`), and only that worker touches the files, the active segment's descriptor
and the segment list. `load()` runs before anything is queued. So each piece of state has one
owner at a time; the `.lock` file only keeps *other processes* out.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import re
import struct
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import msgpack
from crc32c import crc32c

from runtime.log.checkpoints import TMP_SUFFIX, fsync_dir
from runtime.log.errors import LogDirLockedError, LogError

Record = dict[Any, Any]

HEADER: Final = struct.Struct(">II")  # length, crc32c
HEADER_BYTES: Final = HEADER.size
LOCK_FILE: Final = ".lock"
SEGMENT_SUFFIX: Final = ".log"
SNAPSHOT_SUFFIX: Final = ".snapshot"
SNAPSHOT_VERSION: Final = 0
DEFAULT_SEGMENT_BYTES: Final = 8 * 1024 * 1024
DEFAULT_MAX_FRAME_BYTES: Final = 8 * 1024 * 1024

_BODY_FIRST_BYTE: Final = 0x82  # msgpack fixmap of two entries: every segment frame's body
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT_NAME = re.compile(r"^(\d{20})\.snapshot$")

logger = logging.getLogger(__name__)


class MetadataLogCorruptError(LogError):
    """Records that were durable are damaged or missing; replaying around them would be wrong."""


class MetadataLogFailedError(LogError):
    """A write or fsync failed, or the log is closed: no more appends."""


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def snapshot_name(next_offset: int) -> str:
    return f"{next_offset:020d}{SNAPSHOT_SUFFIX}"


# -- frames ---------------------------------------------------------------------------------------


def _pack(obj: object) -> bytes:
    packed = msgpack.packb(obj, use_bin_type=True)
    assert isinstance(packed, bytes)
    return packed


def _frame(body: bytes) -> bytes:
    return HEADER.pack(len(body), crc32c(body)) + body


def _segment_body(first_offset: int, packed_records: Sequence[bytes]) -> bytes:
    """The msgpack of {"offset": first_offset, "records": [...]}, from records packed at append
    time (so a group commit does not encode every record a second time)."""
    packer = msgpack.Packer(use_bin_type=True)
    head: bytes = (
        packer.pack_map_header(2)
        + packer.pack("offset")
        + packer.pack(first_offset)
        + packer.pack("records")
        + packer.pack_array_header(len(packed_records))
    )
    return head + b"".join(packed_records)


def _decode_body(data: bytes | memoryview, pos: int, max_body_bytes: int) -> tuple[Any, int] | None:
    """(decoded body, end position) of a frame at `pos` whose length and CRC check, else None."""
    if len(data) - pos < HEADER_BYTES:
        return None
    length, crc = HEADER.unpack_from(data, pos)
    end = pos + HEADER_BYTES + length
    if length > max_body_bytes or end > len(data):
        return None
    body = data[pos + HEADER_BYTES : end]
    if crc32c(body) != crc:
        return None
    try:
        return msgpack.unpackb(body, raw=False, strict_map_key=False), end
    except (ValueError, TypeError, msgpack.UnpackException):
        return None


def _is_record_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(r, dict) for r in value)


def _parse_segment_frame(
    data: bytes | memoryview, pos: int, expected_offset: int, max_body_bytes: int
) -> tuple[int, list[Record], int] | None:
    """(first offset, records, end) of a valid segment frame at `pos` starting exactly at
    `expected_offset`, else None."""
    decoded = _decode_body(data, pos, max_body_bytes)
    if decoded is None:
        return None
    body, end = decoded
    if not isinstance(body, dict) or set(body) != {"offset", "records"}:
        return None
    offset, records = body["offset"], body["records"]
    if type(offset) is not int or offset != expected_offset:
        return None
    if not _is_record_list(records) or not records:
        return None
    return offset, records, end


def _valid_frame_follows(
    data: bytes | memoryview, start: int, min_offset: int, max_body_bytes: int
) -> int | None:
    """The position of a valid-looking segment frame at or after `start`, if any.

    Used after a bad frame, whose length field cannot be trusted, so every position is tried.
    The caller bounds the region to one frame (a torn tail is at most one write), and a body
    must begin with the two-entry map header before its CRC is computed, which keeps the scan
    cheap; a hit means data after the damage was intact: corruption, not a torn write.
    """
    for pos in range(start, len(data) - HEADER_BYTES):
        if data[pos + HEADER_BYTES] != _BODY_FIRST_BYTE:
            continue
        decoded = _decode_body(data, pos, max_body_bytes)
        if decoded is None:
            continue
        body = decoded[0]
        if (
            isinstance(body, dict)
            and type(body.get("offset")) is int
            and body["offset"] >= min_offset
            and _is_record_list(body.get("records"))
        ):
            return pos
    return None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def write_bytes_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves the old or the new file, whole
    (checkpoints.write_atomically's protocol, for bytes)."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


# -- queued operations ----------------------------------------------------------------------------


@dataclass(slots=True)
class _Commit:
    first_offset: int
    packed_records: list[bytes]
    size: int
    done: asyncio.Future[int]

    @property
    def last_offset(self) -> int:
        return self.first_offset + len(self.packed_records) - 1


@dataclass(slots=True)
class _Snapshot:
    last_offset: int
    body: bytes
    done: asyncio.Future[None]


@dataclass(slots=True)
class _LoadedSnapshot:
    next_offset: int
    records: list[Record] = field(default_factory=list)


# -- the log --------------------------------------------------------------------------------------


class MetadataLog:
    """`load()` once (blocking: run it in a thread if the loop is busy), then `append()` and
    `snapshot()` from the event loop, then `close()`."""

    def __init__(
        self,
        directory: Path,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        if segment_bytes <= 0 or max_frame_bytes <= 0:
            raise ValueError("segment_bytes and max_frame_bytes must be positive")
        self.directory = Path(directory)
        self.segment_bytes = segment_bytes
        self.max_frame_bytes = max_frame_bytes
        # Observable counters (metrics, tests).
        self.torn_tail_truncations = 0
        self.truncated_bytes = 0
        self.corrupt_snapshots = 0
        self.writes = 0  # frames written, each followed by one fsync
        self.commits = 0  # appends made durable
        # Event-loop side.
        self._loaded = False
        self._closed = False
        self._failure: BaseException | None = None
        self._next_offset = 0  # next offset to assign
        self._snapshot_next_offset = 0  # offsets below it are covered by the latest snapshot
        self._ops: deque[_Commit | _Snapshot] = deque()
        self._worker: asyncio.Task[None] | None = None
        self._writing: list[asyncio.Future[Any]] = []  # taken off the queue, being written
        # Worker side (after load): the files.
        self._lock_fd: int | None = None
        self._active_fd: int | None = None
        self._active_size = 0
        self._written_next_offset = 0
        self._segment_bases: list[int] = []
        self._snapshot_offsets: list[int] = []

    @property
    def next_offset(self) -> int:
        """The offset the next appended record will get."""
        return self._next_offset

    @property
    def records_since_snapshot(self) -> int:
        """Records a restart would replay one by one (for the controller's snapshot policy)."""
        return self._next_offset - self._snapshot_next_offset

    @property
    def segment_bases(self) -> list[int]:
        return list(self._segment_bases)

    @property
    def pending_commits(self) -> int:
        return sum(1 for op in self._ops if isinstance(op, _Commit))

    # -- load -----------------------------------------------------------------------------------

    def load(self) -> tuple[list[Record], int]:
        """Lock the directory and read it: (records to replay, next offset).

        The records are the latest valid snapshot's, then every record after it in offset order.
        Truncates a torn tail (see the module docstring); raises `MetadataLogCorruptError` for
        damage to durable records and `LogDirLockedError` if another process holds the directory.
        """
        if self._loaded or self._closed:
            raise RuntimeError("load() runs once, before any append")
        self._lock()
        try:
            records, next_offset = self._load()
        except BaseException:
            self._release()
            raise
        self._loaded = True
        self._next_offset = self._written_next_offset = next_offset
        return records, next_offset

    def _lock(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirLockedError(f"{self.directory} is in use by another controller") from None
        self._lock_fd = fd

    def _release(self) -> None:
        if self._active_fd is not None:
            os.close(self._active_fd)
            self._active_fd = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def _load(self) -> tuple[list[Record], int]:
        segments: list[int] = []
        snapshots: list[int] = []
        for name in os.listdir(self.directory):
            if name.endswith(TMP_SUFFIX):
                # A snapshot whose rename never happened: the old snapshots are still complete.
                os.unlink(self.directory / name)
            elif match := _SEGMENT_NAME.match(name):
                segments.append(int(match.group(1)))
            elif match := _SNAPSHOT_NAME.match(name):
                snapshots.append(int(match.group(1)))
        segments.sort()
        snapshots.sort()
        self._segment_bases = segments
        self._snapshot_offsets = snapshots

        snapshot = self._latest_valid_snapshot(snapshots)
        start = snapshot.next_offset
        records = list(snapshot.records)
        self._snapshot_next_offset = start
        if not segments:
            if start > 0:
                raise MetadataLogCorruptError(
                    f"{self.directory}: the snapshot at {start} has no segment after it"
                )
            self._create_segment(0)
            return records, 0
        # Segment i holds offsets [base_i, base_{i+1}); only those reaching `start` matter.
        relevant = [
            b for i, b in enumerate(segments) if i + 1 == len(segments) or segments[i + 1] > start
        ]
        if relevant[0] > start:
            raise MetadataLogCorruptError(
                f"{self.directory}: records {start}..{relevant[0] - 1} are missing "
                f"(first segment {segment_name(relevant[0])})"
            )
        next_offset = self._replay(relevant, start, records)
        if next_offset < start:
            raise MetadataLogCorruptError(
                f"{self.directory}: the log ends at {next_offset}, before the snapshot at {start}"
            )
        last = self.directory / segment_name(segments[-1])
        self._active_fd = os.open(last, os.O_WRONLY | os.O_APPEND)
        self._active_size = os.fstat(self._active_fd).st_size
        return records, next_offset

    def _latest_valid_snapshot(self, snapshots: list[int]) -> _LoadedSnapshot:
        for next_offset in reversed(snapshots):
            path = self.directory / snapshot_name(next_offset)
            records = self._read_snapshot(path, next_offset)
            if records is not None:
                return _LoadedSnapshot(next_offset, records)
            self.corrupt_snapshots += 1
            logger.error("metadata snapshot %s is corrupt; trying an older one", path)
        return _LoadedSnapshot(0)

    @staticmethod
    def _read_snapshot(path: Path, next_offset: int) -> list[Record] | None:
        data = path.read_bytes()
        decoded = _decode_body(data, 0, len(data))
        if decoded is None or decoded[1] != len(data):
            return None
        body = decoded[0]
        if (
            not isinstance(body, dict)
            or body.get("version") != SNAPSHOT_VERSION
            or body.get("last_offset") != next_offset - 1
            or not _is_record_list(body.get("records"))
        ):
            return None
        records: list[Record] = body["records"]
        return records

    def _replay(self, bases: list[int], start: int, records: list[Record]) -> int:
        """Append the records >= `start` of segments `bases` to `records`; the next offset."""
        expected = bases[0]
        for index, base in enumerate(bases):
            path = self.directory / segment_name(base)
            if base != expected:
                raise MetadataLogCorruptError(
                    f"{path}: starts at {base} but the previous segment ends before {expected}"
                )
            data = path.read_bytes()
            pos = 0
            while pos < len(data):
                parsed = _parse_segment_frame(data, pos, expected, self.max_frame_bytes)
                if parsed is None:
                    self._bad_frame(path, data, pos, expected, is_last=index + 1 == len(bases))
                    break
                offset, frame_records, pos = parsed
                skip = max(0, start - offset)
                records.extend(frame_records[skip:])
                expected = offset + len(frame_records)
        return expected

    def _bad_frame(
        self, path: Path, data: bytes, pos: int, expected: int, *, is_last: bool
    ) -> None:
        if not is_last:
            raise MetadataLogCorruptError(
                f"{path}: bad frame at byte {pos} (offset {expected}) in a segment that is not "
                f"the last one: durable records are damaged"
            )
        if len(data) - pos > HEADER_BYTES + self.max_frame_bytes:
            raise MetadataLogCorruptError(
                f"{path}: bad frame at byte {pos} (offset {expected}) with more than one frame "
                f"of data after it: durable records are damaged"
            )
        follower = _valid_frame_follows(data, pos + 1, expected, self.max_frame_bytes)
        if follower is not None:
            raise MetadataLogCorruptError(
                f"{path}: bad frame at byte {pos} (offset {expected}) followed by a valid frame "
                f"at byte {follower}: durable records are damaged"
            )
        dropped = len(data) - pos
        logger.warning(
            "metadata log %s: truncating a torn tail of %d bytes at byte %d (offset %d)",
            path,
            dropped,
            pos,
            expected,
        )
        os.truncate(path, pos)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.torn_tail_truncations += 1
        self.truncated_bytes += dropped

    def _create_segment(self, base_offset: int) -> None:
        """Make a new empty active segment (worker side), durable in the directory."""
        path = self.directory / segment_name(base_offset)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            fsync_dir(self.directory)
        except BaseException:
            os.close(fd)
            raise
        if self._active_fd is not None:
            os.close(self._active_fd)
        self._active_fd = fd
        self._active_size = 0
        self._segment_bases.append(base_offset)

    # -- append and snapshot (event loop side) --------------------------------------------------

    async def append(self, records: list[Record]) -> int:
        """Commit `records` durably; the offset of the last one. Concurrent appends are written
        together (one write, one fsync) in the order they were called, and get consecutive
        offsets in that order. Cancelling the caller does not withdraw the commit."""
        self._check_usable()
        if not records:
            raise ValueError("append needs at least one record")
        packed: list[bytes] = []
        for record in records:
            if not isinstance(record, dict):
                raise TypeError(f"a metadata record is a dict, got {type(record).__name__}")
            packed.append(_pack(record))
        size = sum(len(p) for p in packed)
        # Room for the frame header and the body's map/array headers.
        if size + 64 > self.max_frame_bytes:
            raise ValueError(f"a commit of {size} bytes exceeds max_frame_bytes")
        done: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        commit = _Commit(self._next_offset, packed, size, done)
        self._next_offset += len(records)
        self._enqueue(commit)
        return await asyncio.shield(done)

    async def snapshot(self, records: list[Record], last_offset: int) -> None:
        """Durably store `records` as the state as of `last_offset`, then delete the segments
        and snapshots it makes redundant. Every commit up to `last_offset` must have been
        appended (it is written first, since operations run in call order)."""
        self._check_usable()
        if not self._snapshot_next_offset - 1 <= last_offset < self._next_offset:
            raise ValueError(
                f"snapshot offset {last_offset} outside "
                f"[{self._snapshot_next_offset - 1}, {self._next_offset - 1}]"
            )
        if not _is_record_list(records):
            raise TypeError("snapshot records must be a list of dicts")
        body = _pack({"version": SNAPSHOT_VERSION, "last_offset": last_offset, "records": records})
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._snapshot_next_offset = last_offset + 1
        self._enqueue(_Snapshot(last_offset, body, done))
        await asyncio.shield(done)

    async def close(self) -> None:
        """Wait for queued operations, then close the files and release the directory."""
        if self._closed:
            return
        self._closed = True
        if self._worker is not None:
            await asyncio.shield(self._worker)
        self._release()

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise MetadataLogFailedError("the metadata log failed") from self._failure
        if self._closed:
            raise MetadataLogFailedError("the metadata log is closed")
        if not self._loaded:
            raise RuntimeError("load() the metadata log before appending")

    def _enqueue(self, op: _Commit | _Snapshot) -> None:
        self._ops.append(op)
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(
                self._run(), name=f"metadata log {self.directory}"
            )

    # -- the worker -----------------------------------------------------------------------------

    async def _run(self) -> None:
        try:
            while self._ops:
                op = self._ops[0]
                if isinstance(op, _Snapshot):
                    self._ops.popleft()
                    self._writing = [op.done]
                    await asyncio.to_thread(self._write_snapshot, op.last_offset, op.body)
                    self._writing = []
                    op.done.set_result(None)
                    continue
                group = self._take_group()
                self._writing = [commit.done for commit in group]
                body = _segment_body(
                    group[0].first_offset, [p for c in group for p in c.packed_records]
                )
                await asyncio.to_thread(self._write_frame, _frame(body), group[-1].last_offset + 1)
                self._writing = []
                self.writes += 1
                self.commits += len(group)
                for commit in group:
                    commit.done.set_result(commit.last_offset)
        except BaseException as exc:
            # An I/O error (or a bug) leaves the files in an unknown state: fail-stop.
            self._fail(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._worker = None

    def _take_group(self) -> list[_Commit]:
        """The commits at the head of the queue that fit in one frame (at least one)."""
        group: list[_Commit] = []
        size = 0
        while self._ops and isinstance(self._ops[0], _Commit):
            commit = self._ops[0]
            if group and size + commit.size + 64 > self.max_frame_bytes:
                break
            group.append(commit)
            size += commit.size
            self._ops.popleft()
        return group

    def _fail(self, exc: BaseException) -> None:
        logger.error("metadata log %s failed: %r", self.directory, exc)
        self._failure = exc
        error = MetadataLogFailedError(f"metadata log write failed: {exc!r}")
        error.__cause__ = exc
        waiting = [*self._writing, *(op.done for op in self._ops)]
        self._writing = []
        self._ops.clear()
        for future in waiting:
            if not future.done():
                future.set_exception(error)

    def _write_frame(self, frame: bytes, next_offset: int) -> None:
        assert self._active_fd is not None
        _write_all(self._active_fd, frame)
        os.fsync(self._active_fd)
        self._active_size += len(frame)
        self._written_next_offset = next_offset
        if self._active_size >= self.segment_bytes:
            self._create_segment(next_offset)

    def _write_snapshot(self, last_offset: int, body: bytes) -> None:
        if last_offset + 1 == self._written_next_offset and self._active_size > 0:
            # Roll, so that the segment holding `last_offset` is wholly covered and deleted.
            self._create_segment(self._written_next_offset)
        write_bytes_atomically(self.directory / snapshot_name(last_offset + 1), _frame(body))
        keep = last_offset + 1
        bases = self._segment_bases
        covered = [b for i, b in enumerate(bases[:-1]) if bases[i + 1] <= keep]
        for base in covered:
            os.unlink(self.directory / segment_name(base))
        older = [s for s in self._snapshot_offsets if s != keep]
        for offset in older:
            os.unlink(self.directory / snapshot_name(offset))
        if covered or older:
            fsync_dir(self.directory)
        self._segment_bases = [b for b in bases if b not in covered]
        self._snapshot_offsets = [keep]
