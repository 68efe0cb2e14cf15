"""The controller's durable metadata log: append-only commits of msgpack records, plus snapshots.

The controller (actors/controller/controller.py) turns every change of its metadata — brokers,
topics, assignments, leader/ISR, epochs — into records (msgpack-able dicts whose meaning only it
knows), commits them here before acting on them, and after a restart replays `load()`'s records
to rebuild its state. This module knows nothing about what the records say.

The files and the bytes in them (directory layout, frames, snapshots) are in
`runtime.log.metadata_log_format`. In short: every record has an offset, 0, 1, 2, ...; a segment
is a sequence of checksummed frames, each holding the records of one group commit; a snapshot
file is one frame holding the state as of an offset.

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
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from runtime.log.checkpoints import TMP_SUFFIX, fsync_dir
from runtime.log.errors import LogDirLockedError, LogError
from runtime.log.metadata_log_format import (
    HEADER_BYTES,
    LOCK_FILE,
    SEGMENT_NAME,
    SNAPSHOT_NAME,
    Record,
    encode_frame,
    is_record_list,
    pack,
    parse_segment_frame,
    read_snapshot,
    segment_body,
    segment_name,
    snapshot_body,
    snapshot_name,
    valid_frame_follows,
    write_all,
    write_bytes_atomically,
)

DEFAULT_SEGMENT_BYTES: Final = 8 * 1024 * 1024
DEFAULT_MAX_FRAME_BYTES: Final = 8 * 1024 * 1024

logger = logging.getLogger(__name__)


class MetadataLogCorruptError(LogError):
    """Records that were durable are damaged or missing; replaying around them would be wrong."""


class MetadataLogFailedError(LogError):
    """A write or fsync failed, or the log is closed: no more appends."""


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
            elif match := SEGMENT_NAME.match(name):
                segments.append(int(match.group(1)))
            elif match := SNAPSHOT_NAME.match(name):
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
            records = read_snapshot(path, next_offset)
            if records is not None:
                return _LoadedSnapshot(next_offset, records)
            self.corrupt_snapshots += 1
            logger.error("metadata snapshot %s is corrupt; trying an older one", path)
        return _LoadedSnapshot(0)

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
                parsed = parse_segment_frame(data, pos, expected, self.max_frame_bytes)
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
        follower = valid_frame_follows(data, pos + 1, expected, self.max_frame_bytes)
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
            packed.append(pack(record))
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
        if not is_record_list(records):
            raise TypeError("snapshot records must be a list of dicts")
        body = snapshot_body(last_offset, records)
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
                body = segment_body(
                    group[0].first_offset, [p for c in group for p in c.packed_records]
                )
                await asyncio.to_thread(
                    self._write_frame, encode_frame(body), group[-1].last_offset + 1
                )
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
        write_all(self._active_fd, frame)
        os.fsync(self._active_fd)
        self._active_size += len(frame)
        self._written_next_offset = next_offset
        if self._active_size >= self.segment_bytes:
            self._create_segment(next_offset)

    def _write_snapshot(self, last_offset: int, body: bytes) -> None:
        if last_offset + 1 == self._written_next_offset and self._active_size > 0:
            # Roll, so that the segment holding `last_offset` is wholly covered and deleted.
            self._create_segment(self._written_next_offset)
        write_bytes_atomically(self.directory / snapshot_name(last_offset + 1), encode_frame(body))
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
