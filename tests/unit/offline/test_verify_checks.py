"""`ketch verify`'s checks without Spark: the driver-side judgement (`offline.verify_job.judge`)
over the verify level read straight through the data source's reader (the code Spark tasks run),
and the pure checks of `offline.verify_checks` on hand-made rows.

The Spark test (`tests/spark/test_verify.py`) injects the same corruptions and runs the whole job;
here the same expectations are met whichever way the table is cut: index checks in the task or on
the driver, whole segments or byte ranges, tasks finishing in any order.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from offline.datasource import VERIFY_LEVEL, KetchReader
from offline.verify_checks import (
    NO_LIMIT,
    BatchRow,
    Checked,
    checked_batches,
    clean_spans_equal,
    clean_summary,
    divergent_batches,
    epoch_checkpoint_findings,
    invalid_batch_findings,
    ordering_findings,
    plainly_clean,
    replica_summary,
    segment_base_findings,
)
from offline.verify_index_checks import IndexRow, segment_index_findings
from offline.verify_job import judge
from offline.verify_layout import Layout, read_layout
from tests.unit.offline.corruptions import OPEN_TXN, corrupt
from tests.unit.offline.helpers import EVENT_PRODUCER_ID, EVENTS, BuiltCluster, build_cluster

KEY = ("/d/broker-0", "t", 0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> BuiltCluster:
    return build_cluster(tmp_path_factory.mktemp("verify") / "data", seed=8)


def _table(layout: Layout, max_bytes: int, *, raw_everywhere: bool, reverse: bool) -> pa.Table:
    paths = [str(b) for b in layout.broker_dirs]
    raw = frozenset(paths if raw_everywhere else layout.partial_dirs)
    reader = KetchReader(VERIFY_LEVEL, paths, max_bytes, 2, raw)
    slices = reader.partitions()
    ordered = list(reversed(slices)) if reverse else slices
    return pa.Table.from_batches([b for s in ordered for b in reader.read(s)])


CUTS = [
    pytest.param(128 << 20, False, False, id="whole-segments-index-in-task"),
    pytest.param(3_000, False, True, id="byte-ranges-reversed"),
    pytest.param(2_000, True, True, id="byte-ranges-index-on-driver"),
]


@pytest.mark.parametrize(("max_bytes", "raw_everywhere", "reverse"), CUTS)
def test_clean_copy_has_no_findings(
    cluster: BuiltCluster, tmp_path: Path, max_bytes: int, raw_everywhere: bool, reverse: bool
) -> None:
    root = tmp_path / "data"
    shutil.copytree(cluster.root, root)
    layout = read_layout([str(root)])
    table = _table(layout, max_bytes, raw_everywhere=raw_everywhere, reverse=reverse)
    judged = judge(layout, table)
    assert judged.findings == []
    # the events are an idempotent producer's, over two producer epochs: no gap either
    assert EVENT_PRODUCER_ID in table.column("producer_id").to_pylist()
    assert judged.sequence_gaps == []
    assert (
        sum(s.batches for s in judged.summary.values())
        == 3 * sum(len(b) for b in cluster.batches.values()) + 3 * 10
    )
    # the compacted topic's replicas are left to the record-level Spark job
    assert {b[0] for b in judged.bounds} == {"events", "table"}


@pytest.mark.parametrize(("max_bytes", "raw_everywhere", "reverse"), CUTS)
def test_every_injected_problem_is_found_by_the_driver(
    cluster: BuiltCluster, tmp_path: Path, max_bytes: int, raw_everywhere: bool, reverse: bool
) -> None:
    root = tmp_path / "data"
    shutil.copytree(cluster.root, root)
    expected = {e for e in corrupt(cluster, root) if e[0] != "replica_record_divergence"}
    layout = read_layout([str(root)])
    judged = judge(
        layout, _table(layout, max_bytes, raw_everywhere=raw_everywhere, reverse=reverse)
    )
    found = {
        (
            f.kind,
            None if f.broker_dir is None else Path(f.broker_dir).name,
            f.topic,
            f.partition,
            f.offsets,
        )
        for f in judged.findings
    }
    details = "\n".join(f"{f.kind} {f.broker_dir} {f.detail}" for f in judged.findings)
    assert found == expected, details
    assert len(judged.findings) == len(expected), details
    # Producer sequence gaps are no findings, but a batch lost to damage leaves one: the
    # CRC-damaged batch of events-0 on broker-1. The segment removed from events-2 on broker-2
    # held the first batches of producer epoch 1, and a new epoch may start at any sequence.
    gapped = {(Path(g.broker_dir).name, g.topic, g.partition) for g in judged.sequence_gaps}
    assert gapped == {("broker-1", EVENTS, 0)}
    # The transaction left open is no finding, only counted.
    assert [(t.topic, t.partition, t.producer_id) for t in judged.open_transactions] == [OPEN_TXN]


def _batch(
    segment: int,
    position: int,
    base: int | None,
    last: int | None,
    epoch: int | None = 1,
    reason: str | None = None,
) -> BatchRow:
    return BatchRow(segment, position, base, last, epoch, 100, 7, reason)


def test_an_invalid_batch_is_placed_after_its_predecessor_and_judged_below_the_limit() -> None:
    rows = [
        _batch(0, 0, 0, 4),
        _batch(0, 100, 5, 9, reason="crc_mismatch: stored 1, computed 2"),
        _batch(0, 200, None, None, None, "bad_magic: magic 7 (expected 2)"),
    ]
    checked = checked_batches(rows, NO_LIMIT)
    assert [c.place for c in checked] == [0, 5, 10]
    found = invalid_batch_findings(KEY, checked)
    # a readable batch keeps its own offsets; an unreadable one is placed after the previous
    assert [(f.kind, f.offsets) for f in found] == [
        ("crc_mismatch", (5, 9)),
        ("bad_magic", (10, 10)),
    ]
    assert [c.place for c in checked_batches(rows, 10)] == [0, 5]
    # an unreadable batch first in its partition sits at its segment's base offset
    assert checked_batches(rows[2:], NO_LIMIT)[0].place == 0


def test_ordering_between_valid_neighbours_only() -> None:
    rows = [
        _batch(0, 0, 0, 9, epoch=2),
        _batch(0, 100, 5, 12, epoch=2),  # overlaps 0..9
        _batch(0, 200, 3, 4, epoch=2),  # not increasing
        _batch(20, 0, 20, 21, epoch=1),  # a gap 13..19 (from the previous valid: 3..4 -> 5..19)
        _batch(20, 100, 30, 31, reason="crc_mismatch: x"),  # invalid: neither side judged
        _batch(20, 200, 40, 41, epoch=1),
    ]
    checked = checked_batches(rows, NO_LIMIT)
    found = {(f.kind, f.offsets) for f in ordering_findings(KEY, checked, compacted=False)}
    assert found == {
        ("offset_overlap", (5, 9)),
        ("offsets_not_increasing", (3, 4)),
        ("offset_gap", (5, 19)),
        ("epoch_decreasing", (20, 21)),
    }
    compacted = {(f.kind, f.offsets) for f in ordering_findings(KEY, checked, compacted=True)}
    assert compacted == found - {("offset_gap", (5, 19))}


def test_epoch_checkpoint_ranges_with_equal_starts() -> None:
    checked = [Checked(_batch(0, 0, 10, 12, epoch=e), 10, None) for e in (3, 2)]
    epochs = [(1, 0), (2, 10), (3, 10)]  # epoch 2 covers no offsets
    found = epoch_checkpoint_findings(KEY, checked, epochs)
    assert [(f.offsets, f.detail.split("; ")[1]) for f in found] == [
        ((10, 12), "first: 2 where the checkpoint says 3")
    ]
    assert epoch_checkpoint_findings(KEY, checked[:1], epochs) == []


def test_segment_index_findings_each_kind() -> None:
    batches = [_batch(100, 0, 100, 104), _batch(100, 500, 105, 109)]
    entries = [
        IndexRow("offset", 0, 100, 0, None, None),  # fine
        IndexRow("offset", 1, 103, 250, None, None),  # no batch starts there
        IndexRow("offset", 2, 104, 500, None, None),  # the batch there starts at 105
        IndexRow("offset", 3, 104, 600, None, None),  # nowhere, and not above the previous
        IndexRow("offset", 4, 120, 500, None, None),  # past the segment's end; position back
        IndexRow("time", 0, 101, None, 50, None),  # fine
        IndexRow("time", 1, 102, None, 40, None),  # goes back in time
        IndexRow("time", 2, 150, None, 60, None),  # outside the segment
        IndexRow("time", 3, 900, None, 70, None),  # at or above the limit: not judged
        IndexRow("offset", -1, None, None, None, "x.index is missing"),
    ]
    found = segment_index_findings((*KEY, 100), batches, entries, limit=500)
    got = sorted((f.kind, f.offsets, f.detail.split(": ")[-1]) for f in found)
    assert got == sorted(
        [
            ("offset_index_entry", (103, 103), "no batch starts there"),
            ("offset_index_entry", (104, 104), "the batch there starts at offset 105"),
            ("offset_index_entry", (104, 104), "no batch starts there"),
            ("offset_index_order", (104, 104), "not above the previous entry (104 -> byte 500)"),
            ("offset_index_entry", (120, 120), "the segment ends at offset 109"),
            ("offset_index_order", (120, 120), "not above the previous entry (104 -> byte 600)"),
            ("time_index_order", (102, 102), "goes back from (50, offset 101)"),
            ("time_index_entry", (150, 150), "offset outside the segment's batches"),
            ("index_file", None, "x.index is missing"),
        ]
    )


def test_divergent_batches_report_differences_and_absences() -> None:
    same = [Checked(_batch(0, 0, 0, 4), 0, None), Checked(_batch(0, 100, 5, 9), 5, None)]
    other = [Checked(_batch(0, 0, 0, 4, epoch=9), 0, None)]  # differs at 0, lacks 5..9
    rows = divergent_batches([("a", same), ("b", same), ("c", other)], 0, 10, 100)
    assert [(r["base_offset"], r["last_offset"], len(r["replicas"])) for r in rows] == [
        (0, 4, 3),
        (5, 9, 2),
    ]
    assert divergent_batches([("a", same), ("b", same)], 0, 10, 100) == []
    assert len(divergent_batches([("a", same), ("c", other)], 0, 10, 1)) == 1


def _random_replica(rng: random.Random) -> tuple[list[BatchRow], list[tuple[int, int]]]:
    """A clean replica (contiguous batches over segments, epochs rising at checkpointed
    offsets), then with a few random faults of the kinds the checks look for."""
    rows, epochs = [], [(1, 0)]
    offset, epoch, segment, position = 0, 1, 0, 0
    for _ in range(rng.randrange(0, 12)):
        if rng.random() < 0.2:
            segment, position = offset, 0
        if rng.random() < 0.2:
            epoch += 1
            epochs.append((epoch, offset))
        last = offset + rng.randrange(0, 4)
        rows.append(BatchRow(segment, position, offset, last, epoch, 100, 7, None))
        offset, position = last + 1, position + 100
    for _ in range(rng.randrange(0, 3)):
        if not rows:
            break
        at = rng.randrange(len(rows))
        row = rows[at]
        assert row.base_offset is not None
        assert row.last_offset is not None
        faults = [
            row._replace(base_offset=row.base_offset + rng.choice([-1, 1])),
            row._replace(last_offset=row.last_offset + rng.choice([-1, 1])),
            row._replace(leader_epoch=rng.choice([0, 1, epoch + 1])),
            row._replace(reason="crc_mismatch: x"),
            row._replace(segment=row.segment + 1),
        ]
        rows[at] = rng.choice(faults)
    return rows, epochs


def test_the_fast_path_passes_only_what_the_per_batch_checks_pass() -> None:
    seed = 12
    rng = random.Random(seed)
    passed = 0
    for case in range(3_000):
        rows, epochs = _random_replica(rng)
        rows.sort()
        compacted = rng.random() < 0.3
        columns = tuple(list(column) for column in zip(*rows, strict=True)) or tuple(
            [] for _ in BatchRow._fields
        )
        checked = checked_batches(rows, NO_LIMIT)
        found = [
            *invalid_batch_findings(KEY, checked),
            *ordering_findings(KEY, checked, compacted),
            *segment_base_findings(KEY, checked, compacted),
            *epoch_checkpoint_findings(KEY, checked, epochs),
        ]
        if plainly_clean(columns, compacted, NO_LIMIT, epochs):
            passed += 1
            assert found == [], f"seed {seed} case {case}: {rows} {epochs}"
            assert clean_summary(columns) == replica_summary(checked), f"seed {seed} case {case}"
    assert 300 < passed < 2_900, (
        f"seed {seed}: {passed} clean cases; the faults are too rare/common"
    )
    clean_rows = [BatchRow(0, 0, 0, 4, 1, 100, 7, None), BatchRow(0, 100, 5, 9, 1, 100, 7, None)]
    clean = tuple(list(c) for c in zip(*clean_rows, strict=True))
    assert plainly_clean(clean, False, NO_LIMIT, [(1, 0)])
    assert not plainly_clean(clean, False, 9, [(1, 0)])  # a limit: judged batch by batch
    assert clean_spans_equal([clean, clean], 0, 10)
    other = (*clean[:6], [7, 8], clean[7])  # another CRC
    assert not clean_spans_equal([clean, other], 0, 10)
    assert clean_spans_equal([clean, other], 0, 0)
