"""An unknown flag is the subcommand's own usage error, whether the command runs through
`ketch` (cli/main.py) or a module's `main(argv)` (cli/common.py `run_argv`): argparse otherwise
hands the leftovers to the top-level parser, which prints `ketch`'s usage."""

from __future__ import annotations

import pytest

from cli import main as ketch
from cli import topic


def _assert_topic_list_usage(err: str) -> None:
    assert err.startswith("usage: ketch topic list")
    assert "unrecognized arguments: --bogus" in err


def test_through_ketch(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        ketch.main(["topic", "list", "--bogus"])
    assert exited.value.code == 2
    _assert_topic_list_usage(capsys.readouterr().err)


def test_through_a_modules_main(capsys: pytest.CaptureFixture[str]) -> None:
    assert topic.main(["topic", "list", "--bogus"]) == 2
    _assert_topic_list_usage(capsys.readouterr().err)
