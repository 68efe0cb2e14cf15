"""`ketch verify`'s comparison of a partition's replicas, on the driver and in one Spark job.

Each partition held by several log dirs is compared over ``[lo, hi)`` (`replica_bounds`: the
largest first offset among its replicas, since retention may have removed more on one, to the
smallest of their HWs, log ends and limits):

* topics that are not compacted, byte by byte (`batch_replica_findings`): the same batches
  (base and last offset, epoch, size, CRC) on every replica, as a list comparison of their
  columns when every replica is `plainly_clean`, else batch by batch; a differing or missing
  batch is a ``replica_divergence``, consecutive ones merged into one range per replica
  (`merge_ranges`);
* compacted topics, record by record (`record_replica_findings`, a Spark job over their
  records, run only when there are some): the latest record per key below ``hi`` on every
  replica, a ``replica_record_divergence`` where they differ. The batches of aborted
  transactions (`offline.verify_txn_checks.aborted_batches`, whose ABORT markers lie below
  ``hi``) are left out: a cleaner removes them, so a compacted replica and one not compacted yet
  legitimately differ there.

Both stop at `MAX_DIVERGENT_ROWS` and say so. Called by `offline.verify_job`, which owns
everything here: plain values on the driver, no shared state, no locks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final

from pyspark.sql import SparkSession
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from offline import verify_checks as checks
from offline.verify_checks import Checked, Finding, ReplicaSummary
from offline.verify_layout import Layout, Replica
from offline.verify_scan import NO_BATCHES, ReplicaKey, Scanned, reader
from wire.topic import TopicPartition

MAX_DIVERGENT_ROWS: Final = 10_000  # per comparison; a report past that says "truncated"
Summary = dict[ReplicaKey, ReplicaSummary]  # replicas with at least one valid batch
BrokersOf = dict[TopicPartition, list[str]]  # the log dirs holding each partition
Bounds = list[tuple[str, int, int, int, int]]  # (topic, partition, lo, hi, replicas)

ABORTED_SCHEMA: Final = StructType(
    [
        StructField("broker_dir", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("batch_base_offset", LongType(), False),
    ]
)
BOUNDS_SCHEMA: Final = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("lo", LongType(), False),
        StructField("hi", LongType(), False),
        StructField("n_replicas", IntegerType(), False),
    ]
)


def replica_bounds(layout: Layout, summary: Summary) -> Bounds:
    """Per partition with several replicas: ``(topic, partition, lo, hi, replicas)``."""
    by_tp: dict[TopicPartition, list[Replica]] = {}
    for replica in layout.replicas:
        by_tp.setdefault(replica.tp, []).append(replica)
    bounds: Bounds = []
    for tp, replicas in sorted(by_tp.items()):
        if len(replicas) < 2:
            continue
        los, his = [], []
        for replica in replicas:
            row = summary.get((replica.broker_dir, tp.topic, tp.partition))
            first = 0 if row is None else row.first_offset
            end = 0 if row is None else row.next_offset
            los.append(first)
            his.append(min(end, replica.limit, end if replica.hw is None else replica.hw))
        lo, hi = max(los), min(his)
        if lo < hi:
            bounds.append((tp.topic, tp.partition, lo, hi, len(replicas)))
    return bounds


def _majority(variants: dict[str, Any]) -> Any:
    counts = Counter(variants.values())
    (top, count), *rest = counts.most_common()
    return top if not rest or rest[0][1] < count else None


def merge_ranges(
    hits: Iterable[tuple[str, str, int, int, int, str]],
) -> list[Finding]:
    """Consecutive divergent batches of one replica (in offset order) become one finding."""
    found: list[Finding] = []
    open_ranges: dict[tuple[str, str, int], list[Any]] = {}
    for broker_dir, topic, partition, first, last, detail in hits:
        key = (broker_dir, topic, partition)
        current = open_ranges.get(key)
        if current is not None and current[1] >= first - 1 and current[3] == detail:
            current[1] = max(current[1], last)
            continue
        if current is not None:
            found.append(_divergence(key, current))
        open_ranges[key] = [first, last, detail, detail]
    found.extend(_divergence(key, current) for key, current in open_ranges.items())
    return found


def _divergence(key: tuple[str, str, int], current: list[Any]) -> Finding:
    broker_dir, topic, partition = key
    first, last, detail, _ = current
    return Finding(
        "replica_divergence", broker_dir, topic, partition, None, (first, last),
        f"offsets {first}..{last}: {detail}",
    )  # fmt: skip


def _batch_divergences(rows: Sequence[Any], brokers_of: BrokersOf) -> list[Finding]:
    hits = []
    for row in rows:
        tp = TopicPartition(row["topic"], row["partition"])
        variants = {r["broker_dir"]: r["variant"] for r in row["replicas"]}
        majority = _majority(variants) if len(variants) == row["n_replicas"] else None
        if majority is None and len(variants) < row["n_replicas"]:
            majority = Counter(variants.values()).most_common(1)[0][0]
        for broker in brokers_of[tp]:
            mine = variants.get(broker)
            if mine is not None and mine == majority:
                continue
            if mine is None:
                detail = "batches missing here that the other replicas hold below the HW"
            elif majority is None:
                detail = "replicas disagree (no majority) on batch (last offset/epoch/size/crc)"
            else:
                detail = "batch differs from the other replicas (last offset/epoch/size/crc)"
            hits.append(
                (broker, tp.topic, tp.partition, row["base_offset"], row["last_offset"], detail)
            )
    hits.sort(key=lambda h: (h[0], h[1], h[2], h[3]))
    return merge_ranges(hits)


def _key_divergences(rows: Sequence[Any], brokers_of: BrokersOf) -> list[Finding]:
    found = []
    for row in rows:
        tp = TopicPartition(row["topic"], row["partition"])
        states = {s["broker_dir"]: s for s in row["states"]}
        key = bytes(row["key"])
        described = ", ".join(
            f"{b}: {'absent' if b not in states else 'offset ' + str(states[b]['offset'])}"
            for b in brokers_of[tp]
        )
        offsets = [s["offset"] for s in states.values()]
        found.append(
            Finding(
                "replica_record_divergence", None, tp.topic, tp.partition, None,
                (min(offsets), max(offsets)),
                f"key {key!r}: latest record below the HW differs ({described})",
            )
        )  # fmt: skip
    return found


def _log_dirs_of(layout: Layout) -> BrokersOf:
    brokers_of: BrokersOf = {}
    for replica in layout.replicas:
        brokers_of.setdefault(replica.tp, []).append(replica.broker_dir)
    return brokers_of


def batch_replica_findings(
    layout: Layout,
    scanned: Scanned,
    checked: dict[ReplicaKey, list[Checked]],
    bounds: Sequence[tuple[str, int, int, int, int]],
) -> list[Finding]:
    """Byte-level comparison of the replicas of every topic that is not compacted: a list
    comparison when every replica is `plainly_clean`, else batch by batch."""
    brokers_of = _log_dirs_of(layout)
    limits = {(r.broker_dir, r.tp.topic, r.tp.partition): r.limit for r in layout.replicas}
    plain = [b for b in bounds if b[0] not in layout.compacted_topics]
    found: list[Finding] = []
    rows: list[Any] = []
    for topic, partition, lo, hi, n_replicas in plain:
        keys = [(b, topic, partition) for b in brokers_of[TopicPartition(topic, partition)]]
        if not any(k in checked for k in keys) and checks.clean_spans_equal(
            [scanned.batches.get(k, NO_BATCHES) for k in keys], lo, hi
        ):
            continue
        for k in keys:
            if k not in checked:
                batches = checks.rows_of(scanned.batches.get(k, NO_BATCHES))
                checked[k] = checks.checked_batches(batches, limits[k])
        replicas = [(k[0], checked[k]) for k in keys]
        budget = MAX_DIVERGENT_ROWS - len(rows)
        for row in checks.divergent_batches(replicas, lo, hi, budget) if budget > 0 else []:
            rows.append({**row, "topic": topic, "partition": partition, "n_replicas": n_replicas})
    found.extend(_batch_divergences(rows, brokers_of))
    if len(rows) >= MAX_DIVERGENT_ROWS:
        found.append(_truncated("replica_divergence"))
    return found


def record_replica_findings(
    spark: SparkSession,
    layout: Layout,
    bounds: Sequence[tuple[str, int, int, int, int]],
    aborted: dict[ReplicaKey, list[tuple[int, int]]],
) -> list[Finding]:
    """Record-level comparison of compacted topics' replicas: a Spark job over their records,
    run only when there are some. The batches of transactions aborted below the compared range's
    end are left out (a cleaner removes them from one replica before another)."""
    compacted = [b for b in bounds if b[0] in layout.compacted_topics]
    if not compacted:
        return []
    hi_of = {(topic, partition): hi for topic, partition, _, hi, _ in compacted}
    aborted_rows = [
        (broker_dir, topic, partition, base)
        for (broker_dir, topic, partition), pairs in aborted.items()
        if (topic, partition) in hi_of
        for base, marker in pairs
        if marker < hi_of[(topic, partition)]
    ]
    dirs = [
        str(Path(r.broker_dir) / r.tp.dir_name)
        for r in layout.replicas
        if r.tp.topic in layout.compacted_topics
    ]
    records = reader(spark, "record").load(dirs)
    bounds_df = spark.createDataFrame(compacted, BOUNDS_SCHEMA)
    aborted_df = spark.createDataFrame(aborted_rows, ABORTED_SCHEMA) if aborted_rows else None
    key_rows = checks.divergent_keys(records, bounds_df, MAX_DIVERGENT_ROWS, aborted_df).collect()
    found = _key_divergences(key_rows, _log_dirs_of(layout))
    if len(key_rows) >= MAX_DIVERGENT_ROWS:
        found.append(_truncated("replica_record_divergence"))
    return found


def _truncated(kind: str) -> Finding:
    return Finding(
        kind, None, None, None, None, None,
        f"more than {MAX_DIVERGENT_ROWS} divergent entries; the list above is cut there",
    )  # fmt: skip
