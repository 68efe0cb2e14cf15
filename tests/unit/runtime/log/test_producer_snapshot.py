from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from runtime.log.errors import CorruptSnapshotError
from runtime.log.producer_snapshot import (
    SnapshotEntry,
    SnapshotFiles,
    decode_snapshot,
    encode_snapshot,
    read_snapshot_file,
    write_snapshot_file,
)

# One entry written out field by field from Kafka's version-1 layout, not by the encoder.
GOLDEN_BODY = bytes.fromhex(
    "00000001"  # ProducerEntries count: 1
    "00000000000003e8"  # ProducerId 1000
    "0005"  # Epoch 5
    "00000029"  # LastSequence 41
    "00000000000004d2"  # LastOffset 1234
    "00000009"  # OffsetDelta 9
    "0000018bcfe56800"  # Timestamp 1_700_000_000_000
    "00000003"  # CoordinatorEpoch 3
    "ffffffffffffffff"  # CurrentTxnFirstOffset -1: no ongoing transaction
)
GOLDEN = bytes.fromhex("000134c4acca") + GOLDEN_BODY  # Version 1, CRC-32C of the body
GOLDEN_ENTRY = SnapshotEntry(
    producer_id=1000,
    producer_epoch=5,
    last_sequence=41,
    last_offset=1234,
    offset_delta=9,
    timestamp=1_700_000_000_000,
    coordinator_epoch=3,
    current_txn_first_offset=-1,
)


def test_crc_library_is_castagnoli_and_matches_golden_crc() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    assert crc32c(GOLDEN_BODY) == 0x34C4ACCA


def test_encode_matches_hand_written_bytes() -> None:
    assert encode_snapshot([GOLDEN_ENTRY]) == GOLDEN


def test_decode_hand_written_bytes() -> None:
    assert decode_snapshot(GOLDEN) == [GOLDEN_ENTRY]


def test_empty_snapshot_layout() -> None:
    expected = struct.pack(">hI", 1, crc32c(b"\x00\x00\x00\x00")) + b"\x00\x00\x00\x00"
    assert encode_snapshot([]) == expected
    assert decode_snapshot(expected) == []


def test_round_trip_several_entries_with_extremes() -> None:
    entries = [
        SnapshotEntry(2**63 - 1, 32767, 2**31 - 1, 2**63 - 1, 2**31 - 1, -1, 2**31 - 1, 7),
        SnapshotEntry(0, 0, -1, -1, 0, -1, -1, -1),  # only a marker: no batch
        SnapshotEntry(5, 1, 0, 0, 0, 0, -1, 0),
    ]
    assert decode_snapshot(encode_snapshot(entries)) == entries


def _with_crc(body: bytes, version: int = 1) -> bytes:
    return struct.pack(">hI", version, crc32c(body)) + body


def test_wrong_version_is_rejected() -> None:
    with pytest.raises(CorruptSnapshotError, match="version 2"):
        decode_snapshot(_with_crc(GOLDEN_BODY, version=2))


def test_bad_crc_is_rejected() -> None:
    flipped = bytearray(GOLDEN)
    flipped[20] ^= 0x01
    with pytest.raises(CorruptSnapshotError, match="CRC"):
        decode_snapshot(bytes(flipped))


@pytest.mark.parametrize("length", [0, 1, 5, 9])
def test_data_shorter_than_the_header_is_rejected(length: int) -> None:
    with pytest.raises(CorruptSnapshotError, match="shorter"):
        decode_snapshot(GOLDEN[:length])


def test_truncated_entries_are_rejected_even_with_a_valid_crc() -> None:
    with pytest.raises(CorruptSnapshotError, match="announces 1 entries"):
        decode_snapshot(_with_crc(GOLDEN_BODY[:-1]))


def test_truncated_file_is_rejected_by_crc() -> None:
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(GOLDEN[:-3])


def test_trailing_bytes_are_rejected() -> None:
    with pytest.raises(CorruptSnapshotError, match="trailing"):
        decode_snapshot(_with_crc(GOLDEN_BODY + b"\x00"))


def test_negative_count_is_rejected() -> None:
    with pytest.raises(CorruptSnapshotError, match="announces -1"):
        decode_snapshot(_with_crc(b"\xff\xff\xff\xff"))


@pytest.mark.parametrize(
    "entry",
    [
        SnapshotEntry(-1, 0, 0, 0, 0, 0, 0, -1),  # negative producer id
        SnapshotEntry(1, 0, 0, -2, 0, 0, 0, -1),  # offset below the -1 sentinel
        SnapshotEntry(1, 0, 0, 5, -1, 0, 0, -1),  # negative offset delta
        SnapshotEntry(1, 0, -1, 5, 0, 0, 0, -1),  # a batch without a sequence
        SnapshotEntry(1, 0, 0, 5, 0, 0, 0, -7),  # transaction offset below the sentinel
    ],
)
def test_impossible_entries_are_rejected(entry: SnapshotEntry) -> None:
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(encode_snapshot([entry]))


def test_file_write_is_atomic_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000001235.snapshot"
    write_snapshot_file(path, [GOLDEN_ENTRY])
    assert path.read_bytes() == GOLDEN
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    assert read_snapshot_file(path) == [GOLDEN_ENTRY]


def test_read_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000007.snapshot"
    path.write_bytes(GOLDEN[:-1])
    with pytest.raises(CorruptSnapshotError, match=re.escape(path.name)):
        read_snapshot_file(path)


def test_snapshot_files_scan_sorts_ignores_others_and_removes_stale_tmp(tmp_path: Path) -> None:
    for name in [
        "00000000000000000020.snapshot",
        "00000000000000000003.snapshot",
        "00000000000000000009.snapshot.tmp",  # a write cut by a crash
        "00000000000000000000.log",
        "7.snapshot",  # not a 20-digit name
        "leader-epoch-checkpoint",
    ]:
        (tmp_path / name).write_bytes(b"")
    files = SnapshotFiles(tmp_path)
    assert files.offsets == (3, 20)
    assert not (tmp_path / "00000000000000000009.snapshot.tmp").exists()
    assert (tmp_path / "00000000000000000000.log").exists()
    assert 3 in files
    assert 4 not in files


def test_snapshot_files_write_read_delete(tmp_path: Path) -> None:
    files = SnapshotFiles(tmp_path)
    assert files.write(30, [GOLDEN_ENTRY]) == tmp_path / "00000000000000000030.snapshot"
    files.write(10, [])
    assert list(files.offsets) == [10, 30]
    assert files.read(30) == [GOLDEN_ENTRY]
    files.delete(30)
    assert list(files.offsets) == [10]
    assert not (tmp_path / "00000000000000000030.snapshot").exists()
    assert SnapshotFiles(tmp_path).offsets == (10,)


def test_snapshot_files_of_a_missing_directory_are_empty(tmp_path: Path) -> None:
    assert SnapshotFiles(tmp_path / "absent").offsets == ()
