"""`offline.compact_task.PartitionTask`, the per-partition function of ``ketch compact``, called
without Spark: it stages exactly the files a write with the reference survivors
(`survivors_by_scan`, whole records read in one process) stages, transactions included; a record
without a key is refused as a value and nothing is written; a bounded key map cleans the prefix
of whole segments that fits, those staged files are a clean of that prefix, and the job's result
(`offline.compact._result_of`) plans, installs and checkpoints only that prefix."""

from __future__ import annotations

import hashlib
from pathlib import Path

from offline.compact import _result_of
from offline.compact_plan import PartitionPlan, plan_topic
from offline.compact_task import PartitionOutcome, PartitionTask
from offline.compact_write import survivors_by_scan, write_cleaned_partition
from tests.unit.offline.compact_helpers import (
    COMPACT_PROPS,
    TOPIC,
    build_broker_dir,
    build_transactional_partition,
    config,
)

SEEDS = (3, 17, 29)


def _digests(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


def _reference(plan: PartitionPlan, staging: Path, now_ms: int) -> Path:
    """The partition cleaned from the reference survivors into `staging`."""
    cfg = config()
    sources = plan.sources
    write_cleaned_partition(
        plan.directory,
        sources,
        survivors_by_scan(plan.directory, sources, plan.aborted_batches),
        staging / plan.tp.dir_name,
        now_ms=now_ms,
        delete_retention_ms=cfg.delete_retention_ms,
        log_config=cfg.log,
        aborted_batches=plan.aborted_batches,
    )
    return staging / plan.tp.dir_name


def test_a_task_stages_what_the_reference_survivors_stage(tmp_path: Path) -> None:
    for seed in SEEDS:
        root = tmp_path / str(seed)
        broker = build_broker_dir(root, seed, partitions=2, keys=25)
        build_transactional_partition(broker.data_dir, 2, seed)
        now = broker.end_ms + 10
        plans = [p for p in plan_topic(broker.data_dir, TOPIC, config(), now) if p.sources]
        assert len(plans) == 3, f"seed {seed}: a partition has nothing to clean"
        assert any(p.aborted_batches for p in plans), f"seed {seed}: no aborted batch"
        task = PartitionTask(root / "staging", config(), now)
        for plan in plans:
            outcome = task(plan)
            assert outcome.error is None, f"seed {seed}: {outcome.error}"
            assert outcome.sources_taken == len(plan.sources), f"seed {seed}"
            assert outcome.aborted_batches == plan.aborted_batches, f"seed {seed}"
            expected = _reference(plan, root / "reference", now)
            staged = root / "staging" / plan.tp.dir_name
            assert _digests(staged) == _digests(expected), f"seed {seed} partition {plan.tp}"
            sizes = {name: (staged / name).stat().st_size for name in _digests(staged)}
            assert all(sizes[f"{base:020d}.log"] == size for base, size in outcome.segments)
            assert outcome.stats.records_out < outcome.stats.records_in, f"seed {seed}"


def test_a_record_without_a_key_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    props = {**COMPACT_PROPS, "cleanup.policy": "delete"}  # so the broker accepted it
    broker = build_broker_dir(tmp_path, 41, props=props, keyless_at=2)
    now = broker.end_ms + 10
    (plan,) = plan_topic(broker.data_dir, TOPIC, config(), now)
    outcome = PartitionTask(tmp_path / "staging", config(), now)(plan)
    assert outcome.error is not None
    assert "without a key" in outcome.error, outcome.error
    assert outcome.error.startswith(f"{plan.tp}: "), outcome.error
    assert not (tmp_path / "staging").exists()


def test_a_full_key_map_cleans_the_prefix_of_whole_segments_that_fits(tmp_path: Path) -> None:
    seed = 5
    # Many keys, so each segment brings new ones and a small map fills before the range ends.
    broker = build_broker_dir(tmp_path, seed, batches=200, keys=5000)
    now = broker.end_ms + 10
    (plan,) = plan_topic(broker.data_dir, TOPIC, config(), now)
    whole = PartitionTask(tmp_path / "whole", config(), now)(plan)
    assert whole.error is None, whole.error
    assert len(plan.sources) > 3, f"seed {seed}"
    outcome: PartitionOutcome = PartitionTask(
        tmp_path / "bounded", config(), now, max_map_entries=whole.map_entries // 2
    )(plan)
    assert outcome.error is None, outcome.error
    assert 0 < outcome.sources_taken < len(plan.sources), f"seed {seed}: {outcome}"
    assert outcome.map_entries <= whole.map_entries // 2
    prefix = plan.sources[: outcome.sources_taken]
    expected = tmp_path / "reference" / plan.tp.dir_name
    cfg = config()
    write_cleaned_partition(
        plan.directory,
        prefix,
        survivors_by_scan(plan.directory, prefix),
        expected,
        now_ms=now,
        delete_retention_ms=cfg.delete_retention_ms,
        log_config=cfg.log,
    )
    assert _digests(tmp_path / "bounded" / plan.tp.dir_name) == _digests(expected)
    result = _result_of(plan, outcome)
    assert result.plan.sources == prefix
    assert result.plan.clean_end_offset == prefix[-1].next_offset
    assert result.plan.stop_kind == "offset map"
    assert result.new_segments == outcome.segments
    assert _result_of(plan, whole).plan == plan
