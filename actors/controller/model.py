"""The controller's durable metadata: the records of its metadata log and the model they build.

Everything the controller must remember across a restart — the cluster id, its epoch, the
registered brokers, the topics and their config overrides, every partition's assignment,
leader, ISR and epochs, the deletions under way, where the next block of producer ids starts,
the ACLs and the client quotas — is written as a record before it is acted on (the znodes of
Kafka's ZooKeeper controller, the metadata records of KRaft). Replaying the records in order
rebuilds an equal `ControllerModel`, and `snapshot()` condenses a model into the few records that
rebuild it, so the log can be cut.

The records and their codec are formats, so they live in wire/metadata_records.py.

`apply` asserts the invariants the controller must keep (a violation is a controller bug, never
an expected error): the cluster id is set once and never changes; the controller epoch never
decreases; broker epochs only grow, each registration issuing one larger than any before; a
partition's ISR is a non-empty subset of its replicas and its leader is in the ISR or -1; its
leader epoch grows whenever the leader changes, its partition epoch whenever the replicas or ISR
change, and neither ever decreases; the next producer id only grows, so no block of producer
ids is handed out twice.

Owner: the controller actor, from its own task (and its replay at startup); nothing else holds a
reference, so no lock is needed. Pure: no I/O, no clock, no asyncio.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, replace
from typing import Final, assert_never

from actors.controller.election import topics_collide, validate_topic_name
from actors.views import NO_LEADER
from wire.errors import ErrorCode
from wire.metadata_records import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    ClusterIdRecord,
    ControllerEpochRecord,
    Endpoint,
    FenceBrokerRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicConfigsRecord,
    TopicDeletionRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UserScramCredentialRecord,
)
from wire.topic import TopicPartition, uuid_text

TOPIC_ID_BYTES: Final = 16
PRODUCER_ID_BLOCK_SIZE: Final = 1_000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE
MAX_PRODUCER_ID: Final = 2**63 - 1  # producer ids are Kafka int64s
QuotaEntityKey = tuple[tuple[str, str | None], ...]  # ClientQuotaRecord.entity


# ---------------------------------------------------------------------------------------------
# The model.


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A registered broker as the model knows it (the latest registration plus fencing)."""

    broker_id: int
    incarnation_id: bytes
    broker_epoch: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    log_dirs: tuple[bytes, ...] = ()  # its log directories' ids (empty: it sent none)


def is_valid_topic_id(topic_id: bytes) -> bool:
    return len(topic_id) == TOPIC_ID_BYTES and topic_id != bytes(TOPIC_ID_BYTES)


class ControllerModel:
    """Brokers, topics, partitions and epochs, built only by `apply`-ing records."""

    def __init__(self) -> None:
        self._cluster_id: str | None = None
        self._controller_epoch = 0
        self._brokers: dict[int, BrokerRegistration] = {}
        self._max_broker_epoch = -1
        self._topics: dict[bytes, TopicRecord] = {}
        self._topic_ids: dict[str, bytes] = {}
        self._partitions: dict[bytes, dict[int, PartitionRecord]] = {}
        # Insertion-ordered, so deletions resume in the order they were asked for.
        self._deleting: dict[bytes, None] = {}
        self._producer_ids: ProducerIdsRecord | None = None  # the newest block handed out
        # ACLs by id, in creation order (a snapshot writes them back in it).
        self._acls: dict[bytes, AccessControlEntryRecord] = {}
        # SCRAM credentials by (user, mechanism type code); no passwords (wire/metadata_records).
        self._scram: dict[tuple[str, int], UserScramCredentialRecord] = {}
        # Client quotas: entity (its sorted components) -> key -> value (AlterClientQuotas).
        self._client_quotas: dict[QuotaEntityKey, dict[str, float]] = {}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ControllerModel):
            return NotImplemented
        return self._state() == other._state()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"ControllerModel(epoch={self._controller_epoch}, brokers={sorted(self._brokers)}, "
            f"topics={sorted(self._topic_ids)}, deleting={len(self._deleting)})"
        )

    def _state(self) -> tuple[object, ...]:
        return (
            self._cluster_id,
            self._controller_epoch,
            self._brokers,
            self._max_broker_epoch,
            self._topics,
            self._partitions,
            list(self._deleting),
            self._producer_ids,
            list(self._acls.values()),
            self._scram,
            self._client_quotas,
        )

    # -- applying records ------------------------------------------------------------------

    def apply(self, record: Record) -> None:
        match record:
            case ControllerEpochRecord():
                self._apply_controller_epoch(record)
            case ClusterIdRecord():
                self._apply_cluster_id(record)
            case RegisterBrokerRecord():
                self._apply_register(record)
            case FenceBrokerRecord():
                self._apply_fencing(record.broker_id, record.broker_epoch, fenced=True)
            case UnfenceBrokerRecord():
                self._apply_fencing(record.broker_id, record.broker_epoch, fenced=False)
            case TopicRecord():
                self._apply_topic(record)
            case TopicConfigsRecord():
                self._apply_topic_configs(record)
            case PartitionRecord():
                self._apply_partition(record)
            case TopicDeletionRecord():
                self._apply_topic_deletion(record)
            case RemoveTopicRecord():
                self._apply_remove_topic(record)
            case ProducerIdsRecord():
                self._apply_producer_ids(record)
            case AccessControlEntryRecord():
                assert record.id not in self._acls, f"ACL id in use: {record}"
                self._acls[record.id] = record
            case RemoveAccessControlEntryRecord():
                removed = self._acls.pop(record.id, None)
                assert removed is not None, f"unknown ACL: {record}"
            case UserScramCredentialRecord():
                self._scram[(record.name, record.mechanism)] = record
            case RemoveUserScramCredentialRecord():
                gone = self._scram.pop((record.name, record.mechanism), None)
                assert gone is not None, f"unknown SCRAM credential: {record}"
            case ClientQuotaRecord():
                self._apply_client_quota(record)
            case _:
                assert_never(record)

    def _apply_controller_epoch(self, record: ControllerEpochRecord) -> None:
        assert record.epoch >= self._controller_epoch, (
            f"controller epoch going back: {self._controller_epoch} -> {record.epoch}"
        )
        self._controller_epoch = record.epoch

    def _apply_cluster_id(self, record: ClusterIdRecord) -> None:
        # A second, different id would make the brokers that stored the first refuse to join.
        assert record.cluster_id, record
        assert self._cluster_id in (None, record.cluster_id), (
            f"cluster id changing: {self._cluster_id} -> {record.cluster_id}"
        )
        self._cluster_id = record.cluster_id

    def _apply_register(self, record: RegisterBrokerRecord) -> None:
        assert record.broker_id >= 0, record
        assert record.broker_epoch > self._max_broker_epoch, (
            f"broker epoch {record.broker_epoch} not above {self._max_broker_epoch}: {record}"
        )
        self._brokers[record.broker_id] = BrokerRegistration(
            record.broker_id,
            record.incarnation_id,
            record.broker_epoch,
            record.endpoints,
            record.rack,
            record.fenced,
            record.log_dirs,
        )
        self._max_broker_epoch = record.broker_epoch

    def _apply_fencing(self, broker_id: int, broker_epoch: int, *, fenced: bool) -> None:
        broker = self._brokers.get(broker_id)
        assert broker is not None, f"fencing unknown broker {broker_id}"
        # A fencing decision is about one registration; one for an older registration is a bug.
        assert broker.broker_epoch == broker_epoch, (
            f"fencing broker {broker_id} at epoch {broker_epoch}, registered at "
            f"{broker.broker_epoch}"
        )
        self._brokers[broker_id] = replace(broker, fenced=fenced)

    def _apply_topic(self, record: TopicRecord) -> None:
        assert validate_topic_name(record.name) is ErrorCode.NONE, record
        assert is_valid_topic_id(record.topic_id), record
        assert record.name not in self._topic_ids, f"topic {record.name} exists"
        assert record.topic_id not in self._topics, f"topic id {record.topic_id.hex()} in use"
        self._topics[record.topic_id] = record
        self._topic_ids[record.name] = record.topic_id
        self._partitions[record.topic_id] = {}

    def _apply_topic_configs(self, record: TopicConfigsRecord) -> None:
        topic = self._topics.get(record.topic_id)
        assert topic is not None, f"configs of unknown topic: {record}"
        # The topic keeps one record of itself, its configs the latest ones: a snapshot writes
        # it back as one TopicRecord.
        self._topics[record.topic_id] = replace(topic, configs=record.configs)

    def _apply_partition(self, record: PartitionRecord) -> None:
        partitions = self._partitions.get(record.topic_id)
        assert partitions is not None, f"partition of unknown topic: {record}"
        _check_partition_record(record)
        previous = partitions.get(record.partition)
        if previous is not None:
            _check_partition_change(previous, record)
        partitions[record.partition] = record

    def _apply_topic_deletion(self, record: TopicDeletionRecord) -> None:
        assert record.topic_id in self._topics, f"deleting unknown topic: {record}"
        assert record.topic_id not in self._deleting, f"deletion queued twice: {record}"
        self._deleting[record.topic_id] = None

    def _apply_remove_topic(self, record: RemoveTopicRecord) -> None:
        topic = self._topics.pop(record.topic_id, None)
        assert topic is not None, f"removing unknown topic: {record}"
        del self._topic_ids[topic.name]
        del self._partitions[record.topic_id]
        self._deleting.pop(record.topic_id, None)

    def _apply_producer_ids(self, record: ProducerIdsRecord) -> None:
        # Growing strictly is what makes ids unique across restarts: a record that went back
        # (or stood still) would hand out a block a second time.
        assert self.next_producer_id() < record.next_producer_id <= MAX_PRODUCER_ID + 1, (
            f"next producer id {self.next_producer_id()} -> {record.next_producer_id}"
        )
        self._producer_ids = record

    # -- snapshot --------------------------------------------------------------------------

    def snapshot(self) -> list[Record]:
        """Records that rebuild an equal model when applied to an empty one, in an order that
        satisfies `apply`'s checks (the cluster id, registrations by ascending broker epoch,
        each topic before its partitions, deletions, then the newest producer-id block)."""
        records: list[Record] = []
        if self._cluster_id is not None:
            records.append(ClusterIdRecord(self._cluster_id))
        records.append(ControllerEpochRecord(self._controller_epoch))
        for b in sorted(self._brokers.values(), key=lambda b: b.broker_epoch):
            records.append(
                RegisterBrokerRecord(
                    b.broker_id,
                    b.incarnation_id,
                    b.broker_epoch,
                    b.endpoints,
                    b.rack,
                    b.fenced,
                    b.log_dirs,
                )
            )
        for topic in self.topics():
            records.append(topic)
            records.extend(self.partitions_of(topic.topic_id))
        records.extend(TopicDeletionRecord(topic_id) for topic_id in self._deleting)
        if self._producer_ids is not None:
            records.append(self._producer_ids)
        records.extend(self._acls.values())
        records.extend(self._scram.values())
        records.extend(
            ClientQuotaRecord(entity, key, value)
            for entity, values in self._client_quotas.items()
            for key, value in values.items()
        )
        return records

    # -- queries ---------------------------------------------------------------------------

    @property
    def cluster_id(self) -> str | None:
        """The cluster's id; None until the first start of the controller has written one."""
        return self._cluster_id

    @property
    def controller_epoch(self) -> int:
        return self._controller_epoch

    def next_broker_epoch(self) -> int:
        """The epoch for the next registration: above every broker epoch ever issued."""
        return self._max_broker_epoch + 1

    def next_producer_id(self) -> int:
        """The first producer id not yet handed out in any block."""
        return 0 if self._producer_ids is None else self._producer_ids.next_producer_id

    def scram_credentials(self) -> list[UserScramCredentialRecord]:
        """Every SCRAM credential, by user name, then mechanism."""
        return [self._scram[key] for key in sorted(self._scram)]

    def scram_credential(self, name: str, mechanism: int) -> UserScramCredentialRecord | None:
        return self._scram.get((name, mechanism))

    def client_quotas(self) -> dict[QuotaEntityKey, dict[str, float]]:
        """Every client quota entity with its values (a copy)."""
        return {entity: dict(values) for entity, values in self._client_quotas.items()}

    def _apply_client_quota(self, record: ClientQuotaRecord) -> None:
        values = self._client_quotas.setdefault(record.entity, {})
        if record.remove:
            values.pop(record.key, None)
        else:
            values[record.key] = record.value
        if not values:
            del self._client_quotas[record.entity]  # an entity with no quota left is gone

    def acls(self) -> list[AccessControlEntryRecord]:
        """Every ACL, in creation order."""
        return list(self._acls.values())

    def broker(self, broker_id: int) -> BrokerRegistration | None:
        return self._brokers.get(broker_id)

    def brokers(self) -> list[BrokerRegistration]:
        return [self._brokers[i] for i in sorted(self._brokers)]

    def unfenced_broker_ids(self) -> list[int]:
        return sorted(i for i, b in self._brokers.items() if not b.fenced)

    def topic_by_name(self, name: str) -> TopicRecord | None:
        topic_id = self._topic_ids.get(name)
        return None if topic_id is None else self._topics[topic_id]

    def topic_by_id(self, topic_id: bytes) -> TopicRecord | None:
        return self._topics.get(topic_id)

    def topics(self) -> list[TopicRecord]:
        """Every topic, including those queued for deletion, by name."""
        return [self._topics[self._topic_ids[name]] for name in sorted(self._topic_ids)]

    def colliding_topic(self, name: str) -> str | None:
        """An existing topic `name` would collide with (same name with "." read as "_")."""
        return next((t for t in sorted(self._topic_ids) if topics_collide(name, t)), None)

    def partition(self, topic_id: bytes, partition: int) -> PartitionRecord | None:
        return self._partitions.get(topic_id, {}).get(partition)

    def partitions_of(self, topic_id: bytes) -> list[PartitionRecord]:
        partitions = self._partitions.get(topic_id, {})
        return [partitions[p] for p in sorted(partitions)]

    def topic_partition(self, record: PartitionRecord) -> TopicPartition:
        """The name-keyed identity the state machines and the brokers' logs use."""
        return TopicPartition(self._topics[record.topic_id].name, record.partition)

    def partition_by_name(self, tp: TopicPartition) -> PartitionRecord | None:
        topic_id = self._topic_ids.get(tp.topic)
        return None if topic_id is None else self.partition(topic_id, tp.partition)

    def all_partitions(self) -> list[PartitionRecord]:
        """Every partition, by topic name then partition number."""
        return [p for topic in self.topics() for p in self.partitions_of(topic.topic_id)]

    def partitions_led_by(self, broker_id: int) -> list[PartitionRecord]:
        return [p for p in self.all_partitions() if p.leader == broker_id]

    def partitions_hosted_on(self, broker_id: int) -> list[PartitionRecord]:
        return [p for p in self.all_partitions() if broker_id in p.replicas]

    def topics_queued_for_deletion(self) -> list[TopicRecord]:
        """In the order the deletions were asked for."""
        return [self._topics[topic_id] for topic_id in self._deleting]

    def is_queued_for_deletion(self, topic_id: bytes) -> bool:
        return topic_id in self._deleting

    def new_topic_id(self, rng: random.Random | None = None) -> bytes:
        """A fresh topic id: a version-4 UUID's 16 bytes (from `rng` when given, for
        reproducible tests), never all-zero (Kafka's "no id") and not in use."""
        while True:
            if rng is None:
                candidate = uuid.uuid4().bytes
            else:
                candidate = uuid.UUID(int=rng.getrandbits(128), version=4).bytes
            if is_valid_topic_id(candidate) and candidate not in self._topics:
                return candidate


def new_cluster_id(rng: random.Random | None = None) -> str:
    """A fresh cluster id as Kafka makes one (`Uuid.randomUuid().toString()`): a version-4 UUID
    in URL-safe base64 without padding, 22 characters, never all-zero, and never starting with
    "-", which a command line would read as a flag (Kafka skips those too). From `rng` when
    given, for reproducible tests."""
    while True:
        if rng is None:
            raw = uuid.uuid4().bytes
        else:
            raw = uuid.UUID(int=rng.getrandbits(128), version=4).bytes
        text = uuid_text(raw)
        if raw != bytes(TOPIC_ID_BYTES) and not text.startswith("-"):
            return text


def _check_partition_record(record: PartitionRecord) -> None:
    assert record.partition >= 0, record
    assert record.replicas, f"no replicas: {record}"
    assert len(set(record.replicas)) == len(record.replicas), f"duplicate replicas: {record}"
    assert all(r >= 0 for r in record.replicas), record
    # Empty only when the last ISR member lost its data (liveness.forget_lost_replicas).
    assert record.isr or record.leader == NO_LEADER, f"empty ISR with a leader: {record}"
    assert len(set(record.isr)) == len(record.isr), f"duplicate ISR members: {record}"
    assert set(record.isr) <= set(record.replicas), f"ISR outside the replicas: {record}"
    assert record.leader == NO_LEADER or record.leader in record.isr, f"leader not in ISR: {record}"
    assert record.leader_epoch >= 0, record
    assert record.partition_epoch >= 0, record


def _check_partition_change(previous: PartitionRecord, record: PartitionRecord) -> None:
    assert record.leader_epoch >= previous.leader_epoch, f"leader epoch back: {record}"
    assert record.partition_epoch >= previous.partition_epoch, f"partition epoch back: {record}"
    if record.leader != previous.leader:
        # Replicas tell leaderships apart by epoch: a new leader under an old epoch is invisible.
        assert record.leader_epoch > previous.leader_epoch, (
            f"leader {previous.leader} -> {record.leader} without a new leader epoch: {record}"
        )
    if record.isr != previous.isr or record.replicas != previous.replicas:
        assert record.partition_epoch > previous.partition_epoch, (
            f"ISR/replicas changed without a new partition epoch: {previous} -> {record}"
        )
