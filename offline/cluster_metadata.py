"""What a cluster's controller says about its topics, for the offline jobs: each topic's config
overrides (`cleanup.policy`, `min.compaction.lag.ms`, ...), read from the controller's metadata
log beside the brokers' data dirs.

A `ketch up` cluster keeps topic settings only in its controller's metadata log
(`<data>/controller/`): the TopicRecord a topic was created with, the TopicConfigsRecord of each
IncrementalAlterConfigs (its whole override map), the RemoveTopicRecord of a deleted one. Without
this, `ketch verify` took a live-cleaned compacted topic (`__consumer_offsets` included) for a
plain one and reported its compaction gaps as damage, and `ketch compact` refused a compacted
topic as "not compacted". The log is read without its lock and without repairing anything
(runtime/log/metadata_log_reader.py), so a running controller is not disturbed.

Where the controller dir is: `<data dir>/controller/` for a cluster's data dir, and beside each
broker dir for a broker's (`<broker dir>/../controller/`), as node/layout.py lays them out.

Pure functions of the files; no state.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Final

from runtime.log.metadata_log_reader import read_metadata_records
from wire.metadata_records import (
    RemoveTopicRecord,
    TopicConfigsRecord,
    TopicRecord,
    decode_record,
)

CONTROLLER_DIR: Final = "controller"  # node/layout.py's name (offline sits below node/)


def controller_dirs_near(paths: Iterable[Path]) -> list[Path]:
    """The controller dirs a data dir or broker dir has beside or under it (each once)."""
    found: list[Path] = []
    for path in paths:
        resolved = path.resolve()
        for candidate in (resolved / CONTROLLER_DIR, resolved.parent / CONTROLLER_DIR):
            if candidate.is_dir() and candidate not in found:
                found.append(candidate)
    return found


def topic_configs_from_metadata(controller_dir: Path) -> dict[str, dict[str, str]]:
    """Every live topic's config overrides, by name, as the controller's metadata log says.

    Records of kinds this reader does not model are skipped; one that does not decode is an
    error (ValueError), since the log's frames passed their CRC."""
    names: dict[bytes, str] = {}
    configs: dict[bytes, dict[str, str]] = {}
    for raw in read_metadata_records(controller_dir):
        if raw.get("type") not in _TOPIC_TYPES:
            continue
        record = decode_record(raw)
        if isinstance(record, TopicRecord):
            names[record.topic_id] = record.name
            configs[record.topic_id] = dict(record.configs)
        elif isinstance(record, TopicConfigsRecord):
            configs[record.topic_id] = dict(record.configs)
        elif isinstance(record, RemoveTopicRecord):
            names.pop(record.topic_id, None)
            configs.pop(record.topic_id, None)
    return {name: configs.get(topic_id, {}) for topic_id, name in names.items()}


def cluster_topic_configs(paths: Iterable[Path]) -> dict[str, dict[str, str]]:
    """`topic_configs_from_metadata` of every controller dir near `paths`, merged."""
    merged: dict[str, dict[str, str]] = {}
    for controller_dir in controller_dirs_near(paths):
        merged.update(topic_configs_from_metadata(controller_dir))
    return merged


_TOPIC_TYPES: Final = frozenset({TopicRecord.TYPE, TopicConfigsRecord.TYPE, RemoveTopicRecord.TYPE})
