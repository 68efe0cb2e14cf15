"""SASL on the Kafka listener: one connection's authentication, as Kafka's SaslServerAuthenticator.

On a listener whose security protocol is SASL_PLAINTEXT or SASL_SSL, a connection must
authenticate before anything else. The states and what each accepts (the transition table
`_TRANSITIONS`; anything absent fails the connection, which is then closed, as Kafka closes it
with an IllegalSaslStateException)::

    AWAIT_HANDSHAKE     ApiVersions (answered, stays), SaslHandshake v1 -> AWAIT_AUTHENTICATE
    AWAIT_AUTHENTICATE  SaslAuthenticate -> AWAIT_AUTHENTICATE (a SCRAM round) or COMPLETE
    COMPLETE            every request; SaslHandshake / SaslAuthenticate answered
                        ILLEGAL_SASL_STATE (no re-authentication, KIP-368's default)
    FAILED              nothing (the connection closes once the failure is answered)

A mechanism not enabled is answered UNSUPPORTED_SASL_MECHANISM with the enabled list, then the
connection closes; a failed exchange is answered SASL_AUTHENTICATION_FAILED with Kafka's message
for it, then the connection closes. The mechanisms:

* PLAIN (RFC 4616): one token `authzid NUL user NUL password`; the users and passwords come from
  the JAAS config (runtime/net/sasl_config.py); the password is compared in constant time, also
  for an unknown user (against a dummy), so timing does not tell users apart.
* SCRAM-SHA-256 / SCRAM-SHA-512: two rounds of runtime/net/scram.py's `ScramServer`, with the
  credentials the controller keeps (`ScramCredentialSource`, the broker's copy of them).

SaslHandshake v0 (raw SASL tokens follow without Kafka framing) is refused: the connection is
closed with a log line saying so. Every client this project drives uses v1 (ApiVersions lists
v1 only).

Sans-IO: `runtime/net/kafka_dialect.py` feeds it the decoded SaslHandshake mechanism and
SaslAuthenticate bytes, and turns its `SaslReply` into Kafka responses. One object per
connection, touched only by that connection's reader.
"""

from __future__ import annotations

import enum
import hmac
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from runtime.net.sasl_config import PLAIN
from runtime.net.scram import MECHANISMS as SCRAM_MECHANISMS
from runtime.net.scram import ScramCredential, ScramError, ScramServer
from wire.errors import ErrorCode

_log = logging.getLogger(__name__)

PLAIN_FAILED: Final = "Authentication failed: Invalid username or password"
_DUMMY_PASSWORD: Final = b"\x00" * 32


def invalid_credentials(mechanism: str) -> str:
    """Kafka's message for a mechanism's failure that is not a plain password mismatch."""
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


class ScramCredentialSource(Protocol):
    """The SCRAM credentials a broker knows (the controller's, as UpdateMetadata brought them)."""

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None: ...


class SaslState(enum.Enum):
    AWAIT_HANDSHAKE = "await_handshake"
    AWAIT_AUTHENTICATE = "await_authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


class SaslEvent(enum.Enum):
    API_VERSIONS = "ApiVersions"
    HANDSHAKE = "SaslHandshake"
    AUTHENTICATE = "SaslAuthenticate"
    REQUEST = "request"  # any other API


# Where each accepted (state, event) leads; AUTHENTICATE's target is where a round that did not
# finish the exchange leaves it (a finishing round moves to COMPLETE).
_TRANSITIONS: Final[dict[tuple[SaslState, SaslEvent], SaslState]] = {
    (SaslState.AWAIT_HANDSHAKE, SaslEvent.API_VERSIONS): SaslState.AWAIT_HANDSHAKE,
    (SaslState.AWAIT_HANDSHAKE, SaslEvent.HANDSHAKE): SaslState.AWAIT_AUTHENTICATE,
    (SaslState.AWAIT_AUTHENTICATE, SaslEvent.AUTHENTICATE): SaslState.AWAIT_AUTHENTICATE,
    (SaslState.COMPLETE, SaslEvent.API_VERSIONS): SaslState.COMPLETE,
    (SaslState.COMPLETE, SaslEvent.REQUEST): SaslState.COMPLETE,
}


@dataclass(frozen=True, slots=True)
class SaslReply:
    """What to answer a SaslHandshake / SaslAuthenticate with, and whether to close after."""

    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    auth_bytes: bytes = b""
    close: bool = False


class SaslServerAuthenticator:
    """One connection's server end. `principal` is `User:NAME` once `state` is COMPLETE."""

    __slots__ = (
        "_mechanism",
        "_plain_users",
        "_scram",
        "_scram_server",
        "mechanisms",
        "peer",
        "principal",
        "state",
    )

    def __init__(
        self,
        mechanisms: Sequence[str],
        plain_users: Mapping[str, str],
        scram: ScramCredentialSource,
        *,
        peer: str = "",
    ) -> None:
        self.mechanisms = list(mechanisms)
        self._plain_users = plain_users
        self._scram = scram
        self.peer = peer
        self.state = SaslState.AWAIT_HANDSHAKE
        self.principal: str | None = None
        self._mechanism = ""
        self._scram_server: ScramServer | None = None

    @property
    def authenticated(self) -> bool:
        return self.state is SaslState.COMPLETE

    def accepts(self, event: SaslEvent) -> bool:
        """Whether `event` is legal now; if not, the connection has failed (and must close)."""
        if (self.state, event) in _TRANSITIONS:
            return True
        self.state = SaslState.FAILED
        return False

    def handshake(self, mechanism: str) -> SaslReply:
        if self.state is SaslState.COMPLETE:
            return SaslReply(ErrorCode.ILLEGAL_SASL_STATE, "Unexpected SaslHandshake request")
        if not self.accepts(SaslEvent.HANDSHAKE):
            return SaslReply(ErrorCode.ILLEGAL_SASL_STATE, close=True)
        if mechanism not in self.mechanisms:
            self.state = SaslState.FAILED
            message = f"Unsupported SASL mechanism {mechanism}"
            return SaslReply(ErrorCode.UNSUPPORTED_SASL_MECHANISM, message, close=True)
        self._mechanism = mechanism
        scram = SCRAM_MECHANISMS.get(mechanism)
        if scram is not None:
            source = self._scram
            self._scram_server = ScramServer(
                scram, lambda user: source.scram_credential(user, mechanism)
            )
        self.state = SaslState.AWAIT_AUTHENTICATE
        return SaslReply()

    def authenticate(self, token: bytes) -> SaslReply:
        if self.state is SaslState.COMPLETE:
            message = "SaslAuthenticate request received after successful authentication"
            return SaslReply(ErrorCode.ILLEGAL_SASL_STATE, message)
        if not self.accepts(SaslEvent.AUTHENTICATE):
            return SaslReply(ErrorCode.ILLEGAL_SASL_STATE, close=True)
        if self._mechanism == PLAIN:
            return self._plain(token)
        server = self._scram_server
        assert server is not None, self._mechanism
        try:
            answer = server.evaluate(token)
        except ScramError as exc:
            return self._failed(invalid_credentials(self._mechanism), str(exc), server.user)
        if server.complete:
            self._complete(server.user)
        return SaslReply(auth_bytes=answer)

    def _plain(self, token: bytes) -> SaslReply:
        parts = bytes(token).split(b"\x00")
        if len(parts) != 3:
            reason = f"expected 3 tokens, got {len(parts)}"
            return self._failed(invalid_credentials(PLAIN), reason, "")
        try:
            authzid, user, password = (part.decode("utf-8") for part in parts)
        except UnicodeDecodeError:
            return self._failed(invalid_credentials(PLAIN), "not UTF-8", "")
        if not user:
            return self._failed("Authentication failed: username not specified", "", user)
        if not password:
            return self._failed("Authentication failed: password not specified", "", user)
        if authzid and authzid != user:
            message = (
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
            return self._failed(message, "", user)
        expected = self._plain_users.get(user)
        # Compared in constant time even for an unknown user, against a dummy.
        known = expected is not None
        reference = expected.encode("utf-8") if expected is not None else _DUMMY_PASSWORD
        if not hmac.compare_digest(reference, password.encode("utf-8")) or not known:
            return self._failed(PLAIN_FAILED, "wrong password or unknown user", user)
        self._complete(user)
        return SaslReply()

    def _complete(self, user: str) -> None:
        self.state = SaslState.COMPLETE
        self.principal = f"User:{user}"

    def _failed(self, message: str, reason: str, user: str) -> SaslReply:
        self.state = SaslState.FAILED
        _log.info(
            "failed authentication from %s with %s (user %r): %s",
            self.peer,
            self._mechanism,
            user,
            reason or message,
        )
        return SaslReply(ErrorCode.SASL_AUTHENTICATION_FAILED, message, close=True)


class NoScramCredentials:
    """A source without any credential (a broker before its first UpdateMetadata, tests)."""

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return None


class ScramCredentialCache:
    """The broker's copy of the controller's SCRAM credentials: replaced whole by each
    UpdateMetadata that carries them. Owned by the broker's event loop (no lock)."""

    def __init__(self) -> None:
        self._credentials: dict[tuple[str, str], ScramCredential] = {}

    def scram_credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._credentials.get((user, mechanism))

    def replace(self, credentials: Mapping[tuple[str, str], ScramCredential]) -> None:
        self._credentials = dict(credentials)

    def items(self) -> list[tuple[tuple[str, str], ScramCredential]]:
        """Every credential by (user, mechanism name)."""
        return list(self._credentials.items())

    def __len__(self) -> int:
        return len(self._credentials)
