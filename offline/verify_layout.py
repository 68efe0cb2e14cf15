"""`ketch verify`'s view of the data dirs, read on the driver: replicas, limits, epochs.

The driver reads the small files only: each log dir's checkpoints (HWs, recovery points, log
start offsets) and clean-shutdown marker, each partition's leader-epoch-checkpoint, and the
topic configs that say which topics are compacted: the cluster controller's metadata log beside
the data dirs (`offline.cluster_metadata`, a `ketch up` cluster's), then ``topic-configs.json``.
A dir without the clean-shutdown marker is checked only below each log's recovery point (its
`Replica.limit`). A checkpoint that does not parse becomes a ``checkpoint_unreadable`` finding,
not an error.

Plain values built once per run: nothing shared, no locks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from offline.checkpoint_tables import read_leader_epochs
from offline.cluster_metadata import cluster_topic_configs
from offline.data_dirs import broker_dirs_of, partition_dirs_of
from offline.verify_checks import NO_LIMIT, Finding
from runtime.log.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from runtime.log.errors import CorruptCheckpointError
from runtime.log.manager import CLEAN_SHUTDOWN_FILE
from wire.topic import TopicPartition

TOPIC_CONFIGS_FILE: Final = "topic-configs.json"


@dataclass(frozen=True, slots=True)
class Replica:
    broker_dir: str
    tp: TopicPartition
    limit: int  # offsets at or above are not checked
    compacted: bool
    hw: int | None
    clean: bool
    log_start: int  # from log-start-offset-checkpoint (0 when absent): an empty log ends there


@dataclass
class Layout:
    broker_dirs: list[Path]
    replicas: list[Replica]
    epochs: list[tuple[str, str, int, int, int]]
    compacted_topics: set[str]
    partial_dirs: list[str]
    findings: list[Finding]


def read_topic_configs(data_dir: Path) -> dict[str, dict[str, Any]]:
    path = data_dir / TOPIC_CONFIGS_FILE
    if not path.exists():
        return {}
    loaded = json.loads(path.read_text())
    if not isinstance(loaded, dict) or not all(isinstance(v, dict) for v in loaded.values()):
        raise ValueError(f"{path}: expected {{topic: {{config: value}}}}")
    return loaded


def _checkpoint(path: Path, findings: list[Finding]) -> dict[TopicPartition, int]:
    try:
        return OffsetCheckpointFile(path).read()
    except CorruptCheckpointError as exc:
        findings.append(
            Finding("checkpoint_unreadable", str(path.parent), None, None, None, None, str(exc))
        )
        return {}


def read_layout(data_dirs: Sequence[str], extra_compacted: Iterable[str] = ()) -> Layout:
    compacted = set(extra_compacted)
    findings: list[Finding] = []
    brokers: list[Path] = []
    config_dirs: list[Path] = []
    for data_dir in data_dirs:
        found = broker_dirs_of(data_dir)
        brokers.extend(found)
        # The cluster data dir holds the file; a broker log dir given alone finds its parent's.
        config_dirs.extend({Path(data_dir).resolve(), *(b.parent for b in found)})
    configs: dict[str, dict[str, Any]] = dict(cluster_topic_configs(sorted(set(config_dirs))))
    for config_dir in sorted(set(config_dirs)):
        configs.update(read_topic_configs(config_dir))
    for topic, config in configs.items():
        if "compact" in str(config.get("cleanup.policy", "")):
            compacted.add(topic)
    replicas: list[Replica] = []
    epochs: list[tuple[str, str, int, int, int]] = []
    partial: list[str] = []
    for broker in brokers:
        clean = (broker / CLEAN_SHUTDOWN_FILE).exists()
        if not clean:
            partial.append(str(broker))
        hws = _checkpoint(broker / REPLICATION_OFFSET_CHECKPOINT, findings)
        recovery_points = _checkpoint(broker / RECOVERY_POINT_CHECKPOINT, findings)
        log_starts = _checkpoint(broker / LOG_START_OFFSET_CHECKPOINT, findings)
        for partition_dir in partition_dirs_of(broker):
            tp = TopicPartition.from_dir_name(partition_dir.name)
            limit = NO_LIMIT if clean else recovery_points.get(tp, 0)
            replicas.append(
                Replica(
                    str(broker),
                    tp,
                    limit,
                    tp.topic in compacted,
                    hws.get(tp),
                    clean,
                    log_starts.get(tp, 0),
                )
            )
            try:
                for epoch, start in read_leader_epochs(partition_dir):
                    epochs.append((str(broker), tp.topic, tp.partition, epoch, start))
            except CorruptCheckpointError as exc:
                findings.append(
                    Finding(
                        "checkpoint_unreadable", str(broker), tp.topic, tp.partition, None, None,
                        str(exc),
                    )
                )  # fmt: skip
    return Layout(brokers, replicas, epochs, compacted, partial, findings)
