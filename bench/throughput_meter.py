"""What `python -m bench.throughput` reads around each measured window: the wall time
(`time.perf_counter_ns`) and the CPU time every measured process spent in it.

CPU comes from `/proc/PID/stat` (proc(5)): field 14 `utime` and field 15 `stime`, the ticks the
process's threads (all of them: the counters are the thread group's) ran in user and kernel mode,
in units of `sysconf(SC_CLK_TCK)` (100 per second on Linux). Children's time (`cutime`,
`cstime`) is left out: a broker runs no children. The second field, `comm`, is the executable's
name in parentheses and may itself hold spaces and parentheses, so the fields are counted from
the LAST `)`.

Resolution: one tick (10 ms at 100 Hz) per sample, so a window whose process spends ~100 ms of
CPU is known to ~10%; the report gives the spread over runs, which shows that noise.

A `CpuMeter` is a plain value (names -> PIDs); `Window` is owned by the one thread that opened it
(a librdkafka phase's worker thread, or the event loop for the native producer), so no lock.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

CLOCK_TICKS_PER_S: Final = os.sysconf("SC_CLK_TCK")
# In the fields after `comm`'s closing parenthesis, field 3 (state) is index 0, so proc(5)'s
# field n is index n - 3.
_UTIME_INDEX: Final = 14 - 3
_STIME_INDEX: Final = 15 - 3


class ProcessGone(Exception):
    """A measured process exited (or its /proc entry is unreadable) during a phase."""


def cpu_ticks(stat_line: str) -> int:
    """utime + stime of a `/proc/PID/stat` line, in clock ticks."""
    head, closing, rest = stat_line.rpartition(")")
    if not closing or "(" not in head:
        raise ValueError(f"not a /proc/PID/stat line: {stat_line[:80]!r}")
    fields = rest.split()
    if len(fields) <= _STIME_INDEX:
        raise ValueError(f"a /proc/PID/stat line with {len(fields) + 2} fields: {stat_line[:80]!r}")
    return int(fields[_UTIME_INDEX]) + int(fields[_STIME_INDEX])


def read_cpu_ticks(pid: int, proc: Path = Path("/proc")) -> int:
    try:
        return cpu_ticks((proc / str(pid) / "stat").read_text())
    except OSError as exc:
        raise ProcessGone(f"process {pid} is gone ({exc})") from None


def cpu_seconds(
    before: Mapping[str, int], after: Mapping[str, int], ticks_per_s: int = CLOCK_TICKS_PER_S
) -> dict[str, float]:
    """Each process's CPU seconds between two samples (same names, in `before`'s order)."""
    assert before.keys() == after.keys(), (before, after)
    spent = {name: (after[name] - before[name]) / ticks_per_s for name in before}
    # The counters only grow while the PID is the same process; a negative delta would mean
    # the PID was reused by another process mid-window.
    assert all(s >= 0 for s in spent.values()), spent
    return spent


@dataclass(frozen=True, slots=True)
class CpuMeter:
    """The processes a target's CPU is read from, by display name (`broker-0`, `controller`,
    `tansu`, and `bench client` for this process)."""

    processes: Mapping[str, int]

    def sample(self) -> dict[str, int]:
        return {name: read_cpu_ticks(pid) for name, pid in self.processes.items()}


@dataclass(frozen=True, slots=True)
class Measured:
    elapsed_ns: int
    cpu_s: dict[str, float]


@dataclass(slots=True)
class Window:
    """One measured window: `start()` then `stop()`; CPU is sampled just outside the clock
    readings, so the window's CPU covers at least its wall time."""

    meter: CpuMeter
    _cpu_before: dict[str, int] = field(init=False, default_factory=dict)
    _started_ns: int | None = field(init=False, default=None)

    def start(self) -> None:
        assert self._started_ns is None, "the window is already open"
        self._cpu_before = self.meter.sample()
        self._started_ns = time.perf_counter_ns()

    def stop(self) -> Measured:
        ended_ns = time.perf_counter_ns()
        assert self._started_ns is not None, "the window was never opened"
        cpu_after = self.meter.sample()
        elapsed_ns = max(1, ended_ns - self._started_ns)
        self._started_ns = None
        return Measured(elapsed_ns, cpu_seconds(self._cpu_before, cpu_after))
