"""node/config_check.py: every property's name, type and range checked with the components' own
validation, one message per problem naming the file or flag, the key, the value and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.broker.config import known_properties as broker_properties
from node.config_check import ConfigProblems, Role, check, known_properties, raise_problems
from node.controller.config import known_properties as controller_properties
from runtime.config import EffectiveConfig, Setting, Source, Value, resolve

BOTH = (Role.BROKER, Role.CONTROLLER)


def from_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> EffectiveConfig:
    """The properties of `ketch.toml` holding `text`, named as a user passes it (relative)."""
    monkeypatch.chdir(tmp_path)
    Path("ketch.toml").write_text(text)
    return resolve(file=Path("ketch.toml"))


def messages(effective: EffectiveConfig, roles: tuple[Role, ...] = BOTH) -> list[str]:
    return [str(problem) for problem in check(effective, roles)]


def test_a_non_integer_names_the_file_the_key_the_value_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effective = from_file(tmp_path, monkeypatch, '"min.insync.replicas" = "abc"\n')
    assert messages(effective) == ['ketch.toml: "min.insync.replicas" = "abc": not an integer']


def test_an_out_of_range_value_gives_the_components_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # min.insync.replicas = 0 used to be refused only by the partitions, once they existed.
    effective = from_file(tmp_path, monkeypatch, '"min.insync.replicas" = 0\n')
    assert messages(effective) == ['ketch.toml: "min.insync.replicas" = 0: must be >= 1']
    effective = from_file(tmp_path, monkeypatch, '"log.segment.bytes" = 5\n')
    [message] = messages(effective)
    assert message.startswith('ketch.toml: "log.segment.bytes" = 5: must be >= ')


def test_a_flag_is_named_as_it_was_typed() -> None:
    effective = resolve(flags={"min.insync.replicas": "abc", "broker.session.timeout.ms": "0"})
    assert messages(effective) == [
        "--set broker.session.timeout.ms=0: must be >= 1",
        "--set min.insync.replicas=abc: not an integer",
    ]


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("replica.lag.time.max.ms", "1.5", "not an integer"),
        ("replica.lag.time.max.ms", True, "not an integer"),
        ("unclean.leader.election.enable", "maybe", "not true or false"),
        ("metrics.port", 70_000, "must be -1 (off) or a port 0..65535"),
        ("max.connections", 0, "must be positive"),
        ("server.shutdown.timeout.ms", -1, "must not be negative"),  # read by its field name
        ("log.dirs", 5, "expected a comma-separated string"),
        ("listeners", "native://h:1,native://h:2", "native named twice"),
    ],
)
def test_each_reason_is_the_components_own_without_the_key_and_value(
    key: str, value: Value, reason: str
) -> None:
    [problem] = check(resolve(flags={key: value}), BOTH)
    assert problem.keys == (key,)
    assert problem.reason == reason


def test_unknown_names_get_the_closest_known_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effective = from_file(
        tmp_path, monkeypatch, '"replica.lag.time.max" = 10000\n"zzz.qqq" = true\n'
    )
    assert messages(effective) == [
        'ketch.toml: "replica.lag.time.max" = 10000: unknown property '
        '(did you mean "replica.lag.time.max.ms"?)',
        'ketch.toml: "zzz.qqq" = true: unknown property',
    ]


def test_one_file_for_every_node_each_role_accepts_the_others_keys() -> None:
    broker_only = "replica.lag.time.max.ms"
    controller_only = "metadata.snapshot.records"
    assert broker_only in broker_properties() - controller_properties()
    assert controller_only in controller_properties() - broker_properties()
    assert known_properties() == broker_properties() | controller_properties()
    effective = resolve(flags={broker_only: 10_000, controller_only: 5})
    assert check(effective, [Role.BROKER]) == []
    assert check(effective, [Role.CONTROLLER]) == []
    # A role checks only the values it reads: the broker leaves the controller's to it.
    bad_for_controller = resolve(flags={controller_only: 0})
    assert check(bad_for_controller, [Role.BROKER]) == []
    assert messages(bad_for_controller, (Role.CONTROLLER,)) == [
        "--set metadata.snapshot.records=0: must be >= 1"
    ]


def test_every_problem_is_reported_once_in_key_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effective = from_file(
        tmp_path,
        monkeypatch,
        '"num.partitions" = 0\n"min.insync.replicas" = "x"\n"log.retention.hours" = "y"\n'
        '"replica.lag.time.max.ms" = 10000\n',
    )
    # num.partitions is read by both roles and reported once; the valid key is not reported.
    assert messages(effective) == [
        'ketch.toml: "log.retention.hours" = "y": not an integer',
        'ketch.toml: "min.insync.replicas" = "x": not an integer',
        'ketch.toml: "num.partitions" = 0: must be >= 1',
    ]


def test_keys_wrong_only_together_are_one_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    effective = from_file(
        tmp_path,
        monkeypatch,
        '"group.min.session.timeout.ms" = 9000\n"group.max.session.timeout.ms" = 8000\n'
        '"group.initial.rebalance.delay.ms" = 0\n',
    )
    assert messages(effective) == [
        'ketch.toml: "group.max.session.timeout.ms" = 8000, '
        '"group.min.session.timeout.ms" = 9000: '
        "group.min.session.timeout.ms must not exceed group.max.session.timeout.ms"
    ]
    # Each is fine alone.
    assert check(resolve(flags={"group.min.session.timeout.ms": 9000}), BOTH) == []
    assert check(resolve(flags={"group.max.session.timeout.ms": 8000}), BOTH) == []


def test_a_file_value_and_a_flag_wrong_together_name_both() -> None:
    low, high = "group.min.session.timeout.ms", "group.max.session.timeout.ms"
    effective = EffectiveConfig(
        {low: Setting(low, 9000, Source.FILE), high: Setting(high, "8000", Source.FLAG)},
        Path("ketch.toml"),
    )
    [problem] = check(effective, BOTH)
    assert problem.where() == f'ketch.toml: "{low}" = 9000 and --set {high}=8000'


def test_defaults_are_never_a_problem() -> None:
    from node.broker.config import property_defaults as broker_defaults
    from node.controller.config import property_defaults as controller_defaults

    defaults = {**controller_defaults(), **broker_defaults()}
    assert check(resolve(defaults=defaults), BOTH) == []


@pytest.mark.parametrize("raw", ["abc", "-5", "1.5", "", "1e3"])
def test_no_value_crashes_the_check_or_leaks_python_text(raw: str) -> None:
    """Every name any node reads, set alone to a bad text: a problem of that key or none, never
    an exception other than the components' ValueErrors, never Python's own words."""
    for key in sorted(known_properties()):
        for problem in check(resolve(flags={key: raw}), BOTH):
            assert problem.keys == (key,), problem
            text = str(problem)
            assert "invalid literal" not in text, text
            assert "could not convert" not in text, text
            assert text.startswith(f"--set {key}={raw}: "), text


def test_raise_problems_carries_them_all() -> None:
    effective = resolve(flags={"min.insync.replicas": "abc", "zzz": 1})
    with pytest.raises(ConfigProblems) as raised:
        raise_problems(effective, [Role.BROKER])
    assert [p.keys for p in raised.value.problems] == [("zzz",), ("min.insync.replicas",)]
    assert str(raised.value).splitlines() == [str(p) for p in raised.value.problems]
    raise_problems(resolve(flags={"min.insync.replicas": 2}), [Role.BROKER])  # no problem
