"""runtime/net/tls.py: contexts from Kafka's ssl.* properties (PEM files and inline PEM,
per-listener overrides, client auth, hostname verification), handshakes over the TCP transport,
and each refusal with the property and file it names. The PEM material is made per test in
tmp_path by cli/up/certificates.py (a new CA each time)."""

from __future__ import annotations

import asyncio
import ssl
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from cli.up.certificates import CertificateAuthority, write_cluster_certificates, write_private
from node.broker.config import BrokerConfig
from node.config_check import Role, check
from runtime.config import EffectiveConfig, Setting, Source
from runtime.net import tcp
from runtime.net.tls import SslConfig, listener_tls, tls_property_names
from runtime.net.transport import Address, Stream

TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Material:
    ca: CertificateAuthority
    truststore: Path
    keystore: Path  # CN=node, SAN 127.0.0.1 and localhost
    directory: Path


@pytest.fixture
def material(tmp_path: Path) -> Material:
    ca = CertificateAuthority()
    truststore = tmp_path / "ca.pem"
    truststore.write_bytes(ca.certificate_pem)
    keystore = tmp_path / "node.pem"
    write_private(keystore, ca.issue("node").keystore_pem)
    return Material(ca, truststore, keystore, tmp_path)


def _server_props(m: Material, **extra: str) -> dict[str, object]:
    return {"ssl.keystore.location": str(m.keystore), **extra}


def _client_props(m: Material, **extra: str) -> dict[str, object]:
    return {"ssl.truststore.location": str(m.truststore), **extra}


async def _handshake(
    server: ssl.SSLContext, client: ssl.SSLContext, *, host: str = "127.0.0.1"
) -> tuple[str | None, str | None]:
    """Connect `client` to a listener serving `server`; (client's TLS version, the principal
    the server sees). Raises what the client's connect raises."""
    accepted: asyncio.Queue[Stream] = asyncio.Queue()
    done = asyncio.Event()

    async def on_stream(stream: Stream) -> None:
        await accepted.put(stream)
        await done.wait()
        await stream.aclose()

    listener = await tcp.TcpTransport(ssl_server=server).listen(Address(host, 0), on_stream)
    try:
        stream = await tcp.TcpTransport(ssl_client=client).connect(
            listener.address, timeout_s=TIMEOUT_S
        )
        async with asyncio.timeout(TIMEOUT_S):
            served = await accepted.get()
        assert isinstance(served, tcp.TcpStream)
        assert stream.tls_principal is None  # the server's certificate is not a client's
        version, principal = stream.tls_version, served.tls_principal
        await stream.send(b"ping")
        assert await served.receive() == b"ping"
        await stream.aclose()
        return version, principal
    finally:
        done.set()
        await listener.aclose()


async def test_contexts_from_pem_files_complete_a_verified_handshake(material: Material) -> None:
    server = SslConfig.from_properties(_server_props(material)).server_context()
    client = SslConfig.from_properties(_client_props(material)).client_context()
    assert client.check_hostname  # Kafka's default: ssl.endpoint.identification.algorithm=https
    version, principal = await _handshake(server, client)
    assert version == "TLSv1.3"
    assert principal is None  # ssl.client.auth=none: no client certificate asked for


async def test_inline_pem_keystore_and_truststore(material: Material) -> None:
    issued = material.ca.issue("inline", password=b"secret")
    server = SslConfig.from_properties(
        {
            "ssl.keystore.certificate.chain": issued.chain_pem.decode(),
            "ssl.keystore.key": issued.key_pem.decode(),
            "ssl.key.password": "secret",
        }
    ).server_context()
    client = SslConfig.from_properties(
        {"ssl.truststore.certificates": material.ca.certificate_pem.decode()}
    ).client_context()
    version, _ = await _handshake(server, client)
    assert version is not None


async def test_required_client_auth_gives_the_subject_as_principal(material: Material) -> None:
    alice = material.directory / "alice.pem"
    write_private(alice, material.ca.issue("alice", organizational_unit="eng").keystore_pem)
    server = SslConfig.from_properties(
        _server_props(material, **{"ssl.client.auth": "required"}, **_str(_client_props(material)))
    ).server_context()
    client = SslConfig.from_properties(
        _client_props(material, **{"ssl.keystore.location": str(alice)})
    ).client_context()
    _, principal = await _handshake(server, client)
    assert principal == "User:CN=alice,OU=eng"


async def test_required_client_auth_refuses_a_client_without_certificate(
    material: Material,
) -> None:
    server = SslConfig.from_properties(
        _server_props(material, **{"ssl.client.auth": "required"}, **_str(_client_props(material)))
    ).server_context()
    client = SslConfig.from_properties(_client_props(material)).client_context()
    accepted: list[Stream] = []

    async def on_stream(stream: Stream) -> None:
        accepted.append(stream)
        await stream.aclose()

    listener = await tcp.TcpTransport(ssl_server=server).listen(Address("127.0.0.1", 0), on_stream)
    try:
        # In TLS 1.3 the server checks the client's certificate after the client's side of the
        # handshake is done: the client learns of the refusal (an alert) as a closed connection.
        stream = await tcp.TcpTransport(ssl_client=client).connect(
            listener.address, timeout_s=TIMEOUT_S
        )
        async with asyncio.timeout(TIMEOUT_S):
            assert await stream.receive() == b""
        await stream.aclose()
    finally:
        await listener.aclose()
    assert accepted == []  # no stream was handed to the server's handler


async def test_hostname_verification_refuses_a_certificate_for_another_name(
    material: Material,
) -> None:
    other = material.directory / "other.pem"
    write_private(other, material.ca.issue("other", ["other.example"]).keystore_pem)
    server = SslConfig.from_properties({"ssl.keystore.location": str(other)}).server_context()
    verifying = SslConfig.from_properties(_client_props(material)).client_context()
    with pytest.raises(ssl.SSLCertVerificationError, match="IP address mismatch"):
        await _handshake(server, verifying)
    # An empty algorithm turns the name check off (Kafka's way); the chain is still verified.
    lenient = SslConfig.from_properties(
        _client_props(material, **{"ssl.endpoint.identification.algorithm": ""})
    ).client_context()
    assert not lenient.check_hostname
    version, _ = await _handshake(server, lenient)
    assert version is not None


async def test_an_untrusted_server_is_refused(material: Material, tmp_path: Path) -> None:
    stranger = CertificateAuthority("another CA")
    foreign = tmp_path / "foreign.pem"
    write_private(foreign, stranger.issue("node").keystore_pem)
    server = SslConfig.from_properties({"ssl.keystore.location": str(foreign)}).server_context()
    client = SslConfig.from_properties(_client_props(material)).client_context()
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        await _handshake(server, client)


def test_protocol_versions_and_ciphers(material: Material) -> None:
    only12 = SslConfig.from_properties(
        _server_props(
            material,
            **{
                "ssl.protocol": "TLSv1.2",
                "ssl.cipher.suites": "ECDHE-ECDSA-AES128-GCM-SHA256",
            },
        )
    ).server_context()
    assert only12.minimum_version == ssl.TLSVersion.TLSv1_2
    assert only12.maximum_version == ssl.TLSVersion.TLSv1_2
    names = {c["name"] for c in only12.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert names == {"ECDHE-ECDSA-AES128-GCM-SHA256"}
    only13 = SslConfig.from_properties(
        _server_props(material, **{"ssl.enabled.protocols": "TLSv1.3"})
    ).server_context()
    assert only13.minimum_version == ssl.TLSVersion.TLSv1_3


def test_listener_overrides_win_key_by_key(material: Material, tmp_path: Path) -> None:
    props = {
        "ssl.keystore.location": str(material.keystore),
        "ssl.client.auth": "requested",
        "listener.name.kafka.ssl.client.auth": "required",
        "ssl.truststore.location": str(material.truststore),
    }
    kafka = SslConfig.from_properties(props, "kafka")
    native = SslConfig.from_properties(props, "native")
    assert kafka.server_context().verify_mode == ssl.CERT_REQUIRED
    assert native.server_context().verify_mode == ssl.CERT_OPTIONAL
    assert kafka.keys["ssl.client.auth"] == "listener.name.kafka.ssl.client.auth"
    assert kafka.keys["ssl.keystore.location"] == "ssl.keystore.location"
    props["listener.name.kafka.ssl.keystore.location"] = str(tmp_path / "gone.pem")
    with pytest.raises(ValueError, match=r"^listener\.name\.kafka\.ssl\.keystore\.location: no "):
        SslConfig.from_properties(props, "kafka").server_context()


def test_listener_tls_follows_the_security_protocol_map(material: Material) -> None:
    props = {
        "listener.security.protocol.map": "kafka:SSL,native:PLAINTEXT,controller:SASL_SSL",
        **_server_props(material),
        **_client_props(material),
    }
    tls = listener_tls(props, {"kafka", "native", "controller"}, serving={"kafka", "native"})
    assert tls["kafka"].server is not None
    assert tls["kafka"].client is not None
    assert tls["native"].server is None
    assert tls["native"].client is None
    # Dialed only (the broker dials the controller): a client context, no server one.
    assert tls["controller"].server is None
    assert tls["controller"].client is not None
    with pytest.raises(ValueError, match="no listener named internal"):
        listener_tls({"listener.security.protocol.map": "internal:SSL"}, {"native"}, serving=[])


def _refusal(props: Mapping[str, object]) -> str:
    """The message of the first refusal building both contexts from `props` meets."""
    try:
        config = SslConfig.from_properties(props)
        config.server_context()
        config.client_context()
    except ValueError as exc:
        return str(exc)
    raise AssertionError(f"accepted: {props}")


def test_refusals_name_the_property_and_the_file(material: Material, tmp_path: Path) -> None:
    d = material.directory
    encrypted = d / "encrypted.pem"
    write_private(encrypted, material.ca.issue("e", password=b"right").keystore_pem)
    mismatched = d / "mismatched.pem"
    one, two = material.ca.issue("one"), material.ca.issue("two")
    write_private(mismatched, one.key_pem + two.chain_pem)
    missing = tmp_path / "missing.pem"
    cases: list[tuple[dict[str, object], str]] = [
        (
            {"ssl.keystore.location": str(missing)},
            f"ssl.keystore.location: no such file: {missing}",
        ),
        (
            {"ssl.keystore.location": str(mismatched)},
            f"ssl.keystore.location: {mismatched}: the private key does not match the certificate",
        ),
        (
            {"ssl.keystore.location": str(encrypted)},
            f"ssl.keystore.location: {encrypted}: the private key is encrypted: set "
            "ssl.key.password",
        ),
        (
            {"ssl.keystore.location": str(encrypted), "ssl.key.password": "wrong"},
            f"ssl.keystore.location: {encrypted}: the private key cannot be decrypted: wrong "
            "ssl.key.password?",
        ),
        (
            {"ssl.keystore.location": str(material.truststore)},
            f"ssl.keystore.location: {material.truststore}: no private key in it",
        ),
        ({}, "ssl.keystore.location: a TLS listener needs a keystore"),
        (
            {"ssl.keystore.type": "JKS", **_server_props(material)},
            "ssl.keystore.type: only PEM is supported, got 'JKS'",
        ),
        (
            {"ssl.truststore.type": "PKCS12", **_server_props(material)},
            "ssl.truststore.type: only PEM is supported",
        ),
        (
            {"ssl.enabled.protocols": "TLSv1.1,TLSv1.2", **_server_props(material)},
            "ssl.enabled.protocols: TLSv1.1 is refused (insecure)",
        ),
        (
            {"ssl.protocol": "SSLv3", **_server_props(material)},
            "ssl.protocol: SSLv3 is refused (insecure)",
        ),
        (
            {"ssl.client.auth": "always", **_server_props(material)},
            "ssl.client.auth: expected none, requested or required, got 'always'",
        ),
        (
            {"ssl.endpoint.identification.algorithm": "ldap", **_server_props(material)},
            "ssl.endpoint.identification.algorithm: expected https or empty",
        ),
        (
            {"ssl.cipher.suites": "NOT-A-SUITE", **_server_props(material)},
            "ssl.cipher.suites: unknown cipher suite 'NOT-A-SUITE'",
        ),
        (
            {"ssl.truststore.location": str(d / "nothing.pem"), **_server_props(material)},
            f"ssl.truststore.location: no such file: {d / 'nothing.pem'}",
        ),
        (
            {"ssl.keystore.key": one.key_pem.decode()},
            "ssl.keystore.key: needs ssl.keystore.certificate.chain too",
        ),
        (
            {
                "ssl.keystore.certificate.chain": one.chain_pem.decode(),
                **_server_props(material),
            },
            "ssl.keystore.location and ssl.keystore.certificate.chain: set one of them",
        ),
    ]
    for props, expected in cases:
        message = _refusal(props)
        assert message.startswith(expected), (props, message)


def test_a_bad_tls_setting_is_a_configuration_problem(material: Material, tmp_path: Path) -> None:
    """node/config_check.py reports it by key (the node then exits 78), and a TLS listener
    without a keystore is the map's problem with the listener's name."""
    missing = tmp_path / "missing.pem"
    settings = {
        "listener.security.protocol.map": "native:SSL",
        "ssl.keystore.location": str(missing),
        "ssl.truststore.location": str(material.truststore),
        "listener.name.native.ssl.client.auth": "required",
    }
    effective = EffectiveConfig(
        {key: Setting(key, value, Source.FILE) for key, value in settings.items()},
        Path("ketch.toml"),
    )
    problems = check(effective, [Role.BROKER, Role.CONTROLLER])
    assert [p.keys for p in problems] == [
        ("listener.security.protocol.map",),
        ("ssl.keystore.location",),
    ], problems
    assert problems[0].reason.startswith("ssl.keystore.location: a TLS listener needs a keystore")
    assert problems[1].reason == "no such file"  # the value, the path, is named by the problem
    assert tls_property_names() >= set(settings)


def test_broker_config_carries_the_listener_contexts(material: Material) -> None:
    truststore, keystore = material.directory / "tls/ca.pem", material.directory / "tls/b0.pem"
    write_cluster_certificates(truststore, {"broker-0": keystore})
    config = BrokerConfig.from_properties(
        {
            "broker.id": 0,
            "listeners": "native://127.0.0.1:0,kafka://127.0.0.1:0",
            "listener.security.protocol.map": "kafka:SSL,native:SSL,controller:SSL",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.location": str(truststore),
        }
    )
    assert {name: tls.server is not None for name, tls in config.listener_tls.items()} == {
        "controller": False,
        "kafka": True,
        "native": True,
    }
    assert all(tls.client is not None for tls in config.listener_tls.values())
    assert keystore.stat().st_mode & 0o777 == 0o600
    assert keystore.parent.stat().st_mode & 0o777 == 0o700


def _str(props: Mapping[str, object]) -> dict[str, str]:
    return {key: str(value) for key, value in props.items()}


def test_the_readme_example_configures_a_broker(material: Material) -> None:
    """README.md's TLS properties, with this test's files for /etc/ketch's, build a broker whose
    listeners are all TLS, the kafka one asking for client certificates."""
    readme = (Path(__file__).resolve().parents[4] / "README.md").read_text()
    section = readme.split("### TLS", 1)[1]
    block = section.split("```toml", 1)[1].split("```", 1)[0]
    block = block.replace("/etc/ketch/node.pem", str(material.keystore))
    block = block.replace("/etc/ketch/ca.pem", str(material.truststore))
    properties: dict[str, object] = dict(tomllib.loads(block))
    properties.update({"broker.id": 0, "listeners": "native://127.0.0.1:0,kafka://127.0.0.1:0"})
    config = BrokerConfig.from_properties(properties)
    kafka = config.listener_tls["kafka"].server
    native = config.listener_tls["native"].server
    assert kafka is not None
    assert native is not None
    assert kafka.verify_mode == ssl.CERT_REQUIRED
    assert native.verify_mode == ssl.CERT_NONE
