"""`listeners` and `advertised.listeners` in BrokerConfig: parsing, Kafka's rules, defaults."""

from __future__ import annotations

import pytest

from node.broker.config import (
    ADVERTISED_LISTENERS_KEY,
    KAFKA_LISTENER,
    BrokerConfig,
    format_listeners,
    known_properties,
    parse_listeners,
    property_defaults,
)
from runtime.net.transport import Address


def config(listeners: str, advertised: str | None = None) -> BrokerConfig:
    properties: dict[str, object] = {"broker.id": 1, "listeners": listeners}
    if advertised is not None:
        properties[ADVERTISED_LISTENERS_KEY] = advertised
    return BrokerConfig.from_properties(properties)


def test_native_and_kafka_listeners() -> None:
    broker = config("native://127.0.0.1:9092, KAFKA://127.0.0.1:19092")
    assert broker.listen_address == Address("127.0.0.1", 9092)
    assert broker.kafka_listen_address == Address("127.0.0.1", 19092)
    assert KAFKA_LISTENER == "kafka"
    assert dict(broker.listeners) == {
        "native": Address("127.0.0.1", 9092),
        "kafka": Address("127.0.0.1", 19092),
    }


def test_without_a_kafka_entry_there_is_no_kafka_listener() -> None:
    assert config("native://127.0.0.1:9092").kafka_listen_address is None
    assert BrokerConfig(0).kafka_listen_address is None


def test_advertised_address_replaces_the_bound_one_per_listener() -> None:
    broker = config("native://broker-0:9092,kafka://0.0.0.0:19092", "kafka://localhost:19093")
    assert broker.advertised_listeners == {"kafka": Address("localhost", 19093)}
    # The bound address with port 0 resolved is what the caller passes in.
    assert broker.advertised("kafka", Address("0.0.0.0", 19092)) == Address("localhost", 19093)
    assert broker.advertised("native", Address("broker-0", 9092)) == Address("broker-0", 9092)


def test_bound_address_is_advertised_when_none_is_configured() -> None:
    broker = config("native://127.0.0.1:0,kafka://127.0.0.1:0")
    assert broker.advertised_listeners == {}
    assert broker.advertised("native", Address("127.0.0.1", 41234)) == Address("127.0.0.1", 41234)
    assert broker.advertised("kafka", Address("127.0.0.1", 41235)) == Address("127.0.0.1", 41235)


def test_advertised_for_an_unconfigured_listener_is_a_bug() -> None:
    with pytest.raises(AssertionError):
        config("native://127.0.0.1:9092").advertised("kafka", Address("127.0.0.1", 1))


@pytest.mark.parametrize(
    ("listeners", "advertised", "message"),
    [
        # advertised.listeners may only name configured listeners
        ("native://127.0.0.1:9092", "kafka://localhost:19092", "kafka is not in listeners"),
        # a wildcard bind must be advertised, for either listener
        ("native://0.0.0.0:9092", None, "native binds the wildcard host 0.0.0.0"),
        ("native://h:9092,kafka://[::]:19092", None, "kafka binds the wildcard host ::"),
        ("native://h:9092,kafka://0.0.0.0:19092", "native://h:9092", "kafka binds the wildcard"),
        # an advertised address must be one a client can connect to
        ("native://0.0.0.0:9092", "native://0.0.0.0:9092", "which clients cannot connect to"),
        ("native://h:9092", "native://h:0", "which clients cannot connect to"),
        # duplicates: a name twice (either property), a port twice
        ("native://h:1,NATIVE://h:2", None, "listeners: native named twice"),
        ("native://h:1", "native://a:1,native://b:1", "advertised.listeners: native named twice"),
        ("native://h:9092,kafka://h:9092", None, "native and kafka both use port 9092"),
        ("native://a:9092,kafka://b:9092", None, "both use port 9092"),
        # malformed entries name the property
        ("native:/h:1", None, "listeners: expected NAME://host:port"),
        ("native://h:1", "kafka=h:2", "advertised.listeners: expected NAME://host:port"),
        ("native://h:1", "native://h", "advertised.listeners: native: not a host:port"),
        ("native://h:70000", None, "listeners: native: port 70000"),
        # the native listener is required; empty listeners are refused
        ("kafka://h:19092", None, "listeners has no native listener"),
        (" , ", None, "listeners is empty"),
    ],
)
def test_bad_listener_configurations_are_refused(
    listeners: str, advertised: str | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        config(listeners, advertised)


def test_port_zero_may_repeat() -> None:
    """Port 0 picks a free port per listener, so two of them do not collide."""
    broker = config("native://127.0.0.1:0,kafka://127.0.0.1:0")
    assert broker.kafka_listen_address == Address("127.0.0.1", 0)


def test_wildcard_binds_with_advertised_addresses_are_accepted() -> None:
    broker = config(
        "native://0.0.0.0:9092,kafka://[::]:19092",
        "native://broker-0:9092,kafka://[::1]:19092",
    )
    assert broker.listen_address == Address("0.0.0.0", 9092)
    assert broker.advertised("native", Address("0.0.0.0", 9092)) == Address("broker-0", 9092)
    assert broker.advertised("kafka", Address("::", 19092)) == Address("::1", 19092)


def test_parse_and_format_are_inverse() -> None:
    text = "native://127.0.0.1:9092,kafka://[::1]:19092"
    parsed = parse_listeners(text)
    assert parsed == {"native": Address("127.0.0.1", 9092), "kafka": Address("::1", 19092)}
    assert format_listeners(parsed) == text
    assert parse_listeners("") == {}


def test_defaults_advertise_the_bound_addresses() -> None:
    defaults = property_defaults()
    assert defaults["listeners"] == "native://127.0.0.1:9092"
    assert defaults[ADVERTISED_LISTENERS_KEY] == ""
    assert {"listeners", ADVERTISED_LISTENERS_KEY} <= known_properties()
    # What `config show` lists as the default is what the broker applies.
    from_defaults = BrokerConfig.from_properties({**defaults, "broker.id": 1})
    assert from_defaults == BrokerConfig.from_properties({"broker.id": 1})
    assert from_defaults.advertised_listeners == {}
    assert from_defaults.kafka_listen_address is None
