"""MetadataCache: UpdateMetadata applied, stale controllers refused, deleted partitions returned,
Metadata answers (unknown topics, unavailable leaders), alive brokers and endpoints, brokers in
controlled shutdown (KIP-841)."""

from __future__ import annotations

import dataclasses

import pytest

from actors.metadata_cache import (
    BrokerEndpoint,
    MetadataCache,
    StaleControllerEpochError,
)
from wire.errors import ErrorCode
from wire.messages import (
    MetadataRequest,
    MetadataRequestTopic,
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
)
from wire.topic import TopicPartition

ORDERS_ID = bytes(range(1, 17))
AUDIT_ID = bytes(range(17, 33))


def broker(broker_id: int, *, kafka: bool = False) -> UpdateMetadataBroker:
    endpoints = [UpdateMetadataEndpoint(host="10.0.0.1", port=9092 + broker_id, listener="native")]
    if kafka:
        endpoints.append(
            UpdateMetadataEndpoint(host="10.0.0.1", port=19092 + broker_id, listener="kafka")
        )
    return UpdateMetadataBroker(id=broker_id, endpoints=endpoints, rack=f"rack-{broker_id % 2}")


def state(
    topic: str,
    partition: int,
    leader: int,
    *,
    isr: list[int] | None = None,
    replicas: list[int] | None = None,
    leader_epoch: int = 1,
    offline: list[int] | None = None,
    topic_id: bytes = ORDERS_ID,
) -> UpdateMetadataPartitionState:
    return UpdateMetadataPartitionState(
        topic_name=topic,
        topic_id=topic_id,
        partition_index=partition,
        controller_epoch=1,
        leader=leader,
        leader_epoch=leader_epoch,
        isr=[0, 1, 2] if isr is None else isr,
        partition_epoch=4,
        replicas=[0, 1, 2] if replicas is None else replicas,
        offline_replicas=offline or [],
    )


def update(
    states: list[UpdateMetadataPartitionState],
    brokers: list[UpdateMetadataBroker] | None = None,
    *,
    controller_epoch: int = 1,
    controller_id: int = 100,
) -> UpdateMetadataRequest:
    return UpdateMetadataRequest(
        controller_id=controller_id,
        controller_epoch=controller_epoch,
        partition_states=states,
        live_brokers=[broker(0), broker(1), broker(2)] if brokers is None else brokers,
    )


def test_empty_cache_knows_nothing() -> None:
    snapshot = MetadataCache().snapshot
    assert snapshot.alive_broker_ids() == frozenset()
    assert snapshot.controller_id == -1
    assert snapshot.partition_state(TopicPartition("orders", 0)) is None
    assert snapshot.topic_metadata() == []


def test_update_stores_brokers_partitions_and_controller() -> None:
    cache = MetadataCache()
    deleted = cache.update(
        update([state("orders", 0, 1, leader_epoch=3), state("orders", 1, 2, isr=[2, 0])])
    )
    assert deleted == []
    snapshot = cache.snapshot
    assert (snapshot.controller_id, snapshot.controller_epoch) == (100, 1)
    assert snapshot.alive_broker_ids() == {0, 1, 2}
    p1 = snapshot.partition_state(TopicPartition("orders", 1))
    assert p1 is not None
    assert (p1.leader, p1.isr, p1.replicas, p1.partition_epoch) == (2, (2, 0), (0, 1, 2), 4)
    assert snapshot.topic_id("orders") == ORDERS_ID
    assert snapshot.leader_endpoint(TopicPartition("orders", 0)) == BrokerEndpoint(
        "native", "10.0.0.1", 9093
    )


def test_snapshots_are_immutable_and_old_ones_stay_valid() -> None:
    cache = MetadataCache()
    cache.update(update([state("orders", 0, 1), state("audit", 0, 2, topic_id=AUDIT_ID)]))
    before = cache.snapshot
    cache.update(update([state("orders", 0, 2, leader_epoch=2)], [broker(0), broker(2)]))
    after = cache.snapshot
    old_state = before.partition_state(TopicPartition("orders", 0))
    new_state = after.partition_state(TopicPartition("orders", 0))
    assert old_state is not None
    assert new_state is not None
    assert (old_state.leader, new_state.leader) == (1, 2)
    assert before.is_broker_alive(1)
    assert not after.is_broker_alive(1)
    assert after.topics["audit"] is before.topics["audit"], "untouched topics are shared"
    with pytest.raises(TypeError):
        after.topics["x"] = after.topics["audit"]  # type: ignore[index]
    with pytest.raises(TypeError):
        after.topics["orders"].partitions[9] = new_state  # type: ignore[index]


def test_stale_controller_epoch_is_refused_and_changes_nothing() -> None:
    cache = MetadataCache()
    cache.update(update([state("orders", 0, 1)], controller_epoch=5))
    before = cache.snapshot
    with pytest.raises(StaleControllerEpochError) as raised:
        cache.update(update([state("orders", 0, 2)], [broker(2)], controller_epoch=4))
    assert raised.value.error_code is ErrorCode.STALE_CONTROLLER_EPOCH
    assert (raised.value.controller_epoch, raised.value.known_epoch) == (4, 5)
    assert cache.snapshot is before
    # The same epoch is the same controller (its later requests); a higher one a new controller.
    cache.update(update([state("orders", 0, 2)], controller_epoch=5, controller_id=100))
    cache.update(update([], controller_epoch=6, controller_id=101))
    assert (cache.snapshot.controller_id, cache.snapshot.controller_epoch) == (101, 6)
    leader = cache.snapshot.partition_state(TopicPartition("orders", 0))
    assert leader is not None
    assert leader.leader == 2, "partitions not mentioned are kept"


def test_leader_during_delete_removes_partitions_and_returns_them() -> None:
    cache = MetadataCache()
    cache.update(
        update(
            [state("orders", 0, 1), state("orders", 1, 2), state("audit", 0, 0, topic_id=AUDIT_ID)]
        )
    )
    deleted = cache.update(update([state("orders", 1, -2), state("audit", 0, -2)]))
    assert deleted == [TopicPartition("orders", 1), TopicPartition("audit", 0)]
    snapshot = cache.snapshot
    assert snapshot.contains(TopicPartition("orders", 0))
    assert not snapshot.contains(TopicPartition("orders", 1))
    assert not snapshot.has_topic("audit"), "a topic without partitions is gone"
    [audit] = snapshot.topic_metadata(["audit"])
    assert audit.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_topic_names_by_id_follow_creation_and_deletion() -> None:
    cache = MetadataCache()
    cache.update(update([state("orders", 0, 1), state("audit", 0, 0, topic_id=AUDIT_ID)]))
    before = cache.snapshot
    assert before.topic_name(ORDERS_ID) == "orders"
    assert before.topic_name(AUDIT_ID) == "audit"
    assert before.topic_name(bytes(16)) is None
    cache.update(update([state("audit", 0, -2)]))
    assert cache.snapshot.topic_name(AUDIT_ID) is None
    assert cache.snapshot.topic_name(ORDERS_ID) == "orders"
    assert before.topic_name(AUDIT_ID) == "audit", "an older snapshot keeps its view"


def test_metadata_answers_unknown_topics_and_unavailable_leaders() -> None:
    cache = MetadataCache()
    cache.update(
        update(
            [
                state("orders", 0, 1, leader_epoch=7),
                state("orders", 1, 3, leader_epoch=2, offline=[3]),  # leader not alive
                state("orders", 2, -1, isr=[2], leader_epoch=9),  # no leader at all
            ]
        )
    )
    topics = cache.snapshot.topic_metadata(["orders", "missing", "orders"])
    assert [t.name for t in topics] == ["orders", "missing"], "asked twice, answered once"
    orders, missing = topics
    assert missing.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert missing.partitions == []
    assert orders.error_code == ErrorCode.NONE
    assert orders.topic_id == ORDERS_ID
    p0, p1, p2 = orders.partitions
    assert (p0.error_code, p0.leader_id, p0.leader_epoch) == (ErrorCode.NONE, 1, 7)
    assert (p0.replica_nodes, p0.isr_nodes) == ([0, 1, 2], [0, 1, 2])
    assert (p1.error_code, p1.leader_id, p1.leader_epoch) == (ErrorCode.LEADER_NOT_AVAILABLE, -1, 2)
    assert p1.offline_replicas == [3]
    assert (p2.error_code, p2.leader_id, p2.isr_nodes) == (ErrorCode.LEADER_NOT_AVAILABLE, -1, [2])


def test_metadata_response_by_listener_by_id_and_for_all_topics() -> None:
    cache = MetadataCache()
    cache.update(
        update(
            [
                state("orders", 0, 1),
                state("audit", 0, 0, topic_id=AUDIT_ID),
                state("__consumer_offsets", 0, 2, topic_id=bytes(16)),
            ],
            [broker(0, kafka=True), broker(1), broker(2, kafka=True)],
        )
    )
    snapshot = cache.snapshot
    everything = snapshot.metadata_response(MetadataRequest(), cluster_id="c1")
    assert [t.name for t in everything.topics] == ["__consumer_offsets", "audit", "orders"]
    assert [t.is_internal for t in everything.topics] == [True, False, False]
    assert [b.node_id for b in everything.brokers] == [0, 1, 2]
    assert (everything.controller_id, everything.cluster_id) == (100, "c1")

    # On the Kafka listener broker 1 has no endpoint: it is left out, and so is it as a leader.
    kafka = snapshot.metadata_response(
        MetadataRequest(topics=[MetadataRequestTopic(name="orders")]), listener="kafka"
    )
    assert [(b.node_id, b.port) for b in kafka.brokers] == [(0, 19092), (2, 19094)]
    [orders] = kafka.topics
    assert orders.partitions[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE

    by_id = snapshot.metadata_response(
        MetadataRequest(
            topics=[
                MetadataRequestTopic(topic_id=AUDIT_ID),
                MetadataRequestTopic(topic_id=b"x" * 16),
            ]
        )
    )
    assert [(t.name, t.error_code) for t in by_id.topics] == [
        ("audit", ErrorCode.NONE),
        ("", ErrorCode.UNKNOWN_TOPIC_ID),
    ]
    assert snapshot.metadata_response(MetadataRequest(topics=[])).topics == []


def test_alive_brokers_and_endpoints_for_fetchers_and_isr_expansion() -> None:
    cache = MetadataCache()
    cache.update(update([state("orders", 0, 2)], [broker(0), broker(2, kafka=True)]))
    snapshot = cache.snapshot
    assert snapshot.alive_broker_ids() == {0, 2}
    assert snapshot.is_broker_alive(2)
    assert not snapshot.is_broker_alive(1)
    assert snapshot.endpoint(1) is None
    assert snapshot.endpoint(2, "kafka") == BrokerEndpoint("kafka", "10.0.0.1", 19094)
    assert snapshot.endpoint(0, "kafka") is None
    tp = TopicPartition("orders", 0)
    assert snapshot.leader_endpoint(tp) == BrokerEndpoint("native", "10.0.0.1", 9094)
    # The leader's broker dies: the fetcher has nowhere to go until metadata names a new one.
    cache.update(update([], [broker(0)]))
    assert cache.snapshot.leader_endpoint(tp) is None
    assert not cache.snapshot.is_broker_alive(2)
    assert snapshot.is_broker_alive(2), "a reader's snapshot does not change under it"


def test_a_broker_in_controlled_shutdown_is_alive_but_no_isr_candidate() -> None:
    """KIP-841: the cache keeps UpdateMetadata's in_controlled_shutdown, and a leader asks
    `is_replica_eligible` before it proposes or counts a replica for the ISR."""
    cache = MetadataCache()
    leaving = dataclasses.replace(broker(2), in_controlled_shutdown=True)
    cache.update(update([], [broker(0), broker(1), leaving]))
    snapshot = cache.snapshot
    assert snapshot.brokers[2].in_controlled_shutdown
    assert not snapshot.brokers[1].in_controlled_shutdown
    assert snapshot.is_broker_alive(2), "still alive: it serves and is listed to clients"
    assert snapshot.endpoint(2) is not None
    assert [b.node_id for b in snapshot.response_brokers()] == [0, 1, 2]
    assert [snapshot.is_replica_eligible(b) for b in (0, 1, 2, 3)] == [True, True, False, False]
    # The next UpdateMetadata without the flag (its shutdown was cancelled) makes it eligible.
    cache.update(update([], [broker(0), broker(1), broker(2)]))
    assert cache.snapshot.is_replica_eligible(2)
