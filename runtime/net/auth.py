"""Cluster-credential authentication: a mutual HMAC-SHA256 challenge/response (sans-IO).

Control-plane requests (LeaderAndIsr, AlterPartition, broker registration, ...) are accepted only
on a connection that has proven knowledge of the cluster secret (`<data-dir>/cluster.secret`).
The proof travels in Kafka's SASL envelope: one SaslHandshake (API 17) naming the mechanism
`KETCH-HMAC-SHA256`, then two SaslAuthenticate (API 36) rounds whose `auth_bytes` are::

    round 1  client -> server  client_nonce   32 random bytes
             server -> client  server_nonce   32 random bytes
    round 2  client -> server  client_proof   32 bytes = HMAC-SHA256(K, "client" label | cn | sn)
             server -> client  server_proof   32 bytes = HMAC-SHA256(K, "server" label | cn | sn)

    K = HMAC-SHA256(secret, "ketch cluster credential v1")

Why this shape:

* Both sides prove: the server's proof lets a broker know it is talking to its real controller
  (and vice versa) before it believes any control request, not only the other way round.
* Both nonces enter both proofs, so neither a recorded client proof nor a recorded server proof
  is any use on another connection (each side picks a fresh nonce per connection).
* The labels differ, so a server proof can never be replayed back as a client proof (reflection).
* The secret itself never crosses the wire and never keys anything but the derivation of K.
* Proofs are compared with `hmac.compare_digest` (constant time), never `==`.

The state machines of both ends live here as transition tables; `runtime.net.server` feeds the
server side with the bodies of SaslHandshake/SaslAuthenticate, and the client calls
`ClientAuthenticator` (or the bare `client_proof` / `verify_server_proof` functions).
A server end that saw a wrong proof or an out-of-order message stays failed: a connection gets
one attempt, so guessing costs a connection per try.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable

from wire.errors import ErrorCode

MECHANISM = "KETCH-HMAC-SHA256"
NONCE_BYTES = 32
PROOF_BYTES = hashlib.sha256().digest_size
MIN_SECRET_BYTES = 16
"""A shorter secret is refused: 128 bits is the least that makes guessing pointless."""

_KEY_LABEL = b"ketch cluster credential v1"
_CLIENT_LABEL = b"KETCH-HMAC-SHA256 client proof\x00"
_SERVER_LABEL = b"KETCH-HMAC-SHA256 server proof\x00"

NonceFactory = Callable[[int], bytes]


class AuthenticationError(Exception):
    """The peer failed to prove the cluster credential, or broke the exchange's order."""


def derive_key(secret: bytes) -> bytes:
    """K, the HMAC key both proofs use, from the configured cluster secret."""
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"cluster secret must have at least {MIN_SECRET_BYTES} bytes")
    return hmac.new(secret, _KEY_LABEL, hashlib.sha256).digest()


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def _proof(label: bytes, key: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    if len(client_nonce) != NONCE_BYTES or len(server_nonce) != NONCE_BYTES:
        raise AuthenticationError(f"nonces must be {NONCE_BYTES} bytes")
    return hmac.new(key, label + client_nonce + server_nonce, hashlib.sha256).digest()


def client_proof(key: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    """The client's round-2 message. `key` is `derive_key(secret)`."""
    return _proof(_CLIENT_LABEL, key, client_nonce, server_nonce)


def server_proof(key: bytes, client_nonce: bytes, server_nonce: bytes) -> bytes:
    """The server's round-2 reply. `key` is `derive_key(secret)`."""
    return _proof(_SERVER_LABEL, key, client_nonce, server_nonce)


def verify_client_proof(key: bytes, client_nonce: bytes, server_nonce: bytes, proof: bytes) -> bool:
    return hmac.compare_digest(client_proof(key, client_nonce, server_nonce), proof)


def verify_server_proof(key: bytes, client_nonce: bytes, server_nonce: bytes, proof: bytes) -> bool:
    return hmac.compare_digest(server_proof(key, client_nonce, server_nonce), proof)


class ServerState(enum.Enum):
    AWAIT_HANDSHAKE = "await_handshake"
    AWAIT_CLIENT_NONCE = "await_client_nonce"
    AWAIT_CLIENT_PROOF = "await_client_proof"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class _Event(enum.Enum):
    HANDSHAKE = "SaslHandshake"
    AUTHENTICATE = "SaslAuthenticate"


# Which message each state accepts and where it leads on success. Anything absent is
# ILLEGAL_SASL_STATE and fails the connection's authentication for good.
_SERVER_TRANSITIONS: dict[tuple[ServerState, _Event], ServerState] = {
    (ServerState.AWAIT_HANDSHAKE, _Event.HANDSHAKE): ServerState.AWAIT_CLIENT_NONCE,
    (ServerState.AWAIT_CLIENT_NONCE, _Event.AUTHENTICATE): ServerState.AWAIT_CLIENT_PROOF,
    (ServerState.AWAIT_CLIENT_PROOF, _Event.AUTHENTICATE): ServerState.AUTHENTICATED,
}


class ServerAuthenticator:
    """The server end of one connection's exchange. `secret=None`: no credential can succeed."""

    __slots__ = ("_client_nonce", "_key", "_new_nonce", "_server_nonce", "state")

    def __init__(self, secret: bytes | None, *, nonce_factory: NonceFactory | None = None) -> None:
        self._key = derive_key(secret) if secret is not None else None
        self._new_nonce: NonceFactory = nonce_factory or secrets.token_bytes
        self._client_nonce = b""
        self._server_nonce = b""
        self.state = ServerState.AWAIT_HANDSHAKE

    @property
    def authenticated(self) -> bool:
        return self.state is ServerState.AUTHENTICATED

    @property
    def mechanisms(self) -> list[str]:
        return [MECHANISM] if self._key is not None else []

    def _advance(self, event: _Event) -> ServerState | None:
        target = _SERVER_TRANSITIONS.get((self.state, event))
        if target is None:
            self.state = ServerState.FAILED
        return target

    def handshake(self, mechanism: str) -> ErrorCode:
        """Answer a SaslHandshake; the response also lists `mechanisms`."""
        if self.state is ServerState.AWAIT_HANDSHAKE and mechanism not in self.mechanisms:
            # Kafka lets the client pick again after an unsupported mechanism.
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        target = self._advance(_Event.HANDSHAKE)
        if target is None:
            return ErrorCode.ILLEGAL_SASL_STATE
        self.state = target
        return ErrorCode.NONE

    def authenticate(self, auth_bytes: bytes) -> tuple[ErrorCode, bytes]:
        """Answer a SaslAuthenticate: (error code, auth_bytes of the response)."""
        target = self._advance(_Event.AUTHENTICATE)
        if target is None:
            return ErrorCode.ILLEGAL_SASL_STATE, b""
        assert self._key is not None, "handshake cannot succeed without a secret"
        if target is ServerState.AWAIT_CLIENT_PROOF:
            if len(auth_bytes) != NONCE_BYTES:
                self.state = ServerState.FAILED
                return ErrorCode.SASL_AUTHENTICATION_FAILED, b""
            self._client_nonce = bytes(auth_bytes)
            self._server_nonce = self._new_nonce(NONCE_BYTES)
            assert len(self._server_nonce) == NONCE_BYTES
            self.state = target
            return ErrorCode.NONE, self._server_nonce
        if not verify_client_proof(self._key, self._client_nonce, self._server_nonce, auth_bytes):
            self.state = ServerState.FAILED
            return ErrorCode.SASL_AUTHENTICATION_FAILED, b""
        self.state = target
        return ErrorCode.NONE, server_proof(self._key, self._client_nonce, self._server_nonce)


class ClientState(enum.Enum):
    START = "start"
    SENT_NONCE = "sent_nonce"
    SENT_PROOF = "sent_proof"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


class ClientAuthenticator:
    """The client end: produces the two SaslAuthenticate payloads and checks the server's proof.

    Use: send SaslHandshake(mechanism=MECHANISM); then SaslAuthenticate(auth_bytes=
    `first_message()`); pass the reply's auth_bytes to `on_challenge()` and send what it returns;
    pass the final reply's auth_bytes to `on_server_proof()`, which raises AuthenticationError
    unless the server proved the secret too.
    """

    __slots__ = ("_client_nonce", "_key", "_new_nonce", "_server_nonce", "state")

    def __init__(self, secret: bytes, *, nonce_factory: NonceFactory | None = None) -> None:
        self._key = derive_key(secret)
        self._new_nonce: NonceFactory = nonce_factory or secrets.token_bytes
        self._client_nonce = b""
        self._server_nonce = b""
        self.state = ClientState.START

    def _expect(self, state: ClientState) -> None:
        if self.state is not state:
            actual = self.state
            self.state = ClientState.FAILED
            raise AuthenticationError(f"expected state {state.value}, in {actual.value}")

    def first_message(self) -> bytes:
        self._expect(ClientState.START)
        self._client_nonce = self._new_nonce(NONCE_BYTES)
        assert len(self._client_nonce) == NONCE_BYTES
        self.state = ClientState.SENT_NONCE
        return self._client_nonce

    def on_challenge(self, server_nonce: bytes) -> bytes:
        self._expect(ClientState.SENT_NONCE)
        if len(server_nonce) != NONCE_BYTES:
            self.state = ClientState.FAILED
            raise AuthenticationError(f"server nonce of {len(server_nonce)} bytes")
        self._server_nonce = bytes(server_nonce)
        self.state = ClientState.SENT_PROOF
        return client_proof(self._key, self._client_nonce, self._server_nonce)

    def on_server_proof(self, proof: bytes) -> None:
        self._expect(ClientState.SENT_PROOF)
        if not verify_server_proof(self._key, self._client_nonce, self._server_nonce, proof):
            self.state = ClientState.FAILED
            raise AuthenticationError("the server did not prove the cluster credential")
        self.state = ClientState.AUTHENTICATED

    @property
    def authenticated(self) -> bool:
        return self.state is ClientState.AUTHENTICATED
