"""The small checkpoint files of log dirs, read on the driver: as rows, or as small DataFrames.

The offset checkpoints of each log dir (``replication-offset-checkpoint``,
``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``,
``cleaner-offset-checkpoint``), each partition's ``leader-epoch-checkpoint`` and
``partition.metadata``: `offset_checkpoints_df`, `leader_epochs_df` and `partition_metadata_df`
read them into small DataFrames, over plain readers (`read_offset_checkpoints`, ...) that the
verify job also uses directly. A file that does not parse raises CorruptCheckpointError.

Runs on the driver; plain values: no state.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from offline.data_dirs import OFFSET_CHECKPOINTS, broker_dirs_of, partition_dirs_of
from runtime.log.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    PartitionMetadataFile,
)
from wire.topic import TopicPartition

OFFSET_CHECKPOINT_SCHEMA: Final = StructType(
    [
        StructField("broker_dir", StringType(), False),
        StructField("checkpoint", StringType(), False),  # the file name
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
    ]
)
LEADER_EPOCH_SCHEMA: Final = StructType(
    [
        StructField("broker_dir", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("epoch", IntegerType(), False),
        StructField("start_offset", LongType(), False),
    ]
)
PARTITION_METADATA_SCHEMA: Final = StructType(
    [
        StructField("broker_dir", StringType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("topic_id", StringType(), True),
    ]
)


def read_offset_checkpoints(broker_dir: Path) -> list[tuple[str, str, str, int, int]]:
    """``(broker_dir, checkpoint file, topic, partition, offset)`` for every entry of the log
    dir's offset checkpoints. Raises CorruptCheckpointError for a file that does not parse."""
    rows = []
    for name in OFFSET_CHECKPOINTS:
        for tp, offset in sorted(OffsetCheckpointFile(broker_dir / name).read().items()):
            rows.append((str(broker_dir), name, tp.topic, tp.partition, offset))
    return rows


def read_leader_epochs(partition_dir: Path) -> list[tuple[int, int]]:
    """``(epoch, start offset)`` entries of a partition's leader-epoch-checkpoint."""
    entries = LeaderEpochCheckpointFile(partition_dir / LEADER_EPOCH_CHECKPOINT).read()
    return [(e.epoch, e.start_offset) for e in entries]


def _all_partition_dirs(paths: Iterable[str | Path]) -> list[tuple[Path, Path]]:
    return [
        (broker_dir, partition_dir)
        for path in paths
        for broker_dir in broker_dirs_of(path)
        for partition_dir in partition_dirs_of(broker_dir)
    ]


def offset_checkpoints_df(spark: SparkSession, paths: Iterable[str | Path]) -> DataFrame:
    rows = [
        row
        for path in paths
        for broker in broker_dirs_of(path)
        for row in read_offset_checkpoints(broker)
    ]
    return spark.createDataFrame(rows, OFFSET_CHECKPOINT_SCHEMA)


def leader_epochs_df(spark: SparkSession, paths: Iterable[str | Path]) -> DataFrame:
    rows = []
    for broker_dir, partition_dir in _all_partition_dirs(paths):
        tp = TopicPartition.from_dir_name(partition_dir.name)
        for epoch, start in read_leader_epochs(partition_dir):
            rows.append((str(broker_dir), tp.topic, tp.partition, epoch, start))
    return spark.createDataFrame(rows, LEADER_EPOCH_SCHEMA)


def partition_metadata_df(spark: SparkSession, paths: Iterable[str | Path]) -> DataFrame:
    rows = []
    for broker_dir, partition_dir in _all_partition_dirs(paths):
        tp = TopicPartition.from_dir_name(partition_dir.name)
        topic_id = PartitionMetadataFile(partition_dir / PARTITION_METADATA).read()
        rows.append((str(broker_dir), tp.topic, tp.partition, topic_id))
    return spark.createDataFrame(rows, PARTITION_METADATA_SCHEMA)
