"""SASL login of ketch's client as a user: PLAIN and SCRAM-SHA-256/512 on the native listener.

    config = SaslClientConfig.from_properties({
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice", "sasl.password": "alice-secret",
    })
    client = Client(bootstrap, ..., authenticator=sasl_authenticator(config))

Properties (Kafka's client names; librdkafka's `sasl.username` / `sasl.password`, or the Java
client's `sasl.jaas.config` with a PlainLoginModule / ScramLoginModule entry naming `username`
and `password`):

    security.protocol   SASL_PLAINTEXT or SASL_SSL log in; PLAINTEXT / SSL do not (then None)
    sasl.mechanism      PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's default is GSSAPI, which
                        ketch does not have: ketch's is SCRAM-SHA-256, as the broker's)

The exchange on each fresh connection (`BrokerConnection` runs it before any queued request):
SaslHandshake naming the mechanism, then SaslAuthenticate rounds, as Kafka's framed SASL (the
same messages the cluster credential uses, runtime/net/auth.py):

    PLAIN          one round: `NUL user NUL password` (RFC 4616)
    SCRAM-SHA-*    client-first -> server-first, client-final -> server-final, whose signature
                   is checked (runtime/net/scram.py's `ScramClient`): the broker proves it holds
                   the user's ServerKey, not only that it let the client in

A refusal raises `client.errors.SaslAuthenticationError` with the broker's message (not
retriable: the same password fails again). The config is immutable and holds the password only
in memory; `repr` leaves it out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from client.connection import Authenticator, RawSender
from client.errors import SaslAuthenticationError
from runtime.net.sasl_config import PLAIN, PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, parse_jaas_config
from runtime.net.scram import MECHANISMS as SCRAM_MECHANISMS
from runtime.net.scram import ScramClient, ScramError
from runtime.net.security_protocol import SecurityProtocol
from wire.errors import ErrorCode
from wire.messages import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from wire.messages.base import Request

SECURITY_PROTOCOL_KEY: Final = "security.protocol"
SASL_MECHANISM_KEY: Final = "sasl.mechanism"
SASL_USERNAME_KEY: Final = "sasl.username"
SASL_PASSWORD_KEY: Final = "sasl.password"
SASL_JAAS_CONFIG_KEY: Final = "sasl.jaas.config"
DEFAULT_MECHANISM: Final = "SCRAM-SHA-256"
CLIENT_MECHANISMS: Final = (PLAIN, *SCRAM_MECHANISMS)


@dataclass(frozen=True, slots=True)
class SaslClientConfig:
    """Who the client logs in as, and how."""

    mechanism: str
    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if self.mechanism not in CLIENT_MECHANISMS:
            known = ", ".join(CLIENT_MECHANISMS)
            raise ValueError(
                f"{SASL_MECHANISM_KEY}: unsupported mechanism {self.mechanism} (ketch has {known})"
            )
        if not self.username:
            raise ValueError(f"{SASL_USERNAME_KEY} (or sasl.jaas.config's username) is required")
        if not self.password:
            raise ValueError(f"{SASL_PASSWORD_KEY} (or sasl.jaas.config's password) is required")

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> SaslClientConfig | None:
        """The login `security.protocol` asks for, or None (PLAINTEXT / SSL); ValueError naming
        the property at fault."""
        raw = str(properties.get(SECURITY_PROTOCOL_KEY, "PLAINTEXT") or "PLAINTEXT")
        try:
            protocol = SecurityProtocol(raw.strip().upper())
        except ValueError:
            known = ", ".join(p.value for p in SecurityProtocol)
            message = f"{SECURITY_PROTOCOL_KEY}: unknown protocol {raw!r} ({known})"
            raise ValueError(message) from None
        if not protocol.uses_sasl:
            return None
        mechanism = str(properties.get(SASL_MECHANISM_KEY, DEFAULT_MECHANISM)).strip().upper()
        username = str(properties.get(SASL_USERNAME_KEY, "") or "")
        password = str(properties.get(SASL_PASSWORD_KEY, "") or "")
        jaas = str(properties.get(SASL_JAAS_CONFIG_KEY, "") or "")
        if jaas and not (username or password):
            username, password = _jaas_login(jaas, mechanism)
        return cls(mechanism, username, password)


def _jaas_login(text: str, mechanism: str) -> tuple[str, str]:
    """`username` and `password` of the JAAS entry that fits `mechanism`."""
    module = PLAIN_LOGIN_MODULE if mechanism == PLAIN else SCRAM_LOGIN_MODULE
    options = parse_jaas_config(text).get(module)
    if options is None:
        raise ValueError(f"{SASL_JAAS_CONFIG_KEY}: {mechanism} needs a {module} entry")
    return options.get("username", ""), options.get("password", "")


def sasl_authenticator(config: SaslClientConfig) -> Authenticator:
    """Log in as `config` on a fresh connection (the module docstring's exchange)."""

    async def authenticate(sender: RawSender) -> None:
        handshake = await _raw(sender, SaslHandshakeRequest(mechanism=config.mechanism))
        assert isinstance(handshake, SaslHandshakeResponse)
        if handshake.error_code != ErrorCode.NONE:
            name = ErrorCode.from_code(handshake.error_code).name
            offered = ", ".join(handshake.mechanisms) or "none"
            raise SaslAuthenticationError(
                f"SASL mechanism {config.mechanism} refused ({name}); the broker offers {offered}"
            )
        if config.mechanism == PLAIN:
            token = b"\x00" + config.username.encode() + b"\x00" + config.password.encode()
            await _round(sender, token)
            return
        scram = ScramClient(SCRAM_MECHANISMS[config.mechanism], config.username, config.password)
        try:
            server_first = await _round(sender, scram.first_message())
            server_final = await _round(sender, scram.final_message(server_first))
            scram.verify(server_final)
        except (ScramError, ValueError, KeyError) as exc:
            # A server message that does not parse, or a wrong server signature.
            raise SaslAuthenticationError(f"{config.mechanism} exchange failed: {exc}") from exc

    return authenticate


async def _round(sender: RawSender, token: bytes) -> bytes:
    response = await _raw(sender, SaslAuthenticateRequest(auth_bytes=token))
    assert isinstance(response, SaslAuthenticateResponse)
    if response.error_code != ErrorCode.NONE:
        name = ErrorCode.from_code(response.error_code).name
        detail = response.error_message or name
        raise SaslAuthenticationError(f"{detail} ({name})")
    return bytes(response.auth_bytes)


async def _raw(sender: RawSender, request: Request) -> Any:
    return await sender.request(
        request.API_KEY, request.API_VERSION, request.to_body(), request.RESPONSE.from_body
    )
