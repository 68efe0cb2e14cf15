"""wire.record_reader: records read from a batch, the log-append time given to every record, and
each malformed record named in a CorruptRecordError (record bytes edited behind a fixed CRC,
lying counts and offset deltas, garbage compressed payloads; the CRC is checked unless told
not to)."""

from __future__ import annotations

import struct

import pytest

from tests.unit.wire.batch_helpers import edit_header, recrc, sample_batch
from wire.batch_builder import build_batch
from wire.record_reader import iter_records
from wire.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    CompressionType,
    CorruptRecordError,
    Record,
)

# ---------------------------------------------------------------------------- records


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    batch = build_batch(
        [(None, b"a"), (None, b"b")], timestamps=[1, 2], timestamp_type=1, max_timestamp=99
    )
    assert [r.timestamp for r in iter_records(batch)] == [99, 99]


# ---------------------------------------------------------------------------- corrupt records
# Each case edits the record bytes of a one-record batch and fixes the CRC, so that the record
# parser (not the CRC) must notice.


def one_record_batch(body: bytes) -> bytearray:
    """A batch whose single record's bytes (after its length varint) are ``body``."""
    batch = bytearray(build_batch([(None, b"")]))
    record_length = len(body)
    prefix = batch[:RECORD_BATCH_OVERHEAD]
    encoded = bytes([record_length << 1]) + body  # zigzag varint of a small length
    assert record_length < 64
    out = prefix + encoded
    struct.pack_into(">i", out, 8, len(out) - LOG_OVERHEAD)
    return recrc(out)


# attributes, timestamp delta 0, offset delta 0, null key, empty value, no headers
GOOD_BODY = bytes([0, 0, 0, 1, 0, 0])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (GOOD_BODY[:3], "runs past the end"),
        (bytes([0, 0, 0, 3]) + b"\x00", "key has negative length -2 in record 0"),
        (bytes([0, 0, 0, 20, 0, 0]), "key length 10 runs past the end of the record in record 0"),
        (bytes([0, 0, 0, 1, 0, 1]), "negative header count -1 in record 0"),
        (bytes([0, 0, 0, 1, 0, 2, 1]), "negative header key length"),
        (bytes([0, 0, 0, 1, 0, 2, 2, 0xFF, 1]), "header key is not UTF-8 in record 0"),
        (bytes([0, 0, 2, 1, 0, 0]), "offset delta 1 out of order"),
        (bytes([0, 0, 0, 1, 0, 0, 0]), "record declares 7 bytes but its fields use 6 in record 0"),
        (bytes([0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]), "longer than 5 bytes"),
        (b"", "empty record body in record 0"),
    ],
)
def test_corrupt_record_fields_are_named(body: bytes, message: str) -> None:
    assert list(iter_records(one_record_batch(GOOD_BODY))) == [Record(0, -1, None, b"", ())]
    with pytest.raises(CorruptRecordError, match=message):
        list(iter_records(one_record_batch(body)))


def test_record_count_mismatch_both_ways() -> None:
    batch = sample_batch()
    with pytest.raises(CorruptRecordError, match="record count mismatch: header says 4"):
        list(iter_records(edit_header(batch, records_count=4)))
    with pytest.raises(CorruptRecordError, match=r"record count mismatch: \d+ bytes follow"):
        list(iter_records(edit_header(batch, records_count=2)))
    with pytest.raises(CorruptRecordError, match="negative record count"):
        list(iter_records(edit_header(batch, records_count=-1)))


def test_offset_delta_beyond_last_offset_delta() -> None:
    with pytest.raises(CorruptRecordError, match="out of order"):
        list(iter_records(edit_header(sample_batch(), last_offset_delta=1)))


@pytest.mark.parametrize("codec", [c for c in CompressionType if c is not CompressionType.NONE])
def test_garbage_compressed_payload_names_the_codec(codec: CompressionType) -> None:
    batch = build_batch([(None, b"x" * 100)] * 3, compression=codec)
    damaged = bytearray(batch)
    for index in range(RECORD_BATCH_OVERHEAD, len(damaged)):
        damaged[index] = (index * 89) & 0xFF
    with pytest.raises(CorruptRecordError, match=f"bad {codec.name.lower()} data"):
        list(iter_records(recrc(damaged)))


def test_iter_records_checks_the_crc_unless_told_not_to() -> None:
    batch = bytearray(sample_batch())
    batch[18] ^= 0x01  # inside the stored CRC itself
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        list(iter_records(batch))
    assert len(list(iter_records(batch, verify_crc=False))) == 3
