"""`ketch compact` exit codes for what is decided before Spark starts: usage errors are 2,
refusals (topic not compacted, broker running) are 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from offline.compact import default_staging_dir, main
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
