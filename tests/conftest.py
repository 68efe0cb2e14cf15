"""Shared test configuration.

Hypothesis runs derandomized (a fixed seed derived from each test) with no example database, so
every run of `make test` explores the same examples and a failure reproduces exactly; the failing
example is printed by hypothesis itself.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ketch", derandomize=True, database=None, deadline=None, print_blob=True)
settings.load_profile("ketch")


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and key for 127.0.0.1, made by the openssl command (part of
    every machine this project supports; a missing one fails the TLS tests rather than skipping
    them)."""
    openssl = shutil.which("openssl")
    assert openssl is not None, "the TLS tests need the openssl command"
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
            "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )  # fmt: skip
    return cert, key
