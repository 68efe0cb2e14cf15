"""The arithmetic of `python -m bench.throughput`, pure: one measured phase -> its figures, and
the runs of a scenario -> median with min-max spread.

Units (names end in them): MiB = 2^20 bytes of record VALUES (keys, headers and the RecordBatch
framing are not counted: the payload an application hands over); `mib_per_s`; CPU as
`cpu_ms_per_mib[<process>]` (a transfer) or `cpu_us_per_request[<process>]` (one request at a
time), one figure per measured process; latencies as `latency_us_p50` / `latency_us_p99`
(nearest rank over every measured request); ratios are plain numbers (`ratio_to_...`).

A ratio between two scenarios is taken per run (run i of one against run i of the other, both
measured minutes apart on the same machine) and then summarized like any figure, so its spread
shows how much the pairing moved.

Everything here is values and functions; no state.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

MIB: Final = 1 << 20
NS_PER_S: Final = 1_000_000_000


@dataclass(frozen=True, slots=True)
class Phase:
    """What one measured window moved, and the CPU each process spent in it."""

    elapsed_ns: int
    cpu_s: Mapping[str, float]
    payload_bytes: int
    records: int
    latencies_ns: tuple[int, ...] = ()  # per request, for the one-at-a-time scenario

    def __post_init__(self) -> None:
        assert self.elapsed_ns > 0, self.elapsed_ns
        assert self.payload_bytes >= 0, self
        assert self.records >= 0, self
        assert all(s >= 0 for s in self.cpu_s.values()), self.cpu_s


def cpu_key(unit: str, process: str) -> str:
    """`cpu_ms_per_mib[broker-0]`: the figure's unit with the process in brackets, as the
    latency benchmark names a scenario's client (`produce_acks1[confluent]`)."""
    return f"cpu_{unit}[{process}]"


def transfer_metrics(phase: Phase) -> dict[str, float]:
    """A bulk transfer (ingest or fetch): MiB/s, records/s and CPU ms per MiB per process."""
    assert phase.payload_bytes > 0, "a transfer moved nothing"
    mib = phase.payload_bytes / MIB
    seconds = phase.elapsed_ns / NS_PER_S
    metrics = {"mib_per_s": mib / seconds, "records_per_s": phase.records / seconds}
    for process, cpu_s in phase.cpu_s.items():
        metrics[cpu_key("ms_per_mib", process)] = cpu_s * 1e3 / mib
    return metrics


def request_metrics(phase: Phase) -> dict[str, float]:
    """One request at a time: p50/p99 latency, requests/s, CPU us per request per process."""
    latencies = sorted(phase.latencies_ns)
    assert latencies, "no request was measured"
    assert len(latencies) == phase.records, (len(latencies), phase.records)
    metrics = {
        "latency_us_p50": nearest_rank(latencies, 0.50) / 1e3,
        "latency_us_p99": nearest_rank(latencies, 0.99) / 1e3,
        "requests_per_s": phase.records / (phase.elapsed_ns / NS_PER_S),
    }
    for process, cpu_s in phase.cpu_s.items():
        metrics[cpu_key("us_per_request", process)] = cpu_s * 1e6 / phase.records
    return metrics


def nearest_rank(ordered: Sequence[int], fraction: float) -> int:
    """The nearest-rank percentile of ascending samples: the smallest sample with at least
    `fraction` of all samples at or below it."""
    assert ordered, "no samples"
    assert 0.0 < fraction <= 1.0, fraction
    rank = math.ceil(fraction * len(ordered))
    return ordered[rank - 1]


@dataclass(frozen=True, slots=True)
class Spread:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        ordered = sorted(values)
        assert ordered, "no runs"
        return cls(statistics.median(ordered), ordered[0], ordered[-1])


def paired_ratios(numerators: Sequence[float], denominators: Sequence[float]) -> list[float]:
    """numerator[i] / denominator[i] for each run i."""
    assert len(numerators) == len(denominators), (numerators, denominators)
    assert all(d > 0 for d in denominators), denominators
    return [n / d for n, d in zip(numerators, denominators, strict=True)]


@dataclass(slots=True)
class ScenarioRuns:
    """One scenario against one target: each run's figures, then their summary."""

    name: str  # ingest_1KiB_acks1, fetch_1KiB, produce_100B_one_at_a_time, ...
    target: str  # ketch, ketch_rf3, tansu
    description: str
    note: str | None = None  # printed beside every figure (Tansu's in-memory storage)
    runs: list[dict[str, float]] = field(default_factory=list)

    def figure(self, key: str) -> list[float]:
        return [run[key] for run in self.runs]

    def add_ratio(self, key: str, denominators: Sequence[float], of: str = "mib_per_s") -> None:
        """`key` in each run: this scenario's `of` over the other scenario's, run by run."""
        for run, ratio in zip(self.runs, paired_ratios(self.figure(of), denominators), strict=True):
            run[key] = ratio

    def summary(self) -> dict[str, Spread]:
        """Each figure's median and min-max over the runs, in the first run's key order."""
        assert self.runs, f"{self.name}: no runs"
        keys = list(self.runs[0])
        assert all(list(run) == keys for run in self.runs), f"{self.name}: runs differ in figures"
        return {key: Spread.of(self.figure(key)) for key in keys}
