"""The "ketch" Spark data source: segment files of one or more log dirs as DataFrames.

Usage::

    register(spark)   # or build_session(), which registers it
    spark.read.format("ketch").option("level", "batch").load(paths)

``paths`` (one or several) may be cluster data dirs (holding ``broker-<id>/`` log dirs), broker
log dirs, partition dirs (``<topic>-<partition>``) or segment files (``<20 digits>.log``).
Levels and schemas are in `offline.schema`: ``batch`` (default), ``record`` and ``index``; and
``verify`` (`VERIFY_SCHEMA`, here: it is `ketch verify`'s working table, not a public contract):
per segment, one lean row per batch (offsets, leader epoch, size, CRC, reason, the producer
fields, the transactional flag and a control batch's control type) and, in the same task that
has the segment open, the index checks' findings (or, when the task holds only part of the
segment or the broker dir is listed in option ``raw_index_dirs``, the raw index entries for the
driver to judge), and the ``.txnindex`` entries, always raw: they are judged against the markers
of the whole partition, on the driver (`offline.verify_txn_checks`).

Partitioning (`plan_slices`): a segment file, or a byte range of a segment larger than the
target size (option ``max_partition_bytes``, default 128 MB; range starts at batch boundaries
from the segment's offset index, `offline.batch_scan.byte_ranges`), is the unit; small units are
packed into one task as Spark's file sources pack small files (option ``min_partitions``, default
1, spreads the bytes over at least that many tasks). ``read`` yields Arrow record batches of at
most ``CHUNK_ROWS`` rows, built column-wise from the scan's tuples.

What the paths stand for (`offline.data_dirs.discover`) is found on the driver, which only lists
directories; tasks open the files. The log dirs' small checkpoint files are read on the driver
into small DataFrames by `offline.checkpoint_tables`, not through this source. Nothing here
holds mutable shared state: no locks.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from offline.batch_scan import (
    ScannedBatch,
    byte_ranges,
    control_types,
    read_index_entries,
    read_txn_index,
    scan_records,
    scan_segment,
)
from offline.data_dirs import SegmentFile, discover
from offline.schema import (
    BATCH_ARROW,
    COMPRESSION_NAMES,
    INDEX_ARROW,
    LEVELS,
    RECORD_ARROW,
    arrow_schema,
)
from offline.verify_index_checks import index_readable_rows, segment_index_findings
from wire.records import CONTROL_BIT, TRANSACTIONAL_BIT

FORMAT: Final = "ketch"
VERIFY_LEVEL: Final = "verify"  # `ketch verify`'s working table (`VERIFY_SCHEMA`, below)
DEFAULT_MAX_PARTITION_BYTES: Final = 128 << 20
CHUNK_ROWS: Final = 4096
# What opening a file is worth in bytes when packing small segments into one task (Spark's
# spark.sql.files.openCostInBytes default).
OPEN_COST_BYTES: Final = 4 << 20


# -- the data source ----------------------------------------------------------------------------


class SegmentSlice(InputPartition):
    """One Spark input partition: byte ranges of segment files (picklable plain values)."""

    def __init__(self, pieces: Sequence[tuple[SegmentFile, int, int]]) -> None:
        super().__init__(None)
        self.pieces = tuple(pieces)


def _paths_option(options: dict[str, str]) -> list[str]:
    if "paths" in options:
        paths: list[str] = json.loads(options["paths"])
        return paths
    if "path" in options:
        return [options["path"]]
    raise ValueError("the ketch data source needs a path: .load(path) or .load([paths])")


class KetchDataSource(DataSource):
    """``spark.read.format("ketch")``; options ``level``, ``max_partition_bytes``,
    ``min_partitions`` and, for the verify level, ``raw_index_dirs`` (a JSON list)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _level(self) -> str:
        level = str(self.options.get("level", "batch")).lower()
        if level not in LEVELS and level != VERIFY_LEVEL:
            known = sorted([*LEVELS, VERIFY_LEVEL])
            raise ValueError(f"unknown level {level!r}: expected one of {known}")
        return level

    def schema(self) -> StructType:
        level = self._level()
        return VERIFY_SCHEMA if level == VERIFY_LEVEL else LEVELS[level]

    def reader(self, schema: StructType) -> DataSourceReader:
        options = dict(self.options)
        max_bytes = int(options.get("max_partition_bytes", DEFAULT_MAX_PARTITION_BYTES))
        min_partitions = int(options.get("min_partitions", 1))
        raw_index_dirs = frozenset(json.loads(options.get("raw_index_dirs", "[]")))
        return KetchReader(
            self._level(), _paths_option(options), max_bytes, min_partitions, raw_index_dirs
        )


class KetchReader(DataSourceReader):
    def __init__(
        self,
        level: str,
        paths: list[str],
        max_partition_bytes: int,
        min_partitions: int,
        raw_index_dirs: frozenset[str] = frozenset(),
    ) -> None:
        if max_partition_bytes <= 0:
            raise ValueError(f"max_partition_bytes must be positive, got {max_partition_bytes}")
        if min_partitions <= 0:
            raise ValueError(f"min_partitions must be positive, got {min_partitions}")
        self.level = level
        self.paths = paths
        self.max_partition_bytes = max_partition_bytes
        self.min_partitions = min_partitions
        self.raw_index_dirs = raw_index_dirs

    def partitions(self) -> list[SegmentSlice]:
        segments = discover(self.paths)
        if self.level not in ("index", VERIFY_LEVEL):  # these read a segment's index files too
            segments = [s for s in segments if s.size_bytes > 0]
        return plan_slices(segments, self.level, self.max_partition_bytes, self.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, SegmentSlice), partition
        for segment, start, end in partition.pieces:
            if self.level == "batch":
                yield from batch_level_batches(segment, start, end)
            elif self.level == "record":
                yield from record_level_batches(segment, start, end)
            elif self.level == VERIFY_LEVEL:
                whole = start == 0 and end >= segment.size_bytes
                judge = whole and segment.broker_dir not in self.raw_index_dirs
                yield from verify_level_batches(segment, start, end, judge_index=judge)
            else:
                yield index_level_batch(segment)


def plan_slices(
    segments: Sequence[SegmentFile], level: str, max_partition_bytes: int, min_partitions: int
) -> list[SegmentSlice]:
    """Input partitions: each segment, or each byte range of a segment larger than the target,
    with small neighbours packed into one task up to the target size.

    Why pack: a Python data source task costs a few hundred milliseconds to start (measured
    with pyspark 4: 43 one-segment tasks took 6.8 s for 380 KB), so one task per small
    segment would spend the job starting tasks. The target is Spark's file-source rule:
    ``min(max_partition_bytes, max(open cost, total / min_partitions))``, with each file
    costing ``OPEN_COST_BYTES`` more than its size, so `min_partitions` (the verify job
    passes Spark's default parallelism) keeps every core busy. The index level reads whole
    (small) index files, so each segment counts only its open cost there.
    """

    def cost(size: int) -> int:
        return OPEN_COST_BYTES + (0 if level == "index" else size)

    total = sum(cost(s.size_bytes) for s in segments)
    target = min(max_partition_bytes, max(OPEN_COST_BYTES, -(-total // min_partitions)))
    slices: list[SegmentSlice] = []
    pending: list[tuple[SegmentFile, int, int]] = []
    pending_cost = 0
    for segment in segments:
        if level == "index":
            ranges = [(0, segment.size_bytes)]
        else:
            ranges = byte_ranges(segment.path, segment.segment, target)
        for start, end in ranges:
            piece_cost = cost(end - start)
            if pending and pending_cost + piece_cost > target:
                slices.append(SegmentSlice(pending))
                pending, pending_cost = [], 0
            pending.append((segment, start, end))
            pending_cost += piece_cost
    if pending:
        slices.append(SegmentSlice(pending))
    return slices


def register(spark: SparkSession) -> None:
    spark.dataSource.register(KetchDataSource)


# -- Arrow column building ---------------------------------------------------------------------


def _location(segment: SegmentFile, rows: int) -> list[pa.Array]:
    return [
        pa.array([segment.broker_dir] * rows, pa.string()),
        pa.array([segment.topic] * rows, pa.string()),
        pa.array([segment.partition] * rows, pa.int32()),
        pa.array([segment.segment] * rows, pa.int64()),
    ]


_CODEC_NAMES: Final = pa.array(COMPRESSION_NAMES, pa.string())


def batch_rows_to_arrow(segment: SegmentFile, rows: Sequence[ScannedBatch]) -> pa.RecordBatch:
    """Columns from scan tuples: one transpose (C), one array per column, derived flags computed
    on the attributes column by Arrow kernels rather than per row in Python."""
    (position, size, base, last, epoch, magic, attrs, bts, mts, pid, pep, seq, count, stored,
     computed, reason) = zip(*rows, strict=True)  # fmt: skip
    attributes = pa.array(attrs, pa.int16())
    reasons = pa.array(reason, pa.string())
    columns = [
        *_location(segment, len(rows)),
        pa.array(position, pa.int64()),
        pa.array(base, pa.int64()),
        pa.array(last, pa.int64()),
        pa.array(epoch, pa.int32()),
        pa.array(magic, pa.int8()),
        attributes,
        pc.take(_CODEC_NAMES, pc.bit_wise_and(attributes, 7)),
        pc.not_equal(pc.bit_wise_and(attributes, 0x10), 0),
        pc.not_equal(pc.bit_wise_and(attributes, 0x20), 0),
        pa.array(bts, pa.int64()),
        pa.array(mts, pa.int64()),
        pa.array(pid, pa.int64()),
        pa.array(pep, pa.int16()),
        pa.array(seq, pa.int32()),
        pa.array(count, pa.int32()),
        pa.array(size, pa.int32()),
        pa.array(stored, pa.int64()),
        pa.array(computed, pa.int64()),
        pc.is_null(reasons),
        reasons,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=BATCH_ARROW)


def batch_level_batches(segment: SegmentFile, start: int, end: int) -> Iterator[pa.RecordBatch]:
    rows: list[ScannedBatch] = []
    for batch in scan_segment(segment.path, start, end):
        rows.append(batch)
        if len(rows) >= CHUNK_ROWS:
            yield batch_rows_to_arrow(segment, rows)
            rows = []
    if rows:
        yield batch_rows_to_arrow(segment, rows)


def record_level_batches(segment: SegmentFile, start: int, end: int) -> Iterator[pa.RecordBatch]:
    columns: list[list[Any]] = [[] for _ in range(9)]
    (batch_position, batch_base, offset, timestamp, key, value, headers, control, valid) = columns

    def flush() -> pa.RecordBatch:
        arrays = [
            *_location(segment, len(offset)),
            pa.array(batch_position, pa.int64()),
            pa.array(batch_base, pa.int64()),
            pa.array(offset, pa.int64()),
            pa.array(timestamp, pa.int64()),
            pa.array(key, pa.binary()),
            pa.array(value, pa.binary()),
            pa.array(headers, RECORD_ARROW.field("headers").type),
            pa.array(control, pa.bool_()),
            pa.array(valid, pa.bool_()),
        ]
        for column in columns:
            column.clear()
        return pa.RecordBatch.from_arrays(arrays, schema=RECORD_ARROW)

    for scanned in scan_records(segment.path, start, end):
        record = scanned.record
        batch_position.append(scanned.batch_position)
        batch_base.append(scanned.batch_base_offset)
        offset.append(record.offset)
        timestamp.append(record.timestamp)
        key.append(record.key)
        value.append(record.value)
        headers.append([{"key": k, "value": v} for k, v in record.headers])
        control.append(scanned.is_control)
        valid.append(True)  # scan_records yields records of valid batches only
        if len(offset) >= CHUNK_ROWS:
            yield flush()
    if offset:
        yield flush()


def index_level_batch(segment: SegmentFile) -> pa.RecordBatch:
    entries = read_index_entries(segment.path, segment.segment)
    arrays = [
        *_location(segment, len(entries)),
        pa.array([e.kind for e in entries], pa.string()),
        pa.array([e.slot for e in entries], pa.int32()),
        pa.array([e.offset for e in entries], pa.int64()),
        pa.array([e.position for e in entries], pa.int64()),
        pa.array([e.timestamp for e in entries], pa.int64()),
        pa.array([e.problem for e in entries], pa.string()),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=INDEX_ARROW)


# -- the verify level ---------------------------------------------------------------------------

VERIFY_SCHEMA: Final = StructType(
    [
        StructField("broker_dir", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("segment", LongType(), False),
        # "batch", "offset", "time", "finding" or "txn" (a .txnindex entry)
        StructField("row", StringType(), False),
        StructField("position", LongType(), True),  # batch, offset index entry
        # a batch's; an index entry's offset; a finding's first offset; a txn entry's first
        StructField("base_offset", LongType(), True),
        StructField("last_offset", LongType(), True),  # batch; finding's last; txn entry's last
        StructField("leader_epoch", IntegerType(), True),
        StructField("size_bytes", IntegerType(), True),
        StructField("stored_crc", LongType(), True),
        StructField("slot", IntegerType(), True),  # index/txn entry (-1: a file-level problem)
        StructField("timestamp", LongType(), True),  # time index entry
        StructField("reason", StringType(), True),  # batch: None when valid; finding: its kind
        # index or txn entry's file-level problem; finding's detail
        StructField("detail", StringType(), True),
        # A batch's producer fields, for the idempotent producers' and the transaction checks
        # (null in other rows but a txn entry's producer id).
        StructField("producer_id", LongType(), True),
        StructField("producer_epoch", ShortType(), True),
        StructField("base_sequence", IntegerType(), True),
        StructField("is_control", BooleanType(), True),
        StructField("is_transactional", BooleanType(), True),
        StructField("control_type", ShortType(), True),  # a control batch's record's type
    ]
)
VERIFY_ARROW: Final = arrow_schema(VERIFY_SCHEMA)
_VERIFY_COLUMNS: Final = len(VERIFY_SCHEMA.fields) - 5  # without the location and the row tag


def _verify_batch(
    segment: SegmentFile, columns: Sequence[Sequence[Any]], tag: str
) -> pa.RecordBatch:
    """`columns` after the row tag; rows other than batches may leave out the batches' own."""
    rows = len(columns[0])
    if len(columns) < _VERIFY_COLUMNS:
        columns = (*columns, *([(None,) * rows] * (_VERIFY_COLUMNS - len(columns))))
    assert len(columns) == _VERIFY_COLUMNS, len(columns)
    arrays = [
        *_location(segment, rows),
        pa.array([tag] * rows, pa.string()),
        *(pa.array(column, VERIFY_ARROW.field(i + 5).type) for i, column in enumerate(columns)),
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=VERIFY_ARROW)


def verify_level_batches(
    segment: SegmentFile, start: int, end: int, *, judge_index: bool
) -> Iterator[pa.RecordBatch]:
    """One row per batch starting in ``[start, end)``; with the first range of a segment, its
    index: the findings of `segment_index_findings` when `judge_index` (the task holds the whole
    segment and every batch of it counts), else the entries; and its ``.txnindex`` entries."""
    scanned = list(scan_segment(segment.path, start, end))
    for at in range(0, len(scanned), CHUNK_ROWS):
        chunk = scanned[at : at + CHUNK_ROWS]
        (position, size, base, last, epoch, _, attrs, _, _, pid, pep, seq, _, stored, _,
         reason) = zip(*chunk, strict=True)  # fmt: skip
        nones = (None,) * len(chunk)
        control = [None if a is None else a & CONTROL_BIT != 0 for a in attrs]
        transactional = [None if a is None else a & TRANSACTIONAL_BIT != 0 for a in attrs]
        types: list[int | None] = list(nones)
        if True in control:  # markers are few: their records are read only where they are
            chosen = [i for i, c in enumerate(control) if c and reason[i] is None]
            for i, kind in control_types(segment.path, chunk, chosen).items():
                types[i] = kind
        yield _verify_batch(
            segment,
            (position, base, last, epoch, size, stored, nones, nones, reason, nones, pid, pep,
             seq, control, transactional, types),
            "batch",
        )  # fmt: skip
    if start != 0:
        return
    yield from _txn_index_rows(segment)
    entries = read_index_entries(segment.path, segment.segment)
    if judge_index:
        batches = index_readable_rows(scanned)
        where = (segment.broker_dir, segment.topic, segment.partition, segment.segment)
        found = segment_index_findings(where, batches, entries)
        if found:
            nones = (None,) * len(found)
            yield _verify_batch(
                segment,
                (
                    nones,
                    [f.offsets[0] if f.offsets else None for f in found],
                    [f.offsets[1] if f.offsets else None for f in found],
                    nones, nones, nones, nones, nones,
                    [f.kind for f in found],
                    [f.detail for f in found],
                ),
                "finding",
            )  # fmt: skip
        return
    for tag in ("offset", "time"):
        mine = [e for e in entries if e.kind == tag]
        if mine:
            nones = (None,) * len(mine)
            yield _verify_batch(
                segment,
                (
                    [e.position for e in mine], [e.offset for e in mine], nones, nones, nones,
                    nones, [e.slot for e in mine], [e.timestamp for e in mine], nones,
                    [e.problem for e in mine],
                ),
                tag,
            )  # fmt: skip


def _txn_index_rows(segment: SegmentFile) -> Iterator[pa.RecordBatch]:
    """The segment's ``.txnindex`` entries as "txn" rows (slot, first offset as base_offset, last
    offset, producer id), or one slot -1 row whose detail says why the file is rejected."""
    entries, problem = read_txn_index(segment.path, segment.segment)
    if problem is not None:
        yield _verify_batch(
            segment, ((None,), (None,), (None,), (None,), (None,), (None,), (-1,), (None,),
                      (None,), (problem,)),
            "txn",
        )  # fmt: skip
        return
    if not entries:
        return
    nones = (None,) * len(entries)
    yield _verify_batch(
        segment,
        (nones, [e.first_offset for e in entries], [e.last_offset for e in entries], nones,
         nones, nones, list(range(len(entries))), nones, nones, nones,
         [e.producer_id for e in entries]),
        "txn",
    )  # fmt: skip
