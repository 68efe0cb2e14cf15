"""The simulation tests' figures in the session's terminal summary: seeds run, simulated time,
faults injected and writes acknowledged (issue 20 asks for them in every `make test`)."""

from __future__ import annotations

import pytest

SUMMARIES: list[str] = []


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for summary in SUMMARIES:
        terminalreporter.write_sep("-", "deterministic simulation")
        terminalreporter.write_line(summary)
