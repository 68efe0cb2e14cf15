"""`ketch up --tls`'s certificates: a throwaway certificate authority and one certificate per node,
as PEM files that runtime/net/tls.py reads (`ssl.keystore.location`, `ssl.truststore.location`).

    <cluster dir>/tls/ca.pem               the CA's certificate: every node's and client's
                                           truststore (mode 0644: it is public)
    <cluster dir>/tls/<node>.pem           the node's private key, then its certificate, then
                                           the CA's (a Kafka PEM keystore); mode 0600

Each node certificate names the node (CN) and carries the hosts a client dials as subject
alternative names (127.0.0.1 and localhost by default), so hostname verification stays on. Keys
are ECDSA P-256 (small, fast handshakes). The CA's private key lives only in the
`CertificateAuthority` object: it is never written anywhere, so once the certificates are
signed and the object dropped, no new certificate can be issued under that CA; a cluster that
needs another node's certificate gets a new CA (`ketch up --tls` makes one at every start,
replacing the files).

Pure except for the files `write_cluster_certificates` writes; nothing here is shared.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_HOSTS: Final = ("127.0.0.1", "localhost")
VALID_DAYS: Final = 365
# Certificates start a little in the past: a peer whose clock is slightly behind still accepts.
_BACKDATE: Final = datetime.timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class IssuedCertificate:
    """A key and its certificate chain as PEM: `key_pem` (encrypted when a password was
    given), `chain_pem` (the leaf, then the CA)."""

    key_pem: bytes
    chain_pem: bytes

    @property
    def keystore_pem(self) -> bytes:
        """Key then chain: the one-file PEM keystore of `ssl.keystore.location`."""
        return self.key_pem + self.chain_pem


class CertificateAuthority:
    """A self-signed CA whose private key exists only in this object (module docstring)."""

    def __init__(self, name: str = "ketch cluster CA", *, days: int = VALID_DAYS) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._days = days
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = datetime.datetime.now(datetime.UTC)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def certificate_pem(self) -> bytes:
        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        hosts: Iterable[str] = DEFAULT_HOSTS,
        *,
        organizational_unit: str | None = None,
        password: bytes | None = None,
    ) -> IssuedCertificate:
        """A certificate for `common_name`, valid for server and client authentication, with
        each of `hosts` (IP literal or DNS name) as a subject alternative name."""
        key = ec.generate_private_key(ec.SECP256R1())
        # Least specific first, as X.509 orders a name; its RFC 2253 string reverses that
        # (CN=...,OU=...), the form Kafka's principals take.
        attributes = []
        if organizational_unit is not None:
            attributes.append(
                x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, organizational_unit)
            )
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = datetime.datetime.now(datetime.UTC)
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=self._days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
            .sign(self._key, hashes.SHA256())
        )
        encryption: serialization.KeySerializationEncryption = (
            serialization.NoEncryption()
            if password is None
            else serialization.BestAvailableEncryption(password)
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )
        chain = certificate.public_bytes(serialization.Encoding.PEM) + self.certificate_pem
        return IssuedCertificate(key_pem, chain)


def _names(hosts: Iterable[str]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return names


def write_private(path: Path, data: bytes) -> None:
    """`data` into `path` with mode 0600 from the start (never readable by others, not even
    between the create and a chmod)."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)


def write_cluster_certificates(
    truststore: Path, keystores: Mapping[str, Path], hosts: Iterable[str] = DEFAULT_HOSTS
) -> None:
    """A new CA: its certificate into `truststore`, and for each node of `keystores` (node name
    -> path) a keystore with a certificate for that name; the directories are created 0700. The
    CA's key is dropped when this returns."""
    ca = CertificateAuthority()
    host_list = list(hosts)
    for node, path in keystores.items():
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_private(path, ca.issue(node, host_list).keystore_pem)
    truststore.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    truststore.unlink(missing_ok=True)
    truststore.write_bytes(ca.certificate_pem)
    truststore.chmod(0o644)
