"""`ketch compact` exit codes for what is decided before Spark starts: usage errors are 2,
refusals (topic not compacted, broker running) are 1."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from offline.compact import (
    CompactResult,
    PartitionResult,
    _print_summary,
    default_staging_dir,
    main,
)
from offline.compact_plan import CompactConfig, PartitionPlan, SourceSegment
from offline.compact_write import CleanStats
from runtime.clock import ManualClock
from runtime.log.config import LogManagerConfig
from runtime.log.manager import LogManager

from .compact_helpers import TOPIC, build_broker_dir


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2  # no DATA_DIR, no --topic
    assert main([str(tmp_path)]) == 2  # no --topic
    assert main([str(tmp_path / "missing"), "--topic", TOPIC]) == 2
    assert main([str(tmp_path), "--topic", TOPIC, "--config", "no-equals-sign"]) == 2
    assert main([str(tmp_path), "--topic", TOPIC, "--conf", "=x"]) == 2
    assert "k=v" in capsys.readouterr().err


def test_refusals_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broker = build_broker_dir(tmp_path, 5)
    # Kafka's default cleanup.policy is delete: nothing to compact without a compact policy.
    assert main([str(broker.data_dir), "--topic", TOPIC]) == 1
    assert "cleanup.policy=delete" in capsys.readouterr().err
    manager = LogManager(LogManagerConfig(log_dirs=(str(broker.data_dir),)), ManualClock())
    manager.open()
    try:
        args = [str(broker.data_dir), "--topic", TOPIC, "--install"]
        assert main([*args, "--config", "cleanup.policy=compact"]) == 1
        assert "running broker" in capsys.readouterr().err
    finally:
        manager.shutdown()


def test_default_staging_dir_is_beside_the_data_dir(tmp_path: Path) -> None:
    staging = default_staging_dir(tmp_path / "broker-0")
    assert staging.parent == tmp_path.resolve()
    assert staging.name == "broker-0.compact-staging"


def test_the_summary_fits_80_columns() -> None:
    """Seven numeric columns once crushed each other at 80 columns: records and bytes now read
    "before -> after", bytes in kB/MB/GB."""
    sources = (SourceSegment(0, 104_857_600, 900_000, 0), SourceSegment(900_000, 5_000, 901_000, 0))
    plan = PartitionPlan(
        topic="orders-compacted",
        partition=11,
        directory=Path("/d/orders-compacted-11"),
        high_watermark=1_000_000,
        sources=sources,
        total_segments=3,
        stop_reason="the active segment is never cleaned",
        stop_kind="active segment",
    )
    stats = CleanStats(
        records_in=901_000, records_out=12_345, bytes_in=104_862_600, bytes_out=1_500
    )
    result = CompactResult(
        data_dir=Path("/data/broker-0"),
        topic="orders-compacted",
        staging_dir=Path("/data/broker-0.compact-staging"),
        installed=False,
        config=CompactConfig(cleanup_policy="compact"),
        plans=(plan,),
        partitions=(PartitionResult(plan, ((0, 1_500),), stats),),
        elapsed_s=2.0,
        stats=stats,
    )
    out = io.StringIO()
    _print_summary(result, Console(file=out, width=80))
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    [row] = [line for line in lines if "active segment" in line]
    assert "901000→12345" in row
    assert "104.9 MB→1.5 kB" in row
    assert "2/3" in row
