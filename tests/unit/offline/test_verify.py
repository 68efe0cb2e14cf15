"""`ketch verify`'s command line before Spark starts, and the driver-side merging of replica
divergences into ranges."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from offline.verify import main, report_json
from offline.verify_checks import Finding
from offline.verify_job import VerifyReport, _merge_ranges


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "DATA_DIR" in capsys.readouterr().err
    assert main([str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main([str(tmp_path), "--conf", "novalue"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main([str(tmp_path), "--bogus"]) == 2


def test_divergent_batches_merge_into_ranges_per_replica() -> None:
    hits = [
        ("b1", "t", 0, 10, 14, "differs"),
        ("b1", "t", 0, 15, 19, "differs"),
        ("b1", "t", 0, 30, 34, "differs"),
        ("b1", "t", 0, 35, 39, "missing"),
        ("b2", "t", 0, 15, 19, "differs"),
    ]
    found = {(f.broker_dir, f.offsets, f.detail.split(": ", 1)[1]) for f in _merge_ranges(hits)}
    assert found == {
        ("b1", (10, 19), "differs"),
        ("b1", (30, 34), "differs"),
        ("b1", (35, 39), "missing"),
        ("b2", (15, 19), "differs"),
    }


def test_report_json_has_the_design_shape() -> None:
    finding = Finding("offset_gap", "/d/broker-0", "t", 1, 40, (41, 44), "offsets 41..44 missing")
    report = VerifyReport(False, [finding], {"batches": 3})
    shaped = json.loads(json.dumps(report_json(report)))
    assert shaped == {
        "ok": False,
        "findings": [
            {
                "kind": "offset_gap",
                "broker_dir": "/d/broker-0",
                "topic": "t",
                "partition": 1,
                "segment": 40,
                "offsets": [41, 44],
                "detail": "offsets 41..44 missing",
            }
        ],
        "stats": {"batches": 3},
    }
