"""__consumer_offsets records in Kafka's formats, and the partition of a group."""

from __future__ import annotations

import random
import struct

import pytest

from wire.batch_builder import build_records_batch
from wire.group_records import (
    GroupKey,
    GroupRecordError,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    build_group_batch,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
    iter_group_records,
    java_string_hashcode,
    partition_for,
)
from wire.record_reader import iter_records
from wire.records import CompressionType, Record

SEED = 10


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Hello World", -862545276),
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE: Math.abs would stay negative
        ("\u00e9t\u00e9", 233 * 31 * 31 + 116 * 31 + 233),  # UTF-16 code units, not UTF-8 bytes
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # a surrogate pair is two code units
    ],
)
def test_java_string_hashcode(text: str, expected: int) -> None:
    assert java_string_hashcode(text) == expected


def test_partition_for_masks_the_sign_bit_as_kafka_does() -> None:
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("Hello World", 50) == (-862545276 & 0x7FFFFFFF) % 50
    assert partition_for("hello", 50) == 99162322 % 50
    rng = random.Random(SEED)
    for _ in range(200):
        group = "".join(rng.choice("abcxyz-_0") for _ in range(rng.randint(0, 12)))
        assert 0 <= partition_for(group, 7) < 7, f"{group!r} (seed={SEED})"
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for("g", 0)


def test_keys_golden_bytes() -> None:
    assert encode_key(OffsetKey("g", "t", 3)) == (
        b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    )
    assert encode_key(GroupKey("grp")) == b"\x00\x02\x00\x03grp"
    # Version 0 offset keys (older Kafka) have the same layout.
    assert decode_key(b"\x00\x00\x00\x01g\x00\x01t\x00\x00\x00\x03") == OffsetKey("g", "t", 3)


def test_offset_values_golden_bytes_and_every_version() -> None:
    v3 = OffsetValue(offset=42, metadata="m", commit_timestamp=1000, leader_epoch=5)
    assert encode_offset_value(v3) == (
        b"\x00\x03" + struct.pack(">qi", 42, 5) + b"\x00\x01m" + struct.pack(">q", 1000)
    )
    assert decode_offset_value(encode_offset_value(v3)) == v3
    v1 = OffsetValue(offset=7, metadata="", commit_timestamp=10, expire_timestamp=99)
    assert encode_offset_value(v1) == b"\x00\x01" + struct.pack(">qhqq", 7, 0, 10, 99)
    assert decode_offset_value(encode_offset_value(v1)) == v1
    v0 = b"\x00\x00" + struct.pack(">q", 9) + b"\xff\xff" + struct.pack(">q", 11)
    assert decode_offset_value(v0) == OffsetValue(offset=9, metadata="", commit_timestamp=11)
    v2 = b"\x00\x02" + struct.pack(">q", 9) + b"\x00\x02ab" + struct.pack(">q", 11)
    assert decode_offset_value(v2) == OffsetValue(offset=9, metadata="ab", commit_timestamp=11)
    # v4 (flexible): compact string (length + 1 as a varint) and an empty tag buffer.
    v4 = b"\x00\x04" + struct.pack(">qi", 9, 2) + b"\x03ab" + struct.pack(">q", 11) + b"\x00"
    assert decode_offset_value(v4) == OffsetValue(9, "ab", 11, 2)


MEMBERS = (
    MemberValue("m-1", "client-a", "/127.0.0.1", 30000, 10000, b"\x00\x01sub", b"asg", None),
    MemberValue("m-2", "client-b", "/127.0.0.2", 60000, 45000, b"", b"", "static-2"),
)


def test_group_values_round_trip_and_read_older_versions() -> None:
    value = GroupValue("consumer", 7, "range", "m-1", 1_700_000_000_000, MEMBERS)
    data = encode_group_value(value)
    assert data[:2] == b"\x00\x03"
    assert decode_group_value(data) == value
    empty = GroupValue("consumer", 0, None, None)
    assert decode_group_value(encode_group_value(empty)) == empty

    # Version 0: no rebalance timeout (it equals the session timeout), no state timestamp, no
    # instance ids; version 1 adds the rebalance timeout before the session timeout.
    def v0_or_v1(version: int) -> bytes:
        out = struct.pack(">h", version) + b"\x00\x08consumer" + struct.pack(">i", 3)
        out += b"\x00\x05range" + b"\x00\x03m-1" + struct.pack(">i", 1)
        out += b"\x00\x03m-1" + b"\x00\x01c" + b"\x00\x01h"
        out += struct.pack(">i", 500) if version == 1 else b""
        out += struct.pack(">i", 400) + struct.pack(">i", 1) + b"s" + struct.pack(">i", 1) + b"a"
        return out

    [m0] = decode_group_value(v0_or_v1(0)).members
    assert (m0.rebalance_timeout, m0.session_timeout) == (400, 400)
    [m1] = decode_group_value(v0_or_v1(1)).members
    assert (m1.rebalance_timeout, m1.session_timeout, m1.subscription) == (500, 400, b"s")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        b"\x00\x09\x00\x01g",  # unknown key version
        b"\x00\x02\x00\x05gr",  # string longer than the data
        b"\x00\x02\xff\xffx",  # null group name, then trailing bytes
        b"\x00\x02\x00\x02\xff\xfe",  # not UTF-8
    ],
)
def test_malformed_keys_are_group_record_errors(data: bytes) -> None:
    with pytest.raises(GroupRecordError):
        decode_key(data)


def test_malformed_values_are_group_record_errors() -> None:
    good = encode_offset_value(OffsetValue(1, "m", 2, 3))
    for bad in (good[:-1], good + b"x", b"\x00\x07" + good[2:]):
        with pytest.raises(GroupRecordError):
            decode_offset_value(bad)
    group = encode_group_value(GroupValue("consumer", 1, "range", "m-1", 0, MEMBERS))
    for bad in (group[:-3], b"\x00\x05" + group[2:]):
        with pytest.raises(GroupRecordError):
            decode_group_value(bad)


@pytest.mark.parametrize("compression", list(CompressionType))
def test_batches_carry_commits_groups_and_tombstones(compression: CompressionType) -> None:
    entries: list[tuple[OffsetKey | GroupKey, OffsetValue | GroupValue | None]] = [
        (OffsetKey("g", "orders", 0), OffsetValue(10, "", 5, 1)),
        (GroupKey("g"), GroupValue("consumer", 2, "range", "m-1", 5, MEMBERS)),
        (OffsetKey("g", "orders", 1), None),
    ]
    batch = build_group_batch(entries, timestamp_ms=5)
    assert [(k, v) for _, k, v in iter_group_records(batch)] == entries
    # As stored: at an offset, possibly compressed (what loading reads back).
    records = list(iter_records(batch))
    stored = build_records_batch(
        [Record(100 + i, r.timestamp, r.key, r.value) for i, r in enumerate(records)],
        compression=compression,
    )
    assert [(o, k) for o, k, _ in iter_group_records(stored + stored)] == [
        (100, entries[0][0]),
        (101, entries[1][0]),
        (102, entries[2][0]),
    ] * 2
    keyless = build_records_batch([Record(0, 5, None, b"x")])
    with pytest.raises(GroupRecordError, match="no key"):
        list(iter_group_records(keyless))
