"""`python -m bench.groups` end to end, small: one trial of every scenario with aiokafka on a
process cluster without the initial delay, and its JSON; bad arguments exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import groups

pytestmark = pytest.mark.slow


def test_one_trial_of_every_scenario(tmp_path: Path) -> None:
    out = tmp_path / "groups.json"
    code = groups.main(
        ["--trials", "1", "--delays", "0", "--clients", "aiokafka", "--json", str(out)]
    )
    assert code == groups.EXIT_OK
    document = json.loads(out.read_text())
    assert document["config"]["clients"].keys() == {"aiokafka"}
    scenarios = {s["name"]: s for s in document["scenarios"]}
    assert sorted(scenarios) == sorted(
        [groups.BASELINE, groups.FIRST, "rebalance_on_join", "rebalance_on_leave"]
    )
    for scenario in scenarios.values():
        assert len(scenario["trials_ms"]) == 1
        assert scenario["median_ms"] > 0
        assert scenario["initial_delay_ms"] == 0
    first = scenarios[groups.FIRST]
    assert first["ratio_to_baseline"] == pytest.approx(
        first["median_ms"] / scenarios[groups.BASELINE]["median_ms"], rel=0.01
    )


@pytest.mark.parametrize(
    "argv",
    [["--trials", "0"], ["--delays", "x"], ["--delays", "-1"], ["--clients", "kafka-python"]],
)
def test_bad_arguments_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert groups.main(argv) == groups.EXIT_USAGE
    assert "bench.groups:" in capsys.readouterr().err
