"""Planning and writing cleaned segments (no Spark): latest record per key with original
offsets, batch identity kept, KIP-534 delete horizon, HW / active segment / lag limits. The
broker dir they clean and the model of a pass are in compact_helpers.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from offline.compact_plan import (
    CompactConfig,
    CompactError,
    PartitionPlan,
    plan_partition,
    plan_topic,
    read_source_segment,
)
from offline.compact_write import (
    DELETE_HORIZON_BIT,
    BatchCleaner,
    CleanedPartition,
    survivors_by_scan,
    write_cleaned_partition,
)
from runtime.clock import ManualClock
from runtime.log.config import LogConfig
from runtime.log.log import Log
from tests.unit.offline.compact_helpers import (
    COMPACT_PROPS,
    RETENTION_MS,
    TOPIC,
    WALL_MS,
    BrokerDir,
    build_broker_dir,
    config,
    expected_after_pass,
    read_partition,
)
from wire.batch_builder import build_batch
from wire.record_reader import iter_records
from wire.records import BatchHeader, iter_batches


def clean_partition(
    broker: BrokerDir, staging: Path, now_ms: int, p: int = 0
) -> tuple[PartitionPlan, CleanedPartition]:
    cfg = config()
    plan = plan_partition(broker.data_dir / f"{TOPIC}-{p}", broker.high_watermarks[p], cfg, now_ms)
    survivors = survivors_by_scan(plan.directory, plan.sources)
    cleaned = write_cleaned_partition(
        plan.directory,
        plan.sources,
        survivors,
        staging,
        now_ms=now_ms,
        delete_retention_ms=cfg.delete_retention_ms,
        log_config=cfg.log,
    )
    return plan, cleaned


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cleaned_segments_keep_the_latest_record_per_key_with_original_offsets(
    tmp_path: Path, seed: int
) -> None:
    broker = build_broker_dir(tmp_path, seed)
    now = broker.end_ms + 10
    before = read_partition(broker.data_dir / f"{TOPIC}-0")
    plan, cleaned = clean_partition(broker, tmp_path / "staging", now)
    assert plan.sources, f"seed {seed}: nothing cleanable"
    end = plan.clean_end_offset
    staged = read_partition(tmp_path / "staging")
    originals = {r.offset: (h, r) for h, r in before}
    in_range = [r for _, r in before if r.offset < end]
    want = expected_after_pass(in_range, end, now, {})
    assert [r for _, r in staged] == want, f"seed {seed}"
    for header, record in staged:
        source_header, _ = originals[record.offset]
        # The batch identity survives: same offset range, producer fields, codec, epoch.
        assert header.base_offset == source_header.base_offset, f"seed {seed}"
        assert header.last_offset_delta == source_header.last_offset_delta, f"seed {seed}"
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
            source_header.producer_id,
            source_header.producer_epoch,
            source_header.base_sequence,
        ), f"seed {seed}"
        assert header.compression == source_header.compression, f"seed {seed}"
        assert header.partition_leader_epoch == source_header.partition_leader_epoch
        batch_has_tombstone = any(
            r.value is None for h, r in staged if h.base_offset == header.base_offset
        )
        # KIP-534: a batch keeping a tombstone carries the horizon in its base timestamp.
        assert header.has_delete_horizon == batch_has_tombstone, f"seed {seed}"
        if batch_has_tombstone:
            assert header.attributes & DELETE_HORIZON_BIT
            assert header.base_timestamp == now + RETENTION_MS, f"seed {seed}"
    # The staged segments load as a log: fresh indexes pass the sanity checks, same end.
    log = Log.open(tmp_path / "staging", config().log, ManualClock(), had_clean_shutdown=True)
    try:
        assert not log.recovery_report.rebuilt_indexes, f"seed {seed}"
        assert log.log_end_offset == end, f"seed {seed}"
    finally:
        log.close()
    assert cleaned.stats.records_out == len(want)


def test_tombstones_are_dropped_once_their_horizon_passed(tmp_path: Path) -> None:
    seed = 5
    broker = build_broker_dir(tmp_path, seed, keys=30)
    now = broker.end_ms + 10
    plan, _ = clean_partition(broker, tmp_path / "pass1", now)
    end = plan.clean_end_offset
    first = [r for _, r in read_partition(tmp_path / "pass1")]
    assert any(r.value is None for r in first), f"seed {seed}: no tombstone to test with"
    # Second pass over the first pass's output, before and after the horizon.
    cfg = config()
    sources = [read_source_segment(p) for p in sorted((tmp_path / "pass1").glob("*.log"))]
    survivors = survivors_by_scan(tmp_path / "pass1", sources)
    for label, at, expect_dropped in (
        ("early", now + RETENTION_MS - 1, False),
        ("late", now + RETENTION_MS, True),
    ):
        out = tmp_path / f"pass2-{label}"
        write_cleaned_partition(
            tmp_path / "pass1",
            sources,
            survivors,
            out,
            now_ms=at,
            delete_retention_ms=RETENTION_MS,
            log_config=cfg.log,
        )
        second = [r for _, r in read_partition(out)]
        horizons = {r.offset: now + RETENTION_MS for r in first if r.value is None}
        assert second == expected_after_pass(first, end, at, horizons), f"seed {seed} {label}"
        dropped = [r for r in first if r.value is None and r not in second]
        assert bool(dropped) == expect_dropped, f"seed {seed} {label}: {dropped}"
        # Records keep their original timestamps under a horizon base timestamp.
        by_offset = {r.offset: r for r in first}
        assert all(r.timestamp == by_offset[r.offset].timestamp for r in second)


def test_plan_stops_at_hw_active_segment_and_compaction_lag(tmp_path: Path) -> None:
    broker = build_broker_dir(tmp_path, 7, hw_fraction=1.0)
    directory = broker.data_dir / f"{TOPIC}-0"
    cfg = config()
    now = broker.end_ms + 10  # record timestamps run a few ms past the last append
    full = plan_partition(directory, broker.high_watermarks[0], cfg, now)
    assert full.total_segments >= 4
    assert len(full.sources) == full.total_segments - 1, full.stop_reason  # all but active
    assert "active" in full.stop_reason
    # A HW inside the third segment: only the first two are wholly below it.
    third = full.sources[2]
    at_hw = plan_partition(directory, third.next_offset - 1, cfg, now)
    assert [s.base_offset for s in at_hw.sources] == [s.base_offset for s in full.sources[:2]]
    assert "high watermark" in at_hw.stop_reason
    # min.compaction.lag.ms: segments with records newer than now - lag are not cleaned.
    lagged_cfg = config(**{"min.compaction.lag.ms": now - third.largest_timestamp + 1})
    lagged = plan_partition(directory, broker.high_watermarks[0], lagged_cfg, now)
    assert [s.base_offset for s in lagged.sources] == [s.base_offset for s in full.sources[:2]]
    assert "min.compaction.lag.ms" in lagged.stop_reason
    # No HW checkpoint entry: nothing is known committed, nothing is cleaned.
    assert plan_partition(directory, 0, cfg, now).sources == ()


def test_records_without_keys_are_an_error(tmp_path: Path) -> None:
    props = {**COMPACT_PROPS, "cleanup.policy": "delete"}  # the broker would refuse them
    broker = build_broker_dir(tmp_path, 11, props=props, keyless_at=3)
    plans = plan_topic(broker.data_dir, TOPIC, config(), broker.end_ms)
    with pytest.raises(CompactError, match="no key"):
        survivors_by_scan(plans[0].directory, plans[0].sources)


def test_topic_config_file_and_overrides(tmp_path: Path) -> None:
    from offline.compact_plan import resolve_config

    data_dir = tmp_path / "broker-0"
    data_dir.mkdir()
    assert not resolve_config(data_dir, TOPIC).compact  # Kafka's default policy is delete
    (tmp_path / "topic-configs.json").write_text(
        '{"t": {"cleanup.policy": "compact", "delete.retention.ms": 5}}'
    )
    cfg = resolve_config(data_dir, TOPIC)
    assert cfg.compact
    assert cfg.delete_retention_ms == 5
    assert cfg.min_compaction_lag_ms == 0
    assert resolve_config(data_dir, TOPIC, {"delete.retention.ms": "9"}).delete_retention_ms == 9
    with pytest.raises(CompactError, match=r"min\.compaction\.lag\.ms"):
        resolve_config(data_dir, TOPIC, {"min.compaction.lag.ms": "-1"})
    with pytest.raises(CompactError, match=r"cleanup\.policy"):
        resolve_config(data_dir, TOPIC, {"cleanup.policy": "shred"})


def test_config_defaults_are_kafkas() -> None:
    cfg = CompactConfig()
    assert (cfg.delete_retention_ms, cfg.min_compaction_lag_ms) == (86_400_000, 0)
    assert cfg.log == LogConfig()


def _only_batch(data: bytes) -> BatchHeader:
    ((_, header),) = list(iter_batches(data))
    return header


def test_batch_cleaner_copies_rebuilds_and_keeps_timestamps() -> None:
    now = WALL_MS + 100
    records = [(b"a", b"1"), (b"b", None), (b"c", b"3")]
    # Log-append time: every record reads as maxTimestamp, which a rebuild must keep.
    append_time = build_batch(
        records, base_offset=10, timestamps=[5, 6, 7], timestamp_type=1, max_timestamp=WALL_MS
    )
    control = build_batch([(b"\x00\x00\x00\x00", b"")], base_offset=13, is_control=True)
    cleaner = BatchCleaner([10, 11, 14], now, RETENTION_MS)
    out = cleaner.clean(memoryview(append_time), _only_batch(append_time), last_in_range=False)
    assert out is not None
    header = _only_batch(out)
    assert (header.base_offset, header.last_offset) == (10, 12)  # the range is kept
    assert header.timestamp_type == 1
    assert header.has_delete_horizon  # it keeps the tombstone of key b
    assert header.base_timestamp == now + RETENTION_MS
    kept = list(iter_records(out))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in kept] == [
        (10, b"a", b"1", WALL_MS),
        (11, b"b", None, WALL_MS),
    ]
    # Control batches are copied byte for byte, whatever the survivors say.
    copied = cleaner.clean(memoryview(control), _only_batch(control), last_in_range=False)
    assert copied == control
    # A batch that keeps everything and already has its horizon is not re-encoded; once the
    # horizon has passed, its tombstone goes.
    again = BatchCleaner([10, 11], now, RETENTION_MS)
    assert again.clean(memoryview(out), header, last_in_range=False) == out
    late = BatchCleaner([10, 11], now + RETENTION_MS, RETENTION_MS)
    dropped = late.clean(memoryview(out), header, last_in_range=False)
    assert dropped is not None
    assert [r.offset for r in iter_records(dropped)] == [10]
    assert not _only_batch(dropped).has_delete_horizon
    assert late.stats.tombstones_dropped == 1
    # ...but not in the last batch of the cleaned range, whose end offset must survive.
    last = BatchCleaner([11], now + RETENTION_MS, RETENTION_MS)
    assert last.clean(memoryview(out), header, last_in_range=True) is not None
    assert (
        BatchCleaner([11], now + RETENTION_MS, RETENTION_MS).clean(
            memoryview(out), header, last_in_range=False
        )
        is None
    )
