"""Topic settings read from a cluster controller's metadata log, by the offline jobs: the
lock-free reader (runtime/log/metadata_log_reader.py) against a log its owner holds open, and
the fold into per-topic configs that `ketch verify` and `ketch compact` use."""

from __future__ import annotations

from pathlib import Path

from offline.cluster_metadata import cluster_topic_configs, topic_configs_from_metadata
from offline.compact_plan import resolve_config
from offline.verify_layout import read_layout
from runtime.log.metadata_log import MetadataLog
from runtime.log.metadata_log_reader import read_metadata_records
from wire.metadata_records import (
    RemoveTopicRecord,
    TopicConfigsRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    encode_record,
)

PRICES = b"p" * 16
ORDERS = b"o" * 16
GONE = b"g" * 16


def _history() -> list[list[dict[str, object]]]:
    """Commits as the controller makes them: creations, an alteration, a deletion."""
    return [
        [encode_record(TopicRecord("prices", PRICES, {"cleanup.policy": "compact"}))],
        [encode_record(TopicRecord("orders", ORDERS)), encode_record(UnfenceBrokerRecord(0, 1))],
        [encode_record(TopicRecord("gone", GONE, {"cleanup.policy": "compact"}))],
        [
            encode_record(
                TopicConfigsRecord(
                    PRICES, {"cleanup.policy": "compact", "min.compaction.lag.ms": "5"}
                )
            )
        ],
        [encode_record(RemoveTopicRecord(GONE))],
    ]


async def _write(directory: Path, *, snapshot_after: int | None = None) -> MetadataLog:
    """A log holding `_history()`, left open (locked) as a running controller leaves it."""
    log = MetadataLog(directory)
    log.load()
    for index, commit in enumerate(_history()):
        await log.append(commit)
        if snapshot_after == index:
            state = [encode_record(TopicRecord("prices", PRICES, {"cleanup.policy": "compact"}))]
            state += [encode_record(TopicRecord("orders", ORDERS))]
            state += [encode_record(TopicRecord("gone", GONE, {"cleanup.policy": "compact"}))]
            await log.snapshot(state, log.next_offset - 1)
    return log


EXPECTED = {
    "prices": {"cleanup.policy": "compact", "min.compaction.lag.ms": "5"},
    "orders": {},
}


async def test_a_running_controllers_log_reads_without_its_lock(tmp_path: Path) -> None:
    log = await _write(tmp_path / "controller")
    try:
        assert len(read_metadata_records(tmp_path / "controller")) == 6
        assert topic_configs_from_metadata(tmp_path / "controller") == EXPECTED
    finally:
        await log.close()


async def test_a_snapshot_replaces_the_records_it_covers(tmp_path: Path) -> None:
    log = await _write(tmp_path / "controller", snapshot_after=2)
    await log.close()
    # Three records of the snapshot, then the two commits after it.
    assert len(read_metadata_records(tmp_path / "controller")) == 5
    assert topic_configs_from_metadata(tmp_path / "controller") == EXPECTED


async def test_a_torn_tail_is_read_up_to_and_left_alone(tmp_path: Path) -> None:
    log = await _write(tmp_path / "controller")
    await log.close()
    (segment,) = (tmp_path / "controller").glob("*.log")
    whole = segment.read_bytes()
    segment.write_bytes(whole + b"\x00\x00\x01\x00torn")
    assert topic_configs_from_metadata(tmp_path / "controller") == EXPECTED
    assert segment.read_bytes() == whole + b"\x00\x00\x01\x00torn"  # nothing repaired
    # Cut inside the last commit: the removal of "gone" is not committed, so it still exists.
    segment.write_bytes(whole[:-3])
    assert "gone" in topic_configs_from_metadata(tmp_path / "controller")


def test_no_controller_dir_reads_as_nothing(tmp_path: Path) -> None:
    assert read_metadata_records(tmp_path / "absent") == []
    assert cluster_topic_configs([tmp_path]) == {}


async def test_verify_and_compact_learn_compacted_topics_from_the_cluster(tmp_path: Path) -> None:
    """`ketch up`'s layout: data/controller beside data/broker-N; either path finds it."""
    data = tmp_path / "data"
    log = await _write(data / "controller")
    await log.close()
    broker = data / "broker-0"
    (broker / "prices-0").mkdir(parents=True)
    (broker / "orders-0").mkdir()
    for given in ([str(data)], [str(broker)]):
        assert read_layout(given).compacted_topics == {"prices"}
    config = resolve_config(broker, "prices")
    assert config.compact
    assert config.min_compaction_lag_ms == 5
    assert not resolve_config(broker, "orders").compact
    # topic-configs.json still overrides, key by key.
    (data / "topic-configs.json").write_text('{"prices": {"min.compaction.lag.ms": 7}}')
    assert resolve_config(broker, "prices").min_compaction_lag_ms == 7
    assert resolve_config(broker, "prices").compact
