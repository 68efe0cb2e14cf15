"""How `python -m bench.throughput` shows its results: one table per target (rich), and the JSON
document (--json).

Table rows are a scenario's figures (throughput, latency, ratios first, then CPU per process):
the median over the runs and the min-max spread. A target with a note (Tansu's in-memory
storage) has it in its title and, in short (`row_notes`), beside every one of its figures, so
no figure is read without it.

JSON:

    {"config": {...}, "notes": [...],
     "targets": {"ketch": {...}, "ketch_rf3": {...}, "tansu": {...} | {"skipped": "why"}},
     "scenarios": [{"name", "target", "description", "note",
                    "runs": [{figure: value}, ...],
                    "summary": {figure: {"median", "min", "max"}}}]}

Pure functions over `ScenarioRuns`; nothing is kept.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.throughput_summary import ScenarioRuns, Spread

_UNITS = {
    "mib_per_s": "MiB/s",
    "records_per_s": "records/s",
    "requests_per_s": "requests/s",
    "latency_us_p50": "p50 latency us",
    "latency_us_p99": "p99 latency us",
    "cpu_ms_per_mib": "CPU ms/MiB",
    "cpu_us_per_request": "CPU us/request",
}
# Wide enough for a row with the note column; used when stdout is not a terminal (which rich
# would otherwise render at 80 columns, wrapping every label).
REPORT_WIDTH = 120


def figure_label(key: str) -> str:
    """`cpu_ms_per_mib[broker-0]` -> `CPU ms/MiB broker-0`; ratios keep their name."""
    base, bracket, rest = key.partition("[")
    label = _UNITS.get(base, base.replace("_", " "))
    return f"{label} {rest.rstrip(']')}" if bracket else label


def number(value: float) -> str:
    """Three significant figures, without an exponent for the sizes seen here."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _ordered(summary: Mapping[str, Spread]) -> list[str]:
    # The figures a reader looks for first, then each process's CPU.
    head = [k for k in summary if not k.startswith("cpu_")]
    return head + [k for k in summary if k.startswith("cpu_")]


def report_console() -> Console:
    return Console(width=None if sys.stdout.isatty() else REPORT_WIDTH)


def print_tables(
    console: Console,
    scenarios: Sequence[ScenarioRuns],
    titles: Mapping[str, str],
    row_notes: Mapping[str, str],
) -> None:
    """One table per target, in the order the targets first appear."""
    targets = list(dict.fromkeys(s.target for s in scenarios))
    for target in targets:
        rows = [s for s in scenarios if s.target == target]
        runs = len(rows[0].runs)
        note = rows[0].note
        table = Table(
            title=f"{titles.get(target, target)} - median of {runs} run(s), min-max"
            + (f"\n[bold]{note}[/bold]" if note else ""),
            title_justify="left",
        )
        table.add_column("scenario")
        table.add_column("figure")
        table.add_column("median", justify="right")
        table.add_column("min-max", justify="right")
        if note:
            table.add_column("note")
        for scenario in rows:
            summary = scenario.summary()
            for i, key in enumerate(_ordered(summary)):
                spread = summary[key]
                cells = [
                    scenario.name if i == 0 else "",
                    figure_label(key),
                    number(spread.median),
                    f"{number(spread.low)}-{number(spread.high)}",
                ]
                row_note = row_notes.get(scenario.target, scenario.note or "")
                table.add_row(*cells, *([row_note] if note else []))
            table.add_section()
        console.print(table)


def document(
    config: Mapping[str, Any],
    notes: Sequence[str],
    targets: Mapping[str, Mapping[str, Any]],
    scenarios: Sequence[ScenarioRuns],
) -> dict[str, Any]:
    return {
        "config": dict(config),
        "notes": list(notes),
        "targets": {name: dict(facts) for name, facts in targets.items()},
        "scenarios": [
            {
                "name": s.name,
                "target": s.target,
                "description": s.description,
                "note": s.note,
                "runs": s.runs,
                "summary": {
                    key: {"median": v.median, "min": v.low, "max": v.high}
                    for key, v in s.summary().items()
                },
            }
            for s in scenarios
        ],
    }


def write_json(path: Path, doc: Mapping[str, Any]) -> None:
    path.write_text(json.dumps(doc, indent=2) + "\n")
