"""bench.cleaner stays runnable and measures a real pass: what it cleans shrinks, and every
figure is produced. No timing is asserted (performance is judged from the benchmark's output)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cleaner import main


def test_a_small_run_reports_every_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cleaner.json"
    assert (
        main(
            [
                "--mb",
                "3",
                "--keys",
                "50",
                "--rounds",
                "1",
                "--dir",
                str(tmp_path),
                "--json",
                str(out),
            ]
        )
        == 0
    )
    figures = json.loads(out.read_text())
    assert figures["input_mib"] >= 2  # every segment but the active one
    assert 0 < figures["kept_fraction"] < 0.05  # 50 keys' latest records out of ~27,000
    for name in ("read_crc_mib_s", "pass_mib_s"):
        assert figures[name]["min"] > 0
    assert "pass / read_crc" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == [out]  # the log is removed


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--mb", "1"])
    assert exited.value.code == 2
    assert "--mb >= 2" in capsys.readouterr().err
