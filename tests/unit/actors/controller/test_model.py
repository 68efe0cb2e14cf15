"""The controller model: invariants asserted on apply, queries, and snapshot() rebuilding an equal
model for random histories (the records' codec is tested in tests/unit/wire)."""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.controller.election import assign_replicas
from actors.controller.model import (
    ControllerModel,
    is_valid_topic_id,
    new_cluster_id,
)
from tests.unit.wire.metadata_helpers import through_msgpack
from wire.errors import ErrorCode
from wire.metadata_records import (
    RECORD_TYPES,
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
from wire.topic import TopicPartition, parse_uuid_text

ORDERS = bytes(range(1, 17))
AUDIT = bytes(range(17, 33))
EP = (Endpoint("native", "127.0.0.1", 9092),)

# -- apply and queries -------------------------------------------------------------------------


def cluster() -> ControllerModel:
    records: list[Record] = [
        ControllerEpochRecord(1),
        RegisterBrokerRecord(0, b"a", 0, EP, None, fenced=False),
        RegisterBrokerRecord(1, b"b", 1, EP, None, fenced=False),
        RegisterBrokerRecord(2, b"c", 2, EP, "r2"),
        TopicRecord("orders", ORDERS, {"min.insync.replicas": "2"}),
        PartitionRecord(ORDERS, 0, (0, 1, 2), (0, 1, 2), 0, 0, 0),
        PartitionRecord(ORDERS, 1, (1, 2, 0), (1, 2, 0), 1, 0, 0),
        TopicRecord("audit", AUDIT),
        PartitionRecord(AUDIT, 0, (2,), (2,), 2, 0, 0),
    ]
    return replay(records)


def test_queries() -> None:
    model = cluster()
    assert model.controller_epoch == 1
    assert model.next_broker_epoch() == 3
    assert [b.broker_id for b in model.brokers()] == [0, 1, 2]
    assert model.unfenced_broker_ids() == [0, 1]
    assert model.broker(2) is not None
    assert model.broker(2).rack == "r2"  # type: ignore[union-attr]
    assert model.broker(9) is None
    orders = model.topic_by_name("orders")
    assert orders is not None
    assert orders.topic_id == ORDERS
    assert model.topic_by_id(AUDIT) == TopicRecord("audit", AUDIT)
    assert [t.name for t in model.topics()] == ["audit", "orders"]
    assert [p.partition for p in model.partitions_of(ORDERS)] == [0, 1]
    assert [(p.topic_id, p.partition) for p in model.partitions_led_by(2)] == [(AUDIT, 0)]
    assert len(model.partitions_hosted_on(0)) == 2
    assert len(model.partitions_hosted_on(2)) == 3
    part = model.partition(ORDERS, 1)
    assert part is not None
    assert model.topic_partition(part) == TopicPartition("orders", 1)
    assert model.partition_by_name(TopicPartition("orders", 1)) == part
    assert model.partition_by_name(TopicPartition("nope", 0)) is None
    assert model.colliding_topic("orders") is None
    model.apply(TopicRecord("a.b", bytes(range(40, 56))))
    assert model.colliding_topic("a_b") == "a.b"


def test_broker_lifecycle() -> None:
    model = cluster()
    model.apply(FenceBrokerRecord(0, 0))
    assert model.unfenced_broker_ids() == [1]
    model.apply(UnfenceBrokerRecord(2, 2))
    assert model.unfenced_broker_ids() == [1, 2]
    # A restarted broker re-registers: new incarnation, larger epoch, fenced until unfenced.
    model.apply(RegisterBrokerRecord(1, b"b2", model.next_broker_epoch(), EP, None))
    broker = model.broker(1)
    assert broker is not None
    assert (broker.incarnation_id, broker.broker_epoch, broker.fenced) == (b"b2", 3, True)
    assert model.next_broker_epoch() == 4
    with pytest.raises(AssertionError):  # the old registration's epoch
        model.apply(UnfenceBrokerRecord(1, 1))


def test_topic_deletion_lifecycle() -> None:
    model = cluster()
    model.apply(TopicDeletionRecord(AUDIT))
    model.apply(TopicDeletionRecord(ORDERS))
    assert [t.name for t in model.topics_queued_for_deletion()] == ["audit", "orders"]
    assert model.is_queued_for_deletion(ORDERS)
    model.apply(RemoveTopicRecord(AUDIT))
    assert model.topic_by_name("audit") is None
    assert model.partitions_of(AUDIT) == []
    assert model.partitions_led_by(2) == []
    assert [t.name for t in model.topics_queued_for_deletion()] == ["orders"]
    # The name is free again, under a new id.
    model.apply(TopicRecord("audit", bytes(range(60, 76))))


def change(model: ControllerModel, topic_id: bytes, partition: int, **fields: Any) -> None:
    current = model.partition(topic_id, partition)
    assert current is not None
    values: dict[str, Any] = {
        "replicas": current.replicas,
        "isr": current.isr,
        "leader": current.leader,
        "leader_epoch": current.leader_epoch,
        "partition_epoch": current.partition_epoch,
    }
    values.update(fields)
    model.apply(PartitionRecord(topic_id, partition, **values))


@pytest.mark.parametrize(
    ("record", "why"),
    [
        (ControllerEpochRecord(0), "controller epoch going back"),
        (RegisterBrokerRecord(5, b"x", 2, EP, None), "broker epoch not above every issued"),
        (FenceBrokerRecord(7, 0), "unknown broker"),
        (TopicRecord("orders", bytes(range(90, 106))), "name in use"),
        (TopicRecord("other", ORDERS), "id in use"),
        (TopicRecord("other", bytes(16)), "all-zero id"),
        (TopicRecord("other", b"short"), "id not 16 bytes"),
        (TopicRecord("bad name", bytes(range(90, 106))), "illegal name"),
        (PartitionRecord(bytes(range(90, 106)), 0, (0,), (0,), 0, 0, 0), "unknown topic"),
        (PartitionRecord(ORDERS, 5, (), (0,), 0, 0, 0), "no replicas"),
        (PartitionRecord(ORDERS, 5, (0, 0), (0,), 0, 0, 0), "duplicate replicas"),
        (PartitionRecord(ORDERS, 5, (0, 1), (), 0, 0, 0), "empty ISR with a leader"),
        (PartitionRecord(ORDERS, 5, (0, 1), (0, 2), 0, 0, 0), "ISR outside replicas"),
        (PartitionRecord(ORDERS, 5, (0, 1), (0,), 1, 0, 0), "leader outside ISR"),
        (PartitionRecord(ORDERS, -1, (0,), (0,), 0, 0, 0), "negative partition"),
        (TopicDeletionRecord(bytes(range(90, 106))), "deleting an unknown topic"),
        (RemoveTopicRecord(bytes(range(90, 106))), "removing an unknown topic"),
    ],
)
def test_invariant_violations_are_assertions(record: Record, why: str) -> None:
    model = cluster()
    with pytest.raises(AssertionError):
        model.apply(record)
    assert model == cluster(), f"a refused record ({why}) changed nothing"


@pytest.mark.parametrize(
    ("fields", "legal"),
    [
        ({"leader": 1, "leader_epoch": 1, "partition_epoch": 1}, True),
        ({"leader": 1, "leader_epoch": 1}, True),  # leadership only: the leader epoch says it
        ({"leader": 1}, False),  # new leader under the old leader epoch
        ({"leader": -1, "leader_epoch": 1}, True),
        ({"isr": (0, 1), "partition_epoch": 1}, True),  # AlterPartition shrink
        ({"isr": (0, 1)}, False),  # ISR change without a new partition epoch
        ({"replicas": (0, 1, 2, 3), "partition_epoch": 1}, True),
        ({"replicas": (0, 1, 2, 3)}, False),
        ({"leader_epoch": 1}, True),  # controller bumps the epoch alone
        ({"partition_epoch": 1}, True),
        ({}, True),  # a repeat of the same state is harmless
    ],
)
def test_partition_epoch_rules(fields: dict[str, Any], legal: bool) -> None:
    model = cluster()
    if legal:
        change(model, ORDERS, 0, **fields)
        assert model.partition(ORDERS, 0) == PartitionRecord(
            ORDERS,
            0,
            fields.get("replicas", (0, 1, 2)),
            fields.get("isr", (0, 1, 2)),
            fields.get("leader", 0),
            fields.get("leader_epoch", 0),
            fields.get("partition_epoch", 0),
        )
    else:
        with pytest.raises(AssertionError):
            change(model, ORDERS, 0, **fields)


def test_epochs_never_go_back() -> None:
    model = cluster()
    change(model, ORDERS, 0, leader_epoch=5, partition_epoch=5)
    with pytest.raises(AssertionError):
        change(model, ORDERS, 0, leader_epoch=4)
    with pytest.raises(AssertionError):
        change(model, ORDERS, 0, partition_epoch=4)
    model.apply(ControllerEpochRecord(1))  # the same epoch again is not a decrease
    model.apply(ControllerEpochRecord(4))
    assert model.controller_epoch == 4


def test_the_cluster_id_is_written_once_and_kept_by_snapshots() -> None:
    model = cluster()
    assert replay(model.snapshot()).cluster_id is None
    model.apply(ClusterIdRecord("first"))
    model.apply(ClusterIdRecord("first"))  # the same id again changes nothing
    assert model.cluster_id == "first"
    with pytest.raises(AssertionError):
        model.apply(ClusterIdRecord("second"))
    assert model.cluster_id == "first"
    snapshot = model.snapshot()
    assert snapshot[0] == ClusterIdRecord("first")
    assert replay([through_msgpack(r) for r in snapshot]).cluster_id == "first"


def test_new_cluster_ids_are_kafka_uuid_texts() -> None:
    seed = 11
    rng = random.Random(seed)
    ids = [new_cluster_id(rng) for _ in range(2_000)]
    assert len(set(ids)) == len(ids), f"seed={seed}"
    for text in ids:
        assert len(text) == 22, text
        assert not text.startswith("-"), f"seed={seed}: {text} reads as a flag"
        raw = parse_uuid_text(text)
        assert raw[6] >> 4 == 4, f"seed={seed}: {text} is not a version-4 UUID"
    assert new_cluster_id(random.Random(seed)) == ids[0], "the same seed, the same id"
    assert new_cluster_id() != new_cluster_id()


def test_new_topic_ids_are_fresh_uuid4_bytes() -> None:
    model = cluster()
    rng = random.Random(7)
    ids = {model.new_topic_id(rng) for _ in range(100)}
    assert len(ids) == 100
    assert all(is_valid_topic_id(i) for i in ids)
    assert all(i[6] >> 4 == 4 for i in ids), "version-4 UUIDs"
    assert model.new_topic_id() not in {ORDERS, AUDIT}
    assert model.new_topic_id(random.Random(7)) == model.new_topic_id(random.Random(7))


# -- random histories: snapshot rebuilds an equal model ---------------------------------------


TOPIC_NAMES = ["orders", "audit", "a.b", "a_b", "logs"]


def random_record(model: ControllerModel, rng: random.Random) -> Record | None:
    """One valid next record for `model`, or None when the chosen kind does not apply now."""
    brokers = model.brokers()
    topics = model.topics()
    kinds = ["epoch", "register", "fence", "unfence", "topic", "queue", "remove", "producer_ids"]
    kinds.append("configs")
    kinds.append("scram")
    kinds.append("acl")
    kinds.append("client_quota")
    kind = rng.choice([*kinds, "cluster_id", "change", "change", "change"])
    if kind == "epoch":
        return ControllerEpochRecord(model.controller_epoch + rng.randint(0, 2))
    if kind == "cluster_id":
        # Written once; a repeat of the same id is harmless, another id a bug (asserted).
        return ClusterIdRecord(model.cluster_id or new_cluster_id(rng))
    if kind == "register":
        endpoints = tuple(
            Endpoint(
                rng.choice(["native", "kafka"]),
                f"10.0.0.{rng.randint(1, 9)}",
                rng.randint(1, 65535),
            )
            for _ in range(rng.randint(0, 2))
        )
        return RegisterBrokerRecord(
            rng.randint(0, 5),
            rng.randbytes(16),
            model.next_broker_epoch() + rng.randint(0, 3),
            endpoints,
            rng.choice([None, "r1", "r2"]),
            rng.random() < 0.5,
        )
    if kind in {"fence", "unfence"} and brokers:
        broker = rng.choice(brokers)
        cls = FenceBrokerRecord if kind == "fence" else UnfenceBrokerRecord
        return cls(broker.broker_id, broker.broker_epoch)
    if kind == "topic" and brokers:
        name = rng.choice(TOPIC_NAMES)
        if model.topic_by_name(name) is not None or model.colliding_topic(name) is not None:
            return None
        configs = {"min.insync.replicas": str(rng.randint(1, 3))} if rng.random() < 0.5 else {}
        return TopicRecord(name, model.new_topic_id(rng), configs)
    if kind == "change" and topics:
        topic = rng.choice(topics)
        existing = model.partitions_of(topic.topic_id)
        number = rng.randint(0, len(existing))  # sometimes the next, new partition
        current = model.partition(topic.topic_id, number)
        if current is None:
            if not brokers:
                return None
            ids = [b.broker_id for b in brokers]
            assignment = assign_replicas(ids, 1, rng.randint(1, len(ids)), rng=rng)
            assert not isinstance(assignment, ErrorCode)
            replicas = tuple(assignment[0])
            return PartitionRecord(topic.topic_id, number, replicas, replicas, replicas[0], 0, 0)
        isr = tuple(r for r in current.replicas if rng.random() < 0.6) or current.replicas[:1]
        leader = rng.choice([*isr, -1])
        leader_epoch = current.leader_epoch + (leader != current.leader or rng.random() < 0.2)
        partition_epoch = current.partition_epoch + (isr != current.isr or rng.random() < 0.2)
        return PartitionRecord(
            topic.topic_id, number, current.replicas, isr, leader, leader_epoch, partition_epoch
        )
    if kind == "configs" and topics:
        configs = {"retention.ms": str(rng.randint(1, 9) * 1000)} if rng.random() < 0.7 else {}
        return TopicConfigsRecord(rng.choice(topics).topic_id, configs)
    if kind == "queue":
        candidates = [t for t in topics if not model.is_queued_for_deletion(t.topic_id)]
        return TopicDeletionRecord(rng.choice(candidates).topic_id) if candidates else None
    if kind == "producer_ids" and brokers:
        broker = rng.choice(brokers)
        step = rng.choice([1, 1_000, 5_000])
        return ProducerIdsRecord(
            broker.broker_id, broker.broker_epoch, model.next_producer_id() + step
        )
    if kind == "scram":
        name, mechanism = rng.choice(["alice", "bob"]), rng.choice([1, 2])
        if model.scram_credential(name, mechanism) is not None and rng.random() < 0.4:
            return RemoveUserScramCredentialRecord(name, mechanism)
        keys = rng.randbytes(32)
        return UserScramCredentialRecord(name, mechanism, rng.randbytes(8), keys, keys, 4096)
    if kind == "acl":
        acls = model.acls()
        if acls and rng.random() < 0.4:
            return RemoveAccessControlEntryRecord(rng.choice(acls).id)
        acl_id = rng.randbytes(16)
        return AccessControlEntryRecord(acl_id, 2, rng.choice(["a", "b"]), 3, "User:u", "*", 3, 3)
    if kind == "client_quota":
        entity = rng.choice([(("client-id", "c"),), (("client-id", None), ("user", "u"))])
        key = rng.choice(["producer_byte_rate", "consumer_byte_rate"])
        return ClientQuotaRecord(entity, key, float(rng.randint(1, 9) * 1000), rng.random() < 0.3)
    if kind == "remove" and topics and rng.random() < 0.3:
        return RemoveTopicRecord(rng.choice(topics).topic_id)
    return None


def replay(records: list[Record]) -> ControllerModel:
    model = ControllerModel()
    for record in records:
        model.apply(record)
    return model


def check_history(seed: int, steps: int) -> None:
    rng = random.Random(seed)
    model = ControllerModel()
    log: list[Record] = []
    for step in range(steps):
        record = random_record(model, rng)
        if record is None:
            continue
        model.apply(record)
        log.append(through_msgpack(record))
        if step % 25 == 0 or step == steps - 1:
            snapshot = model.snapshot()
            rebuilt = replay([through_msgpack(r) for r in snapshot])
            assert rebuilt == model, f"seed={seed} step={step}"
            assert rebuilt.snapshot() == snapshot, f"seed={seed} step={step}"
            assert rebuilt.next_broker_epoch() == model.next_broker_epoch(), f"seed={seed}"
            assert rebuilt.next_producer_id() == model.next_producer_id(), f"seed={seed}"
            assert replay(log) == model, f"seed={seed} step={step}: the log replays"
            # Cut the log at the snapshot: the snapshot plus the records after it must keep
            # replaying to the live model at the next check.
            log = list(snapshot)


@settings(max_examples=100)
@given(st.integers(0, 2**32 - 1))
def test_snapshot_rebuilds_an_equal_model(seed: int) -> None:
    check_history(seed, steps=200)


def test_a_long_history_exercises_every_record_type() -> None:
    seed = 20261122
    rng = random.Random(seed)
    model = ControllerModel()
    seen: set[type] = set()
    for _ in range(2000):
        record = random_record(model, rng)
        if record is not None:
            model.apply(record)
            seen.add(type(record))
    assert seen == set(RECORD_TYPES), f"seed={seed}: {seen}"
    assert replay(model.snapshot()) == model, f"seed={seed}"
    assert model != ControllerModel()
