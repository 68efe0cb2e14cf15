"""SASL settings of the Kafka listener (`SaslConfig`), and Kafka's JAAS config text for PLAIN.

Properties (Kafka's names):

    sasl.enabled.mechanisms          mechanisms a SASL listener offers, comma-separated; Kafka's
                                     default is GSSAPI, which ketch does not have: ketch's is
                                     SCRAM-SHA-256,SCRAM-SHA-512 (no password crosses the wire and
                                     none needs a file of passwords; PLAIN must be asked for)
    sasl.server.max.receive.size     largest frame before authentication (524288): a bigger one
                                     closes the connection before its body is read
    listener.name.kafka.plain.sasl.jaas.config   PLAIN's users on the kafka listener, as
    sasl.jaas.config                 `...PlainLoginModule required user_NAME="password" ...;`
                                     (the listener's own property first, as Kafka)

Which listeners speak SASL is `listener.security.protocol.map` (runtime/net/security_protocol.py);
this config only says how. The JAAS texts hold passwords: they are read here, not through the
property reader, so `property_values` (what DescribeConfigs and `ketch config show` list) never
sees them (Kafka lists them as sensitive, without a value).

Immutable once built; validated when built (an unknown mechanism, a malformed JAAS text).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Self

from runtime.net.scram import MECHANISMS as SCRAM_MECHANISMS
from runtime.net.security_protocol import (
    LISTENER_SECURITY_PROTOCOL_MAP_KEY,
    SecurityProtocol,
    parse_security_protocol_map,
    protocol_of,
)
from runtime.properties import NOT_A_PROPERTY, config_from_properties

PLAIN: Final = "PLAIN"
SUPPORTED_MECHANISMS: Final = (PLAIN, *SCRAM_MECHANISMS)
DEFAULT_ENABLED_MECHANISMS: Final = "SCRAM-SHA-256,SCRAM-SHA-512"
DEFAULT_MAX_RECEIVE_SIZE: Final = 524288
SASL_JAAS_CONFIG_KEY: Final = "sasl.jaas.config"
PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"


def listener_jaas_key(listener: str, mechanism: str) -> str:
    """Kafka's per-listener, per-mechanism JAAS property name."""
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.{SASL_JAAS_CONFIG_KEY}"


# The JAAS keys a broker reads (its Kafka listener is always named `kafka`): known properties
# without a listed value.
JAAS_KEYS: Final = frozenset(
    {SASL_JAAS_CONFIG_KEY}
    | {listener_jaas_key(name, m) for name in ("kafka", "native") for m in SUPPORTED_MECHANISMS}
)

# One login module entry: `class.Name flag option=value ... ;` (values quoted or bare).
_MODULE = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b(.*?);", re.S)
_OPTION = re.compile(r'\s*([^\s=]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s";]+))', re.S)


def parse_jaas_config(text: str, *, key: str = SASL_JAAS_CONFIG_KEY) -> dict[str, dict[str, str]]:
    """`Module flag k="v" ...; ...` -> {module class name: options}; ValueError naming `key`."""
    modules: dict[str, dict[str, str]] = {}
    position = 0
    text = text.strip()
    while position < len(text):
        found = _MODULE.match(text, position)
        if found is None:
            raise ValueError(f"{key}: expected 'LoginModule flag option=\"value\" ...;'")
        name, body = found.group(1), found.group(3)
        options: dict[str, str] = {}
        offset = 0
        while body[offset:].strip():
            option = _OPTION.match(body, offset)
            if option is None:
                raise ValueError(f"{key}: {name}: malformed option near {body[offset:].strip()!r}")
            quoted = option.group(2)
            value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else option.group(3)
            options[option.group(1)] = value
            offset = option.end()
        modules[name] = options
        position = found.end()
        while position < len(text) and text[position].isspace():
            position += 1
    return modules


def plain_users(text: str, *, key: str = SASL_JAAS_CONFIG_KEY) -> dict[str, str]:
    """PLAIN's users from a JAAS text: PlainLoginModule's `user_NAME="password"` options."""
    options = parse_jaas_config(text, key=key).get(PLAIN_LOGIN_MODULE, {})
    return {name[5:]: value for name, value in options.items() if name.startswith("user_")}


def parse_mechanisms(text: str, *, key: str = "sasl.enabled.mechanisms") -> tuple[str, ...]:
    """`A,B` -> ("A", "B") (upper case, duplicates dropped); ValueError for an unknown one."""
    names = tuple(dict.fromkeys(m.strip().upper() for m in text.split(",") if m.strip()))
    unknown = [m for m in names if m not in SUPPORTED_MECHANISMS]
    if unknown:
        known = ", ".join(SUPPORTED_MECHANISMS)
        raise ValueError(f"{key}: unsupported mechanism {unknown[0]} (ketch has {known})")
    if not names:
        raise ValueError(f"{key}: name at least one mechanism")
    return names


@dataclass(frozen=True, slots=True)
class SaslConfig:
    sasl_enabled_mechanisms: str = DEFAULT_ENABLED_MECHANISMS
    sasl_server_max_receive_size: int = DEFAULT_MAX_RECEIVE_SIZE
    # PLAIN's users and passwords (from the JAAS texts, never listed; see the module docstring).
    plain_users: Mapping[str, str] = field(
        default_factory=dict, repr=False, metadata=NOT_A_PROPERTY
    )
    # The Kafka listener's security protocol (listener.security.protocol.map, whose reading
    # and listing belong to runtime/net/tls.py): whether the settings above apply at all.
    protocol: SecurityProtocol = field(default=SecurityProtocol.PLAINTEXT, metadata=NOT_A_PROPERTY)

    def __post_init__(self) -> None:
        if self.sasl_server_max_receive_size <= 0:
            raise ValueError("sasl.server.max.receive.size must be positive")
        parse_mechanisms(self.sasl_enabled_mechanisms)

    @classmethod
    def from_properties(cls, properties: Mapping[str, object], listener: str = "kafka") -> Self:
        own = listener_jaas_key(listener, PLAIN)
        key = own if own in properties else SASL_JAAS_CONFIG_KEY
        users = plain_users(str(properties.get(key, "")), key=key)
        protocols = parse_security_protocol_map(
            str(properties.get(LISTENER_SECURITY_PROTOCOL_MAP_KEY, "") or "")
        )
        protocol = protocol_of(protocols, listener)
        return config_from_properties(cls, properties, plain_users=users, protocol=protocol)

    @property
    def enabled(self) -> bool:
        """Whether the listener authenticates with SASL (SASL_PLAINTEXT or SASL_SSL)."""
        return self.protocol.uses_sasl

    @property
    def enabled_mechanisms(self) -> tuple[str, ...]:
        return parse_mechanisms(self.sasl_enabled_mechanisms)
