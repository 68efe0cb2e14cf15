"""The verify level's table on the driver, cut per replica: batch columns in file order, the
raw index entries the scan tasks left to the driver, the findings the tasks made and the
``.txnindex`` entries (`split_scan`); and `reader`, the data source's reader the verify jobs
use. `offline.verify_job` judges what this returns.

Plain values built once per run on the driver: nothing shared, no locks.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrameReader, SparkSession

from offline import verify_checks as checks
from offline.datasource import FORMAT
from offline.verify_checks import BatchRow, Finding
from offline.verify_index_checks import IndexRow
from offline.verify_txn_checks import TxnEntryRow

_REPLICA_COLUMNS: Final = ("broker_dir", "topic", "partition")
_BATCH_ORDER: Final = (*_REPLICA_COLUMNS, "segment", "position")
ReplicaKey = tuple[str, str, int]  # (broker dir, topic, partition)
NO_BATCHES: Final[checks.Columns] = tuple([] for _ in BatchRow._fields)


@dataclass
class Scanned:
    """The verify level's table, split on the driver: batches per replica (file order), the raw
    index entries the tasks left to the driver, the findings the tasks made, and the
    ``.txnindex`` entries per replica."""

    batches: dict[ReplicaKey, checks.Columns] = field(default_factory=dict)
    entries: dict[tuple[str, str, int, int], list[IndexRow]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    txn_entries: dict[ReplicaKey, list[TxnEntryRow]] = field(default_factory=dict)


def split_scan(table: pa.Table) -> Scanned:
    """The batch rows sorted by Arrow and cut per replica into columns (lists): the checks take
    `plainly_clean` replicas as columns, and build `BatchRow`s only for the others."""
    out = Scanned()
    is_batch = pc.equal(table.column("row"), "batch")
    batches = table.filter(is_batch).sort_by([(name, "ascending") for name in _BATCH_ORDER])
    columns = [batches.column(name).to_pylist() for name in BatchRow._fields]
    at = 0
    keys = zip(*(batches.column(name).to_pylist() for name in _REPLICA_COLUMNS), strict=True)
    for key, run in itertools.groupby(keys):  # sorted: one run per replica
        count = len(list(run))
        out.batches[key] = tuple(column[at : at + count] for column in columns)
        at += count
    names = ("broker_dir", "topic", "partition", "segment", "row", "position", "base_offset",
             "last_offset", "slot", "timestamp", "reason", "detail", "producer_id")  # fmt: skip
    others = table.filter(pc.invert(is_batch))
    for (broker, topic, partition, segment, row, position, base, last, slot, timestamp, reason,
         detail, producer) in zip(*(others.column(n).to_pylist() for n in names),
                                  strict=True):  # fmt: skip
        if row == "txn":
            out.txn_entries.setdefault((broker, topic, partition), []).append(
                TxnEntryRow(segment, slot, producer, base, last, detail)
            )
        elif row == "finding":
            offsets = None if base is None else (base, base if last is None else last)
            out.findings.append(
                Finding(reason, broker, topic, partition, segment, offsets, detail or "")
            )
        else:
            out.entries.setdefault((broker, topic, partition, segment), []).append(
                IndexRow(row, slot, base, position, timestamp, detail)
            )
    for rows in out.txn_entries.values():
        rows.sort()  # tasks finish in any order; (segment, slot) is the files' order
    return out


def reader(spark: SparkSession, level: str) -> DataFrameReader:
    """A reader of `level` with at least one task per core."""
    return (
        spark.read.format(FORMAT)
        .option("level", level)
        .option("min_partitions", str(spark.sparkContext.defaultParallelism))
    )
