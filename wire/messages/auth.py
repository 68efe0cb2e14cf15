"""Connection authentication, version 0 of ketch's native protocol: SaslHandshake (17) and
SaslAuthenticate (36), shaped as Kafka's.

A client first names a mechanism with SaslHandshake; the broker answers with the mechanisms it
offers (UNSUPPORTED_SASL_MECHANISM if the named one is not among them). Then one or more
SaslAuthenticate round trips carry the mechanism's opaque bytes: for ketch's cluster credential,
a challenge and an HMAC over it (defined by runtime/net, not here). A failed exchange is answered
SASL_AUTHENTICATION_FAILED with a message.
"""

# No `from __future__ import annotations`: the codec reads each field's type at class creation.

from dataclasses import dataclass, field

from wire.messages.base import ApiKey, Request, Response

# -- SaslHandshake (17) ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslHandshakeResponse(Response):
    API_KEY = ApiKey.SASL_HANDSHAKE
    API_VERSION = 0
    mechanisms: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslHandshakeRequest(Request):
    API_KEY = ApiKey.SASL_HANDSHAKE
    API_VERSION = 0
    RESPONSE = SaslHandshakeResponse
    mechanism: str


# -- SaslAuthenticate (36) -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslAuthenticateResponse(Response):
    """session_lifetime_ms: 0 when the session does not expire."""

    API_KEY = ApiKey.SASL_AUTHENTICATE
    API_VERSION = 0
    error_message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class SaslAuthenticateRequest(Request):
    API_KEY = ApiKey.SASL_AUTHENTICATE
    API_VERSION = 0
    RESPONSE = SaslAuthenticateResponse
    auth_bytes: bytes
