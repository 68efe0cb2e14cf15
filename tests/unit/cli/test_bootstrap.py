"""`--bootstrap HOST:PORT[,HOST:PORT...]` and where its default comes from (cli/bootstrap.py):
the flag, else KETCH_BOOTSTRAP, else the `ketch up` cluster's cluster.json (the command's
--data-dir, else ./data), else 127.0.0.1:9092. Each test runs in its own empty directory with
the variable unset, so neither the checkout's ./data nor the caller's environment leaks in."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from cli.bootstrap import (
    BOOTSTRAP_ENV,
    cluster_json_brokers,
    default_bootstrap,
    format_bootstrap,
    parse_bootstrap,
)
from cli.common import EXIT_USAGE, SubParsers, add_bootstrap_flag, run_argv, set_command
from runtime.net.transport import Address

FALLBACK = (Address("127.0.0.1", 9092),)


@pytest.fixture(autouse=True)
def clean_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(BOOTSTRAP_ENV, raising=False)
    return tmp_path


def write_cluster_json(data_dir: Path, brokers: list[tuple[int, int | None, int]]) -> None:
    """A cluster.json as `ketch up` writes it (node/layout.py): (id, pid, port) per broker."""
    data_dir.mkdir(parents=True, exist_ok=True)
    document = {
        "controller": {"id": 100, "pid": 1, "host": "127.0.0.1", "port": 9192},
        "brokers": [
            {
                "id": broker_id,
                "pid": pid,
                "host": "127.0.0.1",
                "port": port,
                "kafka_port": None,
                "data_dir": str(data_dir / f"broker-{broker_id}"),
            }
            for broker_id, pid, port in brokers
        ],
    }
    (data_dir / "cluster.json").write_text(json.dumps(document))


def parsed(argv: list[str], *, data_dir_flag: bool = False) -> tuple[int, object]:
    """Run a one-command parser built like the real ones; (exit code, args.bootstrap seen)."""
    seen: list[object] = []

    def command(args: argparse.Namespace) -> int:
        seen.append(args.bootstrap)
        return 0

    def register(commands: SubParsers[argparse.ArgumentParser]) -> None:
        parser = commands.add_parser("probe")
        if data_dir_flag:
            parser.add_argument("--data-dir", type=Path)
        add_bootstrap_flag(parser)
        set_command(parser, command)

    code = run_argv("ketch", register, ["probe", *argv])
    return code, (seen[0] if seen else None)


# -- parsing -------------------------------------------------------------------------------------


def test_a_comma_separated_list_keeps_its_order_and_drops_repeats() -> None:
    servers = parse_bootstrap("b:2, a:1 ,[::1]:3,b:2")
    assert servers == (Address("b", 2), Address("a", 1), Address("::1", 3))
    assert format_bootstrap(servers) == "b:2,a:1,[::1]:3"


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("127.0.0.1:9092,nope", "'nope'"),
        ("host:port", "'host:port'"),
        ("a:1,,b:2", "empty address"),
        ("a:1,", "empty address"),
        ("  ", "no address"),
    ],
)
def test_a_bad_list_is_a_usage_error_naming_the_address(
    text: str, named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, seen = parsed(["--bootstrap", text])
    assert code == EXIT_USAGE
    assert seen is None, "the command must not run"
    err = capsys.readouterr().err
    assert "usage: ketch probe" in err
    assert "argument --bootstrap" in err
    assert named in err


def test_the_flag_wins_over_the_environment_and_cluster_json(
    clean_place: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(BOOTSTRAP_ENV, "env:1")
    write_cluster_json(clean_place / "data", [(0, 10, 9092)])
    assert parsed(["--bootstrap", "flag:1,flag:2"]) == (0, (Address("flag", 1), Address("flag", 2)))


# -- defaults ------------------------------------------------------------------------------------


def test_without_anything_the_default_is_broker_0_of_a_default_ketch_up() -> None:
    assert parsed([]) == (0, FALLBACK)


def test_the_environment_variable_comes_before_cluster_json(
    clean_place: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_cluster_json(clean_place / "data", [(0, 10, 9092)])
    monkeypatch.setenv(BOOTSTRAP_ENV, "env:1,env:2")
    assert parsed([]) == (0, (Address("env", 1), Address("env", 2)))


def test_an_empty_environment_variable_counts_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BOOTSTRAP_ENV, " ")
    assert parsed([]) == (0, FALLBACK)


def test_a_bad_environment_variable_is_a_usage_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(BOOTSTRAP_ENV, "a:1,oops")
    code, seen = parsed([])
    assert (code, seen) == (EXIT_USAGE, None)
    err = capsys.readouterr().err
    assert "usage: ketch probe" in err
    assert f"{BOOTSTRAP_ENV}='a:1,oops'" in err
    assert "'oops'" in err


def test_every_broker_of_the_running_cluster_up_ones_first(clean_place: Path) -> None:
    """./data/cluster.json, as `ketch up` (default --data-dir) leaves it while it runs; a broker
    that is down (pid null) is still listed, after the others: it may be back by then."""
    write_cluster_json(clean_place / "data", [(0, None, 9092), (1, 11, 9093), (2, 12, 9094)])
    expected = (Address("127.0.0.1", 9093), Address("127.0.0.1", 9094), Address("127.0.0.1", 9092))
    assert parsed([]) == (0, expected)


def test_a_data_dir_flag_names_the_cluster_json_to_read(clean_place: Path) -> None:
    write_cluster_json(clean_place / "data", [(0, 10, 9092)])
    write_cluster_json(clean_place / "elsewhere", [(0, 10, 7000), (1, 11, 7001)])
    argv = ["--data-dir", str(clean_place / "elsewhere")]
    expected = (Address("127.0.0.1", 7000), Address("127.0.0.1", 7001))
    assert parsed(argv, data_dir_flag=True) == (0, expected)
    # Without the flag the same command reads ./data.
    assert parsed([], data_dir_flag=True) == (0, (Address("127.0.0.1", 9092),))


@pytest.mark.parametrize(
    "content",
    ["{not json", '{"brokers": [{"host": "h"}]}', '{"brokers": []}', '{"controller": {}}'],
)
def test_an_unusable_cluster_json_is_a_usage_error_naming_the_file(
    content: str, clean_place: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (clean_place / "data").mkdir()
    (clean_place / "data" / "cluster.json").write_text(content)
    code, seen = parsed([])
    assert (code, seen) == (EXIT_USAGE, None)
    err = capsys.readouterr().err
    assert "cluster.json" in err
    assert "--bootstrap" in err  # says how to get past it
    assert "Traceback" not in err


def test_default_bootstrap_reads_what_it_is_given(clean_place: Path) -> None:
    """The function under the flag, with an explicit environment (no process state)."""
    write_cluster_json(clean_place / "d", [(3, 1, 5000)])
    found = default_bootstrap(data_dir=clean_place / "d", environ={})
    assert found == (Address("127.0.0.1", 5000),)
    assert default_bootstrap(data_dir=clean_place / "none", environ={}) == FALLBACK
    assert default_bootstrap(environ={BOOTSTRAP_ENV: "x:1"}) == (Address("x", 1),)
    assert cluster_json_brokers(clean_place / "none") is None
