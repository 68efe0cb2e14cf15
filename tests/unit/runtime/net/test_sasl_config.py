"""Kafka's JAAS text for PLAIN's users and the SASL settings (runtime/net/sasl_config.py)."""

from __future__ import annotations

import pytest

from runtime.net.sasl_config import SaslConfig, parse_jaas_config, plain_users

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def test_plain_users_from_jaas() -> None:
    text = (
        f'{PLAIN} required username="admin" password="admin-secret"\n'
        '  user_admin="admin-secret" user_alice="a \\"quoted\\" secret" user_bob=bare;'
    )
    assert plain_users(text) == {
        "admin": "admin-secret",
        "alice": 'a "quoted" secret',
        "bob": "bare",
    }


def test_several_modules_and_other_modules_ignored() -> None:
    text = (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="s";'
        f' {PLAIN} required user_x="y";'
    )
    modules = parse_jaas_config(text)
    assert set(modules) == {"org.apache.kafka.common.security.scram.ScramLoginModule", PLAIN}
    assert plain_users(text) == {"x": "y"}


@pytest.mark.parametrize(
    "text",
    [
        f'{PLAIN} required user_x="y"',  # no ';'
        f'{PLAIN} mandatory user_x="y";',  # unknown flag
        f"{PLAIN} required user_x;",  # option without value
        f'{PLAIN} required user_x="unterminated;',
    ],
)
def test_malformed_jaas_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"sasl\.jaas\.config"):
        plain_users(text)


def test_listener_property_wins_over_the_global_one() -> None:
    config = SaslConfig.from_properties(
        {
            "sasl.jaas.config": f'{PLAIN} required user_global="g";',
            "listener.name.kafka.plain.sasl.jaas.config": f'{PLAIN} required user_own="o";',
        }
    )
    assert config.plain_users == {"own": "o"}
    fallback = SaslConfig.from_properties({"sasl.jaas.config": f'{PLAIN} required user_g="g";'})
    assert fallback.plain_users == {"g": "g"}


def test_mechanisms() -> None:
    assert SaslConfig().enabled_mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512")
    config = SaslConfig.from_properties({"sasl.enabled.mechanisms": "plain, SCRAM-SHA-512"})
    assert config.enabled_mechanisms == ("PLAIN", "SCRAM-SHA-512")
    with pytest.raises(ValueError, match="GSSAPI"):
        SaslConfig.from_properties({"sasl.enabled.mechanisms": "GSSAPI"})
    with pytest.raises(ValueError, match="at least one"):
        SaslConfig.from_properties({"sasl.enabled.mechanisms": ""})
    with pytest.raises(ValueError, match="positive"):
        SaslConfig(sasl_server_max_receive_size=0)
