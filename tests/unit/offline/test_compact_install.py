"""The install protocol: a crash injected before every file operation leaves a directory the
storage engine loads as either the old or the new segments (never a mix), with transaction
indexes that match the markers, and a broker holding the log dir makes the install refuse."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from offline.compact_install import (
    hold_log_dir_lock,
    install_partition,
    update_cleaner_checkpoint,
)
from offline.compact_plan import CompactError, PartitionPlan, plan_partition
from offline.compact_write import CleanedPartition, survivors_by_scan, write_cleaned_partition
from runtime.clock import ManualClock
from runtime.log.checkpoints import CLEANER_OFFSET_CHECKPOINT, OffsetCheckpointFile
from runtime.log.config import LogManagerConfig
from runtime.log.manager import LogManager
from wire.records import Record
from wire.topic import TopicPartition

from .compact_helpers import (
    TOPIC,
    WALL_MS,
    BrokerDir,
    TxnPartition,
    build_broker_dir,
    build_transactional_partition,
    config,
    read_partition,
    reopen_txn_partition,
    txn_index_findings,
)

TP = TopicPartition(TOPIC, 0)


class SimulatedCrash(Exception):
    pass


def _stage(broker: BrokerDir, staging: Path) -> tuple[PartitionPlan, CleanedPartition]:
    cfg = config()
    now = broker.end_ms + 10
    plan = plan_partition(broker.data_dir / TP.dir_name, broker.high_watermarks[0], cfg, now)
    survivors = survivors_by_scan(plan.directory, plan.sources)
    cleaned = write_cleaned_partition(
        plan.directory,
        plan.sources,
        survivors,
        staging,
        now_ms=now,
        delete_retention_ms=cfg.delete_retention_ms,
        log_config=cfg.log,
    )
    return plan, cleaned


def _install(
    data_dir: Path, plan: PartitionPlan, cleaned: CleanedPartition, hook: object = None
) -> None:
    kwargs = {} if hook is None else {"step": hook}
    install_partition(
        data_dir / TP.dir_name,
        cleaned.staging_dir,
        [s.base_offset for s in cleaned.segments],
        [s.base_offset for s in plan.sources],
        **kwargs,  # type: ignore[arg-type]
    )
    update_cleaner_checkpoint(data_dir, {TP: plan.clean_end_offset}, **kwargs)  # type: ignore[arg-type]


def _load(data_dir: Path) -> tuple[list[Record], int]:
    """Open the dir as a broker would (LogManager, swap completion and all), shut it down, and
    return the records left and the log end offset."""
    manager = LogManager(LogManagerConfig(log_dirs=(str(data_dir),)), ManualClock())
    manager.open()
    log = manager.get_log(TP)
    assert log is not None
    end = log.log_end_offset
    manager.shutdown()
    strays = [
        p.name
        for p in (data_dir / TP.dir_name).iterdir()
        if p.name.endswith((".cleaned", ".swap", ".deleted"))
    ]
    assert not strays, strays
    return [r for _, r in read_partition(data_dir / TP.dir_name)], end


def test_a_crash_before_any_step_leaves_old_or_new_segments(tmp_path: Path) -> None:
    seed = 21
    # Many keys, so the cleaned range spans several output segments.
    broker = build_broker_dir(tmp_path / "pristine", seed, keys=400, batches=45)
    plan, cleaned = _stage(broker, tmp_path / "staging")
    assert len(cleaned.segments) >= 3, f"seed {seed}: {cleaned.segments}"
    old_records = [r for _, r in read_partition(broker.data_dir / TP.dir_name)]
    old_end = _load_copy(broker.data_dir, tmp_path / "old-copy")[1]

    steps: list[str] = []
    done = _copy(broker.data_dir, tmp_path / "complete")
    _install(done, plan, cleaned, steps.append)
    new_records, new_end = _load(done)
    assert new_end == old_end, f"seed {seed}"
    assert len(new_records) < len(old_records), f"seed {seed}: compaction removed nothing"
    assert OffsetCheckpointFile(done / CLEANER_OFFSET_CHECKPOINT).read() == {
        TP: plan.clean_end_offset
    }
    commit = max(i for i, s in enumerate(steps) if s.endswith(".swap") and ".cleaned" in s)

    for k, name in enumerate(steps):
        target = _copy(broker.data_dir, tmp_path / f"crash-{k}")

        def crash_at_k(step: str, k: int = k, calls: list[int] = []) -> None:  # noqa: B006
            if len(calls) == k:
                raise SimulatedCrash(step)
            calls.append(k)

        with pytest.raises(SimulatedCrash):
            _install(target, plan, cleaned, crash_at_k)
        records, end = _load(target)
        expected = old_records if k <= commit else new_records
        assert records == expected, f"seed {seed}: crash before step {k} ({name})"
        assert end == old_end, f"seed {seed}: crash before step {k} ({name})"
        shutil.rmtree(target)


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def _load_copy(source: Path, target: Path) -> tuple[list[Record], int]:
    return _load(_copy(source, target))


def test_install_refuses_a_log_dir_a_broker_holds(tmp_path: Path) -> None:
    broker = build_broker_dir(tmp_path, 3)
    manager = LogManager(LogManagerConfig(log_dirs=(str(broker.data_dir),)), ManualClock())
    manager.open()
    try:
        with (
            pytest.raises(CompactError, match="running broker"),
            hold_log_dir_lock(broker.data_dir),
        ):
            pass
    finally:
        manager.shutdown()
    # Once the broker is gone the lock is free, and a broker cannot start while it is held.
    with hold_log_dir_lock(broker.data_dir):
        blocked = LogManager(LogManagerConfig(log_dirs=(str(broker.data_dir),)), ManualClock())
        with pytest.raises(Exception, match="in use"):
            blocked.open()


def test_a_crash_leaves_transaction_indexes_that_match_the_markers(tmp_path: Path) -> None:
    """With transactions: every cleaned segment that keeps an ABORT marker has a .txnindex to
    install (after the .log, before the indexes whose absence makes the loader rebuild it), and
    the old segments' .txnindex files go with them. Wherever the install stops, the loaded log
    has the old or the new records, the same last stable offset, and .txnindex files that match
    its markers (verify's check)."""
    seed = 2
    pristine = tmp_path / "pristine"
    txns = build_transactional_partition(pristine / "broker-0", 0, seed)
    now = WALL_MS + 10_000
    cfg = config()
    plan = plan_partition(txns.directory, txns.high_watermark, cfg, now)
    cleaned = write_cleaned_partition(
        plan.directory,
        plan.sources,
        survivors_by_scan(plan.directory, plan.sources, plan.aborted_batches),
        tmp_path / "staging",
        now_ms=now,
        delete_retention_ms=cfg.delete_retention_ms,
        log_config=cfg.log,
        aborted_batches=plan.aborted_batches,
    )
    staged_indexes = sorted(p.name for p in (tmp_path / "staging").glob("*.txnindex"))
    assert staged_indexes, f"seed {seed}: no cleaned segment keeps an ABORT marker"
    old_records = [r for _, r in read_partition(txns.directory)]

    def install(directory: Path, hook: Callable[[str], None]) -> None:
        install_partition(
            directory,
            cleaned.staging_dir,
            [s.base_offset for s in cleaned.segments],
            [s.base_offset for s in plan.sources],
            step=hook,
        )

    steps: list[str] = []
    done = _copy(pristine, tmp_path / "complete") / "broker-0" / txns.directory.name
    install(done, steps.append)
    new_records = _load_txns(txns, done, seed, "complete")
    assert len(new_records) < len(old_records), f"seed {seed}"
    # The .txnindex is renamed right after its .log when the swap is finished.
    finals = [s.split(" -> ")[1] for s in steps if s.startswith("rename") and ".swap -> " in s]
    for name in staged_indexes:
        at = finals.index(name)
        assert finals[at - 1] == name.replace(".txnindex", ".log"), finals
    commit = max(i for i, s in enumerate(steps) if s.endswith(".swap") and ".cleaned" in s)

    for k, name in enumerate(steps):
        target = _copy(pristine, tmp_path / f"crash-{k}") / "broker-0" / txns.directory.name

        def crash_at_k(step: str, k: int = k, calls: list[int] = []) -> None:  # noqa: B006
            if len(calls) == k:
                raise SimulatedCrash(step)
            calls.append(k)

        with pytest.raises(SimulatedCrash):
            install(target, crash_at_k)
        records = _load_txns(txns, target, seed, f"crash before step {k} ({name})")
        expected = old_records if k <= commit else new_records
        assert records == expected, f"seed {seed}: crash before step {k} ({name})"
        shutil.rmtree(target.parent.parent)


def _load_txns(txns: TxnPartition, directory: Path, seed: int, label: str) -> list[Record]:
    """Load the partition as a stopped broker's (swap completion and all) and check what must
    hold whatever the install did: no strays, the LSO, .txnindex files matching the markers."""
    moved = TxnPartition(
        directory, txns.high_watermark, txns.last_stable_offset, txns.kinds, txns.markers,
        txns.aborted,
    )  # fmt: skip
    log = reopen_txn_partition(moved, clean=True)
    try:
        assert log.last_stable_offset == txns.last_stable_offset, f"seed {seed}: {label}"
        assert log.log_end_offset == txns.high_watermark, f"seed {seed}: {label}"
    finally:
        log.close()
    strays = [p.name for p in directory.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    assert not strays, f"seed {seed}: {label}: {strays}"
    assert txn_index_findings(directory) == [], f"seed {seed}: {label}"
    return [r for _, r in read_partition(directory)]
