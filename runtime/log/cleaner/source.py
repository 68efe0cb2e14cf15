"""Source segments of a compaction: what a pass knows of each segment it rewrites.

Shared by the offline plan (`offline.compact_plan`) and the brokers' live cleaner
(`runtime.log.cleaner.manager`): `SourceSegment` (base offset, size, next offset, largest
timestamp), `read_source_segment` (those facts from a ``.log`` file's batch headers, feeding a
`TransactionScan` on the way) and `CompactError`, the refusal both raise. Pure values and
functions over files each call opens itself: no shared state.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from runtime.log.cleaner.txn import TransactionScan, read_control_type
from runtime.log.file_batches import FileBatches
from runtime.log.segment import offset_from_file_name

NO_TIMESTAMP: Final = -1


class CompactError(Exception):
    """A compaction that must not proceed (bad input, refused install); the message says why."""


@dataclass(frozen=True, slots=True)
class SourceSegment:
    """One existing segment: base offset, size, next offset and largest timestamp."""

    base_offset: int
    size_bytes: int
    next_offset: int
    largest_timestamp: int  # largest batch max timestamp, else the file's mtime


def read_source_segment(log_path: Path, txns: TransactionScan | None = None) -> SourceSegment:
    """Scan the batch headers of a `.log` file, feeding them to `txns` (with the control record
    of each control batch); raises CompactError on a damaged file."""
    base = offset_from_file_name(log_path.name)
    fd = os.open(log_path, os.O_RDONLY)
    try:
        stat = os.fstat(fd)
        scan = FileBatches(fd, 0, stat.st_size, validate=False)
        next_offset, max_ts = base, NO_TIMESTAMP
        for position, header, _ in scan:
            next_offset = header.next_offset
            max_ts = max(max_ts, header.max_timestamp)
            if txns is not None and header.producer_id >= 0:
                marker = None
                if header.is_control:
                    marker = read_control_type(fd, position, header.size_bytes)
                txns.add(header, marker)
        if scan.error is not None:
            raise CompactError(
                f"{log_path}: {scan.error} at byte {scan.error_position}; run `ketch verify` "
                "and let the broker recover the log before compacting"
            )
    finally:
        os.close(fd)
    largest = max_ts if max_ts >= 0 else stat.st_mtime_ns // 1_000_000
    return SourceSegment(base, stat.st_size, next_offset, largest)
