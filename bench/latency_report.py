"""Results of `ketch bench latency`: the summary table, the JSON document, the percentile plot
and the HdrHistogram logs.

A `ScenarioResult` holds one scenario's HDR histogram (nanoseconds, 3 significant digits) and
the figures needed for throughput; everything printed or written is derived from it here, so
the table, the JSON and the plot cannot disagree. Pure functions over finished results: called
once, after the measuring loop has ended, by the one thread that ran it.

With `--peer-cmd` a `PeerReport` holds the peer broker's results under the same scenario names;
its ratios are peer / ketch (p50, p99: above 1 the peer is slower; throughput in msgs/s: above 1
the peer is faster).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogWriter
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

HISTOGRAM_MAX_NS: Final = 60 * 1_000_000_000
PERCENTILES: Final = (("p50_us", 50.0), ("p90_us", 90.0), ("p99_us", 99.0), ("p999_us", 99.9))
_MB: Final = 1_000_000
# Points of the percentile plot per decade of 1/(1-p): smooth enough, and cheap to look up.
_POINTS_PER_DECADE: Final = 20


def new_histogram() -> HdrHistogram:
    return HdrHistogram(1, HISTOGRAM_MAX_NS, 3)


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    """One scenario's measured window (warm-up excluded).

    `elapsed_s` is the measured window's length, so `count / elapsed_s` is the rate actually
    achieved (in open-loop mode it is the offered rate unless the system fell behind).
    `payload_bytes` is the value bytes acknowledged, for the throughput scenarios only.
    """

    name: str
    description: str
    histogram: HdrHistogram
    elapsed_s: float
    started_at_s: float  # wall-clock start of the measured window, for the HdrHistogram log
    payload_bytes: int | None = None

    @property
    def count(self) -> int:
        total: int = self.histogram.get_total_count()
        return total

    def max_us(self) -> float:
        value_ns: int = self.histogram.get_max_value()
        return round(value_ns / 1000, 1)

    def figures(self) -> dict[str, Any]:
        """The JSON object of this scenario (the exact keys of the issue, plus MB/s if any)."""
        out: dict[str, Any] = {"name": self.name}
        # One pass over the counts for all percentiles (each single lookup is a pass of its own).
        values_ns = self.histogram.get_percentile_to_value_dict([p for _, p in PERCENTILES])
        for key, percentile in PERCENTILES:
            out[key] = round(values_ns[percentile] / 1000, 1) if self.count else None
        out["max_us"] = self.max_us() if self.count else None
        out["count"] = self.count
        out["throughput_msgs_s"] = round(self.count / self.elapsed_s, 1) if self.elapsed_s else 0.0
        if self.payload_bytes is not None:
            out["throughput_mb_s"] = (
                round(self.payload_bytes / _MB / self.elapsed_s, 2) if self.elapsed_s else 0.0
            )
        return out


@dataclass(frozen=True, slots=True)
class PeerReport:
    """The `--peer-cmd` broker: how it was started and reached, and its results."""

    command: str
    bootstrap: str
    brokers: int
    replication_factor: int
    min_insync_replicas: int
    results: Sequence[ScenarioResult]

    def ratios(self, ketch: Sequence[ScenarioResult]) -> list[dict[str, Any]]:
        """Per scenario both ran: peer / ketch of p50, p99 and msgs/s (None when undefined)."""
        ours = {r.name: r.figures() for r in ketch}
        out = []
        for result in self.results:
            theirs = result.figures()
            mine = ours.get(result.name)
            if mine is None:
                continue
            out.append(
                {
                    "name": result.name,
                    "p50_ratio": _quotient(theirs["p50_us"], mine["p50_us"]),
                    "p99_ratio": _quotient(theirs["p99_us"], mine["p99_us"]),
                    "throughput_ratio": _quotient(
                        theirs["throughput_msgs_s"], mine["throughput_msgs_s"]
                    ),
                }
            )
        return out

    def section(self, ketch: Sequence[ScenarioResult]) -> dict[str, Any]:
        return {
            "command": self.command,
            "bootstrap": self.bootstrap,
            "brokers": self.brokers,
            "replication_factor": self.replication_factor,
            "min_insync_replicas": self.min_insync_replicas,
            "scenarios": [r.figures() for r in self.results],
            "ratios": self.ratios(ketch),
        }


def _quotient(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return round(numerator / denominator, 3)


def document(
    config: Mapping[str, Any], results: Sequence[ScenarioResult], peer: PeerReport | None = None
) -> dict[str, Any]:
    out = {"config": dict(config), "scenarios": [r.figures() for r in results]}
    if peer is not None:
        out["peer"] = peer.section(results)
    return out


def write_json(
    path: Path,
    config: Mapping[str, Any],
    results: Sequence[ScenarioResult],
    peer: PeerReport | None = None,
) -> None:
    path.write_text(json.dumps(document(config, results, peer), indent=2) + "\n")


PROCESS_FLOOR: Final = "floor_process"


def _ratio(value: float | None, floor: float | None) -> str:
    if value is None or not floor:
        return "-"
    return f"{value / floor:.1f}x"


def print_table(
    console: Console, config: Mapping[str, Any], results: Sequence[ScenarioResult]
) -> None:
    """Two tables, so each fits 80 columns: the latency percentiles in microseconds, then the
    counts, throughput, and p50 as a multiple of each floor's p50 (the in-process echo's, and
    the echo's in another process)."""
    floors = {r.name: r.figures()["p50_us"] for r in results if r.name in ("floor", PROCESS_FLOOR)}
    floor_p50, process_floor_p50 = floors.get("floor"), floors.get(PROCESS_FLOOR)
    title = (
        f"ketch bench latency: loop={config['loop']}, cluster={config['cluster']}, "
        f"mode={config['mode']}, value={config['size_bytes']} B"
    )
    latency = Table(title=title, box=box.SIMPLE_HEAD)
    latency.add_column("scenario", overflow="fold")
    for header in ("p50 us", "p90 us", "p99 us", "p99.9 us", "max us"):
        latency.add_column(header, justify="right")
    volume = Table(box=box.SIMPLE_HEAD)
    volume.add_column("scenario", overflow="fold")
    for header in ("count", "msgs/s", "MB/s", "p50/floor", "p50/proc"):
        volume.add_column(header, justify="right")
    for result in results:
        f = result.figures()

        def cell(key: str, f: dict[str, Any] = f) -> str:
            value = f.get(key)
            return "-" if value is None else f"{value:,}"

        name = escape(result.name)  # `[confluent]` would be read as a style tag
        latency.add_row(name, *(cell(key) for key, _ in PERCENTILES), cell("max_us"))
        volume.add_row(
            name,
            cell("count"),
            cell("throughput_msgs_s"),
            cell("throughput_mb_s"),
            # Under flat-out load latency is queueing, not a cost per request: no ratio.
            "-" if result.payload_bytes is not None else _ratio(f["p50_us"], floor_p50),
            "-" if result.payload_bytes is not None else _ratio(f["p50_us"], process_floor_p50),
        )
    console.print(latency)
    console.print(volume)
    console.print(
        "  p50/floor, p50/proc: p50 over the echo floor's, in this process and in another one"
    )
    for result in results:
        console.print(f"  [bold]{escape(result.name)}[/bold]: {escape(result.description)}")


def print_peer_table(console: Console, results: Sequence[ScenarioResult], peer: PeerReport) -> None:
    """ketch and the peer side by side, one row per scenario and figure (p50, p99, msgs/s),
    with the ratio peer / ketch: five columns, so it fits 80."""
    table = Table(
        title=f"peer vs ketch (ratio = peer / ketch): {escape(peer.command)}\n"
        f"peer at {peer.bootstrap}, {peer.brokers} broker(s), RF={peer.replication_factor}",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("scenario", overflow="fold")
    table.add_column("figure")
    for header in ("ketch", "peer", "ratio"):
        table.add_column(header, justify="right")
    ours = {r.name: r.figures() for r in results}
    ratios = {r["name"]: r for r in peer.ratios(results)}
    for result in peer.results:
        theirs = result.figures()
        mine = ours.get(result.name, {})
        ratio = ratios.get(result.name, {})
        for figure, key, ratio_key in (
            ("p50 us", "p50_us", "p50_ratio"),
            ("p99 us", "p99_us", "p99_ratio"),
            ("msgs/s", "throughput_msgs_s", "throughput_ratio"),
        ):
            value = ratio.get(ratio_key)
            table.add_row(
                escape(result.name) if key == "p50_us" else "",
                figure,
                _cell(mine.get(key)),
                _cell(theirs.get(key)),
                "-" if value is None else f"{value:.2f}x",
            )
    console.print(table)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:,}"


def _plot_points(histogram: HdrHistogram) -> tuple[list[float], list[float]]:
    """(1/(1-p), latency us) pairs from p=0 up to the last percentile the sample supports."""
    count = histogram.get_total_count()
    if count == 0:
        return [], []
    # Beyond 1/(1-p) = count every point is the maximum; stop there.
    decades = math.log10(max(count, 10))
    xs = [
        10 ** (step / _POINTS_PER_DECADE) for step in range(int(decades * _POINTS_PER_DECADE) + 1)
    ]
    percentiles = [100.0 * (1.0 - 1.0 / x) for x in xs]
    values_ns = histogram.get_percentile_to_value_dict(percentiles)
    ys = [max(values_ns[p], 1) / 1000 for p in percentiles]
    xs.append(10**decades)
    ys.append(max(histogram.get_max_value(), 1) / 1000)
    return xs, ys


def write_plot(path: Path, title: str, results: Sequence[ScenarioResult]) -> list[Path]:
    """The percentile plot as PNG, and one HdrHistogram log per scenario next to it
    (`<stem>.<scenario>.hlog`); returns the logs' paths."""
    # Imported here: matplotlib takes a second or more to import, and only --plot needs it.
    # Figure + the Agg canvas, not pyplot: no global figure state and no display backend.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullLocator

    figure = Figure(figsize=(10, 6), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    longest = 1.0
    for result in results:
        xs, ys = _plot_points(result.histogram)
        if xs:
            axes.plot(xs, ys, label=f"{result.name} (n={result.count:,})")
            longest = max(longest, xs[-1])
    axes.set_xscale("log")
    axes.set_yscale("log")
    ticks = [10.0**k for k in range(math.ceil(math.log10(longest)) + 1)]
    axes.set_xticks(ticks)
    axes.xaxis.set_minor_locator(NullLocator())  # between "99%" and "99.9%" they mean nothing
    axes.set_xticklabels([_percentile_label(t) for t in ticks])
    axes.set_xlabel("percentile (log scale of 1/(1-p))")
    axes.set_ylabel("latency (us, log scale)")
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    if results:
        axes.legend(loc="upper left", fontsize="small")
    # Fixed margins: tight_layout measures every text's extent, the slowest step of the plot.
    figure.subplots_adjust(left=0.08, right=0.97, bottom=0.1, top=0.93)
    figure.savefig(path)
    return [_write_hlog(path, result) for result in results]


def _percentile_label(x: float) -> str:
    percentile = 100.0 * (1.0 - 1.0 / x)
    return f"{percentile:.10g}%"


def _write_hlog(plot_path: Path, result: ScenarioResult) -> Path:
    path = plot_path.with_name(f"{plot_path.stem}.{result.name}.hlog")
    with path.open("w") as out:
        writer = HistogramLogWriter(out)
        writer.output_comment(f"ketch bench latency: {result.name}: {result.description}")
        writer.output_comment("values in nanoseconds; max column in milliseconds")
        writer.output_legend()
        start = result.started_at_s
        writer.output_interval_histogram(
            result.histogram,
            start_time_stamp_sec=start,
            end_time_stamp_sec=start + result.elapsed_s,
        )
    return path
