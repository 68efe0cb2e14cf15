"""`ketch user` (cli/user.py) without a cluster: what `create` computes and sends (a salt and a
salted password per mechanism, as kafka-configs), where the password comes from, and the flags
refused before anything is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.user import main, read_password, upsertions
from runtime.net.scram import SCRAM_SHA_256, SCRAM_SHA_512, credential, salted_password


def test_upsertions_salt_each_mechanism_and_never_carry_the_password() -> None:
    made = upsertions("alice", [SCRAM_SHA_256, SCRAM_SHA_512, SCRAM_SHA_256], "pw", 4096)
    assert [(u.name, u.mechanism, u.iterations) for u in made] == [
        ("alice", 1, 4096),
        ("alice", 2, 4096),
    ]
    first, second = made
    assert first.salt != second.salt
    assert len(first.salt) == 32
    assert first.salted_password == salted_password(SCRAM_SHA_256, b"pw", first.salt, 4096)
    assert second.salted_password == salted_password(SCRAM_SHA_512, b"pw", second.salt, 4096)
    assert b"pw" not in first.salted_password
    # What the controller derives from it is what a SCRAM login checks against.
    derived = credential(SCRAM_SHA_256, first.salt, first.salted_password, 4096)
    assert derived.iterations == 4096


def test_password_from_the_first_line_of_a_file(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text("s3cret\nignored\n")
    assert read_password(path) == "s3cret"
    path.write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        read_password(path)


@pytest.mark.parametrize(
    "argv",
    [
        ["create", "alice", "--mechanism", "SCRAM-SHA-256", "--iterations", "4095"],
        ["create", "alice", "--mechanism", "PLAIN"],
        ["create", "alice"],
        ["create", "alice", "--mechanism", "SCRAM-SHA-256", "--password-file", "/nonexistent"],
    ],
)
def test_bad_flags_are_usage_errors(argv: list[str]) -> None:
    assert main([*argv, "--bootstrap", "127.0.0.1:1"]) == 2
