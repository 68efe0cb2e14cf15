"""What `ketch up` prints about its nodes: the status table once the cluster is ready, and the
report on a node that refused its configuration (exit code EXIT_CONFIG): why, in the node's own
words, and the last lines of its log, since it is not restarted and its log is where the rest is.

A log is read from its end only (at most TAIL_BYTES), so a node that logged for days costs the
same as one that just started; only the lines since `ketch up` last started that node count.

Functions of their arguments and of the log file's contents; nothing is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from rich.markup import escape
from rich.table import Table

from cli.up.child import Child
from node.layout import Layout
from node.process import EXIT_CONFIG, config_error_lines

TAIL_LINES: Final = 20
TAIL_BYTES: Final = 64 * 1024
# The line `ketch up` writes into a node's log before each start (cli/up/supervisor.py).
START_MARK: Final = "--- ketch up: starting "


def start_line(node: str, stamp: str) -> str:
    return f"{START_MARK}{node} at {stamp}\n"


def log_tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` lines of the node's log since its last start by `ketch up`."""
    try:
        with path.open("rb") as file:
            size = file.seek(0, 2)
            file.seek(max(0, size - TAIL_BYTES))
            text = file.read().decode(errors="replace")
    except OSError:
        return []
    tail = text.splitlines()
    starts = [i for i, line in enumerate(tail) if line.startswith(START_MARK)]
    if starts:
        tail = tail[starts[-1] + 1 :]
    return tail[-lines:]


def refusal_report(child: Child) -> list[str]:
    """Rich-markup lines on a node that exited with EXIT_CONFIG: what it said and its log."""
    spec = child.spec
    tail = log_tail(spec.log_file)
    command = spec.args[0]  # "broker" or "controller": the prefix of its error lines
    reasons = config_error_lines(tail, command) or ["(the log does not say why: see below)"]
    lines = [
        f"[red]ketch up: {spec.node} refused its configuration (exit code {EXIT_CONFIG}); "
        "not restarting it, stopping the cluster:[/]"
    ]
    lines += [f"  {escape(reason)}" for reason in reasons]
    lines.append(f"ketch up: the last {len(tail)} lines of {spec.log_file}:")
    lines += [f"  {escape(line)}" for line in tail]
    return lines


def status_table(
    layout: Layout, controller: Child, controller_id: int, brokers: Sequence[tuple[int, Child]]
) -> Table:
    """The nodes once the cluster is ready: pid, listeners, state, directories."""
    table = Table(title=f"ketch cluster at {layout.root}")
    for column in ("node", "id", "pid", "listener", "kafka", "state", "data dir", "log"):
        table.add_column(column, no_wrap=True)
    rows = [(controller, controller_id, layout.controller_dir)]
    rows += [(child, i, layout.broker_dir(i)) for i, child in brokers]
    for child, node_id, data_dir in rows:
        table.add_row(
            child.spec.node,
            str(node_id),
            str(child.pid or "-"),
            str(child.spec.address),
            "-" if child.spec.kafka_address is None else str(child.spec.kafka_address.port),
            child.state.value,
            # Relative to the title's directory: short enough for an 80-column terminal.
            f"{data_dir.relative_to(layout.root)}/",
            str(child.spec.log_file.relative_to(layout.root)),
        )
    return table
