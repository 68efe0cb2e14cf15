"""The controller's metadata records and their codec: what its metadata log stores.

Everything the controller must remember across a restart is written as one of these records
before it is acted on (the metadata records of KRaft); actors/controller/model.py replays them
into the model. Records are frozen slotted dataclasses. `encode_record` turns one into a plain
dict of msgpack types with its kind under "type"; `decode_record` checks every field's type and
raises ValueError for anything malformed, so a bad record is refused rather than half-applied. A
PartitionRecord always carries the partition's full state (no deltas), so replay never depends on
what an older record said.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields
from types import MappingProxyType
from typing import Any, ClassVar, Final, NamedTuple, TypeAlias


class Endpoint(NamedTuple):
    listener: str
    host: str
    port: int


def _frozen_configs(configs: Mapping[str, str]) -> Mapping[str, str]:
    # A read-only copy, so a record stays a value even if the caller's dict changes later.
    return MappingProxyType(dict(configs))


@dataclass(frozen=True, slots=True)
class ControllerEpochRecord:
    TYPE: ClassVar[str] = "controller_epoch"
    epoch: int


@dataclass(frozen=True, slots=True)
class ClusterIdRecord:
    """The cluster's id (Kafka's `cluster.id`: a Uuid in its text form, 22 characters), written
    once, when the controller first starts, and never changed; brokers keep it in their log
    dirs' meta.properties. Kafka formats it into the controller's meta.properties; ketch's
    controller keeps every durable fact in its metadata log, this one too."""

    TYPE: ClassVar[str] = "cluster_id"
    cluster_id: str


@dataclass(frozen=True, slots=True)
class RegisterBrokerRecord:
    """A broker (re-)registered. A re-registration replaces the broker's previous one: a new
    process gets a new incarnation and a larger broker epoch. `fenced` as in KRaft: whether the
    broker may lead or join an ISR yet."""

    TYPE: ClassVar[str] = "register_broker"
    broker_id: int
    incarnation_id: bytes
    broker_epoch: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool = True
    # The ids of the broker's log directories (meta.properties) when it registered; empty for a
    # broker that sent none. A new process on the same directories registers the same ids.
    log_dirs: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "endpoints", tuple(Endpoint(*e) for e in self.endpoints))
        object.__setattr__(self, "log_dirs", tuple(self.log_dirs))


@dataclass(frozen=True, slots=True)
class FenceBrokerRecord:
    TYPE: ClassVar[str] = "fence_broker"
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class UnfenceBrokerRecord:
    TYPE: ClassVar[str] = "unfence_broker"
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class TopicRecord:
    TYPE: ClassVar[str] = "topic"
    name: str
    topic_id: bytes
    configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", _frozen_configs(self.configs))


@dataclass(frozen=True, slots=True)
class TopicConfigsRecord:
    """A topic's config overrides after an IncrementalAlterConfigs: all of them, replacing what
    its TopicRecord (or an earlier record of this kind) said, so replay never depends on an
    older record (KRaft writes one ConfigRecord per key; one full map keeps ketch's rule that
    records carry whole states). A snapshot folds them into the TopicRecord."""

    TYPE: ClassVar[str] = "topic_configs"
    topic_id: bytes
    configs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "configs", _frozen_configs(self.configs))


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """A partition's full state after a change (creation, election, ISR change)."""

    TYPE: ClassVar[str] = "partition"
    topic_id: bytes
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    def __post_init__(self) -> None:
        # Tuples whatever the caller passed, so records compare equal by value.
        object.__setattr__(self, "replicas", tuple(self.replicas))
        object.__setattr__(self, "isr", tuple(self.isr))


@dataclass(frozen=True, slots=True)
class TopicDeletionRecord:
    """DeleteTopics accepted: the topic is queued for deletion until its replicas are gone."""

    TYPE: ClassVar[str] = "topic_deletion"
    topic_id: bytes


@dataclass(frozen=True, slots=True)
class RemoveTopicRecord:
    """The topic's replicas are deleted: it and its partitions are forgotten."""

    TYPE: ClassVar[str] = "remove_topic"
    topic_id: bytes


@dataclass(frozen=True, slots=True)
class ProducerIdsRecord:
    """A block of producer ids went to `broker_id` (at `broker_epoch`): every id below
    `next_producer_id` is taken (KIP-730). Only the newest one matters for replay; a snapshot
    keeps it as it was, even if that broker has re-registered since."""

    TYPE: ClassVar[str] = "producer_ids"
    broker_id: int
    broker_epoch: int
    next_producer_id: int


@dataclass(frozen=True, slots=True)
class AccessControlEntryRecord:
    """An ACL (KRaft's AccessControlEntryRecord): a resource pattern and an access control
    entry, with Kafka's ids for the types (actors/acl/bindings.py). `id` (16 bytes, a Uuid)
    names it for its RemoveAccessControlEntryRecord."""

    TYPE: ClassVar[str] = "access_control_entry"
    id: bytes
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission_type: int


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntryRecord:
    """The ACL `id` is deleted (DeleteAcls)."""

    TYPE: ClassVar[str] = "remove_access_control_entry"
    id: bytes


@dataclass(frozen=True, slots=True)
class UserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism (KRaft's UserScramCredentialRecord):
    `mechanism` is Kafka's type code (1 SCRAM-SHA-256, 2 SCRAM-SHA-512). Never the password
    nor the salted password: StoredKey and ServerKey are all a server needs (runtime/net/scram.py).
    Replaces the user's earlier credential for the mechanism."""

    TYPE: ClassVar[str] = "user_scram_credential"
    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredentialRecord:
    """The user's credential for `mechanism` is deleted (AlterUserScramCredentials)."""

    TYPE: ClassVar[str] = "remove_user_scram_credential"
    name: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class ClientQuotaRecord:
    """One quota value of one entity set or removed (KRaft's ClientQuotaRecord, AlterClientQuotas):
    `entity` is its (entity type, name) components (`user`, `client-id`; name None for
    `<default>`), sorted by type; `value` is ignored when `remove`."""

    TYPE: ClassVar[str] = "client_quota"
    entity: tuple[tuple[str, str | None], ...]
    key: str
    value: float
    remove: bool = False


Record: TypeAlias = (
    ControllerEpochRecord
    | ClusterIdRecord
    | RegisterBrokerRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | TopicRecord
    | TopicConfigsRecord
    | PartitionRecord
    | TopicDeletionRecord
    | RemoveTopicRecord
    | ProducerIdsRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
    | ClientQuotaRecord
)
RECORD_TYPES: Final[tuple[type[Record], ...]] = (
    ControllerEpochRecord,
    ClusterIdRecord,
    RegisterBrokerRecord,
    FenceBrokerRecord,
    UnfenceBrokerRecord,
    TopicRecord,
    TopicConfigsRecord,
    PartitionRecord,
    TopicDeletionRecord,
    RemoveTopicRecord,
    ProducerIdsRecord,
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    UserScramCredentialRecord,
    RemoveUserScramCredentialRecord,
    ClientQuotaRecord,
)
_BY_TYPE: Final[Mapping[str, type[Record]]] = {cls.TYPE: cls for cls in RECORD_TYPES}


# ---------------------------------------------------------------------------------------------
# Encoding: one codec per field, (to msgpack value, from msgpack value raising ValueError).

_Codec: TypeAlias = tuple[Callable[[Any], Any], Callable[[Any], Any]]


def _expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    # bool is an int to isinstance, but a bool where a number belongs is a malformed record.
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise ValueError(f"{what}: expected {kind}, got {type(value).__name__}")
    return value


def _decode_int(value: Any) -> int:
    return int(_expect(value, int, "int field"))


def _decode_bool(value: Any) -> bool:
    return bool(_expect(value, bool, "bool field"))


def _decode_bytes(value: Any) -> bytes:
    return bytes(_expect(value, bytes, "bytes field"))


def _decode_str(value: Any) -> str:
    return str(_expect(value, str, "str field"))


def _decode_optional_str(value: Any) -> str | None:
    return None if value is None else _decode_str(value)


def _decode_ints(value: Any) -> tuple[int, ...]:
    return tuple(_decode_int(v) for v in _expect(value, (list, tuple), "int list"))


def _decode_bytes_list(value: Any) -> tuple[bytes, ...]:
    return tuple(_decode_bytes(v) for v in _expect(value, (list, tuple), "bytes list"))


def _decode_endpoints(value: Any) -> tuple[Endpoint, ...]:
    endpoints = []
    for item in _expect(value, (list, tuple), "endpoint list"):
        if len(_expect(item, (list, tuple), "endpoint")) != 3:
            raise ValueError(f"endpoint {item!r} is not [listener, host, port]")
        endpoints.append(Endpoint(_decode_str(item[0]), _decode_str(item[1]), _decode_int(item[2])))
    return tuple(endpoints)


def _decode_configs(value: Any) -> dict[str, str]:
    items = _expect(value, dict, "configs").items()
    return {_decode_str(k): _decode_str(v) for k, v in items}


def _decode_float(value: Any) -> float:
    # msgpack keeps a float a float; an int is taken too (a whole value written by hand).
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected float field, got {value!r}")
    return float(value)


def _decode_quota_entity(value: Any) -> tuple[tuple[str, str | None], ...]:
    components = []
    for item in _expect(value, (list, tuple), "quota entity"):
        if len(_expect(item, (list, tuple), "quota entity component")) != 2:
            raise ValueError(f"quota entity component {item!r} is not [type, name]")
        components.append((_decode_str(item[0]), _decode_optional_str(item[1])))
    return tuple(components)


def _same(value: Any) -> Any:
    return value


def _as_list(value: tuple[Any, ...]) -> list[Any]:
    return [list(v) if isinstance(v, tuple) else v for v in value]


_CODECS: Final[Mapping[str, _Codec]] = {
    "epoch": (_same, _decode_int),
    "cluster_id": (_same, _decode_str),
    "broker_id": (_same, _decode_int),
    "broker_epoch": (_same, _decode_int),
    "incarnation_id": (_same, _decode_bytes),
    "endpoints": (_as_list, _decode_endpoints),
    "rack": (_same, _decode_optional_str),
    "fenced": (_same, _decode_bool),
    "log_dirs": (list, _decode_bytes_list),
    "name": (_same, _decode_str),
    "topic_id": (_same, _decode_bytes),
    "configs": (dict, _decode_configs),
    "partition": (_same, _decode_int),
    "replicas": (list, _decode_ints),
    "isr": (list, _decode_ints),
    "leader": (_same, _decode_int),
    "leader_epoch": (_same, _decode_int),
    "partition_epoch": (_same, _decode_int),
    "next_producer_id": (_same, _decode_int),
    "id": (_same, _decode_bytes),
    "resource_type": (_same, _decode_int),
    "resource_name": (_same, _decode_str),
    "pattern_type": (_same, _decode_int),
    "principal": (_same, _decode_str),
    "host": (_same, _decode_str),
    "operation": (_same, _decode_int),
    "permission_type": (_same, _decode_int),
    "mechanism": (_same, _decode_int),
    "salt": (_same, _decode_bytes),
    "stored_key": (_same, _decode_bytes),
    "server_key": (_same, _decode_bytes),
    "iterations": (_same, _decode_int),
    "entity": (_as_list, _decode_quota_entity),
    "key": (_same, _decode_str),
    "value": (_same, _decode_float),
    "remove": (_same, _decode_bool),
}


def encode_record(record: Record) -> dict[str, Any]:
    """A dict of msgpack types (int, str, bytes, bool, None, list, dict) with the kind in "type"."""
    encoded: dict[str, Any] = {"type": record.TYPE}
    for f in fields(record):
        encoded[f.name] = _CODECS[f.name][0](getattr(record, f.name))
    return encoded


def decode_record(data: Mapping[str, Any]) -> Record:
    """The record `encode_record` made; ValueError for an unknown type or a malformed field."""
    kind = data.get("type")
    cls = _BY_TYPE.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown metadata record type {kind!r}")
    specs = {f.name: f for f in fields(cls)}
    extra = set(data) - set(specs) - {"type"}
    if extra:
        raise ValueError(f"{kind} record has unknown fields {sorted(extra)}")
    values: dict[str, Any] = {}
    for name, spec in specs.items():
        if name not in data:
            if spec.default is not MISSING or spec.default_factory is not MISSING:
                continue  # a field added later: records written before it take its default
            raise ValueError(f"{kind} record lacks field {name!r}")
        try:
            values[name] = _CODECS[name][1](data[name])
        except ValueError as exc:
            raise ValueError(f"{kind}.{name}: {exc}") from exc
    return cls(**values)
