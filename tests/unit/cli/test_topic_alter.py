"""`ketch topic alter`'s flags and what it prints, without a cluster (cli/topic_admin.py); the
command against a running cluster is tests/integration/test_topic_alter.py."""

from __future__ import annotations

import pytest

from cli import topic as cli_topic
from cli.topic_admin import altered_message

NOWHERE = "127.0.0.1:1"  # nothing listens: a flag error must be reported before any connection


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        ([], "nothing to alter: give --partitions, --config or --delete-config"),
        (
            ["--config", "retention.ms=1", "--delete-config", "retention.ms"],
            "each config key once: retention.ms given more than once",
        ),
        (["--config", "retention.ms"], "expected key=value"),
        (["--partitions", "0"], "must be at least 1"),
    ],
)
def test_bad_flags_are_usage_errors_before_anything_is_sent(
    argv: list[str], problem: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli_topic.main(["topic", "alter", "orders", *argv, "--bootstrap", NOWHERE])
    err = capsys.readouterr().err
    assert code == 2, err
    assert problem in err
    assert "usage: ketch topic alter" in err
    assert "cannot reach" not in err


def test_the_message_lists_each_change() -> None:
    text = altered_message(
        "orders", 3, 6, {"retention.ms": "3600000", "cleanup.policy": "compact"}, ["segment.ms"]
    )
    assert text.splitlines() == [
        "Altered topic 'orders':",
        "  partitions: 3 -> 6",
        "  set cleanup.policy=compact",
        "  set retention.ms=3600000",
        "  deleted segment.ms (the broker default applies)",
    ]
    assert altered_message("orders", 3, None, {"retention.ms": "1"}, []).splitlines() == [
        "Altered topic 'orders':",
        "  set retention.ms=1",
    ]
