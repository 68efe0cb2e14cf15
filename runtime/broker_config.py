"""`BrokerConfig`: one broker's settings, read from Kafka's property names.

A node's property map holds every component's settings; each component reads its own keys
through its own `from_properties` (log manager, replica manager, replica fetchers, request
server, fetch clients), and this class gathers them with the few keys that belong to the node
itself:

    broker.id              this broker's id (required)
    listeners              comma-separated `NAME://host:port`; the native listener is served
    controller.address     `host:port` of the controller (AlterPartition goes there)
    message.max.bytes      the largest produce batch the data path accepts
    metrics.port           the Prometheus endpoint's port on the listener's host (-1: off,
                           the default; 0: any free port), runtime/metrics.py

and the lifecycle's keys (runtime/broker_lifecycle.py): cluster.id, broker.heartbeat.interval.ms,
broker.session.timeout.ms, controlled.shutdown.enable, controlled.shutdown.max.retries,
controlled.shutdown.retry.backoff.ms.

The value is immutable: a node is configured once, at construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from actors.fetcher import ReplicaFetcherConfig
from actors.metadata_cache import DEFAULT_LISTENER
from actors.replica_manager import ReplicaManagerConfig
from actors.request_path import DEFAULT_MESSAGE_MAX_BYTES
from runtime.broker_lifecycle import BrokerLifecycleConfig
from runtime.log.config import LogManagerConfig
from runtime.metrics import METRICS_DISABLED, METRICS_PORT_KEY, metrics_port
from runtime.net.client_config import ClientConfig
from runtime.net.server import ServerConfig
from runtime.net.transport import Address
from runtime.properties import int_property

DEFAULT_LISTENERS = f"{DEFAULT_LISTENER}://127.0.0.1:9092"


def parse_listeners(text: str) -> dict[str, Address]:
    """`NAME://host:port,...` -> {name: address}; names are case-insensitive as in Kafka."""
    listeners: dict[str, Address] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, address = part.partition("://")
        if not sep or not name:
            raise ValueError(f"listeners: expected NAME://host:port, got {part!r}")
        key = name.lower()
        if key in listeners:
            raise ValueError(f"listeners: {key} named twice")
        listeners[key] = Address.parse(address)
    if not listeners:
        raise ValueError("listeners is empty")
    return listeners


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    broker_id: int
    listeners: Mapping[str, Address] = field(
        default_factory=lambda: parse_listeners(DEFAULT_LISTENERS)
    )
    controller_address: Address | None = None
    message_max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES
    log: LogManagerConfig = field(default_factory=LogManagerConfig)
    replication: ReplicaManagerConfig | None = None
    fetcher: ReplicaFetcherConfig = field(default_factory=ReplicaFetcherConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    # The clients of the replica fetchers and of the control channel (AlterPartition,
    # registration, heartbeats, controlled shutdown, forwarded topic requests).
    client: ClientConfig = field(default_factory=ClientConfig)
    lifecycle: BrokerLifecycleConfig = field(default_factory=BrokerLifecycleConfig)
    metrics_port: int = METRICS_DISABLED

    def __post_init__(self) -> None:
        if self.broker_id < 0:
            raise ValueError(f"broker.id must be >= 0: {self.broker_id}")
        if self.message_max_bytes < 1:
            raise ValueError(f"message.max.bytes must be >= 1: {self.message_max_bytes}")
        if self.replication is not None and self.replication.broker_id != self.broker_id:
            raise ValueError("replication settings are for another broker id")
        if self.metrics_port != METRICS_DISABLED and not 0 <= self.metrics_port <= 65_535:
            raise ValueError(f"{METRICS_PORT_KEY} must be -1 (off) or 0..65535")
        if self.listener_name not in self.listeners:
            raise ValueError(f"listeners has no {self.listener_name} listener")

    @property
    def replica_manager(self) -> ReplicaManagerConfig:
        return self.replication or ReplicaManagerConfig(self.broker_id)

    @property
    def listener_name(self) -> str:
        return (self.replication or ReplicaManagerConfig(self.broker_id)).inter_broker_listener

    @property
    def listen_address(self) -> Address:
        """The address the native listener binds (port 0: any free port)."""
        return self.listeners[self.listener_name]

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> BrokerConfig:
        if "broker.id" not in properties:
            raise ValueError("broker.id is required")
        broker_id = int_property(properties, "broker.id", -1)
        controller = properties.get("controller.address")
        return cls(
            broker_id,
            listeners=parse_listeners(str(properties.get("listeners", DEFAULT_LISTENERS))),
            controller_address=None if controller is None else Address.parse(str(controller)),
            message_max_bytes=int_property(
                properties, "message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES
            ),
            log=LogManagerConfig.from_properties(properties),
            replication=ReplicaManagerConfig.from_properties(broker_id, properties),
            fetcher=ReplicaFetcherConfig.from_properties(properties),
            server=ServerConfig.from_properties(properties),
            client=ClientConfig.from_properties(_client_properties(properties)),
            lifecycle=BrokerLifecycleConfig.from_properties(properties),
            metrics_port=metrics_port(properties),
        )


# The broker-level names of the log settings and the LogConfig field each sets (the names
# runtime/log/config.py reads), for the defaults listing below.
_BROKER_LOG_FIELDS: Final = {
    "log.segment.bytes": "segment_bytes",
    "log.roll.ms": "segment_ms",
    "log.roll.jitter.ms": "segment_jitter_ms",
    "log.index.size.max.bytes": "segment_index_bytes",
    "log.index.interval.bytes": "index_interval_bytes",
    "log.retention.ms": "retention_ms",
    "log.retention.bytes": "retention_bytes",
    "log.flush.interval.messages": "flush_messages",
    "log.flush.interval.ms": "flush_ms",
    "log.segment.delete.delay.ms": "file_delete_delay_ms",
    "log.cleanup.policy": "cleanup_policy",
}
# Read by the components but without a default of their own to show.
_KEYS_WITHOUT_DEFAULT: Final = frozenset(
    {
        "broker.id",
        "controller.address",
        "log.dir",
        "log.roll.hours",
        "log.retention.minutes",
        "log.retention.hours",
    }
)


def property_defaults() -> dict[str, bool | int | float | str]:
    """Every broker property this node reads, with the default its component applies; for
    `ketch config show` and for telling a mistyped name from a real one."""
    log_manager = LogManagerConfig()
    log_defaults = log_manager.default
    replication = ReplicaManagerConfig(0)
    fetcher = ReplicaFetcherConfig()
    server = ServerConfig()
    client = ClientConfig()
    lifecycle = BrokerLifecycleConfig()
    defaults: dict[str, bool | int | float | str] = {
        "listeners": DEFAULT_LISTENERS,
        "message.max.bytes": DEFAULT_MESSAGE_MAX_BYTES,
        "log.dirs": ",".join(log_manager.log_dirs),
        "log.retention.check.interval.ms": log_manager.retention_check_interval_ms,
        "log.flush.scheduler.interval.ms": log_manager.flush_scheduler_interval_ms,
        "log.flush.offset.checkpoint.interval.ms": (
            log_manager.flush_offset_checkpoint_interval_ms
        ),
        "log.flush.start.offset.checkpoint.interval.ms": (
            log_manager.flush_start_offset_checkpoint_interval_ms
        ),
        "replica.lag.time.max.ms": replication.replica_lag_time_max_ms,
        "replica.high.watermark.checkpoint.interval.ms": (
            replication.high_watermark_checkpoint_interval_ms
        ),
        "min.insync.replicas": replication.min_insync_replicas,
        METRICS_PORT_KEY: METRICS_DISABLED,
    }
    for key, name in _BROKER_LOG_FIELDS.items():
        defaults[key] = getattr(log_defaults, name)
    component: ReplicaFetcherConfig | ServerConfig | BrokerLifecycleConfig
    for component in (fetcher, server, lifecycle):
        for key in component.PROPERTIES:
            defaults[key] = getattr(component, key.replace(".", "_"))
    for key in _CLIENT_KEYS:
        defaults[key] = getattr(client, key.replace(".", "_"))
    return dict(sorted(defaults.items()))


def known_properties() -> frozenset[str]:
    return frozenset(property_defaults()) | _KEYS_WITHOUT_DEFAULT


_CLIENT_KEYS: Final = frozenset(
    {
        "request.timeout.ms",
        "socket.connection.setup.timeout.ms",
        "reconnect.backoff.ms",
        "reconnect.backoff.max.ms",
        "retry.backoff.ms",
        "retry.backoff.max.ms",
    }
)


def _client_properties(properties: Mapping[str, object]) -> dict[str, object]:
    """The client keys a broker honours (others, like a server's, are not the client's)."""
    return {k: v for k, v in properties.items() if k in _CLIENT_KEYS}
