"""`python -m bench.throughput` end to end at its smallest (1 MiB per transfer, one run, no
Tansu): real ketch processes (one broker, then three), librdkafka and ketch's own producer.

The benchmark measures wall time and CPU by design, so this run uses the real clock; the
assertions are on what it must report (every scenario, every measured process, finite and
positive figures in sane ranges), never on how fast this machine is.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from bench import throughput

BUDGET_S = 60.0
SCENARIOS = {
    ("ketch", "ingest_1KiB_acks1"),
    ("ketch", "fetch_1KiB"),
    ("ketch", "ingest_100B_acks1"),
    ("ketch", "fetch_100B"),
    ("ketch", "produce_100B_one_at_a_time"),
    ("ketch", "native_ingest_1KiB_acks1"),
    ("ketch_rf3", "ingest_1KiB_acks_all_rf3"),
}
# Bounds no healthy run leaves on any machine (a figure past them is a unit or counting bug).
MAX_MIB_PER_S = 100_000.0
MAX_LATENCY_US = 10_000_000.0


def _check_figures(scenario: dict[str, Any], processes: list[str]) -> None:
    [run] = scenario["runs"]
    assert all(math.isfinite(v) and v >= 0 for v in run.values()), scenario
    if scenario["name"].startswith("produce_"):
        assert 0 < run["latency_us_p50"] <= run["latency_us_p99"] < MAX_LATENCY_US, run
        assert run["requests_per_s"] > 0, run
        unit = "us_per_request"
        # 2000 acknowledged requests cost the broker more than one clock tick.
        assert run["cpu_us_per_request[broker-0]"] > 0, run
    else:
        assert 0 < run["mib_per_s"] < MAX_MIB_PER_S, run
        assert run["records_per_s"] > 0, run
        unit = "ms_per_mib"
    assert {f"cpu_{unit}[{p}]" for p in processes} <= set(run), (processes, run)
    for key in ("ratio_to_librdkafka", "ratio_to_acks1_rf1"):
        if key in run:
            assert run[key] > 0, run
    summary = scenario["summary"]
    assert set(summary) == set(run), scenario
    for key, spread in summary.items():
        assert spread == {"median": run[key], "min": run[key], "max": run[key]}, key


@pytest.mark.timeout(2 * BUDGET_S)
def test_throughput_bench_reports_every_scenario(tmp_path: Path) -> None:
    out = tmp_path / "throughput.json"
    started = time.monotonic()
    code = throughput.main(["--mb", "1", "--runs", "1", "--json", str(out)])
    elapsed_s = time.monotonic() - started
    assert code == throughput.EXIT_OK
    assert elapsed_s < BUDGET_S
    doc = json.loads(out.read_text())
    assert doc["config"]["mib"] == 1
    assert doc["config"]["runs"] == 1
    scenarios = doc["scenarios"]
    assert {(s["target"], s["name"]) for s in scenarios} == SCENARIOS
    targets = doc["targets"]
    assert set(targets) == {"ketch", "ketch_rf3"}
    assert set(targets["ketch"]["processes"]) == {"broker-0", "controller", "bench client"}
    assert set(targets["ketch_rf3"]["processes"]) == {
        "broker-0",
        "broker-1",
        "broker-2",
        "controller",
        "bench client",
    }
    for scenario in scenarios:
        _check_figures(scenario, list(targets[scenario["target"]]["processes"]))
    ratios = {s["name"]: s["runs"][0] for s in scenarios}
    assert "ratio_to_librdkafka" in ratios["native_ingest_1KiB_acks1"]
    assert "ratio_to_acks1_rf1" in ratios["ingest_1KiB_acks_all_rf3"]
