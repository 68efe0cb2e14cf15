"""The pure parts of `python -m bench.throughput`: /proc/PID/stat parsing, the figures computed
from a measured phase, the median and spread over runs, paired ratios, the report's labels and
JSON shape, and where the Tansu binary is looked for. No timing is asserted (the benchmark's
output is judged by reading it); the end-to-end run is tests/integration/test_bench_throughput.py.
"""

from __future__ import annotations

import json
import os
import string
from pathlib import Path

import pytest

from bench.latency_kafka_peer import template_problem
from bench.throughput_meter import ProcessGone, cpu_seconds, cpu_ticks, read_cpu_ticks
from bench.throughput_report import document, figure_label, number
from bench.throughput_summary import (
    MIB,
    Phase,
    ScenarioRuns,
    Spread,
    nearest_rank,
    paired_ratios,
    request_metrics,
    transfer_metrics,
)
from bench.throughput_tansu import TansuUnavailable, command_template, find_binary

# A real line's shape (proc(5)): pid, (comm), state, ppid, ... utime=14, stime=15, cutime, ...
_STAT_TAIL = "S 1 100 100 0 -1 4194560 5000 0 12 0 {utime} {stime} 7 8 20 0 3 0 99 1 2"


def _stat_line(comm: str, utime: int, stime: int) -> str:
    return f"4242 ({comm}) " + _STAT_TAIL.format(utime=utime, stime=stime) + "\n"


# -- /proc/PID/stat --------------------------------------------------------------------------------


def test_cpu_ticks_is_utime_plus_stime() -> None:
    assert cpu_ticks(_stat_line("python", 300, 45)) == 345


def test_cpu_ticks_counts_fields_after_the_last_parenthesis() -> None:
    # comm may hold spaces and parentheses: splitting the whole line would shift every field.
    assert cpu_ticks(_stat_line("a b) (c", 11, 22)) == 33


@pytest.mark.parametrize("line", ["", "4242 python S 1", "4242 (python) S 1 2 3"])
def test_cpu_ticks_rejects_what_is_not_a_stat_line(line: str) -> None:
    with pytest.raises(ValueError, match="stat line"):
        cpu_ticks(line)


def test_read_cpu_ticks_reads_the_pid_entry(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "stat").write_text(_stat_line("broker", 5, 6))
    assert read_cpu_ticks(77, proc=tmp_path) == 11
    with pytest.raises(ProcessGone, match="78"):
        read_cpu_ticks(78, proc=tmp_path)


def test_read_cpu_ticks_parses_this_process_real_entry() -> None:
    assert read_cpu_ticks(os.getpid()) >= 0


def test_cpu_seconds_is_each_process_delta_over_the_tick_rate() -> None:
    before = {"broker-0": 100, "controller": 7}
    after = {"broker-0": 350, "controller": 7}
    assert cpu_seconds(before, after, ticks_per_s=100) == {"broker-0": 2.5, "controller": 0.0}


def test_cpu_seconds_refuses_a_counter_going_back() -> None:
    with pytest.raises(AssertionError):
        cpu_seconds({"broker-0": 10}, {"broker-0": 9}, ticks_per_s=100)


# -- figures ---------------------------------------------------------------------------------------


def test_transfer_metrics() -> None:
    phase = Phase(
        elapsed_ns=500_000_000,
        cpu_s={"broker-0": 0.01, "bench client": 0.0},
        payload_bytes=2 * MIB,
        records=2048,
    )
    assert transfer_metrics(phase) == {
        "mib_per_s": 4.0,
        "records_per_s": 4096.0,
        "cpu_ms_per_mib[broker-0]": 5.0,
        "cpu_ms_per_mib[bench client]": 0.0,
    }


def test_request_metrics_takes_nearest_rank_percentiles() -> None:
    latencies = tuple(range(100_000, 0, -1_000))  # 100 requests, 1..100 us, out of order
    phase = Phase(
        elapsed_ns=2_000_000_000,
        cpu_s={"broker-0": 0.02},
        payload_bytes=100 * 100,
        records=100,
        latencies_ns=latencies,
    )
    assert request_metrics(phase) == {
        "latency_us_p50": 50.0,
        "latency_us_p99": 99.0,
        "requests_per_s": 50.0,
        "cpu_us_per_request[broker-0]": 200.0,
    }


@pytest.mark.parametrize(
    ("samples", "fraction", "expected"),
    [
        ([7], 0.5, 7),
        ([7], 0.99, 7),
        ([1, 2, 3, 4], 0.5, 2),
        ([1, 2, 3, 4], 0.51, 3),
        ([1, 2], 1.0, 2),
    ],
)
def test_nearest_rank(samples: list[int], fraction: float, expected: int) -> None:
    assert nearest_rank(samples, fraction) == expected


def test_spread_is_median_min_max() -> None:
    assert Spread.of([3.0, 1.0, 2.0]) == Spread(2.0, 1.0, 3.0)
    assert Spread.of([4.0, 1.0, 2.0, 3.0]) == Spread(2.5, 1.0, 4.0)


def test_paired_ratios_divide_run_by_run() -> None:
    assert paired_ratios([10.0, 30.0], [20.0, 60.0]) == [0.5, 0.5]
    with pytest.raises(AssertionError):
        paired_ratios([1.0], [1.0, 2.0])


def test_scenario_ratio_and_summary() -> None:
    native = ScenarioRuns("native", "ketch", "d")
    native.runs = [{"mib_per_s": 10.0}, {"mib_per_s": 30.0}, {"mib_per_s": 12.0}]
    native.add_ratio("ratio_to_librdkafka", [100.0, 100.0, 40.0])
    assert native.figure("ratio_to_librdkafka") == [0.1, 0.3, 0.3]
    summary = native.summary()
    assert summary["mib_per_s"] == Spread(12.0, 10.0, 30.0)
    assert summary["ratio_to_librdkafka"] == Spread(0.3, 0.1, 0.3)


def test_summary_refuses_runs_with_different_figures() -> None:
    scenario = ScenarioRuns("s", "ketch", "d", runs=[{"a": 1.0}, {"b": 1.0}])
    with pytest.raises(AssertionError, match="differ"):
        scenario.summary()


# -- report ----------------------------------------------------------------------------------------


def test_figure_labels_and_numbers() -> None:
    assert figure_label("mib_per_s") == "MiB/s"
    assert figure_label("cpu_ms_per_mib[broker-0]") == "CPU ms/MiB broker-0"
    assert figure_label("ratio_to_librdkafka") == "ratio to librdkafka"
    assert [number(v) for v in (0.0, 0.12345, 12.345, 1234.5)] == ["0", "0.123", "12.3", "1,234"]


def test_document_shape_reads_back_as_json() -> None:
    scenario = ScenarioRuns("fetch_1KiB", "tansu", "d", note="in memory")
    scenario.runs = [{"mib_per_s": 1.0}, {"mib_per_s": 3.0}]
    doc = document({"runs": 2}, ["noisy"], {"tansu": {"bootstrap": "x"}}, [scenario])
    back = json.loads(json.dumps(doc))
    assert back["config"] == {"runs": 2}
    assert back["notes"] == ["noisy"]
    [entry] = back["scenarios"]
    assert entry["note"] == "in memory"
    assert entry["runs"] == [{"mib_per_s": 1.0}, {"mib_per_s": 3.0}]
    assert entry["summary"] == {"mib_per_s": {"median": 2.0, "min": 1.0, "max": 3.0}}


# -- Tansu -----------------------------------------------------------------------------------------


def test_find_binary_wants_an_executable_in_the_package(tmp_path: Path) -> None:
    with pytest.raises(TansuUnavailable, match="no bin/tansu"):
        find_binary(tmp_path)
    binary = tmp_path / "bin" / "tansu"
    binary.parent.mkdir()
    binary.write_bytes(b"")
    binary.chmod(0o644)
    with pytest.raises(TansuUnavailable, match="not executable"):
        find_binary(tmp_path)
    binary.chmod(0o755)
    assert find_binary(tmp_path) == binary


def test_command_template_binds_loopback_on_the_chosen_port() -> None:
    template = command_template(Path("/opt/odd {dir}/tansu"))
    assert template_problem(template) is None
    fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    assert fields == {"port"}  # the braces in the path are escaped, not placeholders
    command = template.format(port=4321)
    assert command.startswith("exec '/opt/odd {dir}/tansu' broker ")
    assert "--listener-url tcp://127.0.0.1:4321 " in command
    assert "--advertised-listener-url tcp://127.0.0.1:4321 " in command
    assert command.endswith("--storage-engine memory://tansu/")
