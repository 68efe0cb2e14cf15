"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka implements them (sans-IO).

The derivations, for a mechanism's hash H (SHA-256 or SHA-512)::

    SaltedPassword  = PBKDF2-HMAC-H(password, salt, iterations)      (RFC 5802's Hi())
    ClientKey       = HMAC(SaltedPassword, "Client Key")
    StoredKey       = H(ClientKey)
    ServerKey       = HMAC(SaltedPassword, "Server Key")
    AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
    ClientProof     = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

A server keeps only `ScramCredential` (salt, StoredKey, ServerKey, iterations), never the
password nor the salted password: StoredKey checks a proof, ServerKey signs the final message,
and neither lets anyone build a proof. The exchange (two SaslAuthenticate rounds in Kafka)::

    client-first   n,,n=<saslname>,r=<client nonce>          (gs2 header "n,,": no channel binding)
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<base64 ClientProof>       (biws = base64("n,,"))
    server-final   v=<base64 ServerSignature>

As Kafka's ScramSaslServer: names are not SASLprep'ed, only `=2C` / `=3D` are unescaped to `,`
/ `=`; channel binding is refused (only `n`); an authorization id, if given, must be the user
name; the `tokenauth` extension (delegation tokens) is refused, other extensions are ignored; a
server nonce is fresh per exchange and the client's final nonce must be exactly both nonces.
A user the server does not know is not revealed as unknown: the exchange goes on with a salt
derived from the name and a server secret (stable for that name, so two tries see the same
salt) and fails at the proof, with the same message a wrong password gets (RFC 5802 section
9's advice; Kafka fails at the first message with the same message text).

`ScramServer` is one exchange's server end as a transition table; `ScramClient` the client end
(the tests' and any ketch client's). `salted_password` and `credential` are what `ketch user
create` computes (as Kafka's kafka-configs does: the client salts, the controller derives the
keys). Nothing here touches a socket or a clock.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

MIN_ITERATIONS: Final = 4096
"""Kafka's ScramMechanism minimum (RFC 7677's recommendation for SHA-256)."""
MAX_ITERATIONS: Final = 16384
"""Kafka's ScramMechanism maximum: AlterUserScramCredentials refuses more."""
DEFAULT_ITERATIONS: Final = 4096
SALT_BYTES: Final = 32  # what kafka-configs generates (a 256-bit random salt)
_GS2_HEADER: Final = "n,,"


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """A SCRAM mechanism: its SASL name, hash, and Kafka's type code (AlterUserScramCredentials
    and DescribeUserScramCredentials name mechanisms by this int8)."""

    name: str
    hash_name: str
    type_code: int

    def hmac(self, key: bytes, message: bytes) -> bytes:
        return hmac.new(key, message, self.hash_name).digest()

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size


SCRAM_SHA_256: Final = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512: Final = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS: Final = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MECHANISMS_BY_TYPE: Final = {m.type_code: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps for one user and mechanism (Kafka's ScramCredential)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def salted_password(
    mechanism: ScramMechanism, password: bytes, salt: bytes, iterations: int
) -> bytes:
    """Hi(password, salt, i): PBKDF2 with the mechanism's HMAC, one hash length of output."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password, salt, iterations)


def credential(
    mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int
) -> ScramCredential:
    """The stored credential from a salted password (what the controller derives)."""
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(
        salt=salt,
        stored_key=mechanism.digest(client_key),
        server_key=mechanism.hmac(salted, b"Server Key"),
        iterations=iterations,
    )


def escape_name(name: str) -> str:
    """A user name as a SCRAM saslname (`=` and `,` escaped)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_name(saslname: str) -> str:
    """The inverse of `escape_name`; ScramError for a `=` not starting `=2C` / `=3D`."""
    out: list[str] = []
    index = 0
    while index < len(saslname):
        char = saslname[index]
        if char == "=":
            code = saslname[index : index + 3]
            if code not in ("=2C", "=3D"):
                raise ScramError(f"invalid escape in user name: {saslname!r}")
            out.append("," if code == "=2C" else "=")
            index += 3
        else:
            out.append(char)
            index += 1
    return "".join(out)


class ScramError(Exception):
    """The exchange failed; the message is for the server's log, never for the client."""


def _attributes(message: str, expected: str) -> dict[str, str]:
    """`a=...,b=...` in the order given by `expected` (one letter per attribute, `*` for
    trailing extensions); ScramError unless the message has exactly that shape."""
    parts = message.split(",")
    values: dict[str, str] = {}
    for index, letter in enumerate(expected):
        if index >= len(parts):
            raise ScramError(f"expected attribute {letter!r}, message ended: {message!r}")
        key, sep, value = parts[index].partition("=")
        if key != letter or not sep:
            raise ScramError(f"expected attribute {letter!r}, got {parts[index]!r}")
        values[letter] = value
    return values


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ScramError(f"{what} is not base64") from None


def _valid_nonce(nonce: str) -> bool:
    # RFC 5802: printable ASCII except ','.
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


def new_nonce() -> str:
    """A fresh nonce of printable characters (192 random bits; Kafka uses 130)."""
    return secrets.token_urlsafe(24)


class ServerState(enum.Enum):
    AWAIT_CLIENT_FIRST = "await_client_first"
    AWAIT_CLIENT_FINAL = "await_client_final"
    COMPLETE = "complete"
    FAILED = "failed"


# Which state each message moves to on success; a message in any other state fails the exchange.
_SERVER_TRANSITIONS: Final = {
    ServerState.AWAIT_CLIENT_FIRST: ServerState.AWAIT_CLIENT_FINAL,
    ServerState.AWAIT_CLIENT_FINAL: ServerState.COMPLETE,
}

CredentialLookup = Callable[[str], ScramCredential | None]
"""user name -> that user's credential for the exchange's mechanism, None when unknown."""


class ScramServer:
    """The server end of one SCRAM exchange: `evaluate(client message) -> server message`.

    `evaluate` raises ScramError (and the exchange stays FAILED) for a malformed message, a
    message out of order, a wrong nonce or a wrong proof. `user` is the authenticated name once
    `state` is COMPLETE. `fake_salt_key` keys the salt shown for unknown users (a per-process
    random secret by default, so the salt is stable for a name while the process lives).
    """

    __slots__ = (
        "_auth_prefix",
        "_credential",
        "_fake_salt_key",
        "_lookup",
        "_nonce",
        "_server_nonce",
        "mechanism",
        "state",
        "user",
    )

    def __init__(
        self,
        mechanism: ScramMechanism,
        lookup: CredentialLookup,
        *,
        server_nonce: Callable[[], str] = new_nonce,
        fake_salt_key: bytes | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._server_nonce = server_nonce
        self._fake_salt_key = fake_salt_key if fake_salt_key is not None else _PROCESS_SALT_KEY
        self.state = ServerState.AWAIT_CLIENT_FIRST
        self.user = ""
        self._credential: ScramCredential | None = None
        self._nonce = ""
        self._auth_prefix = ""

    @property
    def complete(self) -> bool:
        return self.state is ServerState.COMPLETE

    def evaluate(self, message: bytes) -> bytes:
        target = _SERVER_TRANSITIONS.get(self.state)
        if target is None:
            state, self.state = self.state, ServerState.FAILED
            raise ScramError(f"unexpected SCRAM message in state {state.value}")
        try:
            text = bytes(message).decode("utf-8")
            if target is ServerState.AWAIT_CLIENT_FINAL:
                answer = self._client_first(text)
            else:
                answer = self._client_final(text)
        except (ScramError, UnicodeDecodeError) as exc:
            self.state = ServerState.FAILED
            raise ScramError(str(exc)) from None
        self.state = target
        return answer.encode("utf-8")

    def _client_first(self, text: str) -> str:
        cbind, _, rest = text.partition(",")
        authzid, sep, bare = rest.partition(",")
        if cbind != "n" or not sep:
            raise ScramError("only gs2 header 'n' (no channel binding) is supported")
        if authzid and not authzid.startswith("a="):
            raise ScramError(f"malformed authorization id: {authzid!r}")
        values = _attributes(bare, "nr")
        user = unescape_name(values["n"])
        nonce = values["r"]
        extensions = bare.split(",")[2:]
        if not user or not _valid_nonce(nonce):
            raise ScramError("empty user name or invalid client nonce")
        if any("=" not in extension[1:] for extension in extensions):
            raise ScramError(f"malformed extensions in {bare!r}")
        if authzid and unescape_name(authzid[2:]) != user:
            raise ScramError("authorization id is not the user name")
        if "tokenauth=true" in extensions:
            raise ScramError("delegation tokens are not supported")
        self.user = user
        self._credential = self._lookup(user)
        salt, iterations = self._salt_and_iterations(user)
        self._nonce = nonce + self._server_nonce()
        server_first = f"r={self._nonce},s={base64.b64encode(salt).decode()},i={iterations}"
        self._auth_prefix = f"{bare},{server_first}"
        return server_first

    def _salt_and_iterations(self, user: str) -> tuple[bytes, int]:
        if self._credential is not None:
            return self._credential.salt, self._credential.iterations
        # Unknown user: a salt stable for the name, so probing cannot tell it from a real one.
        salt = hmac.new(self._fake_salt_key, user.encode(), hashlib.sha256).digest()
        return salt, DEFAULT_ITERATIONS

    def _client_final(self, text: str) -> str:
        without_proof, sep, proof_attr = text.rpartition(",p=")
        if not sep:
            raise ScramError("client-final message has no proof")
        values = _attributes(without_proof, "cr")
        if _b64decode(values["c"], "channel binding") != _GS2_HEADER.encode():
            raise ScramError("channel binding does not match the gs2 header")
        if values["r"] != self._nonce:
            raise ScramError("invalid client nonce in the final client message")
        proof = _b64decode(proof_attr, "client proof")
        auth_message = f"{self._auth_prefix},{without_proof}".encode()
        stored = self._credential
        mechanism = self.mechanism
        if stored is None:
            raise ScramError(f"unknown user {self.user!r}")
        if len(proof) != mechanism.digest_size:
            raise ScramError("client proof has the wrong length")
        signature = mechanism.hmac(stored.stored_key, auth_message)
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(mechanism.digest(client_key), stored.stored_key):
            raise ScramError("invalid client proof")
        server_signature = mechanism.hmac(stored.server_key, auth_message)
        return f"v={base64.b64encode(server_signature).decode()}"


_PROCESS_SALT_KEY: Final = secrets.token_bytes(32)


class ScramClient:
    """The client end of one exchange: `first_message()`, `final_message(server_first)`,
    `verify(server_final)` (ScramError unless the server proved it holds the ServerKey)."""

    __slots__ = ("_auth_message", "_nonce", "_password", "_server_key", "_user", "mechanism")

    def __init__(
        self, mechanism: ScramMechanism, user: str, password: str, *, nonce: str | None = None
    ) -> None:
        self.mechanism = mechanism
        self._user = user
        self._password = password.encode("utf-8")
        self._nonce = nonce if nonce is not None else new_nonce()
        self._auth_message = b""
        self._server_key = b""

    def first_message(self) -> bytes:
        return f"{_GS2_HEADER}{self._bare()}".encode()

    def _bare(self) -> str:
        return f"n={escape_name(self._user)},r={self._nonce}"

    def final_message(self, server_first: bytes) -> bytes:
        text = server_first.decode()
        values = _attributes(text, "rsi")
        if not values["r"].startswith(self._nonce) or len(values["r"]) == len(self._nonce):
            raise ScramError("server nonce does not extend the client's")
        salt = _b64decode(values["s"], "salt")
        iterations = int(values["i"])
        if iterations < MIN_ITERATIONS:
            raise ScramError(f"{iterations} iterations is fewer than {MIN_ITERATIONS}")
        mechanism = self.mechanism
        salted = salted_password(mechanism, self._password, salt, iterations)
        client_key = mechanism.hmac(salted, b"Client Key")
        channel = base64.b64encode(_GS2_HEADER.encode()).decode()
        without_proof = f"c={channel},r={values['r']}"
        self._auth_message = f"{self._bare()},{text},{without_proof}".encode()
        signature = mechanism.hmac(mechanism.digest(client_key), self._auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_key = mechanism.hmac(salted, b"Server Key")
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        values = _attributes(server_final.decode(), "v")
        expected = self.mechanism.hmac(self._server_key, self._auth_message)
        if not hmac.compare_digest(_b64decode(values["v"], "server signature"), expected):
            raise ScramError("the server's signature is wrong")
