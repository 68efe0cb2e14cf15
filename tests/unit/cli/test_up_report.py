"""cli/up/report.py: the report on a node that refused its configuration (its reason and the
last lines of its log since its last start), read from the end of the log only."""

from __future__ import annotations

from pathlib import Path

from cli.up.child import Child
from cli.up.report import TAIL_BYTES, log_tail, refusal_report, start_line
from node.layout import Layout
from runtime.net.transport import Address


def test_the_tail_is_the_last_lines_since_the_last_start(tmp_path: Path) -> None:
    log = tmp_path / "broker-0.log"
    first_run = [f"old {i}" for i in range(30)]
    second_run = [f"new {i}" for i in range(25)]
    log.write_text(
        start_line("broker-0", "then")
        + "".join(f"{line}\n" for line in first_run)
        + start_line("broker-0", "now")
        + "".join(f"{line}\n" for line in second_run)
    )
    assert log_tail(log) == second_run[-20:]
    assert log_tail(log, lines=3) == second_run[-3:]
    assert log_tail(tmp_path / "missing.log") == []


def test_a_long_log_is_read_from_its_end_only(tmp_path: Path) -> None:
    log = tmp_path / "big.log"
    filler = "x" * 99 + "\n"
    log.write_text(start_line("broker-0", "long ago") + filler * (3 * TAIL_BYTES // 100) + "last\n")
    tail = log_tail(log)
    assert tail[-1] == "last"
    assert len(tail) == 20


def test_the_report_gives_the_reason_then_the_tail(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.logs_dir.mkdir()
    spec = layout.broker_spec(0, Address("127.0.0.1", 1), Address("127.0.0.1", 2), config=None)
    reason = 'ketch broker: ketch.toml: "min.insync.replicas" = "[abc]": not an integer'
    spec.log_file.write_text(start_line("broker-0", "now") + "some log line\n" + reason + "\n")
    lines = refusal_report(Child(spec))
    assert "broker-0 refused its configuration (exit code 78)" in lines[0]
    # The reason comes first, rich markup in it escaped; then the tail, which holds it too.
    assert lines[1] == "  " + reason.replace("[abc]", "\\[abc]")
    assert lines[2] == f"ketch up: the last 2 lines of {spec.log_file}:"
    assert lines[3:] == ["  some log line", lines[1]]
