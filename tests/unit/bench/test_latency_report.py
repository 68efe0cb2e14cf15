"""`ketch bench latency`'s tables (bench/latency_report.py) read at 80 columns: the figures
whole in their cells, never wrapped into fragments."""

from __future__ import annotations

import io

from rich.console import Console

from bench.latency_report import (
    PROCESS_FLOOR,
    PeerReport,
    ScenarioResult,
    new_histogram,
    print_peer_table,
    print_table,
)

CONFIG = {"loop": "uvloop", "cluster": "3 brokers", "mode": "closed", "size_bytes": 100}


def _result(name: str, micros: list[int], payload_bytes: int | None = None) -> ScenarioResult:
    histogram = new_histogram()
    for us in micros:
        histogram.record_value(us * 1_000)
    return ScenarioResult(name, f"what {name} measures", histogram, 10.0, 0.0, payload_bytes)


def _printed(draw: object) -> list[str]:
    out = io.StringIO()
    assert callable(draw)
    draw(Console(file=out, width=80))
    return out.getvalue().splitlines()


def test_the_latency_tables_fit_80_columns() -> None:
    results = [
        _result("floor", [25, 26, 27] * 1_000),
        _result(PROCESS_FLOOR, [60, 61, 64] * 1_000),
        # p50 1,900.5 us: a third of the samples at 1,355, a third at 1,900.
        _result("produce_acks_all[confluent]", [1_355, 1_900, 123_456] * 10_000),
        _result("throughput_acks1", [9_000] * 100_000, payload_bytes=1_000_000_000),
    ]
    lines = _printed(lambda console: print_table(console, CONFIG, results))
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    text = "\n".join(lines)
    assert "produce_acks_all[confl" in text  # a long name folds onto a second line, not cut
    [row] = [line for line in lines if "1,900.5" in line]
    assert "123,469.8" in row  # whole figures (HdrHistogram's 3-digit precision)
    [ratios] = [line for line in lines if "30,000" in line]
    assert "73.1x" in ratios  # p50 (1,900.5) over the in-process floor's (26.0)
    assert "31.2x" in ratios  # and over the other process's (61.0)

    peer = PeerReport("tansu broker", "127.0.0.1:9092", 1, 1, 1, results[2:3])
    lines = _printed(lambda console: print_peer_table(console, results, peer))
    assert all(len(line) <= 80 for line in lines), "\n".join(lines)
    assert any("1.00x" in line for line in lines)
