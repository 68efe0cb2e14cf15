"""`ketch compact` with Spark over logs written by the storage engine: the latest value per key
with original offsets, tombstones kept until their delete horizon, the active segment and
everything above the HW untouched, the result loads in a broker and passes verify; in a
partition with transactions, aborted records gone, committed ones compacted by key, markers kept
until their transaction is empty and their horizon passed, .txnindex files consistent and the
same last stable offset; refusals (keyless records, a running broker) write nothing. The
expected records come from the models in `tests.unit.offline.compact_helpers`."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from offline.compact import run_compact
from offline.compact_install import install_partition, update_cleaner_checkpoint
from offline.compact_plan import CompactError, plan_topic, resolve_config
from offline.compact_write import survivors_by_scan, write_cleaned_partition
from offline.verify_job import run_verify
from runtime.clock import ManualClock
from runtime.log.checkpoints import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from runtime.log.config import LogManagerConfig
from runtime.log.manager import LogManager
from tests.unit.offline.compact_helpers import (
    COMPACT_PROPS,
    RETENTION_MS,
    TOPIC,
    BrokerDir,
    TxnPartition,
    build_broker_dir,
    build_transactional_partition,
    check_first_txn_pass,
    check_txn_index_entries,
    expected_after_pass,
    last_batch_below,
    marker_transactions_with_data,
    read_partition,
    reopen_txn_partition,
)
from wire.records import Record
from wire.topic import TopicPartition

# Each test runs one or two Spark jobs; under a loaded machine that outlasts the default 120 s.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

PARTITIONS = 2  # written by a LogManager, checked against `expected_after_pass`
TXN_PARTITION = PARTITIONS  # one more, with transactions (`build_transactional_partition`)


def _records(broker: BrokerDir, p: int) -> list[Record]:
    return [r for _, r in read_partition(broker.data_dir / f"{TOPIC}-{p}")]


def _digests(directory: Path) -> dict[str, str]:
    return {
        path.name: hashlib.sha256(path.read_bytes()).hexdigest()
        for path in directory.iterdir()
        if path.is_file()
    }


def _load_in_broker(data_dir: Path) -> dict[int, int]:
    """Open the dir as a broker does; the log end offset per partition."""
    manager = LogManager(LogManagerConfig(log_dirs=(str(data_dir),)), ManualClock())
    loaded = manager.open()
    ends = {}
    for p in range(PARTITIONS + 1):
        log = manager.get_log(TopicPartition(TOPIC, p))
        assert log is not None
        ends[p] = log.log_end_offset
    assert not any(r.rebuilt_indexes for d in loaded for r in d.reports.values())
    manager.shutdown()
    return ends


def _verify_ok(spark: SparkSession, data_dir: Path) -> None:
    """`ketch verify` over the cluster data dir (the broker dir's parent, which also holds the
    topic-configs.json that marks the topic compacted, so offset gaps are legitimate)."""
    report = run_verify(spark, [str(data_dir.parent)])
    assert report.ok, report.findings


def _compacted_broker(tmp_path: Path, seed: int) -> tuple[BrokerDir, TxnPartition]:
    broker = build_broker_dir(tmp_path, seed, partitions=PARTITIONS, keys=25)
    txns = build_transactional_partition(broker.data_dir, TXN_PARTITION, seed)
    (tmp_path / "topic-configs.json").write_text(json.dumps({TOPIC: COMPACT_PROPS}))
    return broker, txns


def _plain(p: int) -> bool:
    return p != TXN_PARTITION


def _txns_end_ms(txns: TxnPartition) -> int:
    """The wall time of the transactional partition's last append."""
    return max(h.max_timestamp for h, _ in read_partition(txns.directory))


def _txn_records(txns: TxnPartition) -> list[Record]:
    return [r for h, r in read_partition(txns.directory) if not h.is_control]


def _local_pass(broker: BrokerDir, now: int) -> None:
    """One pass without Spark (survivors from a plain scan), to set up the second-pass test."""
    config = resolve_config(broker.data_dir, TOPIC)
    offsets = {}
    for plan in plan_topic(broker.data_dir, TOPIC, config, now):
        survivors = survivors_by_scan(plan.directory, plan.sources, plan.aborted_batches)
        staged = broker.data_dir.parent / "local-staging" / plan.tp.dir_name
        cleaned = write_cleaned_partition(
            plan.directory,
            plan.sources,
            survivors,
            staged,
            now_ms=now,
            delete_retention_ms=config.delete_retention_ms,
            log_config=config.log,
            aborted_batches=plan.aborted_batches,
        )
        new = [s.base_offset for s in cleaned.segments]
        install_partition(plan.directory, staged, new, [s.base_offset for s in plan.sources])
        offsets[plan.tp] = plan.clean_end_offset
    update_cleaner_checkpoint(broker.data_dir, offsets)


def test_first_pass_keeps_the_latest_record_per_key_below_the_hw(
    spark: SparkSession, tmp_path: Path
) -> None:
    seed = 31
    broker, txns = _compacted_broker(tmp_path, seed)
    before = {p: _records(broker, p) for p in range(PARTITIONS)}
    txn_before = _txn_records(txns)
    ends_before = _load_in_broker(broker.data_dir)
    untouched = {p: _digests(broker.data_dir / f"{TOPIC}-{p}") for p in range(PARTITIONS + 1)}
    now = max(broker.end_ms, _txns_end_ms(txns)) + 10

    first = run_compact(spark, broker.data_dir, TOPIC, now_ms=now, install=True)
    assert first.installed
    assert len(first.partitions) == PARTITIONS + 1, f"seed {seed}"
    checkpoint = OffsetCheckpointFile(broker.data_dir / CLEANER_OFFSET_CHECKPOINT).read()
    for result in first.partitions:
        p, plan = result.partition, result.plan
        end = plan.clean_end_offset
        assert plan.sources, f"seed {seed}"
        assert checkpoint[TopicPartition(TOPIC, p)] == end
        if not _plain(p):
            # Spark's survivors leave the aborted records out (an anti-join with the plan's
            # aborted batches), so an aborted record never hides a committed one.
            assert plan.stop_kind == "open transaction", plan.stop_reason
            assert result.stats.aborted_batches_dropped > 0, f"seed {seed}"
            check_first_txn_pass(txns, txn_before, end, f"seed {seed}")
            continue
        assert end <= broker.high_watermarks[p], f"seed {seed}"
        after = _records(broker, p)
        assert after == expected_after_pass(before[p], end, now, {}), f"seed {seed} p{p}"
        assert any(r.offset >= end for r in after), f"seed {seed}: nothing above the range"
        # The segments from the end of the cleaned range on (above the HW, and the active
        # one) are the very same files.
        now_files = _digests(broker.data_dir / f"{TOPIC}-{p}")
        for name, digest in untouched[p].items():
            if name.endswith(".log") and int(name.split(".")[0]) >= end:
                assert now_files[name] == digest, f"seed {seed}: {name} changed"
    assert first.stats.horizons_set > 0, f"seed {seed}: no tombstone kept"
    assert _load_in_broker(broker.data_dir) == ends_before, f"seed {seed}"


def test_second_pass_drops_tombstones_past_their_horizon_and_passes_verify(
    spark: SparkSession, tmp_path: Path
) -> None:
    seed = 31
    broker, txns = _compacted_broker(tmp_path, seed)
    ends_before = _load_in_broker(broker.data_dir)
    now = max(broker.end_ms, _txns_end_ms(txns)) + 10
    _local_pass(broker, now)  # the first pass, as in the test above, without Spark
    middle = {p: _records(broker, p) for p in range(PARTITIONS)}
    horizons = {
        p: {r.offset: now + RETENTION_MS for r in middle[p] if r.value is None}
        for p in range(PARTITIONS)
    }
    with_data = marker_transactions_with_data(txns.directory)
    later = now + RETENTION_MS
    second = run_compact(spark, broker.data_dir, TOPIC, now_ms=later, install=True)
    dropped = 0
    for result in second.partitions:
        p, end = result.partition, result.plan.clean_end_offset
        after = _records(broker, p)
        if _plain(p):
            assert after == expected_after_pass(middle[p], end, later, horizons[p]), f"{seed}"
            dropped += result.stats.tombstones_dropped
            continue
        # The markers whose transactions lost all their data in the first pass have reached
        # their horizon: they go (but the range's last batch), with their .txnindex entries.
        tail = last_batch_below(txns.directory, end)
        markers = {h.base_offset for h, _ in read_partition(txns.directory) if h.is_control}
        assert markers == {o for o, has in with_data.items() if has or o >= end or o in tail}
        assert result.stats.markers_dropped > 0, f"seed {seed}"
        check_txn_index_entries(txns, markers, f"seed {seed}")
        log = reopen_txn_partition(txns, clean=False)
        try:
            assert log.last_stable_offset == txns.last_stable_offset, f"seed {seed}"
        finally:
            log.close()
    assert dropped > 0, f"seed {seed}: no tombstone reached its horizon"
    assert _load_in_broker(broker.data_dir) == ends_before
    # Gaps from dropped batches and records, batches with a delete horizon and rebuilt batches
    # all pass verify's checks.
    _verify_ok(spark, broker.data_dir)


def test_keyless_records_and_running_brokers_are_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    seed = 41
    props = {**COMPACT_PROPS, "cleanup.policy": "delete"}  # so the broker accepted them
    broker = build_broker_dir(tmp_path, seed, partitions=PARTITIONS, props=props, keyless_at=2)
    snapshot = {p: _digests(broker.data_dir / f"{TOPIC}-{p}") for p in range(PARTITIONS)}
    staging = tmp_path / "staging"
    with pytest.raises(CompactError, match="without a key"):
        run_compact(
            spark,
            broker.data_dir,
            TOPIC,
            now_ms=broker.end_ms + 10,
            staging_dir=staging,
            install=True,
            config_overrides={"cleanup.policy": "compact"},
        )
    assert not staging.exists()
    assert {p: _digests(broker.data_dir / f"{TOPIC}-{p}") for p in range(PARTITIONS)} == snapshot

    manager = LogManager(LogManagerConfig(log_dirs=(str(broker.data_dir),)), ManualClock())
    manager.open()
    try:
        with pytest.raises(CompactError, match="running broker"):
            run_compact(
                spark,
                broker.data_dir,
                TOPIC,
                now_ms=broker.end_ms + 10,
                install=True,
                config_overrides={"cleanup.policy": "compact"},
            )
    finally:
        manager.shutdown()
