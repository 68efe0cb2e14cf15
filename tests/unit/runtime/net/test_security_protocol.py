"""listener.security.protocol.map: parsing, defaults, and refusals that name the bad entry."""

from __future__ import annotations

import pytest

from runtime.net.security_protocol import (
    SecurityProtocol,
    format_security_protocol_map,
    parse_security_protocol_map,
    protocol_of,
)


def test_parses_names_case_insensitively_and_round_trips() -> None:
    protocols = parse_security_protocol_map("NATIVE:SSL, kafka:sasl_ssl")
    assert protocols == {"native": SecurityProtocol.SSL, "kafka": SecurityProtocol.SASL_SSL}
    assert parse_security_protocol_map(format_security_protocol_map(protocols)) == protocols


def test_a_listener_left_out_speaks_plaintext() -> None:
    protocols = parse_security_protocol_map("kafka:SASL_PLAINTEXT")
    assert protocol_of(protocols, "Native") is SecurityProtocol.PLAINTEXT
    assert protocol_of(protocols, "KAFKA") is SecurityProtocol.SASL_PLAINTEXT
    assert parse_security_protocol_map("") == {}


def test_tls_and_sasl_flags() -> None:
    flags = {p: (p.uses_tls, p.uses_sasl) for p in SecurityProtocol}
    assert flags == {
        SecurityProtocol.PLAINTEXT: (False, False),
        SecurityProtocol.SSL: (True, False),
        SecurityProtocol.SASL_PLAINTEXT: (False, True),
        SecurityProtocol.SASL_SSL: (True, True),
    }


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("kafka", "expected NAME:PROTOCOL"),
        (":SSL", "expected NAME:PROTOCOL"),
        ("kafka:TLS", "kafka: unknown protocol 'TLS'"),
        ("kafka:SSL,KAFKA:PLAINTEXT", "kafka named twice"),
    ],
)
def test_refusals_name_the_entry(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=r"listener\.security\.protocol\.map") as caught:
        parse_security_protocol_map(text)
    assert reason in str(caught.value)
