"""Disk faults for tests and the simulator: a log whose disk fails under it.

Ownership: none; each function acts once on the log it is given.
"""

from __future__ import annotations

import os

from runtime.log.log import Log


def fail_log_writes(partition_log: Log) -> None:
    """The disk "fails" under the log's active segment: its descriptor becomes read-only, so the
    next write raises OSError (EBADF) inside the partition actor, while closing it at teardown
    still works."""
    segment = partition_log.active_segment
    read_only = os.open(segment.log_path, os.O_RDONLY)
    try:
        os.dup2(read_only, segment._fd)
    finally:
        os.close(read_only)
