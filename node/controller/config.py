"""The controller process's settings, read from Kafka's property names.

A controller's property map is read by four components, each through its own
`from_properties`: the controller itself (`ControllerConfig`: node.id, cluster.id,
broker.session.timeout.ms, ..., actors/controller/messages.py), its listener (`ServerConfig`:
socket.request.max.bytes, max.connections, ...), its channels to the brokers (`ChannelConfig`:
request.timeout.ms, the backoffs), plus metrics.port and connections.source.host, and TLS
(listener.security.protocol.map and ssl.*, runtime/net/tls.py) for its own listener, named
`controller`, and for its channels to the brokers' inter-broker listener, `native`.
`controller_configs()` reads them all, so `ketch controller` and the configuration check
(node/config_check.py) run the same validation; `property_defaults()` lists what they read with
their defaults, for `ketch config show` and for telling a mistyped name from a real one.

Pure functions; the values are immutable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from actors.controller.channel import ChannelConfig
from actors.controller.messages import ControllerConfig
from actors.metadata_cache import DEFAULT_LISTENER
from runtime.config import Value
from runtime.metrics.registry import METRICS_DISABLED, METRICS_PORT_KEY, metrics_port
from runtime.net.server import ServerConfig
from runtime.net.tcp import SOURCE_HOST_KEY, source_host
from runtime.net.tls import CONTROLLER_LISTENER, ListenerTls, listener_tls, tls_property_names
from runtime.properties import (
    config_from_properties,
    defaults_by_property,
    int_property,
    property_names,
)

_KEYS_WITHOUT_DEFAULT: Final = frozenset({"cluster.id", SOURCE_HOST_KEY})


@dataclass(frozen=True, slots=True)
class ControllerConfigs:
    """Everything the controller process reads from its properties."""

    config: ControllerConfig
    server: ServerConfig
    channels: ChannelConfig
    metrics_port: int
    source_host: str | None  # connections.source.host (None: the kernel chooses)
    # TLS of the controller's listener (`controller`) and of the brokers' it dials (`native`).
    listener_tls: Mapping[str, ListenerTls] = field(default_factory=dict, compare=False)


def controller_configs(properties: Mapping[str, object]) -> ControllerConfigs:
    """Each component's settings from `properties`; ValueError for a value one refuses."""
    return ControllerConfigs(
        config=ControllerConfig.from_properties(properties),
        server=ServerConfig.from_properties(properties),
        channels=channel_config(properties),
        metrics_port=metrics_port(properties),
        source_host=source_host(properties),
        listener_tls=listener_tls(
            properties, {CONTROLLER_LISTENER, DEFAULT_LISTENER}, serving={CONTROLLER_LISTENER}
        ),
    )


def controller_config_defaults() -> dict[str, Value]:
    """ControllerConfig's properties with their defaults (cluster.id has none)."""
    return _values(defaults_by_property(ControllerConfig()))


def property_defaults() -> dict[str, Value]:
    """Every property the controller process reads, with the default its component applies."""
    defaults = controller_config_defaults()
    defaults.update(_values(defaults_by_property(ChannelConfig())))
    defaults.update(_values(defaults_by_property(ServerConfig())))
    defaults[METRICS_PORT_KEY] = METRICS_DISABLED
    return defaults


def _values(defaults: Mapping[str, object]) -> dict[str, Value]:
    """The defaults a config listing can show: None (no default) is left out."""
    shown: dict[str, Value] = {}
    for key, value in defaults.items():
        if value is None:
            continue
        assert isinstance(value, bool | int | float | str), (key, value)
        shown[key] = value
    return shown


def known_properties() -> frozenset[str]:
    return frozenset(property_defaults()) | _KEYS_WITHOUT_DEFAULT | tls_property_names()


def channel_config(properties: Mapping[str, object]) -> ChannelConfig:
    """The channels' settings; a timeout or backoff below 1 ms would spin the sender."""
    for (key,) in property_names(ChannelConfig).values():
        if int_property(properties, key, 1) < 1:
            raise ValueError(f"{key} must be >= 1: {properties[key]!r}")
    return config_from_properties(ChannelConfig, properties)
