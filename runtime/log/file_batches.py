"""Walking the batches of a `.log` file without loading it whole.

Two modes:

* ``validate=True`` reads the file in large chunks and checks every batch as `validate_batch`
  does (structure + CRC-32C): for recovery, `dump-log` and the Spark-free verification paths.
* ``validate=False`` reads only the 61-byte headers (small chunks), checks magic and length, and
  never looks at payloads: for offset lookups and for finding a segment's end.

The walk stops at the first bad or torn batch and records why in `error` (with the file position
in `error_position`), after yielding every good batch before it; `valid_end` is the byte after the
last good batch. The caller decides what a stop means (recovery truncates there; dump-log reports).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import Final

from wire.records import (
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    validate_batch,
)

VALIDATE_CHUNK_BYTES: Final = 1 << 20
HEADER_CHUNK_BYTES: Final = 16 << 10
_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_LENGTH: Final = struct.Struct(">i")
_MAGIC_AT: Final = 16


class FileBatches:
    """Iterate ``(position, header, batch bytes or None)`` over ``[start, end)`` of a file.

    In header-only mode the third element is None. Each instance is iterated once.
    """

    def __init__(self, fd: int, start: int, end: int, *, validate: bool) -> None:
        self._fd = fd
        self._start = start
        self._end = end
        self._validate = validate
        self._chunk = VALIDATE_CHUNK_BYTES if validate else HEADER_CHUNK_BYTES
        self.error: str | None = None
        self.error_position: int | None = None
        self.valid_end = start

    def _fail(self, position: int, reason: str) -> None:
        self.error = reason
        self.error_position = position

    def __iter__(self) -> Iterator[tuple[int, BatchHeader, memoryview | None]]:
        pos = self._start
        buf = b""
        buf_start = pos
        while pos < self._end:
            off = pos - buf_start
            if len(buf) - off < RECORD_BATCH_OVERHEAD:
                buf = os.pread(self._fd, min(self._chunk, self._end - pos), pos)
                buf_start, off = pos, 0
            available = len(buf) - off
            if available < LOG_OVERHEAD:
                self._fail(pos, f"truncated batch: {available} trailing bytes")
                return
            (length,) = _LENGTH.unpack_from(buf, off + 8)
            if available > _MAGIC_AT and buf[off + _MAGIC_AT] != MAGIC_V2:
                self._fail(pos, f"bad magic {buf[off + _MAGIC_AT]} (expected {MAGIC_V2})")
                return
            if length < MIN_BATCH_LENGTH:
                self._fail(pos, f"batch length {length} below the minimum {MIN_BATCH_LENGTH}")
                return
            size = length + LOG_OVERHEAD
            if pos + size > self._end:
                self._fail(pos, f"truncated batch: needs {size} bytes, {self._end - pos} present")
                return
            if self._validate:
                if available < size:
                    buf = os.pread(self._fd, max(self._chunk, size), pos)
                    buf_start, off = pos, 0
                batch = memoryview(buf)[off : off + size]
                try:
                    header = validate_batch(batch)
                except CorruptRecordError as exc:
                    self._fail(pos, str(exc).rsplit(" (batch at byte", 1)[0])
                    return
                yield pos, header, batch
            else:
                header = BatchHeader(*_HEADER.unpack_from(buf, off))
                yield pos, header, None
            pos += size
            self.valid_end = pos
