"""The per-batch scan without Spark: agreement with the storage engine's own walk, each kind of
damage, byte ranges, index entries, layout discovery and task planning."""

from __future__ import annotations

import itertools
import os
import random
import struct
from pathlib import Path

import pytest

from offline.batch_scan import (
    ScannedBatch,
    byte_ranges,
    read_index_entries,
    scan_records,
    scan_segment,
)
from offline.data_dirs import discover
from offline.datasource import OPEN_COST_BYTES, plan_slices
from runtime.log.file_batches import FileBatches
from runtime.log.offset_index import OffsetIndex
from runtime.log.time_index import TimeIndex
from tests.unit.offline.helpers import (
    EVENTS,
    TABLE,
    BuiltCluster,
    batches_in,
    build_cluster,
    flip_byte,
    kafka_python_batch,
    segment_paths,
    truncate_tail,
)
from wire.record_reader import iter_records
from wire.records import iter_batches


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> BuiltCluster:
    return build_cluster(tmp_path_factory.mktemp("scan") / "data", seed=3)


def engine_walk(path: Path) -> list[tuple[int, int, int, int]]:
    fd = os.open(path, os.O_RDONLY)
    try:
        walk = FileBatches(fd, 0, os.fstat(fd).st_size, validate=True)
        found = [(pos, h.base_offset, h.last_offset, h.crc) for pos, h, _ in walk]
        assert walk.error is None
        return found
    finally:
        os.close(fd)


def test_scan_agrees_with_the_storage_engine_walk(cluster: BuiltCluster) -> None:
    for path in sorted(cluster.root.glob("broker-*/*/*.log")):
        scanned = list(scan_segment(path))
        assert all(b.valid for b in scanned), path
        assert [(b.position, b.base_offset, b.last_offset, b.stored_crc) for b in scanned] == (
            engine_walk(path)
        )
        assert all(b.stored_crc == b.computed_crc for b in scanned)
        assert sum(b.size_bytes for b in scanned) == path.stat().st_size


def test_leader_batches_carry_offsets_and_epochs_as_appended(cluster: BuiltCluster) -> None:
    for tp, expected in cluster.batches.items():
        leader = cluster.root / "broker-0" / tp.dir_name
        scanned = [b for path in segment_paths(leader) for b in scan_segment(path)]
        assert [(b.base_offset, b.last_offset, b.leader_epoch) for b in scanned] == expected
        codecs = {b.attributes & 7 for b in scanned if b.attributes is not None}
        assert codecs == {0, 1, 2, 3, 4}, codecs


def test_records_match_the_wire_decoder_including_compressed(cluster: BuiltCluster) -> None:
    for path in segment_paths(cluster.root / "broker-1" / f"{EVENTS}-0"):
        data = path.read_bytes()
        expected = [r for pos, _ in iter_batches(data) for r in iter_records(data, pos)]
        assert [s.record for s in scan_records(path)] == expected


def test_independent_encoder_segment(tmp_path: Path) -> None:
    """A segment of kafka-python batches (one uncompressed, one gzip) with broker offsets."""
    rng = random.Random(11)
    data = b""
    base = 0
    for codec in (0, 1, 0):
        built, count = kafka_python_batch(rng, 4, 1_700_000_000_000, codec)
        patched = bytearray(built)
        struct.pack_into(">q", patched, 0, base)
        data += bytes(patched)
        base += count
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    scanned = list(scan_segment(path))
    assert [(b.base_offset, b.last_offset, b.attributes) for b in scanned] == [
        (0, 3, 0),
        (4, 7, 1),
        (8, 11, 0),
    ]
    assert all(b.valid for b in scanned)
    records = list(scan_records(path))
    assert [s.record.offset for s in records] == list(range(12))
    assert all(s.record.headers == (("h", b"x"),) for s in records)


def _one_segment(cluster: BuiltCluster, tmp_path: Path) -> tuple[Path, list[ScannedBatch]]:
    source = segment_paths(cluster.root / "broker-0" / f"{EVENTS}-1")[0]
    path = tmp_path / source.name
    path.write_bytes(source.read_bytes())
    return path, list(scan_segment(path))


def test_crc_mismatch_is_reported_and_the_walk_goes_on(
    cluster: BuiltCluster, tmp_path: Path
) -> None:
    path, clean = _one_segment(cluster, tmp_path)
    flip_byte(path, clean[1].position + 70)
    scanned = list(scan_segment(path))
    assert [b.kind for b in scanned] == [None, "crc_mismatch"] + [None] * (len(clean) - 2)
    assert scanned[1].stored_crc == clean[1].stored_crc
    assert scanned[1].computed_crc != clean[1].computed_crc


@pytest.mark.parametrize(
    ("byte_at", "value", "kind"),
    [(16, 7, "bad_magic"), (8, 3, "bad_length")],
)
def test_unreadable_header_stops_the_walk(
    cluster: BuiltCluster, tmp_path: Path, byte_at: int, value: int, kind: str
) -> None:
    path, clean = _one_segment(cluster, tmp_path)
    data = bytearray(path.read_bytes())
    at = clean[2].position
    if byte_at == 8:
        struct.pack_into(">i", data, at + 8, value)
    else:
        data[at + byte_at] = value
    path.write_bytes(bytes(data))
    scanned = list(scan_segment(path))
    assert [b.kind for b in scanned] == [None, None, kind]
    assert scanned[2].position == at
    assert scanned[2].size_bytes == len(data) - at
    assert scanned[2].base_offset is None


def test_torn_tail_keeps_the_header_it_could_read(cluster: BuiltCluster, tmp_path: Path) -> None:
    path, clean = _one_segment(cluster, tmp_path)
    truncate_tail(path, 50)
    scanned = list(scan_segment(path))
    last = scanned[-1]
    assert last.kind == "torn_tail"
    assert (last.base_offset, last.last_offset) == (clean[-1].base_offset, clean[-1].last_offset)
    assert last.size_bytes == clean[-1].size_bytes - 50
    assert last.computed_crc is None
    # a tail shorter than a header: still one row, with nothing read from it
    path.write_bytes(path.read_bytes()[: clean[-1].position + 30])
    tail = list(scan_segment(path))[-1]
    assert (tail.kind, tail.size_bytes, tail.base_offset) == ("torn_tail", 30, None)


def test_byte_ranges_start_at_batches_and_scan_to_the_same_rows(cluster: BuiltCluster) -> None:
    path = segment_paths(cluster.root / "broker-0" / f"{EVENTS}-0")[0]
    base = int(path.name.split(".")[0])
    whole = list(scan_segment(path))
    starts = {b.position for b in whole}
    for max_bytes in (1, 2_000, 5_000, 1 << 30):
        ranges = byte_ranges(path, base, max_bytes)
        assert ranges[0][0] == 0
        assert ranges[-1][1] == path.stat().st_size
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        assert {start for start, _ in ranges} <= starts
        pieces = [b for start, end in ranges for b in scan_segment(path, start, end)]
        assert pieces == whole, max_bytes
    assert len(byte_ranges(path, base, 2_000)) > 2


def test_index_entries_and_file_problems(cluster: BuiltCluster, tmp_path: Path) -> None:
    source = segment_paths(cluster.root / "broker-0" / f"{EVENTS}-0")[0]
    entries = read_index_entries(source, 0)
    offsets = [e for e in entries if e.kind == "offset"]
    assert offsets
    assert all(e.slot >= 0 and e.problem is None for e in entries)
    positions = {b.position: b for b in scan_segment(source)}
    for entry in offsets:
        assert entry.position is not None
        assert entry.offset is not None
        batch = positions[entry.position]
        assert batch.base_offset is not None
        assert batch.base_offset <= entry.offset
    copy = tmp_path / source.name
    copy.write_bytes(source.read_bytes())
    copy.with_suffix(".index").write_bytes(source.with_suffix(".index").read_bytes() + b"\0\1")
    problems = [e for e in read_index_entries(copy, 0) if e.slot < 0]
    assert [(e.kind, e.problem is not None) for e in problems] == [
        ("offset", True),
        ("time", True),
    ]
    assert "not a multiple" in str(problems[0].problem)
    assert "missing" in str(problems[1].problem)


def _engine_entries(log: Path, base: int) -> list[tuple[str, int, int | None, int | None]]:
    offsets = OffsetIndex(log.with_suffix(".index"), base, 1)
    times = TimeIndex(log.with_suffix(".timeindex"), base, 1)
    return [
        *(
            ("offset", e.offset, e.position, None)
            for e in map(offsets.entry_at, range(offsets.entries))
        ),
        *(("time", e.offset, None, e.timestamp) for e in map(times.entry_at, range(times.entries))),
    ]


def test_index_entries_are_what_the_storage_engine_loads(
    cluster: BuiltCluster, tmp_path: Path
) -> None:
    def ours(log: Path, base: int) -> list[tuple[str, int, int | None, int | None]]:
        entries = read_index_entries(log, base)
        assert [e.slot for e in entries if e.kind == "offset"] == list(
            range(sum(e.kind == "offset" for e in entries))
        )
        return [(e.kind, e.offset or 0, e.position, e.timestamp) for e in entries]

    for segment in discover([cluster.root]):
        log = Path(segment.path)
        assert ours(log, segment.segment) == _engine_entries(log, segment.segment), log
    # a preallocated tail of zeros is not entries; zeros before a real entry are
    source = segment_paths(cluster.root / "broker-0" / f"{EVENTS}-0")[0]
    copy = tmp_path / source.name
    copy.write_bytes(source.read_bytes())
    copy.with_suffix(".timeindex").write_bytes(source.with_suffix(".timeindex").read_bytes())
    index = source.with_suffix(".index").read_bytes()
    for content in (index + bytes(80), bytes(8) + index):
        copy.with_suffix(".index").write_bytes(content)
        assert ours(copy, 0) == _engine_entries(copy, 0)
    assert (
        len([e for e in read_index_entries(copy, 0) if e.kind == "offset"]) == len(index) // 8 + 1
    )


def test_discover_every_kind_of_path(cluster: BuiltCluster) -> None:
    everything = discover([cluster.root])
    # 3 events + 1 table + 1 quiet partitions on 3 brokers.
    assert len({(s.broker_dir, s.topic, s.partition) for s in everything}) == 15
    broker = cluster.root / "broker-1"
    assert discover([broker]) == [s for s in everything if s.broker_dir == str(broker)]
    partition = broker / f"{TABLE}-0"
    in_partition = discover([partition])
    assert {(s.topic, s.partition) for s in in_partition} == {(TABLE, 0)}
    one = discover([in_partition[0].path, partition])
    assert one == in_partition  # no duplicates
    with pytest.raises(FileNotFoundError):
        discover([cluster.root / "nowhere"])


def test_plan_slices_packs_small_segments_and_covers_every_byte(cluster: BuiltCluster) -> None:
    segments = discover([cluster.root])
    total = sum(s.size_bytes for s in segments)
    for min_partitions in (1, 2, 8):
        slices = plan_slices(segments, "batch", 128 << 20, min_partitions)
        pieces = [p for s in slices for p in s.pieces]
        assert sum(end - start for _, start, end in pieces) == total
        assert sorted({p[0] for p in pieces}) == segments
        target = max(
            OPEN_COST_BYTES, -(-(total + len(segments) * OPEN_COST_BYTES) // min_partitions)
        )
        assert len(slices) >= min(min_partitions, len(segments)) - 1
        for piece in slices:
            cost = sum(OPEN_COST_BYTES + end - start for _, start, end in piece.pieces)
            assert cost <= target or len(piece.pieces) == 1
    # a tiny target splits segments into byte ranges, still covering every byte once
    ranged = plan_slices(segments, "batch", 1_000, 1)
    assert sum(end - start for s in ranged for _, start, end in s.pieces) == total
    assert len(ranged) > len(segments)


def test_a_layout_with_batches_in_iter_batches_positions(cluster: BuiltCluster) -> None:
    """The helpers' own view (`batches_in`) and the scan agree on positions."""
    path = segment_paths(cluster.root / "broker-2" / f"{TABLE}-0")[0]
    assert [p for p, _ in batches_in(path)] == [b.position for b in scan_segment(path)]
