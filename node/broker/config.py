"""`BrokerConfig`: one broker's settings, read from Kafka's property names.

A node's property map holds every component's settings; each component reads its own keys
through its own `from_properties` (log manager, replica manager, replica fetchers, request
server, fetch clients), and this class gathers them with the few keys that belong to the node
itself:

    broker.id              this broker's id (required)
    listeners              comma-separated `NAME://host:port`, the addresses the broker binds:
                           `native` (the msgpack protocol, required) and optionally `kafka`
                           (the Kafka wire protocol, for Kafka clients); names are unique, and
                           so are the ports (port 0: any free port)
    advertised.listeners   comma-separated `NAME://host:port`, the addresses the broker
                           registers for clients to connect to, per listener name (each must
                           be in `listeners`); a listener without one advertises its bound
                           address (port 0 resolved). A listener bound to a wildcard host
                           (0.0.0.0, ::) must have one: no client can connect to a wildcard
    controller.address     `host:port` of the controller (AlterPartition goes there)
    connections.source.host
                           the IP address every connection the broker opens (replica
                           fetchers, the control channel, forwarding) binds to; unset (the
                           default), the kernel chooses. A local cluster behind
                           testkit/proxy.py gives each node its own 127.0.0.x with it, so the
                           proxy knows which node a connection comes from
    message.max.bytes      the largest produce batch the data path accepts
    metrics.port           the Prometheus endpoint's port on the listener's host (-1: off,
                           the default; 0: any free port), runtime/metrics/registry.py

and the lifecycle's keys (node/broker/lifecycle.py): cluster.id, broker.heartbeat.interval.ms,
broker.session.timeout.ms, controlled.shutdown.enable, controlled.shutdown.max.retries,
controlled.shutdown.retry.backoff.ms; and topic auto-creation's (node/broker/auto_topics.py):
auto.create.topics.enable, num.partitions, default.replication.factor; and TLS's
(runtime/net/tls.py): listener.security.protocol.map, ssl.* and listener.name.<name>.ssl.*,
read into `listener_tls` (a bad file or key is refused here, so the node exits 78).

The value is immutable: a node is configured once, at construction. The listener rules are
Kafka's (KafkaConfig's listener validation): a bad combination is refused here, when the
configuration is read, not when a client finds an unreachable address in Metadata; so is a
min.insync.replicas below 1, which the partitions would otherwise refuse only once they exist.

`originals` keeps the names of the properties the config was read from (Kafka's
AbstractConfig.originals()): with `property_values(config)`, the value of every property the
broker reads, it is what DescribeConfigs of the broker lists (node/broker/describe_configs.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from actors.acl.authorizer import AuthorizerConfig
from actors.group.config import GroupCoordinatorConfig
from actors.metadata_cache import DEFAULT_LISTENER
from actors.quota.manager import QuotaConfig
from actors.replication.config import ReplicaFetcherConfig, ReplicaManagerConfig
from actors.replication.request_path import DEFAULT_MESSAGE_MAX_BYTES
from actors.transactions.config import TransactionConfig
from client.config import ClientConfig
from node.broker.auto_topics import AutoTopicCreationConfig
from node.broker.lifecycle import BrokerLifecycleConfig
from runtime.log.cleaner.config import CleanerConfig
from runtime.log.config import LogManagerConfig
from runtime.metrics.registry import METRICS_DISABLED, METRICS_PORT_KEY, metrics_port
from runtime.net.fetch_session import DEFAULT_MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS
from runtime.net.sasl_config import JAAS_KEYS, SaslConfig
from runtime.net.server import ServerConfig
from runtime.net.tcp import parse_source_host
from runtime.net.tls import CONTROLLER_LISTENER, ListenerTls, listener_tls, tls_property_names
from runtime.net.transport import Address
from runtime.properties import (
    NOT_A_PROPERTY,
    config_from_properties,
    defaults_by_property,
    int_property,
    property_metadata,
)

# The listener served with the native (msgpack) protocol: the inter-broker one.
NATIVE_LISTENER: Final = DEFAULT_LISTENER
DEFAULT_LISTENERS = f"{NATIVE_LISTENER}://127.0.0.1:9092"
# The listener whose entry in `listeners` is served with the Kafka wire protocol (wire/kafka/);
# the native one is NATIVE_LISTENER.
KAFKA_LISTENER: Final = "kafka"
LISTENERS_KEY: Final = "listeners"
ADVERTISED_LISTENERS_KEY: Final = "advertised.listeners"
# Hosts that mean "every interface" to bind(): fine to listen on, meaningless to connect to.
WILDCARD_HOSTS: Final = frozenset({"0.0.0.0", "::"})


def parse_listeners(text: str, *, key: str = LISTENERS_KEY) -> dict[str, Address]:
    """`NAME://host:port,...` -> {name: address}; names are case-insensitive as in Kafka.

    `key` names the property in error messages. Empty text gives an empty map: whether that is
    allowed is the caller's rule (`listeners` needs the native entry, `advertised.listeners`
    may be empty)."""
    listeners: dict[str, Address] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, address = part.partition("://")
        if not sep or not name:
            raise ValueError(f"{key}: expected NAME://host:port, got {part!r}")
        name = name.lower()
        if name in listeners:
            raise ValueError(f"{key}: {name} named twice")
        try:
            listeners[name] = Address.parse(address)
        except ValueError as exc:
            raise ValueError(f"{key}: {name}: {exc}") from None
    return listeners


def format_listeners(listeners: Mapping[str, Address]) -> str:
    """The inverse of parse_listeners (names in the map's order)."""
    return ",".join(f"{name}://{address}" for name, address in listeners.items())


def _check_listeners(listeners: Mapping[str, Address], advertised: Mapping[str, Address]) -> None:
    """Kafka's listener rules; ValueError naming the property and the listener at fault."""
    if not listeners:
        raise ValueError(f"{LISTENERS_KEY} is empty")
    ports: dict[int, str] = {}
    for name, address in listeners.items():
        # Two listeners cannot bind one port; port 0 picks a free port for each.
        if address.port != 0 and address.port in ports:
            raise ValueError(
                f"{LISTENERS_KEY}: {ports[address.port]} and {name} both use port {address.port}"
            )
        ports[address.port] = name
        if address.host in WILDCARD_HOSTS and name not in advertised:
            raise ValueError(
                f"{LISTENERS_KEY}: {name} binds the wildcard host {address.host}, which clients "
                f"cannot connect to: give its address in {ADVERTISED_LISTENERS_KEY} "
                f"({name}://HOST:PORT)"
            )
    for name, address in advertised.items():
        if name not in listeners:
            raise ValueError(
                f"{ADVERTISED_LISTENERS_KEY}: {name} is not in {LISTENERS_KEY} "
                f"({', '.join(listeners)})"
            )
        if address.host in WILDCARD_HOSTS or address.port == 0:
            raise ValueError(
                f"{ADVERTISED_LISTENERS_KEY}: {name} advertises {address}, which clients cannot "
                "connect to (a wildcard host or port 0)"
            )


def _listeners_property(key: str, raw: object) -> dict[str, Address]:
    return parse_listeners(str(raw), key=key)


def _address_property(key: str, raw: object) -> Address:
    return Address.parse(str(raw))


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    broker_id: int
    listeners: Mapping[str, Address] = field(
        default_factory=lambda: parse_listeners(DEFAULT_LISTENERS),
        metadata=property_metadata(parse=_listeners_property),
    )
    # Only the listeners whose advertised address differs from the bound one (see advertised()).
    advertised_listeners: Mapping[str, Address] = field(
        default_factory=dict, metadata=property_metadata(parse=_listeners_property)
    )
    controller_address: Address | None = field(
        default=None, metadata=property_metadata(parse=_address_property)
    )
    # connections.source.host (see the module docstring); None: the kernel chooses.
    connections_source_host: str | None = field(
        default=None, metadata=property_metadata(parse=parse_source_host)
    )
    message_max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES
    log: LogManagerConfig = field(default_factory=LogManagerConfig)
    replication: ReplicaManagerConfig | None = None
    fetcher: ReplicaFetcherConfig = field(default_factory=ReplicaFetcherConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    # The clients of the replica fetchers and of the control channel (AlterPartition,
    # registration, heartbeats, controlled shutdown, forwarded topic requests).
    client: ClientConfig = field(default_factory=ClientConfig)
    lifecycle: BrokerLifecycleConfig = field(default_factory=BrokerLifecycleConfig)
    # Topics created on a client's Metadata request (auto.create.topics.enable, ...).
    auto_topics: AutoTopicCreationConfig = field(default_factory=AutoTopicCreationConfig)
    metrics_port: int = METRICS_DISABLED
    # Incremental fetch sessions the Kafka listener keeps (KIP-227; 0: none, every fetch full).
    max_incremental_fetch_session_cache_slots: int = (
        DEFAULT_MAX_INCREMENTAL_FETCH_SESSION_CACHE_SLOTS
    )
    # The consumer-group coordinator (offsets.* and group.* keys, actors/group/config.py).
    groups: GroupCoordinatorConfig = field(default_factory=GroupCoordinatorConfig)
    # The transaction coordinator (transaction.* keys, actors/transactions/config.py).
    transactions: TransactionConfig = field(default_factory=TransactionConfig)
    # The live log cleaner (log.cleaner.* keys, runtime/log/cleaner/config.py).
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    # SASL on the Kafka listener (runtime/net/sasl_config.py: sasl.enabled.mechanisms, the
    # JAAS users of PLAIN, sasl.server.max.receive.size); used when its protocol is SASL_*.
    sasl: SaslConfig = field(default_factory=SaslConfig)
    # The same SASL settings as the native (inter-broker) listener sees them: its protocol in
    # listener.security.protocol.map (runtime/net/native_sasl.py). Not listed: its keys are
    # `sasl`'s.
    native_sasl: SaslConfig = field(default_factory=SaslConfig, metadata=NOT_A_PROPERTY)
    # ACLs on the Kafka listener (authorizer.class.name, super.users,
    # allow.everyone.if.no.acl.found: actors/acl/authorizer.py).
    authorizer: AuthorizerConfig = field(default_factory=AuthorizerConfig)
    # Client quotas' rate windows (quota.window.num, quota.window.size.seconds:
    # actors/quota/manager.py).
    quotas: QuotaConfig = field(default_factory=QuotaConfig)
    # TLS per listener name (runtime/net/tls.py: listener.security.protocol.map and ssl.*),
    # for the listeners it serves and the controller's it connects to; a name left out is
    # plaintext. Not compared: an SSLContext is equal only to itself.
    listener_tls: Mapping[str, ListenerTls] = field(
        default_factory=dict, compare=False, metadata=NOT_A_PROPERTY
    )
    # The names of the properties this config was read from (see the module docstring); not
    # compared: two configs that set the same values are equal however they were given.
    originals: frozenset[str] = field(default=frozenset(), compare=False, metadata=NOT_A_PROPERTY)

    def __post_init__(self) -> None:
        if self.broker_id < 0:
            raise ValueError(f"broker.id must be >= 0: {self.broker_id}")
        if self.message_max_bytes < 1:
            raise ValueError(f"message.max.bytes must be >= 1: {self.message_max_bytes}")
        if self.replication is not None and self.replication.broker_id != self.broker_id:
            raise ValueError("replication settings are for another broker id")
        # Built here for its checks (min.insync.replicas >= 1): each partition builds it anyway.
        _ = self.replica_manager.partition_config
        if self.metrics_port != METRICS_DISABLED and not 0 <= self.metrics_port <= 65_535:
            raise ValueError(f"{METRICS_PORT_KEY} must be -1 (off) or 0..65535")
        if self.max_incremental_fetch_session_cache_slots < 0:
            raise ValueError("max.incremental.fetch.session.cache.slots must be >= 0")
        _check_listeners(self.listeners, self.advertised_listeners)
        if self.listener_name not in self.listeners:
            raise ValueError(f"listeners has no {self.listener_name} listener")
        if self.listener_name == KAFKA_LISTENER:
            # One Server per listener speaks one protocol: the inter-broker one is native.
            raise ValueError(f"the inter-broker listener cannot be {KAFKA_LISTENER}")

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

    @property
    def kafka_listen_address(self) -> Address | None:
        """The address the Kafka-protocol listener binds (port 0: any free port); None when
        `listeners` has no kafka entry (the broker then speaks only the native protocol)."""
        return self.listeners.get(KAFKA_LISTENER)

    def advertised(self, name: str, bound: Address) -> Address:
        """The address to register for listener `name`: its advertised.listeners entry, else
        `bound`, the address the listener really bound (the caller resolves port 0)."""
        assert name in self.listeners, (name, self.listeners)
        address = self.advertised_listeners.get(name)
        if address is not None:
            return address
        # __post_init__ refused a wildcard bind without an advertised address.
        assert bound.host not in WILDCARD_HOSTS, (name, bound)
        return bound

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> BrokerConfig:
        if "broker.id" not in properties:
            raise ValueError("broker.id is required")
        broker_id = int_property(properties, "broker.id", -1)
        replication = ReplicaManagerConfig.from_properties(broker_id, properties)
        # The components read their own keys from the same map (broker.id is read first, as
        # the replica manager needs it); the node's other keys are read by its fields' types
        # and metadata (listeners, advertised.listeners, controller.address, message.max.bytes).
        return config_from_properties(
            cls,
            properties,
            broker_id=broker_id,
            log=LogManagerConfig.from_properties(properties),
            replication=replication,
            fetcher=ReplicaFetcherConfig.from_properties(properties),
            server=ServerConfig.from_properties(properties),
            client=ClientConfig.from_properties(_client_properties(properties)),
            lifecycle=BrokerLifecycleConfig.from_properties(properties),
            auto_topics=AutoTopicCreationConfig.from_properties(properties),
            metrics_port=metrics_port(properties),
            groups=GroupCoordinatorConfig.from_properties(properties),
            transactions=TransactionConfig.from_properties(properties),
            cleaner=CleanerConfig.from_properties(properties),
            sasl=SaslConfig.from_properties(properties, KAFKA_LISTENER),
            native_sasl=SaslConfig.from_properties(properties, replication.inter_broker_listener),
            authorizer=AuthorizerConfig.from_properties(properties),
            quotas=QuotaConfig.from_properties(properties),
            listener_tls=_listener_tls(properties),
            originals=frozenset(properties),
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
    "log.cleaner.min.compaction.lag.ms": "min_compaction_lag_ms",
    "log.cleaner.max.compaction.lag.ms": "max_compaction_lag_ms",
    "log.cleaner.min.cleanable.ratio": "min_cleanable_dirty_ratio",
    "log.cleaner.delete.retention.ms": "delete_retention_ms",
}
# Read by the components but without a default of their own to show.
_KEYS_WITHOUT_DEFAULT: Final = frozenset(
    {
        "broker.id",
        "controller.address",
        "connections.source.host",
        "log.dir",
        "log.roll.hours",
        "log.retention.minutes",
        "log.retention.hours",
    }
)


def property_defaults() -> dict[str, bool | int | float | str]:
    """Every broker property this node reads, with the default its component applies; for
    `ketch config show` and for telling a mistyped name from a real one."""
    defaults = property_values(BrokerConfig(0))
    for key in _KEYS_WITHOUT_DEFAULT:
        defaults.pop(key, None)
    # Kafka's default is null: every listener advertises where it is bound.
    defaults[ADVERTISED_LISTENERS_KEY] = ""
    return defaults


def property_values(config: BrokerConfig) -> dict[str, bool | int | float | str]:
    """Every broker property this node reads, with the value `config` uses (a property in a
    coarser unit, such as log.retention.hours, is shown as the finer one it sets); the keys
    without a default are listed only when `config` has a value for them."""
    log_manager = config.log
    log_defaults = log_manager.default
    replication = config.replica_manager
    values: dict[str, bool | int | float | str] = {
        "broker.id": config.broker_id,
        LISTENERS_KEY: format_listeners(config.listeners),
        ADVERTISED_LISTENERS_KEY: format_listeners(config.advertised_listeners),
        "message.max.bytes": config.message_max_bytes,
        "log.dirs": ",".join(log_manager.log_dirs),
        "log.retention.check.interval.ms": log_manager.retention_check_interval_ms,
        "log.flush.scheduler.interval.ms": log_manager.flush_scheduler_interval_ms,
        "log.flush.offset.checkpoint.interval.ms": (
            log_manager.flush_offset_checkpoint_interval_ms
        ),
        "log.flush.start.offset.checkpoint.interval.ms": (
            log_manager.flush_start_offset_checkpoint_interval_ms
        ),
        "producer.id.expiration.ms": log_manager.producer_id_expiration_ms,
        "producer.id.expiration.check.interval.ms": (
            log_manager.producer_id_expiration_check_interval_ms
        ),
        "replica.lag.time.max.ms": replication.replica_lag_time_max_ms,
        "replica.high.watermark.checkpoint.interval.ms": (
            replication.high_watermark_checkpoint_interval_ms
        ),
        "min.insync.replicas": replication.min_insync_replicas,
        METRICS_PORT_KEY: config.metrics_port,
        "max.incremental.fetch.session.cache.slots": (
            config.max_incremental_fetch_session_cache_slots
        ),
    }
    if config.controller_address is not None:
        values["controller.address"] = str(config.controller_address)
    if config.connections_source_host is not None:
        values["connections.source.host"] = config.connections_source_host
    for key, name in _BROKER_LOG_FIELDS.items():
        values[key] = getattr(log_defaults, name)
    read_by_components = {}
    for component in (
        config.fetcher,
        config.server,
        config.lifecycle,
        config.auto_topics,
        config.groups,
        config.transactions,
        config.cleaner,
        config.sasl,
        config.authorizer,
        config.quotas,
    ):
        read_by_components.update(defaults_by_property(component))
    client_values = defaults_by_property(config.client)
    read_by_components.update({key: client_values[key] for key in _CLIENT_KEYS})
    for key, value in read_by_components.items():
        if value is None:
            continue  # a setting without a value (the lifecycle's cluster.id when unset)
        assert isinstance(value, bool | int | float | str), (key, value)
        values[key] = value
    return dict(sorted(values.items()))


def known_properties() -> frozenset[str]:
    return frozenset(property_defaults()) | _KEYS_WITHOUT_DEFAULT | tls_property_names() | JAAS_KEYS


def _listener_tls(properties: Mapping[str, object]) -> dict[str, ListenerTls]:
    """The TLS contexts of the broker's listeners (served) and of the controller's (dialed)."""
    served = parse_listeners(str(properties.get(LISTENERS_KEY, DEFAULT_LISTENERS)))
    return listener_tls(properties, {*served, CONTROLLER_LISTENER}, serving=served)


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
