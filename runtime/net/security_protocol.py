"""Which security protocol each listener speaks: Kafka's `listener.security.protocol.map`.

Kafka names four protocols, by whether a connection is wrapped in TLS and whether it must
authenticate with SASL before any other request:

    PLAINTEXT        neither (the default for every listener)
    SSL              TLS; the principal is the client certificate's subject when the
                     listener asks for one (ssl.client.auth), else ANONYMOUS
    SASL_PLAINTEXT   SASL, no TLS (PLAIN's password then crosses the wire in the clear)
    SASL_SSL         TLS, then SASL

The map names listeners as `listeners` does (`NAME:PROTOCOL,...`, names case-insensitive);
a listener the map leaves out speaks PLAINTEXT, so a cluster without the property behaves as
before. This module only parses and answers questions; the transports (runtime/net/tcp.py)
and the dialects act on the answers.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

LISTENER_SECURITY_PROTOCOL_MAP_KEY: Final = "listener.security.protocol.map"

ANONYMOUS_PRINCIPAL: Final = "User:ANONYMOUS"
"""Kafka's principal for a connection that did not authenticate."""


class SecurityProtocol(enum.Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


def parse_security_protocol_map(
    text: str, *, key: str = LISTENER_SECURITY_PROTOCOL_MAP_KEY
) -> dict[str, SecurityProtocol]:
    """`NAME:PROTOCOL,...` -> {name: protocol}; ValueError naming `key` and the bad entry."""
    protocols: dict[str, SecurityProtocol] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, value = part.partition(":")
        name = name.strip().lower()
        if not sep or not name:
            raise ValueError(f"{key}: expected NAME:PROTOCOL, got {part!r}")
        if name in protocols:
            raise ValueError(f"{key}: {name} named twice")
        try:
            protocols[name] = SecurityProtocol(value.strip().upper())
        except ValueError:
            known = ", ".join(p.value for p in SecurityProtocol)
            problem = f"{key}: {name}: unknown protocol {value!r} (one of {known})"
            raise ValueError(problem) from None
    return protocols


def format_security_protocol_map(protocols: Mapping[str, SecurityProtocol]) -> str:
    """The inverse of `parse_security_protocol_map` (names in the map's order)."""
    return ",".join(f"{name}:{protocol.value}" for name, protocol in protocols.items())


def protocol_of(protocols: Mapping[str, SecurityProtocol], listener: str) -> SecurityProtocol:
    """The protocol `listener` speaks: its entry in the map, else PLAINTEXT."""
    return protocols.get(listener.lower(), SecurityProtocol.PLAINTEXT)
