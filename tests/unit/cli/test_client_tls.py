"""cli/client_tls.py: a command's client TLS from `--command-config` (Java properties syntax), else
from the `ketch up --tls` cluster's cluster.json when the command's bootstrap is that cluster,
else plaintext; each refusal names the file and the property."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import pytest

from cli.client_tls import command_ssl_context, read_properties_file
from cli.up.certificates import CertificateAuthority
from runtime.net.transport import Address

BROKER = Address("127.0.0.1", 9092)


@pytest.fixture
def ca_file(tmp_path: Path) -> Path:
    path = tmp_path / "ca.pem"
    path.write_bytes(CertificateAuthority().certificate_pem)
    return path


def test_properties_file_syntax(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# a comment\n! another\n\nsecurity.protocol = SSL\nssl.truststore.location: /ca.pem\n"
        "ssl.endpoint.identification.algorithm=\n"
    )
    assert read_properties_file(path) == {
        "security.protocol": "SSL",
        "ssl.truststore.location": "/ca.pem",
        "ssl.endpoint.identification.algorithm": "",
    }
    path.write_text("security.protocol SSL\n")
    with pytest.raises(ValueError, match=r"client\.properties:1: expected key=value"):
        read_properties_file(path)
    with pytest.raises(ValueError, match="--command-config: cannot read"):
        read_properties_file(tmp_path / "absent.properties")


def test_command_config_gives_a_verifying_context(tmp_path: Path, ca_file: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(f"security.protocol=SSL\nssl.truststore.location={ca_file}\n")
    context = command_ssl_context(path, [BROKER], tmp_path)
    assert isinstance(context, ssl.SSLContext)
    assert context.check_hostname
    path.write_text("security.protocol=PLAINTEXT\n")
    assert command_ssl_context(path, [BROKER], tmp_path) is None
    # The SASL protocols are their TLS part here (the login is cli/client_sasl.py's).
    path.write_text(f"security.protocol=SASL_SSL\nssl.truststore.location={ca_file}\n")
    assert isinstance(command_ssl_context(path, [BROKER], tmp_path), ssl.SSLContext)
    path.write_text("security.protocol=SASL_PLAINTEXT\n")
    assert command_ssl_context(path, [BROKER], tmp_path) is None
    path.write_text("security.protocol=SSL\nssl.truststore.location=/nonexistent.pem\n")
    with pytest.raises(ValueError, match=r"ssl\.truststore\.location: no such file"):
        command_ssl_context(path, [BROKER], tmp_path)


def test_cluster_json_applies_to_its_own_brokers_only(tmp_path: Path, ca_file: Path) -> None:
    document = {
        "controller": {"id": 0, "pid": None, "host": "127.0.0.1", "port": 9192},
        "brokers": [{"id": 0, "pid": 1, "host": "127.0.0.1", "port": 9092}],
        "tls": {"security.protocol": "SSL", "ssl.truststore.location": str(ca_file)},
    }
    (tmp_path / "cluster.json").write_text(json.dumps(document))
    assert command_ssl_context(None, [BROKER], tmp_path) is not None
    # Another cluster's brokers: plaintext, whatever this data dir's cluster speaks.
    assert command_ssl_context(None, [Address("127.0.0.1", 7000)], tmp_path) is None
    # No data dir, or one without a cluster: plaintext.
    assert command_ssl_context(None, [BROKER], tmp_path / "elsewhere") is None
    del document["tls"]
    (tmp_path / "cluster.json").write_text(json.dumps(document))
    assert command_ssl_context(None, [BROKER], tmp_path) is None
