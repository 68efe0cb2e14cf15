"""`ketch bench latency` end to end on a small in-process cluster (real controller, brokers,
TCP), plus the load generator's coordinated-omission correction and the argument checks.

The benchmark measures wall-clock latency by design, so its runs use the system clock; the
assertions are on the shape of what it writes and on counts the schedule fixes, never on how
fast this machine is.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram

from bench import latency
from bench.latency_cluster import process_commands_available
from bench.latency_scenarios import Load, closed_loop, now_ns, open_loop

SCENARIO_KEYS = {
    "name",
    "p50_us",
    "p90_us",
    "p99_us",
    "p999_us",
    "max_us",
    "count",
    "throughput_msgs_s",
}


def _run(tmp_path: Path, *flags: str) -> tuple[dict[str, object], Path]:
    out_json = tmp_path / "out.json"
    out_png = tmp_path / "out.png"
    code = latency.main(["--in-process", "--json", str(out_json), "--plot", str(out_png), *flags])
    assert code == latency.EXIT_OK
    document = json.loads(out_json.read_text())
    assert set(document) == {"config", "scenarios"}, document
    return document, out_png


def _check_outputs(
    document: dict[str, object],
    png: Path,
    names: list[str],
    may_be_empty: frozenset[str] = frozenset(),
) -> None:
    scenarios = document["scenarios"]
    assert isinstance(scenarios, list)
    assert [s["name"] for s in scenarios] == names
    for scenario in scenarios:
        assert set(scenario) >= SCENARIO_KEYS, scenario
        if scenario["name"] in may_be_empty and scenario["count"] == 0:
            assert scenario["throughput_msgs_s"] == 0, scenario
            continue
        assert scenario["count"] > 0, scenario
        assert scenario["throughput_msgs_s"] > 0, scenario
        percentiles = [scenario[k] for k in ("p50_us", "p90_us", "p99_us", "p999_us", "max_us")]
        assert percentiles == sorted(percentiles), scenario
        assert percentiles[0] > 0, scenario
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    for name in names:
        hlog = png.with_name(f"out.{name}.hlog")
        # The log reads back as HdrHistogram's format with the scenario's whole sample: one
        # interval line "start,length,max,base64 histogram" after the comments and legend.
        lines = [line for line in hlog.read_text().splitlines() if line[:1].isdigit()]
        assert len(lines) == 1, (hlog, lines)
        histogram = HdrHistogram.decode(lines[0].rsplit(",", 1)[1])
        count = next(s["count"] for s in scenarios if s["name"] == name)
        assert histogram.get_total_count() == count, (name, count)


def test_acks_open_loop_run_writes_json_plot_and_logs(tmp_path: Path) -> None:
    document, png = _run(tmp_path, "--acks", "1", "--rate", "300", "--duration", "1.5")
    _check_outputs(document, png, ["floor", "floor_asyncio", "produce_acks1", "e2e"])
    # Open loop keeps the schedule: every request due in the 0.5 s window (1.5 s over 2
    # cluster scenarios and the floors) is counted, however slow the machine.
    counts = {s["name"]: s["count"] for s in document["scenarios"]}  # type: ignore[attr-defined]
    assert counts["produce_acks1"] == counts["e2e"] == 150, counts
    config = document["config"]
    assert isinstance(config, dict)
    assert config["acks"] == "1"
    assert config["rate"] == 300
    assert config["cluster"] == "in-process"
    assert config["coordinated_omission_correction"] is not None
    assert config["replication_factor"] == 3
    assert config["min_insync_replicas"] == 2


def test_full_closed_loop_run_has_every_scenario(tmp_path: Path) -> None:
    document, png = _run(tmp_path, "--duration", "2", "--loop", "asyncio", "--size", "200")
    names = [
        "floor",
        "floor_uvloop",
        "produce_acks0",
        "produce_acks1",
        "produce_acks_all",
        "e2e",
        "throughput_acks1",
        "throughput_acks_all",
    ]
    # A quarter second per scenario: with thousands of 16 KB-batched records in flight,
    # acks=all on one shared event loop may acknowledge none within it (its p50 is ~0.6 s).
    _check_outputs(document, png, names, may_be_empty=frozenset({"throughput_acks_all"}))
    scenarios = {s["name"]: s for s in document["scenarios"]}  # type: ignore[attr-defined]
    for name in ("throughput_acks1", "throughput_acks_all"):
        figures = scenarios[name]
        # MB/s is the acknowledged value bytes: 200 B per counted message.
        expected = figures["throughput_msgs_s"] * 200 / 1e6
        assert figures["throughput_mb_s"] == pytest.approx(expected, rel=0.01, abs=0.01)
    assert document["config"]["mode"] == "closed-loop"  # type: ignore[index]


@pytest.mark.slow
@pytest.mark.skipif(
    not process_commands_available(),
    reason="`ketch controller`/`ketch broker` are not registered in runtime/cli.py yet",
)
def test_process_cluster_run(tmp_path: Path) -> None:
    """The default path: a controller and 3 brokers as child processes (slow to start: each
    imports the runtime), measured with acks=all; the children are stopped afterwards."""
    out_json = tmp_path / "out.json"
    code = latency.main(["--acks", "all", "--duration", "1", "--json", str(out_json)])
    assert code == latency.EXIT_OK
    document = json.loads(out_json.read_text())
    assert document["config"]["cluster"] == "processes"
    names = [s["name"] for s in document["scenarios"]]
    assert names == ["floor", "floor_asyncio", "produce_acks_all", "e2e"]
    assert all(s["count"] > 0 for s in document["scenarios"]), document


async def test_open_loop_charges_a_stall_to_every_request_due_during_it() -> None:
    """A 50 ms stall of the client's loop: the requests due meanwhile are sent late and each is
    charged from its intended time, and none of the schedule's requests is dropped."""
    load = Load(duration_s=0.3, warmup_s=0.05, rate=1_000, size_bytes=0)
    stall_at = now_ns() + 150_000_000  # inside the measured window
    stalled = False

    async def step(_intended: int) -> int:
        nonlocal stalled
        if not stalled and now_ns() >= stall_at:
            stalled = True
            time.sleep(0.05)  # the stall under test: the whole loop is blocked  # noqa: ASYNC251
        await asyncio.sleep(0)
        return now_ns()

    window = await open_loop(step, load)
    assert stalled
    assert window.histogram.get_total_count() == 300  # duration x rate, all of them
    slow: int = sum(
        item.count_added_in_this_iter_step
        for item in window.histogram.get_recorded_iterator()
        if item.value_iterated_to >= 10_000_000
    )
    # ~50 requests fell due in the stall; each waited from its due time to the stall's end.
    assert slow >= 30, slow


async def test_closed_loop_measures_from_the_actual_send() -> None:
    load = Load(duration_s=0.05, warmup_s=0.01, rate=None, size_bytes=0)

    async def step(intended: int) -> int:
        await asyncio.sleep(0)
        return intended + 2_000_000  # every request "takes" exactly 2 ms

    window = await closed_loop(step, load)
    count = window.histogram.get_total_count()
    assert count > 0
    # Every sample is 2 ms, up to the histogram's 3 significant digits.
    assert window.histogram.get_min_value() >= 1_998_000
    assert window.histogram.get_max_value() <= 2_002_000


@pytest.mark.parametrize(
    "flags",
    [
        ["--duration", "0"],
        ["--rate", "-5"],
        ["--brokers", "0"],
        ["--size", "-1"],
        ["--bootstrap", "127.0.0.1:1", "--in-process"],
    ],
)
def test_bad_arguments_exit_2(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert latency.main(flags) == latency.EXIT_USAGE
    assert "ketch bench latency:" in capsys.readouterr().err


def test_unreachable_bootstrap_fails_with_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    code = latency.main(["--bootstrap", "127.0.0.1:1", "--duration", "0.2", "--acks", "1"])
    assert code == latency.EXIT_FAILED
    assert "failed" in capsys.readouterr().err


def test_register_adds_bench_latency_with_a_handler() -> None:
    parser = argparse.ArgumentParser(prog="ketch")
    latency.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["bench", "latency", "--acks", "all", "--rate", "50"])
    assert args.handler is latency.run
    assert args.acks == "all"
    assert args.rate == 50
