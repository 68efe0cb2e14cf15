"""Planning an offline compaction: topic settings and the cleanable segments of each partition.

Pure file inspection, no Spark and no writes. `plan_topic` lists the ``<topic>-<p>`` directories
of one broker log dir and, per partition, picks the segments a pass may rewrite. As Kafka's
cleaner, the cleanable range is a prefix of the log: it starts at the first segment and ends
before the first segment that is

* the active (last) segment, which the broker still appends to;
* not wholly below the high watermark from ``replication-offset-checkpoint`` (records above the
  HW may still be truncated, so they may neither be rewritten nor supersede older records);
* younger than ``min.compaction.lag.ms`` (its largest record timestamp, or its file's mtime when
  no batch carries a timestamp, as `LogSegment.largest_timestamp`, is after ``now - lag``);
* holding the first offset of a transaction that is not decided below the HW (the first unstable
  offset, Kafka's LSO: `offline.compact_txn`), or after it.

The same header scan folds the partition's transactions (`offline.compact_txn.TransactionScan`):
the plan names the batches of aborted transactions in the cleanable range, which the pass
removes.

Empty segments at the end of that prefix are left out, so the last planned segment ends with a
batch (the install's swap range depends on that, see `offline.compact_install`).

Topic settings come from Kafka's defaults, overridden by what the cluster's controller recorded
for the topic (its metadata log beside the data dir, `offline.cluster_metadata`), by
``topic-configs.json`` in the data dir's parent (``{"<topic>": {"cleanup.policy": "compact",
...}}``), and by explicit ``--config k=v`` values. `CompactError`, `SourceSegment` and
`read_source_segment` live in `runtime.log.cleaner.source` (the brokers' live cleaner uses them
too) and are re-exported here. Everything here is a plain value owned by the caller; no state is
shared.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from offline.cluster_metadata import cluster_topic_configs
from runtime.log.checkpoints import REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile
from runtime.log.cleaner.source import (
    NO_TIMESTAMP,
    CompactError,
    SourceSegment,
    read_source_segment,
)
from runtime.log.cleaner.txn import TransactionScan
from runtime.log.config import LogConfig
from runtime.log.errors import CorruptCheckpointError
from runtime.log.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    offset_from_file_name,
)
from runtime.properties import config_from_properties
from wire.topic import TopicPartition

__all__ = [
    "NO_TIMESTAMP",
    "CompactConfig",
    "CompactError",
    "PartitionPlan",
    "SourceSegment",
    "plan_partition",
    "plan_topic",
    "read_source_segment",
    "read_topic_configs",
    "resolve_config",
]

TOPIC_CONFIGS_FILE: Final = "topic-configs.json"
DEFAULT_DELETE_RETENTION_MS: Final = 86_400_000  # Kafka's delete.retention.ms: one day
DEFAULT_MIN_COMPACTION_LAG_MS: Final = 0


@dataclass(frozen=True, slots=True)
class CompactConfig:
    """The topic settings compaction reads, with Kafka's names in `from_properties`."""

    cleanup_policy: str = "delete"
    min_compaction_lag_ms: int = DEFAULT_MIN_COMPACTION_LAG_MS
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    log: LogConfig = field(default_factory=LogConfig)

    def __post_init__(self) -> None:
        for key, value in (
            ("min.compaction.lag.ms", self.min_compaction_lag_ms),
            ("delete.retention.ms", self.delete_retention_ms),
        ):
            if value < 0:
                raise ValueError(f"{key} must be >= 0, got {value}")

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @classmethod
    def from_properties(cls, props: Mapping[str, object]) -> CompactConfig:
        log = LogConfig.from_properties(props)  # validates cleanup.policy and segment settings
        try:
            return config_from_properties(cls, props, cleanup_policy=log.cleanup_policy, log=log)
        except ValueError as exc:
            # A compaction setting that cannot be read or is out of range refuses the pass like
            # any other bad input; LogConfig's ValueErrors get the topic from resolve_config.
            raise CompactError(str(exc)) from None


def read_topic_configs(data_dir: Path) -> dict[str, dict[str, object]]:
    """Every topic's settings known near the data dir: the cluster controller's metadata log
    beside it (`offline.cluster_metadata`: what a `ketch up` cluster's topics were created or
    altered with), overridden per topic by ``topic-configs.json`` from the data dir's parent."""
    try:
        known: dict[str, dict[str, object]] = {
            topic: dict(settings) for topic, settings in cluster_topic_configs([data_dir]).items()
        }
    except (OSError, ValueError) as exc:
        raise CompactError(f"cannot read the cluster's topic configs: {exc}") from None
    for topic, settings in _topic_configs_file(data_dir).items():
        known[topic] = {**known.get(topic, {}), **settings}
    return known


def _topic_configs_file(data_dir: Path) -> dict[str, dict[str, object]]:
    """``topic-configs.json`` from the data dir's parent; empty when absent."""
    path = data_dir.resolve().parent / TOPIC_CONFIGS_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CompactError(f"{path}: not JSON ({exc})") from None
    if not isinstance(loaded, dict) or not all(isinstance(v, dict) for v in loaded.values()):
        raise CompactError(f'{path}: expected {{"<topic>": {{"<key>": <value>, ...}}, ...}}')
    return {str(topic): dict(settings) for topic, settings in loaded.items()}


def resolve_config(
    data_dir: Path, topic: str, overrides: Mapping[str, object] | None = None
) -> CompactConfig:
    props: dict[str, object] = dict(read_topic_configs(data_dir).get(topic, {}))
    props.update(overrides or {})
    try:
        return CompactConfig.from_properties(props)
    except ValueError as exc:
        raise CompactError(f"topic {topic}: {exc}") from None


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    """What one pass does to one partition: rewrite `sources` (a prefix of the log)."""

    topic: str
    partition: int
    directory: Path
    high_watermark: int
    sources: tuple[SourceSegment, ...]  # the segments to clean, ascending; may be empty
    total_segments: int
    stop_reason: str  # why the cleanable range ends where it does
    # The same in two words: "active segment", "above HW", "compaction lag", "open transaction"
    stop_kind: str
    # Base offsets of the batches of aborted transactions in the cleanable range (removed).
    aborted_batches: frozenset[int] = frozenset()

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def clean_end_offset(self) -> int:
        """First offset after the cleaned range (Kafka's cleaner checkpoint value)."""
        return self.sources[-1].next_offset if self.sources else -1

    @property
    def source_bytes(self) -> int:
        return sum(s.size_bytes for s in self.sources)


def _check_no_unfinished_swap(directory: Path) -> None:
    for path in directory.iterdir():
        if path.name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)):
            raise CompactError(
                f"{path} is left from an unfinished swap or deletion; start and stop the broker "
                "once (its log loading finishes or undoes it) before compacting"
            )


def plan_partition(
    directory: Path, high_watermark: int, config: CompactConfig, now_ms: int
) -> PartitionPlan:
    tp = TopicPartition.from_dir_name(directory.name)
    _check_no_unfinished_swap(directory)
    logs = sorted(
        (p for p in directory.iterdir() if p.name.endswith(LOG_SUFFIX)),
        key=lambda p: offset_from_file_name(p.name),
    )
    txns = TransactionScan(high_watermark)
    segments = [read_source_segment(p, txns) for p in logs]
    unstable = txns.first_unstable_offset
    lag_limit = now_ms - config.min_compaction_lag_ms
    chosen: list[SourceSegment] = []
    reason = kind = "no segments"
    for i, segment in enumerate(segments):
        if i == len(segments) - 1:
            reason = f"segment {segment.base_offset} is the active segment"
            kind = "active segment"
            break
        if segment.next_offset > high_watermark:
            reason = (
                f"segment {segment.base_offset} ends at {segment.next_offset}, above the high "
                f"watermark {high_watermark}"
            )
            kind = "above HW"
            break
        if segment.largest_timestamp > lag_limit:
            reason = (
                f"segment {segment.base_offset} has records newer than min.compaction.lag.ms "
                f"({config.min_compaction_lag_ms} ms)"
            )
            kind = "compaction lag"
            break
        if unstable is not None and segment.next_offset > unstable:
            reason = (
                f"segment {segment.base_offset} holds offset {unstable}, where a transaction "
                "not decided below the high watermark starts"
            )
            kind = "open transaction"
            break
        chosen.append(segment)
    while chosen and chosen[-1].next_offset == chosen[-1].base_offset:
        chosen.pop()  # an empty segment cannot end the range (see the module docstring)
    end = chosen[-1].next_offset if chosen else -1
    return PartitionPlan(
        tp.topic,
        tp.partition,
        directory,
        high_watermark,
        tuple(chosen),
        len(segments),
        reason,
        kind,
        txns.aborted_below(end),
    )


def plan_topic(
    data_dir: Path, topic: str, config: CompactConfig, now_ms: int
) -> list[PartitionPlan]:
    """One plan per ``<topic>-<p>`` directory in `data_dir`, by partition number."""
    if not data_dir.is_dir():
        raise CompactError(f"{data_dir} is not a directory")
    try:
        high_watermarks = OffsetCheckpointFile(data_dir / REPLICATION_OFFSET_CHECKPOINT).read()
    except CorruptCheckpointError as exc:
        raise CompactError(str(exc)) from None
    plans: list[PartitionPlan] = []
    for child in sorted(data_dir.iterdir()):
        if not child.is_dir():
            continue
        try:
            tp = TopicPartition.from_dir_name(child.name)
        except ValueError:
            continue  # deleted (renamed) partitions, staging dirs, anything not a partition
        if tp.topic != topic:
            continue
        # Without a checkpointed HW nothing is known to be committed: compact nothing.
        hw = high_watermarks.get(tp, 0)
        plans.append(plan_partition(child, hw, config, now_ms))
    plans.sort(key=lambda plan: plan.partition)
    return plans
