"""The Spark side of `ketch verify`: each check turns the scanned batches (and index entries,
and for compacted topics records) into a DataFrame of findings with one common schema.

Inputs prepared by `offline.verify` on the driver:

* ``replicas`` — one row per (broker dir, topic, partition): ``limit`` (check only offsets
  below it: the recovery point of a dir without a clean-shutdown marker, else no limit),
  ``compacted``, and the HW from the checkpoint.
* the batch DataFrame of the data source, restricted here to what lies below each ``limit``.

Checks (finding kinds):

* per batch, from the scan: ``crc_mismatch``, ``bad_magic``, ``bad_length``, ``torn_tail``,
  ``bad_codec``, ``bad_count``;
* per partition, ordered by (segment, position), between consecutive valid batches:
  ``offsets_not_increasing``, ``offset_overlap``, ``offset_gap`` (not for compacted topics),
  ``epoch_decreasing``; per segment: ``segment_base_mismatch`` (first batch's base offset
  differs from the file name's, or for a compacted topic lies below it);
* against leader-epoch-checkpoint: ``epoch_checkpoint_mismatch`` (a batch's epoch is not the
  one the checkpoint gives for its base offset), one finding per replica with the range;
* indexes: ``index_file`` (missing, or not whole entries), ``offset_index_entry`` (no batch
  starts at the entry's position, or that batch starts above the entry's offset, or the offset
  lies past the segment's last), ``offset_index_order``, ``time_index_order`` (time or offset
  decreasing), ``time_index_entry`` (offset outside the segment).

The replica comparisons (byte level, record level) need per-partition bounds computed on the
driver from the per-replica summary; they are in `divergent_batches` / `divergent_keys`, which
return rows for the driver to merge into ranges.

DataFrames are immutable values and Spark owns their execution: no state here to guard.
"""

from __future__ import annotations

from functools import reduce
from typing import Final

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

NO_LIMIT: Final = 2**63 - 1
FINDING_SCHEMA: Final = StructType(
    [
        StructField("kind", StringType(), False),
        StructField("broker_dir", StringType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", LongType(), True),
        StructField("segment", LongType(), True),
        StructField("first_offset", LongType(), True),
        StructField("last_offset", LongType(), True),
        StructField("detail", StringType(), True),
    ]
)
_KEYS: Final = ("broker_dir", "topic", "partition")
# Kinds after which the batch's length (hence the next batch's position) is still trusted.
_READABLE_KINDS: Final = ("crc_mismatch", "bad_codec", "bad_count")


def _finding(
    df: DataFrame,
    kind: Column | str,
    *,
    segment: Column | None,
    first: Column | None,
    last: Column | None,
    detail: Column,
) -> DataFrame:
    def long_or_null(column: Column | None) -> Column:
        return (column if column is not None else F.lit(None)).cast("long")

    return df.select(
        (F.lit(kind) if isinstance(kind, str) else kind).alias("kind"),
        F.col("broker_dir"),
        F.col("topic"),
        F.col("partition").cast("long").alias("partition"),
        long_or_null(segment).alias("segment"),
        long_or_null(first).alias("first_offset"),
        long_or_null(last).alias("last_offset"),
        detail.cast("string").alias("detail"),
    )


def checked_batches(batches: DataFrame, replicas: DataFrame) -> DataFrame:
    """The batches to judge: those below each replica's limit, with the replica's columns.

    An invalid batch's own offsets are not trusted, so its place is the offset after the
    previous batch of the partition (or the segment's base offset when it comes first).
    """
    order = Window.partitionBy(*_KEYS).orderBy("segment", "position")
    placed = batches.join(F.broadcast(replicas), list(_KEYS)).withColumn(
        "place",
        F.when(F.col("valid"), F.col("base_offset")).otherwise(
            F.coalesce(F.lag("last_offset").over(order) + 1, F.col("segment"))
        ),
    )
    return placed.where(F.col("place") < F.col("limit")).withColumn(
        "kind", F.substring_index(F.col("reason"), ":", 1)
    )


def invalid_batch_findings(checked: DataFrame) -> DataFrame:
    bad = checked.where(~F.col("valid"))
    readable = F.col("kind").isin(*_READABLE_KINDS) | (F.col("kind") == "torn_tail")
    return _finding(
        bad,
        F.col("kind"),
        segment=F.col("segment"),
        first=F.when(readable, F.col("base_offset")).otherwise(F.col("place")),
        last=F.when(readable, F.col("last_offset")),
        detail=F.concat(F.lit("batch at byte "), F.col("position"), F.lit(": "), F.col("reason")),
    )


def ordering_findings(checked: DataFrame) -> DataFrame:
    """Offsets and epochs between consecutive batches, judged only when both are valid (an
    invalid batch is reported once, by its own kind, not again by its neighbours)."""
    order = Window.partitionBy(*_KEYS).orderBy("segment", "position")
    rows = checked.where(F.col("valid") | F.col("kind").isin(*_READABLE_KINDS)).select(
        *_KEYS,
        "segment",
        "position",
        "base_offset",
        "last_offset",
        "leader_epoch",
        "valid",
        "compacted",
        F.lag("base_offset").over(order).alias("prev_base"),
        F.lag("last_offset").over(order).alias("prev_last"),
        F.lag("leader_epoch").over(order).alias("prev_epoch"),
        F.lag("valid").over(order).alias("prev_valid"),
        F.lag("segment").over(order).alias("prev_segment"),
    )
    judged = rows.where(F.col("valid") & F.col("prev_valid"))
    where = F.concat(
        F.lit("batch at byte "),
        F.col("position"),
        F.lit(" of segment "),
        F.col("segment"),
        F.when(
            F.col("segment") != F.col("prev_segment"),
            F.concat(F.lit(" (previous batch in segment "), F.col("prev_segment"), F.lit(")")),
        ).otherwise(F.lit("")),
    )
    span = F.concat(F.col("base_offset"), F.lit(".."), F.col("last_offset"))
    prev_span = F.concat(F.col("prev_base"), F.lit(".."), F.col("prev_last"))
    found = [
        _finding(
            judged.where(F.col("base_offset") <= F.col("prev_base")),
            "offsets_not_increasing",
            segment=F.col("segment"),
            first=F.col("base_offset"),
            last=F.col("last_offset"),
            detail=F.concat(where, F.lit(": offsets "), span, F.lit(" after "), prev_span),
        ),
        _finding(
            judged.where(
                (F.col("base_offset") > F.col("prev_base"))
                & (F.col("base_offset") <= F.col("prev_last"))
            ),
            "offset_overlap",
            segment=F.col("segment"),
            first=F.col("base_offset"),
            last=F.least(F.col("prev_last"), F.col("last_offset")),
            detail=F.concat(where, F.lit(": offsets "), span, F.lit(" overlap "), prev_span),
        ),
        _finding(
            judged.where(~F.col("compacted") & (F.col("base_offset") > F.col("prev_last") + 1)),
            "offset_gap",
            segment=F.col("segment"),
            first=F.col("prev_last") + 1,
            last=F.col("base_offset") - 1,
            detail=F.concat(
                where,
                F.lit(": offsets "),
                F.col("prev_last") + 1,
                F.lit(".."),
                F.col("base_offset") - 1,
                F.lit(" missing"),
            ),
        ),
        _finding(
            judged.where(F.col("leader_epoch") < F.col("prev_epoch")),
            "epoch_decreasing",
            segment=F.col("segment"),
            first=F.col("base_offset"),
            last=F.col("last_offset"),
            detail=F.concat(
                where,
                F.lit(": leader epoch "),
                F.col("leader_epoch"),
                F.lit(" after "),
                F.col("prev_epoch"),
            ),
        ),
    ]
    return reduce(DataFrame.unionByName, found)


def segment_base_findings(checked: DataFrame) -> DataFrame:
    firsts = (
        checked.where(F.col("valid"))
        .groupBy(*_KEYS, "segment", "compacted")
        .agg(F.min_by("base_offset", "position").alias("first_base"))
    )
    wrong = F.when(F.col("compacted"), F.col("first_base") < F.col("segment")).otherwise(
        F.col("first_base") != F.col("segment")
    )
    return _finding(
        firsts.where(wrong),
        "segment_base_mismatch",
        segment=F.col("segment"),
        first=F.col("first_base"),
        last=None,
        detail=F.concat(
            F.lit("segment "),
            F.col("segment"),
            F.lit(" starts with a batch at offset "),
            F.col("first_base"),
        ),
    )


def epoch_checkpoint_findings(checked: DataFrame, epochs: DataFrame) -> DataFrame:
    """`epochs`: (broker_dir, topic, partition, epoch, start_offset) of leader-epoch-checkpoint."""
    ranges = epochs.withColumn(
        "next_start",
        F.coalesce(
            F.lead("start_offset").over(Window.partitionBy(*_KEYS).orderBy("start_offset")),
            F.lit(NO_LIMIT),
        ),
    )
    valid = checked.where(F.col("valid") & (F.col("leader_epoch") >= 0)).alias("b")
    joined = valid.join(
        F.broadcast(ranges).alias("e"),
        [F.col(f"b.{k}") == F.col(f"e.{k}") for k in _KEYS]
        + [
            F.col("b.base_offset") >= F.col("e.start_offset"),
            F.col("b.base_offset") < F.col("e.next_start"),
        ],
    ).where(F.col("b.leader_epoch") != F.col("e.epoch"))
    grouped = joined.groupBy(*[F.col(f"b.{k}").alias(k) for k in _KEYS]).agg(
        F.min("b.base_offset").alias("first"),
        F.max("b.last_offset").alias("last"),
        F.count(F.lit(1)).alias("batches"),
        F.min_by(F.struct("b.leader_epoch", "e.epoch"), "b.base_offset").alias("example"),
    )
    return _finding(
        grouped,
        "epoch_checkpoint_mismatch",
        segment=None,
        first=F.col("first"),
        last=F.col("last"),
        detail=F.concat(
            F.col("batches"),
            F.lit(" batch(es) carry a leader epoch other than leader-epoch-checkpoint's; first: "),
            F.col("example.leader_epoch"),
            F.lit(" where the checkpoint says "),
            F.col("example.epoch"),
        ),
    )


def index_findings(index: DataFrame, checked: DataFrame, replicas: DataFrame) -> DataFrame:
    entries = index.join(F.broadcast(replicas), list(_KEYS))
    problems = _finding(
        entries.where(F.col("slot") < 0),
        "index_file",
        segment=F.col("segment"),
        first=None,
        last=None,
        detail=F.col("problem"),
    )
    real = entries.where((F.col("slot") >= 0) & (F.col("offset") < F.col("limit")))
    seg_keys = [*_KEYS, "segment"]
    # An entry is judged against every batch whose header was read, damaged ones included: an
    # entry naming a torn or corrupt batch is right about where it is, and that batch is
    # reported once, by its own kind.
    readable = checked.where(
        F.col("valid") | F.col("kind").isin(*_READABLE_KINDS, "torn_tail")
    ).where(F.col("last_offset").isNotNull())
    # Batches and entries of a segment in one stream, so one shuffle by segment serves every
    # index check (joins would shuffle each side again): ordered by position, an offset entry
    # must follow a batch at its own position.
    batch_rows = readable.select(
        *seg_keys,
        F.lit("batch").alias("index_kind"),
        F.lit(None).cast("int").alias("slot"),
        F.col("base_offset").alias("offset"),
        "last_offset",
        "position",
        F.lit(None).cast("long").alias("timestamp"),
    )
    entry_rows = real.select(
        *seg_keys,
        "index_kind",
        "slot",
        "offset",
        F.lit(None).cast("long").alias("last_offset"),
        "position",
        "timestamp",
    )
    by_position = (
        Window.partitionBy(*seg_keys)
        .orderBy(F.col("position"), F.col("index_kind"))  # "batch" < "offset" at one position
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    is_batch = F.col("index_kind") == "batch"
    stream = batch_rows.unionByName(entry_rows).select(
        "*",
        F.max(F.when(is_batch, F.col("last_offset")))
        .over(Window.partitionBy(*seg_keys))
        .alias("seg_last"),
        F.last(F.when(is_batch, F.col("position")), ignorenulls=True)
        .over(by_position)
        .alias("batch_position"),
        F.last(F.when(is_batch, F.col("offset")), ignorenulls=True)
        .over(by_position)
        .alias("prev_batch_base"),
    )
    offsets = stream.where(F.col("index_kind") == "offset").withColumn(
        "batch_base",
        F.when(F.col("batch_position") == F.col("position"), F.col("prev_batch_base")),
    )
    entry_text = F.concat(
        F.lit("offset index slot "),
        F.col("slot"),
        F.lit(" ("),
        F.col("offset"),
        F.lit(" -> byte "),
        F.col("position"),
        F.lit("): "),
    )
    bad_pointer = offsets.where(
        F.col("batch_base").isNull()
        | (F.col("batch_base") > F.col("offset"))
        | (F.col("offset") > F.col("seg_last"))
    )
    pointer = _finding(
        bad_pointer,
        "offset_index_entry",
        segment=F.col("segment"),
        first=F.col("offset"),
        last=F.col("offset"),
        detail=F.concat(
            entry_text,
            F.when(F.col("batch_base").isNull(), F.lit("no batch starts there"))
            .when(
                F.col("batch_base") > F.col("offset"),
                F.concat(F.lit("the batch there starts at offset "), F.col("batch_base")),
            )
            .otherwise(F.concat(F.lit("the segment ends at offset "), F.col("seg_last"))),
        ),
    )
    by_slot = Window.partitionBy(*seg_keys).orderBy("index_kind", "slot")
    same_kind = F.lag("index_kind").over(by_slot) == F.col("index_kind")
    ordered = stream.where(~is_batch).select(
        "*",
        F.when(same_kind, F.lag("offset").over(by_slot)).alias("prev_offset"),
        F.when(same_kind, F.lag("position").over(by_slot)).alias("prev_position"),
        F.when(same_kind, F.lag("timestamp").over(by_slot)).alias("prev_timestamp"),
    )
    offset_order = _finding(
        ordered.where(
            (F.col("index_kind") == "offset")
            & (
                (F.col("offset") <= F.col("prev_offset"))
                | (F.col("position") <= F.col("prev_position"))
            )
        ),
        "offset_index_order",
        segment=F.col("segment"),
        first=F.col("offset"),
        last=F.col("offset"),
        detail=F.concat(
            entry_text,
            F.lit("not above the previous entry ("),
            F.col("prev_offset"),
            F.lit(" -> byte "),
            F.col("prev_position"),
            F.lit(")"),
        ),
    )
    times = ordered.where(F.col("index_kind") == "time")
    time_text = F.concat(
        F.lit("time index slot "),
        F.col("slot"),
        F.lit(" ("),
        F.col("timestamp"),
        F.lit(", offset "),
        F.col("offset"),
        F.lit("): "),
    )
    time_order = _finding(
        times.where(
            (F.col("timestamp") < F.col("prev_timestamp"))
            | (F.col("offset") < F.col("prev_offset"))
        ),
        "time_index_order",
        segment=F.col("segment"),
        first=F.col("offset"),
        last=F.col("offset"),
        detail=F.concat(
            time_text,
            F.lit("goes back from ("),
            F.col("prev_timestamp"),
            F.lit(", offset "),
            F.col("prev_offset"),
            F.lit(")"),
        ),
    )
    time_range = _finding(
        times.where(
            (F.col("offset") < F.col("segment"))
            | F.col("seg_last").isNull()
            | (F.col("offset") > F.col("seg_last"))
        ),
        "time_index_entry",
        segment=F.col("segment"),
        first=F.col("offset"),
        last=F.col("offset"),
        detail=F.concat(time_text, F.lit("offset outside the segment's batches")),
    )
    return reduce(DataFrame.unionByName, [problems, pointer, offset_order, time_order, time_range])


def replica_summary(checked: DataFrame) -> DataFrame:
    """Per replica: first and next offset of its valid batches, counts and bytes."""
    valid = checked.where(F.col("valid"))
    return valid.groupBy(*_KEYS).agg(
        F.min("base_offset").alias("first_offset"),
        (F.max("last_offset") + 1).alias("next_offset"),
        F.count(F.lit(1)).alias("batches"),
        F.sum("size_bytes").alias("bytes"),
    )


def divergent_batches(checked: DataFrame, bounds: DataFrame, max_rows: int) -> DataFrame:
    """Batch groups (same topic, partition, base offset) in ``[lo, hi)`` of `bounds` where the
    replicas disagree: a differing (last offset, epoch, size, CRC) or a replica without it.

    Byte identity by CRC: the stored CRC covers everything but base offset and epoch, which
    are compared directly, and the size. Whether each copy matches its CRC is the scan's
    finding (``crc_mismatch``), not a divergence: a flipped bit is reported once.

    Returns (topic, partition, base_offset, last_offset, replicas:
    array<struct<broker_dir, variant>>, n_replicas), at most `max_rows` rows.
    """
    variant = F.concat_ws(
        "/",
        F.col("last_offset"),
        F.col("leader_epoch"),
        F.col("size_bytes"),
        F.col("stored_crc"),
    )
    rows = (
        checked.where(F.col("base_offset").isNotNull())
        .join(F.broadcast(bounds), ["topic", "partition"])
        .where((F.col("base_offset") >= F.col("lo")) & (F.col("base_offset") < F.col("hi")))
    )
    grouped = rows.groupBy("topic", "partition", "base_offset", "n_replicas").agg(
        F.max("last_offset").alias("last_offset"),
        F.collect_list(F.struct("broker_dir", variant.alias("variant"))).alias("replicas"),
        F.countDistinct(variant).alias("variants"),
    )
    return (
        grouped.where((F.col("variants") > 1) | (F.size("replicas") < F.col("n_replicas")))
        .orderBy("topic", "partition", "base_offset")
        .limit(max_rows)
    )


def divergent_keys(records: DataFrame, bounds: DataFrame, max_rows: int) -> DataFrame:
    """For compacted topics: keys whose latest record below ``hi`` differs between replicas.

    A replica's state of a key is its latest record's (offset, value hash), or absent when the
    latest is a tombstone or the key is gone (a cleaner may drop tombstones). Returns (topic,
    partition, key, states: array<struct<broker_dir, offset, state>>, n_replicas).
    """
    rows = (
        records.where(F.col("key").isNotNull() & ~F.col("is_control"))
        .join(F.broadcast(bounds), ["topic", "partition"])
        .where((F.col("offset") >= F.col("lo")) & (F.col("offset") < F.col("hi")))
    )
    latest = rows.groupBy("broker_dir", "topic", "partition", "key", "n_replicas").agg(
        F.max_by(F.struct("offset", "value"), "offset").alias("latest")
    )
    present = latest.where(F.col("latest.value").isNotNull()).select(
        "broker_dir",
        "topic",
        "partition",
        "key",
        "n_replicas",
        F.col("latest.offset").alias("offset"),
        F.concat_ws("/", F.col("latest.offset"), F.sha2(F.col("latest.value"), 256)).alias("state"),
    )
    grouped = present.groupBy("topic", "partition", "key", "n_replicas").agg(
        F.collect_list(F.struct("broker_dir", "offset", "state")).alias("states"),
        F.countDistinct("state").alias("variants"),
    )
    return (
        grouped.where((F.col("variants") > 1) | (F.size("states") < F.col("n_replicas")))
        .orderBy("topic", "partition", "key")
        .limit(max_rows)
    )
