"""Record batch bytes for the wire tests: a sample three-record batch, and edits that keep the
CRC right so that a check after the CRC's must notice them. Shared by test_records.py,
test_batch_builder.py, test_record_reader.py, test_records_fuzz.py and
test_records_append_fast.py. Pure functions over bytes: no state."""

from __future__ import annotations

import struct

from crc32c import crc32c

from wire.batch_builder import build_batch
from wire.records import BatchHeader

HEADER = struct.Struct(">qiibIhiqqqhii")


def recrc(batch: bytes | bytearray, pos: int = 0) -> bytearray:
    """Return a copy of ``batch`` whose CRC matches its (possibly edited) contents."""
    out = bytearray(batch)
    (length,) = struct.unpack_from(">i", out, pos + 8)
    struct.pack_into(">I", out, pos + 17, crc32c(bytes(out[pos + 21 : pos + 12 + length])))
    return out


def edit_header(batch: bytes, **fields: int) -> bytearray:
    """Rewrite header fields by BatchHeader name and fix the CRC."""
    values = dict(zip(BatchHeader.__slots__, HEADER.unpack_from(batch), strict=True))
    values.update(fields)
    out = bytearray(batch)
    HEADER.pack_into(out, 0, *values.values())
    return recrc(out)


def sample_batch(**kwargs: object) -> bytes:
    records = [(b"key-0", b"value-0"), (None, b"value-1"), (b"key-2", None)]
    return build_batch(records, timestamps=[1_000, 999, 1_005], **kwargs)  # type: ignore[arg-type]
