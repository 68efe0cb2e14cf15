"""TLS contexts from Kafka's `ssl.*` properties: `SslConfig` reads them (with Kafka's per-listener
overrides), `server_context()` / `client_context()` build the `ssl.SSLContext`s that
runtime/net/tcp.py's `TcpTransport` takes, and `listener_transports()` gives a node one transport
per listener, TLS-wrapped where `listener.security.protocol.map` says SSL or SASL_SSL.

The properties (Kafka's names and defaults, PEM only: ketch has no JKS or PKCS12 reader):

    ssl.keystore.type            PEM (the only type accepted)
    ssl.keystore.location        a PEM file holding the private key and the certificate chain
    ssl.keystore.certificate.chain
    ssl.keystore.key             the same as inline PEM text (instead of the location)
    ssl.key.password             the password of an encrypted private key
    ssl.truststore.type          PEM (the only type accepted)
    ssl.truststore.location      a PEM file of trusted CA certificates
    ssl.truststore.certificates  the same as inline PEM text
    ssl.client.auth              none | requested | required (a server's; default none)
    ssl.endpoint.identification.algorithm
                                 https (default): a client checks the server certificate's
                                 name against the host it dialed; empty: no name check (the
                                 chain is still verified)
    ssl.enabled.protocols        TLSv1.2,TLSv1.3 (default); anything older is refused
    ssl.protocol                 TLSv1.3 (default) or TLSv1.2: the newest version offered
                                 (`TLS` leaves the choice to ssl.enabled.protocols)
    ssl.cipher.suites            the TLS 1.2 suites by OpenSSL's names, comma-separated (empty:
                                 OpenSSL's defaults); TLS 1.3's suites are always on (Python
                                 cannot narrow them) and may be listed by their names

`listener.name.<listener>.ssl.<key>` overrides `ssl.<key>` for one listener, key by key, as in
Kafka. A node serves listener L with `SslConfig.from_properties(properties, L)` and, as a client
of a peer's listener L (replica fetchers and transaction markers to `native`, the control channel
to `controller`, the controller's channels to `native`), uses the same listener's settings: its
truststore, its keystore as client certificate (sent only when the peer asks), and hostname
verification unless turned off. A listener's name is the one in `listeners`; the controller's
own listener is named `controller` (CONTROLLER_LISTENER).

Every refusal is a ValueError naming the property (and the file), raised while the node's
configuration is read, so node/config_check.py reports it and the node exits 78 before it
binds anything: a missing file, a file without a key or certificate, a key that does not match
its certificate, an encrypted key without `ssl.key.password` or with a wrong one, a type other
than PEM, a protocol older than TLS 1.2, an unknown cipher suite, a TLS listener with no
keystore. Inline PEM is handed to OpenSSL through an anonymous in-memory file (memfd), so a
private key from the properties is never written to disk.

Pure functions of their arguments and immutable values; a built `ssl.SSLContext` is configured
once, here, and only read afterwards (by asyncio's SSL protocol on the event loop thread).
"""

from __future__ import annotations

import contextlib
import enum
import os
import ssl
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from runtime.net.security_protocol import (
    LISTENER_SECURITY_PROTOCOL_MAP_KEY,
    SecurityProtocol,
    parse_security_protocol_map,
    protocol_of,
)
from runtime.net.tcp import TcpTransport

# The name of the controller's listener in listener.security.protocol.map and in the
# listener.name.<name>.ssl.* overrides (brokers name their own in `listeners`).
CONTROLLER_LISTENER: Final = "controller"
PEM: Final = "PEM"
HTTPS: Final = "https"
# The versions ketch accepts, oldest first; Kafka refuses nothing, but TLS 1.0 and 1.1 are
# deprecated (RFC 8996) and OpenSSL 3 disables them by default anyway.
_VERSIONS: Final = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_OUTDATED: Final = frozenset({"SSL", "SSLv2", "SSLv3", "TLSv1", "TLSv1.1"})

# Every ssl.* property this module reads, with Kafka's default (ketch's for the store types).
SSL_DEFAULTS: Final[Mapping[str, str]] = {
    "ssl.keystore.type": PEM,
    "ssl.keystore.location": "",
    "ssl.keystore.certificate.chain": "",
    "ssl.keystore.key": "",
    "ssl.key.password": "",
    "ssl.truststore.type": PEM,
    "ssl.truststore.location": "",
    "ssl.truststore.certificates": "",
    "ssl.client.auth": "none",
    "ssl.endpoint.identification.algorithm": HTTPS,
    "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
    "ssl.protocol": "TLSv1.3",
    "ssl.cipher.suites": "",
}
SSL_KEYS: Final = frozenset(SSL_DEFAULTS)
# Every listener name a ketch node has: the brokers' `native` and `kafka`, the controller's.
KETCH_LISTENERS: Final = frozenset({"native", "kafka", CONTROLLER_LISTENER})


def listener_prefix(listener: str) -> str:
    """Kafka's prefix of a listener's own settings: `listener.name.<name>.`."""
    return f"listener.name.{listener.lower()}."


def tls_property_names(listeners: Iterable[str] = KETCH_LISTENERS) -> frozenset[str]:
    """Every name this module reads for `listeners`: ssl.*, each listener's
    `listener.name.<name>.ssl.*` overrides, and listener.security.protocol.map."""
    overrides = {listener_prefix(name) + key for name in listeners for key in SSL_KEYS}
    return SSL_KEYS | overrides | {LISTENER_SECURITY_PROTOCOL_MAP_KEY}


class ClientAuth(enum.Enum):
    """ssl.client.auth: whether a server asks for the client's certificate."""

    NONE = "none"
    REQUESTED = "requested"
    REQUIRED = "required"


@dataclass(frozen=True, slots=True)
class Store:
    """PEM material from a file (`location`) or inline text (`text`), with the property names
    to blame in errors."""

    location: str
    text: str
    location_key: str
    text_key: str

    @property
    def configured(self) -> bool:
        return bool(self.location or self.text)


@dataclass(frozen=True, slots=True)
class SslConfig:
    """One listener's TLS settings (module docstring); `keys[name]` is the property a value came
    from, per-listener override or global, for error messages."""

    keystore: Store
    inline_key: str  # ssl.keystore.key (inline private key), paired with keystore.text
    key_password: str
    truststore: Store
    client_auth: ClientAuth
    check_hostname: bool
    minimum_version: ssl.TLSVersion
    maximum_version: ssl.TLSVersion
    cipher_suites: tuple[str, ...]
    keys: Mapping[str, str]  # ssl.* name -> the property actually read (maybe listener's)

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, object], listener: str | None = None
    ) -> SslConfig:
        """The settings for `listener` (its `listener.name.<listener>.ssl.*` over `ssl.*`), or
        the global ones; ValueError naming the property for a value that cannot be used."""
        values: dict[str, str] = {}
        keys: dict[str, str] = {}
        prefix = None if listener is None else listener_prefix(listener)
        for key, default in SSL_DEFAULTS.items():
            source = key
            if prefix is not None and prefix + key in properties:
                source = prefix + key
            raw = properties.get(source, default)
            values[key] = "" if raw is None else str(raw).strip()
            keys[key] = source
        for store in ("ssl.keystore.type", "ssl.truststore.type"):
            if values[store].upper() != PEM:
                raise ValueError(
                    f"{keys[store]}: only PEM is supported, got {values[store]!r} (convert a "
                    "JKS or PKCS12 store with keytool or openssl)"
                )
        minimum, maximum = _versions(values, keys)
        return cls(
            keystore=Store(
                values["ssl.keystore.location"],
                values["ssl.keystore.certificate.chain"],
                keys["ssl.keystore.location"],
                keys["ssl.keystore.certificate.chain"],
            ),
            inline_key=_inline_key(values, keys),
            key_password=values["ssl.key.password"],
            truststore=Store(
                values["ssl.truststore.location"],
                values["ssl.truststore.certificates"],
                keys["ssl.truststore.location"],
                keys["ssl.truststore.certificates"],
            ),
            client_auth=_client_auth(values, keys),
            check_hostname=_check_hostname(values, keys),
            minimum_version=minimum,
            maximum_version=maximum,
            cipher_suites=tuple(
                s.strip() for s in values["ssl.cipher.suites"].split(",") if s.strip()
            ),
            keys=keys,
        )

    # -- contexts ----------------------------------------------------------------------------

    def server_context(self) -> ssl.SSLContext:
        """The context a TLS listener serves with; ValueError when it has no keystore or any
        of its material cannot be loaded."""
        if not self.keystore.configured:
            raise ValueError(
                f"{self.keys['ssl.keystore.location']}: a TLS listener needs a keystore (a PEM "
                f"file with its key and certificate chain; or "
                f"{self.keys['ssl.keystore.certificate.chain']} and "
                f"{self.keys['ssl.keystore.key']})"
            )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._configure(context)
        self._load_keystore(context)
        if self.client_auth is not ClientAuth.NONE:
            self._load_truststore(context)
            context.verify_mode = (
                ssl.CERT_REQUIRED if self.client_auth is ClientAuth.REQUIRED else ssl.CERT_OPTIONAL
            )
        return context

    def client_context(self) -> ssl.SSLContext:
        """The context a connection to a TLS listener is made with: the truststore (the
        system's CAs when none is set, as Kafka falls back to the JVM's), the keystore as the
        client certificate when one is set, hostname verification unless turned off."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self._configure(context)
        context.check_hostname = self.check_hostname
        context.verify_mode = ssl.CERT_REQUIRED
        self._load_truststore(context)
        if self.keystore.configured:
            self._load_keystore(context)
        return context

    def check(self) -> None:
        """Loads whatever material is configured (a listener not using TLS still has its files
        checked: a typo there should not wait for the day the listener is switched over)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._configure(context)
        if self.keystore.configured:
            self._load_keystore(context)
        if self.truststore.configured:
            self._load_truststore(context)

    def _configure(self, context: ssl.SSLContext) -> None:
        context.minimum_version = self.minimum_version
        context.maximum_version = self.maximum_version
        if self.cipher_suites:
            _set_cipher_suites(context, self.cipher_suites, self.keys["ssl.cipher.suites"])

    def _load_keystore(self, context: ssl.SSLContext) -> None:
        store = self.keystore
        if store.location and store.text:
            raise ValueError(
                f"{store.location_key} and {store.text_key}: set one of them, not both"
            )
        asked: list[bool] = []

        def password() -> bytes:
            # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
            asked.append(True)
            return self.key_password.encode()

        if store.location:
            path = _existing_file(store.location_key, store.location)
            where = f"{store.location_key}: {path}"
            _check_pem(where, Path(path).read_bytes(), (b"PRIVATE KEY", b"CERTIFICATE"))
            with _ssl_errors(where, asked, self):
                context.load_cert_chain(path, password=password)
            return
        where = f"{store.text_key} / {self.keys['ssl.keystore.key']}"
        if not self.inline_key:
            raise ValueError(f"{self.keys['ssl.keystore.key']}: required with {store.text_key}")
        with (
            _memory_file(store.text_key, store.text) as chain,
            _memory_file(self.keys["ssl.keystore.key"], self.inline_key) as key,
            _ssl_errors(where, asked, self),
        ):
            context.load_cert_chain(chain, key, password=password)

    def _load_truststore(self, context: ssl.SSLContext) -> None:
        store = self.truststore
        if store.location and store.text:
            raise ValueError(
                f"{store.location_key} and {store.text_key}: set one of them, not both"
            )
        try:
            if store.location:
                path = _existing_file(store.location_key, store.location)
                context.load_verify_locations(cafile=path)
            elif store.text:
                context.load_verify_locations(cadata=store.text)
            else:
                context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        except ssl.SSLError as exc:
            where = store.location or "the inline certificates"
            key = store.location_key if store.location else store.text_key
            raise ValueError(
                f"{key}: no CA certificate could be read from {where} ({_reason(exc)})"
            ) from None


def _versions(values: Mapping[str, str], keys: Mapping[str, str]) -> tuple[ssl.TLSVersion, ...]:
    enabled_key = keys["ssl.enabled.protocols"]
    names = [p.strip() for p in values["ssl.enabled.protocols"].split(",") if p.strip()]
    if not names:
        raise ValueError(f"{enabled_key}: empty (give TLSv1.2 and/or TLSv1.3)")
    enabled = []
    for name in names:
        enabled.append(_version(enabled_key, name))
    protocol_key = keys["ssl.protocol"]
    protocol = values["ssl.protocol"]
    newest = max(enabled)
    if protocol.upper() != "TLS":
        newest = min(newest, _version(protocol_key, protocol))
    oldest = min(enabled)
    if oldest > newest:
        raise ValueError(f"{protocol_key}: {protocol} is older than every version in {enabled_key}")
    return oldest, newest


def _version(key: str, name: str) -> ssl.TLSVersion:
    if name in _VERSIONS:
        return _VERSIONS[name]
    if name in _OUTDATED:
        raise ValueError(f"{key}: {name} is refused (insecure): use TLSv1.2 or TLSv1.3")
    raise ValueError(f"{key}: unknown protocol {name!r} (TLSv1.2 or TLSv1.3)")


def _inline_key(values: Mapping[str, str], keys: Mapping[str, str]) -> str:
    key_text = values["ssl.keystore.key"]
    if key_text and not values["ssl.keystore.certificate.chain"]:
        raise ValueError(
            f"{keys['ssl.keystore.key']}: needs {keys['ssl.keystore.certificate.chain']} too"
        )
    return key_text


def _client_auth(values: Mapping[str, str], keys: Mapping[str, str]) -> ClientAuth:
    raw = values["ssl.client.auth"].lower()
    try:
        return ClientAuth(raw)
    except ValueError:
        raise ValueError(
            f"{keys['ssl.client.auth']}: expected none, requested or required, got {raw!r}"
        ) from None


def _check_hostname(values: Mapping[str, str], keys: Mapping[str, str]) -> bool:
    algorithm = values["ssl.endpoint.identification.algorithm"]
    if algorithm and algorithm.lower() != HTTPS:
        raise ValueError(
            f"{keys['ssl.endpoint.identification.algorithm']}: expected https or empty "
            f"(no hostname verification), got {algorithm!r}"
        )
    return bool(algorithm)


def _set_cipher_suites(context: ssl.SSLContext, suites: tuple[str, ...], key: str) -> None:
    tls13 = {c["name"] for c in context.get_ciphers() if c["protocol"] == "TLSv1.3"}
    tls12 = [s for s in suites if s not in tls13]
    for suite in tls12:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).set_ciphers(suite)
        except ssl.SSLError:
            raise ValueError(
                f"{key}: unknown cipher suite {suite!r} (OpenSSL's names, e.g. "
                "ECDHE-RSA-AES128-GCM-SHA256, or a TLS 1.3 suite such as TLS_AES_128_GCM_SHA256)"
            ) from None
    if tls12:
        context.set_ciphers(":".join(tls12))
    elif context.maximum_version < ssl.TLSVersion.TLSv1_3:
        raise ValueError(f"{key}: only TLS 1.3 suites, but TLS 1.3 is not enabled")


def _existing_file(key: str, location: str) -> str:
    path = Path(location).expanduser()
    if not path.is_file():
        raise ValueError(f"{key}: no such file: {path}")
    if not os.access(path, os.R_OK):
        raise ValueError(f"{key}: cannot read {path} (permissions)")
    return str(path)


def _check_pem(where: str, data: bytes, labels: Iterable[bytes]) -> None:
    """A PEM block of each label, or a ValueError saying which is missing (OpenSSL's own error
    for it is "PEM lib")."""
    for label in labels:
        if b"-----BEGIN " not in data or label not in data:
            raise ValueError(f"{where}: no {label.decode().lower()} in it (expected PEM)")


def _reason(exc: ssl.SSLError) -> str:
    return str(exc.reason or exc.strerror or exc).lower().replace("_", " ")


@contextlib.contextmanager
def _ssl_errors(where: str, asked: list[bool], config: SslConfig) -> Iterator[None]:
    """OpenSSL's errors while loading a keystore, as ValueErrors that say what to fix."""
    try:
        yield
    except ssl.SSLError as exc:
        reason = _reason(exc)
        password_key = config.keys["ssl.key.password"]
        if "mismatch" in reason:
            problem = "the private key does not match the certificate"
        elif asked and not config.key_password:
            problem = f"the private key is encrypted: set {password_key}"
        elif asked:
            problem = f"the private key cannot be decrypted: wrong {password_key}?"
        else:
            problem = f"no private key and certificate chain could be read ({reason})"
        raise ValueError(f"{where}: {problem}") from None


@contextlib.contextmanager
def _memory_file(key: str, text: str) -> Iterator[str]:
    """A path OpenSSL can read `text` from: an anonymous memory file on Linux (never on disk),
    elsewhere a private temporary file removed at once."""
    data = text.replace("\\n", "\n").encode()
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create(f"ketch-{key}", os.MFD_CLOEXEC)
        try:
            os.write(fd, data)
            yield f"/proc/self/fd/{fd}"
        finally:
            os.close(fd)
        return
    fd, name = tempfile.mkstemp(prefix="ketch-pem-")  # mode 0600
    try:
        os.write(fd, data)
        os.close(fd)
        yield name
    finally:
        os.unlink(name)


# -- listeners ------------------------------------------------------------------------------------


def security_protocols(properties: Mapping[str, object]) -> dict[str, SecurityProtocol]:
    """listener.security.protocol.map from a node's properties (empty: every listener is
    PLAINTEXT)."""
    raw = properties.get(LISTENER_SECURITY_PROTOCOL_MAP_KEY, "")
    return parse_security_protocol_map(str(raw or ""))


@dataclass(frozen=True, slots=True)
class ListenerTls:
    """The TLS contexts of one listener of a node: `server` to serve it (None: plaintext) and
    `client` to reach a peer's listener of that name (None: plaintext)."""

    server: ssl.SSLContext | None
    client: ssl.SSLContext | None

    def transport(self, *, source_host: str | None = None) -> TcpTransport:
        return TcpTransport(ssl_server=self.server, ssl_client=self.client, source_host=source_host)


def listener_tls(
    properties: Mapping[str, object], listeners: Iterable[str], *, serving: Iterable[str]
) -> dict[str, ListenerTls]:
    """For each name in `listeners`: its contexts per listener.security.protocol.map; a server
    context only for the ones this node serves (`serving`). Every listener's configured
    material is loaded (checked) whether or not it speaks TLS. ValueError naming the property
    for anything unusable, and for a map entry naming a listener no ketch node has (one file
    configures every node: the controller's map names the brokers' listeners too)."""
    names = {name.lower() for name in listeners}
    served = {name.lower() for name in serving}
    protocols = security_protocols(properties)
    unknown = sorted(set(protocols) - names - KETCH_LISTENERS)
    if unknown:
        raise ValueError(
            f"{LISTENER_SECURITY_PROTOCOL_MAP_KEY}: no listener named {', '.join(unknown)} "
            f"(known: {', '.join(sorted(names | KETCH_LISTENERS))})"
        )
    SslConfig.from_properties(properties).check()
    result = {}
    for name in sorted(names):
        config = SslConfig.from_properties(properties, name)
        if not protocol_of(protocols, name).uses_tls:
            config.check()
            result[name] = ListenerTls(None, None)
            continue
        server = config.server_context() if name in served else None
        result[name] = ListenerTls(server, config.client_context())
    return result


# -- clients -------------------------------------------------------------------------------------

SECURITY_PROTOCOL_KEY: Final = "security.protocol"


def client_ssl_context(properties: Mapping[str, object]) -> ssl.SSLContext | None:
    """A client's TLS context from Kafka client properties (`security.protocol` and ssl.*, as in
    a Kafka CLI's --command-config file): None for PLAINTEXT (the default) and SASL_PLAINTEXT.
    Only the TLS part: the SASL login of SASL_* is the client's (client/sasl.py)."""
    raw = str(properties.get(SECURITY_PROTOCOL_KEY, "PLAINTEXT") or "PLAINTEXT").strip()
    try:
        protocol = SecurityProtocol(raw.upper())
    except ValueError:
        known = ", ".join(p.value for p in SecurityProtocol)
        raise ValueError(f"{SECURITY_PROTOCOL_KEY}: unknown protocol {raw!r} ({known})") from None
    if not protocol.uses_tls:
        return None
    return SslConfig.from_properties(properties).client_context()
