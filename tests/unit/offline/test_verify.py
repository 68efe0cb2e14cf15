"""`ketch verify`'s command line before Spark starts, and the driver-side merging of replica
divergences into ranges."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from offline.verify import _print_summary, main, report_json
from offline.verify_checks import Finding
from offline.verify_job import VerifyReport
from offline.verify_replicas import merge_ranges


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
    found = {(f.broker_dir, f.offsets, f.detail.split(": ", 1)[1]) for f in merge_ranges(hits)}
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


def test_sequence_gaps_and_open_transactions_are_summarised_apart_from_problems(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gap = {
        "broker_dir": "/d/broker-1", "topic": "t", "partition": 2, "producer_id": 7,
        "producer_epoch": 0, "expected_sequence": 3, "base_sequence": 10, "offset": 40,
        "previous_offset": 30,
    }  # fmt: skip
    open_txn = {
        "broker_dir": "/d/broker-0", "topic": "t", "partition": 1, "producer_id": 9,
        "first_offset": 70,
    }  # fmt: skip
    stats = {
        "broker_dirs": 1, "partitions": 1, "replicas": 1, "batches": 9, "bytes": 900,
        "elapsed_s": 0.1, "partial_dirs": [], "sequence_gaps": 4, "sequence_gap_examples": [gap],
        "open_transactions": 2, "open_transaction_examples": [open_txn],
    }  # fmt: skip
    _print_summary(VerifyReport(True, [], stats))
    printed = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "4 idempotent producer sequence gap(s), not problems" in printed
    assert "broker-1 t-2 producer 7 epoch 0: sequence 10 at offset 40, expected 3" in printed
    assert "2 transaction(s) open at the end of the log, not problems" in printed
    assert "broker-0 t-1 producer 9 from offset 70" in printed
    assert "OK: no problems found" in printed


def test_findings_read_whole_at_80_columns() -> None:
    """Each finding is a heading and its detail indented beneath, never a column squeezed to
    a few characters; no line passes the terminal's 80 columns."""
    detail = (
        "replica diverges from the leader's copy: batch crc 0x1234abcd here, 0x99887766 on "
        "broker-0, for offsets 100..199 of the same leader epoch 4"
    )
    findings = [
        Finding("replica_divergence", "/d/broker-1", "orders", 3, 0, (100, 199), detail),
        Finding("offset_gap", "/d/broker-0", "orders", 1, 40, (41, 44), "offsets 41..44 missing"),
        Finding("layout", None, None, None, None, None, "topic-configs.json unreadable"),
    ]
    stats = {
        "broker_dirs": 2, "partitions": 2, "replicas": 4, "batches": 9, "bytes": 900,
        "elapsed_s": 0.1, "partial_dirs": [], "sequence_gaps": 0, "open_transactions": 0,
    }  # fmt: skip
    out = io.StringIO()
    _print_summary(VerifyReport(False, findings, stats), Console(file=out, width=80))
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert "3 problem(s): 1 layout, 1 offset_gap, 1 replica_divergence" in lines
    heading = lines.index(
        "1. replica_divergence broker-1 · orders-3 · segment 0 · offsets 100..199"
    )
    # The detail, whole, on the indented lines beneath its heading.
    assert lines[heading + 1].startswith("   replica diverges")
    assert " ".join(line.strip() for line in lines[heading + 1 : heading + 3]) == detail
    assert "3. layout" in lines
