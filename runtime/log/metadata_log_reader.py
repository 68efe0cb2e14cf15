"""Reading a controller's metadata log from outside: no lock, nothing repaired, nothing written.

`MetadataLog.load()` (runtime/log/metadata_log.py) is the owner's read: it locks the directory
and truncates a torn tail. Offline tools (`ketch verify`, `ketch compact`) want to know what the
metadata says (which topics are compacted, their settings) while the controller may be running
and appending, so they read the files as they are:

* the latest snapshot that checks (a `.tmp` one is a snapshot still being written: ignored);
* then the frames of the segments after it, in offset order, up to the first frame that does not
  check. For a live log that is the frame being written now, for a stopped one a torn tail the
  owner will truncate at its next start; either way the records before it are the committed ones.

A snapshot taken while reading may delete the segments being read: the read then starts over
from the new snapshot, a few times at most. A directory with no log at all reads as no records.

Pure function of the directory's contents at the time of the call; no state.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from runtime.log.metadata_log import DEFAULT_MAX_FRAME_BYTES
from runtime.log.metadata_log_format import (
    SEGMENT_NAME,
    SNAPSHOT_NAME,
    Record,
    parse_segment_frame,
    read_snapshot,
    segment_name,
    snapshot_name,
)

_ATTEMPTS: Final = 5  # reads that a concurrent snapshot's deletions may spoil, before giving up


class MetadataLogUnreadableError(OSError):
    """The log's files kept changing under the reader (or vanished) on every attempt."""


def read_metadata_records(
    directory: Path, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> list[Record]:
    """The records a controller restarted now would replay (as far as they are committed):
    the latest valid snapshot's, then each later record, in offset order. Empty when the
    directory holds no log."""
    last_error: OSError | None = None
    for _ in range(_ATTEMPTS):
        try:
            return _read_once(Path(directory), max_frame_bytes)
        except FileNotFoundError as exc:  # a snapshot deleted what was listed: start over
            last_error = exc
    raise MetadataLogUnreadableError(f"{directory}: the metadata log kept changing: {last_error}")


def _read_once(directory: Path, max_frame_bytes: int) -> list[Record]:
    if not directory.is_dir():
        return []
    segments: list[int] = []
    snapshots: list[int] = []
    for name in os.listdir(directory):
        if match := SEGMENT_NAME.match(name):
            segments.append(int(match.group(1)))
        elif match := SNAPSHOT_NAME.match(name):
            snapshots.append(int(match.group(1)))
    records: list[Record] = []
    start = 0
    for next_offset in sorted(snapshots, reverse=True):
        found = read_snapshot(directory / snapshot_name(next_offset), next_offset)
        if found is not None:
            records, start = list(found), next_offset
            break
    expected = start
    for base in sorted(segments):
        data = (directory / segment_name(base)).read_bytes()
        pos, offset = 0, base
        while pos < len(data):
            parsed = parse_segment_frame(data, pos, offset, max_frame_bytes)
            if parsed is None:
                return records  # the frame being written (or a torn tail): committed so far
            first, frame_records, pos = parsed
            offset = first + len(frame_records)
            if offset <= expected:
                continue  # covered by the snapshot
            if first > expected:
                return records  # a gap: nothing after it can be applied in order
            records.extend(frame_records[expected - first :])
            expected = offset
    return records
