"""The "ketch" data source read through Spark: batch, record and index levels over logs written
by the storage engine (with every codec) and by kafka-python's encoder, byte-range splitting,
and the checkpoint DataFrames."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from offline.batch_scan import scan_segment
from offline.checkpoint_tables import leader_epochs_df, offset_checkpoints_df, partition_metadata_df
from offline.schema import BATCH_SCHEMA, INDEX_SCHEMA, RECORD_SCHEMA
from runtime.log.checkpoints import REPLICATION_OFFSET_CHECKPOINT
from tests.unit.offline.helpers import EVENTS, QUIET, TABLE, BuiltCluster, segment_paths
from wire.record_reader import iter_records
from wire.records import iter_batches

pytestmark = pytest.mark.spark


def test_batch_level_rows_match_the_files(spark: SparkSession, cluster: BuiltCluster) -> None:
    df = spark.read.format("ketch").option("level", "batch").load(str(cluster.root))
    assert df.schema == BATCH_SCHEMA
    rows = df.collect()
    expected = {
        (str(path.parent.parent), path.parent.name, b.position, b.base_offset, b.stored_crc)
        for path in cluster.root.glob("broker-*/*/*.log")
        for b in scan_segment(path)
    }
    found = {
        (r.broker_dir, f"{r.topic}-{r.partition}", r.position, r.base_offset, r.stored_crc)
        for r in rows
    }
    assert found == expected
    assert all(r.valid and r.reason is None and r.stored_crc == r.computed_crc for r in rows)
    assert {r.compression for r in rows} == {"none", "gzip", "snappy", "lz4", "zstd"}
    leader = [
        (r.base_offset, r.last_offset, r.leader_epoch)
        for r in sorted(rows, key=lambda r: (r.segment, r.position))
        if r.broker_dir.endswith("broker-0") and r.topic == EVENTS and r.partition == 1
    ]
    assert leader == next(b for tp, b in cluster.batches.items() if tp.partition == 1)
    # One segment split into byte ranges (a tiny max_partition_bytes): the same rows.
    segment = segment_paths(cluster.root / "broker-0" / f"{EVENTS}-1")[0]
    split = spark.read.format("ketch").option("max_partition_bytes", "4000").load(str(segment))
    assert split.rdd.getNumPartitions() >= 2
    assert sorted(split.collect()) == sorted(
        r
        for r in rows
        if r.broker_dir.endswith("broker-0")
        and r.topic == EVENTS
        and r.partition == 1
        and r.segment == 0
    )


def test_record_level_decodes_every_codec(spark: SparkSession, cluster: BuiltCluster) -> None:
    partition_dir = cluster.root / "broker-2" / f"{EVENTS}-0"
    df = spark.read.format("ketch").option("level", "record").load(str(partition_dir))
    assert df.schema == RECORD_SCHEMA
    rows = sorted(df.collect(), key=lambda r: r.offset)
    expected = [
        record
        for path in segment_paths(partition_dir)
        for pos, _ in iter_batches(path.read_bytes())
        for record in iter_records(path.read_bytes(), pos)
    ]
    assert [(r.offset, r.timestamp, r.key, r.value) for r in rows] == [
        (e.offset, e.timestamp, e.key, e.value) for e in expected
    ]
    assert [tuple((h.key, h.value) for h in r.headers) for r in rows] == [
        e.headers for e in expected
    ]
    assert all(r.batch_valid and not r.is_control for r in rows)
    # kafka-python's records (every fifth batch) are among them, with their header
    assert any(r.key.startswith(b"kp-") and r.headers[0].key == "h" for r in rows)


def test_index_level_and_checkpoint_frames(spark: SparkSession, cluster: BuiltCluster) -> None:
    index = spark.read.format("ketch").option("level", "index").load(str(cluster.root))
    assert index.schema == INDEX_SCHEMA
    rows = index.collect()
    assert not [r for r in rows if r.problem is not None]
    offsets = [r for r in rows if r.index_kind == "offset"]
    assert offsets
    assert all(r.position > 0 and r.offset >= r.segment for r in offsets)
    checkpoints = offset_checkpoints_df(spark, [cluster.root]).collect()
    hws = {
        (r.topic, r.partition): r.offset
        for r in checkpoints
        if r.checkpoint == REPLICATION_OFFSET_CHECKPOINT and r.broker_dir.endswith("broker-0")
    }
    assert hws == {(tp.topic, tp.partition): hw for tp, hw in cluster.high_watermarks.items()}
    epochs = leader_epochs_df(spark, [cluster.root]).collect()
    leader_epochs = sorted(
        (r.epoch, r.start_offset)
        for r in epochs
        if r.broker_dir.endswith("broker-0") and r.topic == EVENTS and r.partition == 0
    )
    assert [e for e, _ in leader_epochs] == [1, 3]
    ids = {(r.topic, r.topic_id) for r in partition_metadata_df(spark, [cluster.root]).collect()}
    assert ids == {(EVENTS, "events-id"), (TABLE, "table-id"), (QUIET, "quiet-id")}
