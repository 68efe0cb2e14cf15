"""`connections.source.host` reaches both node processes' settings (the transport they build
binds outgoing connections to it: tests/unit/runtime/net/test_tcp_source.py), is a known
property of each (settings_from_args refuses an unknown one) and a bad value is a config error."""

from __future__ import annotations

from pathlib import Path

import pytest

from node.broker import main as broker_main
from node.broker.config import BrokerConfig
from node.controller import main as controller_main
from node.layout import Layout
from runtime.config import ConfigError
from runtime.net.tcp import SOURCE_HOST_KEY
from runtime.net.transport import Address

CONTROLLER = Address("127.0.0.1", 9093)
BROKER = Address("127.0.0.1", 9094)


def test_the_broker_config_reads_the_source_host() -> None:
    assert BrokerConfig.from_properties({"broker.id": 0}).connections_source_host is None
    config = BrokerConfig.from_properties({"broker.id": 0, SOURCE_HOST_KEY: "127.0.0.4"})
    assert config.connections_source_host == "127.0.0.4"
    with pytest.raises(ValueError, match=r"connections\.source\.host"):
        BrokerConfig.from_properties({"broker.id": 0, SOURCE_HOST_KEY: "broker-0"})


def test_both_node_commands_take_the_source_host_as_a_known_property(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.prepare(range(1))
    flags = {SOURCE_HOST_KEY: "127.0.0.5"}
    broker = layout.broker_spec(0, BROKER, CONTROLLER, config=None, flags=flags)
    settings = broker_main.settings_from_args(
        broker_main.build_parser().parse_args(broker.args[1:])
    )
    assert settings.config.connections_source_host == "127.0.0.5"
    controller = layout.controller_spec(CONTROLLER, config=None, flags=flags)
    parser = controller_main.build_parser()
    controller_settings = controller_main.settings_from_args(parser.parse_args(controller.args[1:]))
    assert controller_settings.source_host == "127.0.0.5"
    default = layout.controller_spec(CONTROLLER, config=None)
    assert (
        controller_main.settings_from_args(parser.parse_args(default.args[1:])).source_host is None
    )


def test_a_bad_source_host_is_a_config_error_for_both_nodes(tmp_path: Path) -> None:
    layout = Layout(tmp_path)
    layout.prepare(range(1))
    flags = {SOURCE_HOST_KEY: "not-an-ip"}
    broker = layout.broker_spec(0, BROKER, CONTROLLER, config=None, flags=flags)
    with pytest.raises(ConfigError, match=r"connections\.source\.host"):
        broker_main.settings_from_args(broker_main.build_parser().parse_args(broker.args[1:]))
    controller = layout.controller_spec(CONTROLLER, config=None, flags=flags)
    parser = controller_main.build_parser()
    with pytest.raises(ConfigError, match=r"connections\.source\.host"):
        controller_main.settings_from_args(parser.parse_args(controller.args[1:]))
