"""runtime/config.py: TOML with Kafka property names, flag overrides, and each value's source."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from node.broker.config import BrokerConfig, known_properties, property_defaults
from runtime.config import (
    ConfigError,
    Source,
    load_toml,
    parse_override,
    resolve,
)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ketch.toml"
    path.write_text(text)
    return path


def test_quoted_and_dotted_keys_name_the_same_properties(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '"replica.lag.time.max.ms" = 10000\n'
        "log.segment.bytes = 1048576\n"
        '"unclean.leader.election.enable" = true\n'
        '"log.dirs" = ["/data/a", "/data/b"]\n'
        '"cluster.id" = "prod"\n'
        "[controlled.shutdown]\n"
        "enable = false\n",
    )
    assert load_toml(path) == {
        "replica.lag.time.max.ms": 10_000,
        "log.segment.bytes": 1_048_576,
        "unclean.leader.election.enable": True,
        "log.dirs": "/data/a,/data/b",
        "cluster.id": "prod",
        "controlled.shutdown.enable": False,
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"log.segment.bytes" = 1\n[log.segment]\nbytes = 2\n', "given twice"),
        ('"log.roll.ms" = 1979-05-27T07:32:00Z\n', "cannot mean"),
        ('"log.dirs" = [["a"], ["b"]]\n', "cannot mean"),
        ('"log.dirs = 3\n', "not valid TOML"),
    ],
)
def test_bad_files_are_refused(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_toml(write(tmp_path, text))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_toml(tmp_path / "absent.toml")


def test_overrides() -> None:
    assert parse_override("min.insync.replicas=2") == ("min.insync.replicas", "2")
    assert parse_override(" listeners = native://h:1 ") == ("listeners", "native://h:1")
    assert parse_override("a=b=c") == ("a", "b=c")
    for bad in ("novalue", "=3", ""):
        with pytest.raises(ConfigError, match="key=value"):
            parse_override(bad)


def test_flags_over_file_over_defaults_with_sources(tmp_path: Path) -> None:
    path = write(tmp_path, '"min.insync.replicas" = 2\n"replica.lag.time.max.ms" = 10000\n')
    effective = resolve(
        defaults={"min.insync.replicas": 1, "replica.lag.time.max.ms": 30_000, "a.b": "x"},
        file=path,
        flags={"replica.lag.time.max.ms": "500", "broker.id": 3},
    )
    assert effective.properties() == {
        "a.b": "x",
        "broker.id": 3,
        "min.insync.replicas": 2,
        "replica.lag.time.max.ms": "500",
    }
    assert effective.source("a.b") is Source.DEFAULT
    assert effective.source("min.insync.replicas") is Source.FILE
    assert effective.source("replica.lag.time.max.ms") is Source.FLAG
    assert effective.source("absent") is None
    # Only what was set reaches the components, which apply their own defaults.
    assert effective.explicit() == {
        "broker.id": 3,
        "min.insync.replicas": 2,
        "replica.lag.time.max.ms": "500",
    }
    assert effective.file == path


def test_render_is_a_config_file_that_reads_back_the_same(tmp_path: Path) -> None:
    path = write(tmp_path, '"log.dirs" = ["/d/a", "/d/b"]\n"weird \\"name\\"" = "tab\\there"\n')
    effective = resolve(
        defaults={"x.ratio": 0.5, "x.enable": True}, file=path, flags={"broker.id": 1}
    )
    text = effective.render()
    assert '"broker.id" = 1  # flag\n' in text
    assert '"log.dirs" = "/d/a,/d/b"  # file\n' in text
    assert '"x.enable" = true  # default\n' in text
    assert tomllib.loads(text) == effective.properties()


def test_unknown_names_are_reported_with_a_suggestion(tmp_path: Path) -> None:
    effective = resolve(
        defaults={"not.known.but.default": 1},
        flags={"min.insync.replica": "2", "zzz.qqq": "1", "broker.id": 0},
    )
    assert effective.unknown(known_properties()) == [
        "unknown property 'min.insync.replica' (did you mean 'min.insync.replicas'?)",
        "unknown property 'zzz.qqq'",
    ]


def test_broker_defaults_are_what_the_broker_config_applies() -> None:
    """Resolving only the defaults builds the same BrokerConfig as an empty property map, so
    what `config show` calls a default is what the broker really uses."""
    defaults = property_defaults()
    assert defaults["broker.heartbeat.interval.ms"] == 2_000
    assert defaults["controlled.shutdown.max.retries"] == 3
    assert defaults["replica.lag.time.max.ms"] == 30_000
    from_defaults = BrokerConfig.from_properties({**defaults, "broker.id": 0})
    assert from_defaults == BrokerConfig.from_properties({"broker.id": 0})
    assert set(defaults) <= known_properties()
