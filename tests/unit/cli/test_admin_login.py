"""`ketch user` / `ketch quota` prove the cluster secret when they can (cli/admin_login.py): from
--secret-file, else <data-dir>/cluster.secret when it exists; a SASL login in --command-config
wins; nothing to be found means no credential (the command goes as User:ANONYMOUS)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from cli.admin_login import add_cluster_secret_flags, cluster_secret
from cli.client_sasl import client_sasl_scope
from cli.common import CliError
from client.sasl import SaslClientConfig

SECRET = b"s" * 32


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_cluster_secret_flags(parser)
    return parser.parse_args(list(argv))


def test_the_data_dirs_secret_is_used_when_it_exists(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    assert cluster_secret(parse("--data-dir", str(data))) is None
    (data / "cluster.secret").write_bytes(SECRET + b"\n")
    (data / "cluster.secret").chmod(0o600)
    assert cluster_secret(parse("--data-dir", str(data))) == SECRET


def test_an_explicit_secret_file_must_be_usable(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="no cluster secret"):
        cluster_secret(parse("--secret-file", str(tmp_path / "absent")))
    short = tmp_path / "short"
    short.write_bytes(b"tiny")
    with pytest.raises(CliError, match="shorter than"):
        cluster_secret(parse("--secret-file", str(short)))
    good = tmp_path / "good"
    good.write_bytes(SECRET)
    good.chmod(0o600)
    assert cluster_secret(parse("--secret-file", str(good))) == SECRET


def test_a_sasl_login_acts_as_its_user(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_bytes(SECRET)
    good.chmod(0o600)
    with client_sasl_scope(SaslClientConfig("SCRAM-SHA-256", "alice", "pw")):
        assert cluster_secret(parse("--secret-file", str(good))) is None
