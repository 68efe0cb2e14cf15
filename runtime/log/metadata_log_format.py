"""The metadata log's on-disk format: its file names, its checksummed frames, its snapshots.

Used by `runtime.log.metadata_log`, which owns the directory and decides when each file is
written, read, truncated or deleted (its docstring has the durability and crash policy). Here
are the bytes only: how a frame is built and recognised, and which names the files carry.

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

Pure functions, plus two helpers that write one file; no state.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgpack
from crc32c import crc32c

from runtime.log.checkpoints import TMP_SUFFIX, fsync_dir

Record = dict[Any, Any]

HEADER: Final = struct.Struct(">II")  # length, crc32c
HEADER_BYTES: Final = HEADER.size
LOCK_FILE: Final = ".lock"
SEGMENT_SUFFIX: Final = ".log"
SNAPSHOT_SUFFIX: Final = ".snapshot"
SNAPSHOT_VERSION: Final = 0
SEGMENT_NAME: Final = re.compile(r"^(\d{20})\.log$")
SNAPSHOT_NAME: Final = re.compile(r"^(\d{20})\.snapshot$")

_BODY_FIRST_BYTE: Final = 0x82  # msgpack fixmap of two entries: every segment frame's body


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}{SEGMENT_SUFFIX}"


def snapshot_name(next_offset: int) -> str:
    return f"{next_offset:020d}{SNAPSHOT_SUFFIX}"


def pack(obj: object) -> bytes:
    packed = msgpack.packb(obj, use_bin_type=True)
    assert isinstance(packed, bytes)
    return packed


def encode_frame(body: bytes) -> bytes:
    return HEADER.pack(len(body), crc32c(body)) + body


def segment_body(first_offset: int, packed_records: Sequence[bytes]) -> bytes:
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


def decode_body(data: bytes | memoryview, pos: int, max_body_bytes: int) -> tuple[Any, int] | None:
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


def is_record_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(r, dict) for r in value)


def parse_segment_frame(
    data: bytes | memoryview, pos: int, expected_offset: int, max_body_bytes: int
) -> tuple[int, list[Record], int] | None:
    """(first offset, records, end) of a valid segment frame at `pos` starting exactly at
    `expected_offset`, else None."""
    decoded = decode_body(data, pos, max_body_bytes)
    if decoded is None:
        return None
    body, end = decoded
    if not isinstance(body, dict) or set(body) != {"offset", "records"}:
        return None
    offset, records = body["offset"], body["records"]
    if type(offset) is not int or offset != expected_offset:
        return None
    if not is_record_list(records) or not records:
        return None
    return offset, records, end


def valid_frame_follows(
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
        decoded = decode_body(data, pos, max_body_bytes)
        if decoded is None:
            continue
        body = decoded[0]
        if (
            isinstance(body, dict)
            and type(body.get("offset")) is int
            and body["offset"] >= min_offset
            and is_record_list(body.get("records"))
        ):
            return pos
    return None


def write_all(fd: int, data: bytes) -> None:
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
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def snapshot_body(last_offset: int, records: list[Record]) -> bytes:
    """The body of the snapshot holding `records` as the state as of `last_offset`."""
    return pack({"version": SNAPSHOT_VERSION, "last_offset": last_offset, "records": records})


def read_snapshot(path: Path, next_offset: int) -> list[Record] | None:
    """The records of the snapshot file `path` (named for `next_offset`), or None when it is not
    exactly one valid frame of a snapshot body for that offset."""
    data = path.read_bytes()
    decoded = decode_body(data, 0, len(data))
    if decoded is None or decoded[1] != len(data):
        return None
    body = decoded[0]
    if (
        not isinstance(body, dict)
        or body.get("version") != SNAPSHOT_VERSION
        or body.get("last_offset") != next_offset - 1
        or not is_record_list(body.get("records"))
    ):
        return None
    records: list[Record] = body["records"]
    return records
