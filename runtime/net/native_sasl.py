"""Authentication on the native listener: the cluster credential and, on a SASL listener, users.

One `NativeAuthentication` per native connection, fed by runtime/net/native_dialect.py with the
bodies of SaslHandshake (17) and SaslAuthenticate (36). Which mechanisms a connection may pick
depends on the native listener's security protocol (`listener.security.protocol.map`):

    PLAINTEXT / SSL            KETCH-HMAC-SHA256 only (runtime/net/auth.py); a connection that
                               does not prove it stays anonymous (User:ANONYMOUS), as before
    SASL_PLAINTEXT / SASL_SSL  KETCH-HMAC-SHA256, or sasl.enabled.mechanisms (PLAIN,
                               SCRAM-SHA-256/512: runtime/net/sasl.py's `SaslServerAuthenticator`
                               with the Kafka listener's users and SCRAM credentials); a client
                               must finish one of them before any request but ApiVersions

The cluster credential stays on every native listener: it is how brokers, the controller and
admin tools holding the cluster secret reach each other, and only it makes a connection a
cluster member (control-plane APIs, super user for ACLs). A user who logs in gets the principal
`User:NAME` and is never a cluster member.

Why a PLAINTEXT native listener does not offer the user mechanisms: Kafka's listeners do not
either (the security protocol decides whether a listener authenticates users), so a ketch client
and a Kafka client get the same identity from the same listener settings, and a PLAIN password
is never invited onto a listener its operator declared unauthenticated.

What a connection can do, as a table (the dialect applies it):

    mechanism chosen   SaslHandshake (again)           SaslAuthenticate
    none               KETCH-HMAC or a user mechanism  ILLEGAL_SASL_STATE (cluster exchange fails)
                       -> chosen; another name:
                       UNSUPPORTED_SASL_MECHANISM with
                       the list (the client may retry)
    KETCH-HMAC         runtime/net/auth.py's table     runtime/net/auth.py's table
    a user mechanism   ILLEGAL_SASL_STATE              runtime/net/sasl.py's table; a failure is
                                                       answered, then the connection closes

Owned by the connection's reader (no lock); the settings (`NativeSasl`) are immutable and shared
by every connection of the listener.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from runtime.net import auth
from runtime.net.auth import ServerAuthenticator
from runtime.net.sasl import SaslReply, SaslServerAuthenticator, ScramCredentialSource
from runtime.net.security_protocol import ANONYMOUS_PRINCIPAL
from wire.errors import ErrorCode
from wire.messages import ApiKey

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NativeSasl:
    """A SASL_PLAINTEXT / SASL_SSL native listener's user mechanisms: the enabled ones, PLAIN's
    users, where SCRAM credentials come from, and the largest frame before authentication."""

    mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str]
    scram_credentials: ScramCredentialSource
    max_receive_size: int


class NativeAuthentication:
    """One native connection's authentication state (module docstring). `sasl=None`: a
    PLAINTEXT / SSL listener (cluster credential only, authentication optional)."""

    __slots__ = ("_chosen", "cluster", "peer", "sasl", "tls_principal", "user")

    def __init__(
        self,
        cluster_secret: bytes | None,
        sasl: NativeSasl | None,
        peer: str,
        tls_principal: str | None = None,
    ) -> None:
        self.cluster = ServerAuthenticator(cluster_secret)
        self.sasl = sasl
        self.peer = peer
        # The TLS client certificate's principal (SSL with ssl.client.auth), if any.
        self.tls_principal = tls_principal
        self.user: SaslServerAuthenticator | None = None
        self._chosen: str | None = None

    @property
    def cluster_member(self) -> bool:
        return self.cluster.authenticated

    @property
    def principal(self) -> str:
        user = self.user
        if user is not None and user.authenticated and user.principal is not None:
            return user.principal
        return self.tls_principal or ANONYMOUS_PRINCIPAL

    @property
    def authenticated(self) -> bool:
        user = self.user
        return self.cluster_member or (user is not None and user.authenticated)

    @property
    def mechanisms(self) -> list[str]:
        """What a SaslHandshake answer lists: the user mechanisms first, then the credential."""
        users = list(self.sasl.mechanisms) if self.sasl is not None else []
        return users + self.cluster.mechanisms

    def admits(self, api_key: int) -> bool:
        """Whether a request other than SaslHandshake / SaslAuthenticate may be served now."""
        return self.sasl is None or self.authenticated or api_key == ApiKey.API_VERSIONS

    def max_frame_bytes(self) -> int | None:
        """sasl.server.max.receive.size until a SASL listener's connection has authenticated."""
        if self.sasl is None or self.authenticated:
            return None
        return self.sasl.max_receive_size

    def handshake(self, mechanism: str) -> SaslReply:
        sasl = self.sasl
        if self._chosen is None and sasl is not None and mechanism in sasl.mechanisms:
            self.user = SaslServerAuthenticator(
                sasl.mechanisms, sasl.plain_users, sasl.scram_credentials, peer=self.peer
            )
            self._chosen = mechanism
            return self.user.handshake(mechanism)
        if self._chosen is None or self._chosen == auth.MECHANISM:
            code = self.cluster.handshake(mechanism)
            if code is ErrorCode.NONE:
                self._chosen = auth.MECHANISM
            elif code is ErrorCode.UNSUPPORTED_SASL_MECHANISM:
                return SaslReply(code, f"Unsupported SASL mechanism {mechanism}")
            return SaslReply(code)
        assert self.user is not None, self._chosen
        return self.user.handshake(mechanism)

    def authenticate(self, auth_bytes: bytes) -> SaslReply:
        user = self.user
        if user is not None:
            reply = user.authenticate(auth_bytes)
            if user.authenticated:
                _log.debug("%s authenticated as %s", self.peer, self.principal)
            return reply
        code, answer = self.cluster.authenticate(auth_bytes)
        if code is ErrorCode.NONE:
            return SaslReply(auth_bytes=answer)
        _log.warning("cluster credential rejected for %s: %s", self.peer, code.name)
        message = f"{auth.MECHANISM} exchange failed ({code.name}); open a new connection"
        return SaslReply(code, message)
