"""FindCoordinator on a cluster without the coordinator's topic (node/broker/groups.py): the
topic is created with exactly its configured replication factor, and not at all while fewer
brokers are alive, as in Kafka; the answer meanwhile is COORDINATOR_NOT_AVAILABLE saying why."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import cast

from actors.group.config import GroupCoordinatorConfig
from actors.group.coordinator import GroupCoordinator
from actors.metadata_cache import AliveBroker, BrokerEndpoint, MetadataSnapshot
from actors.transactions.config import TransactionConfig
from actors.transactions.coordinator import TransactionCoordinator
from node.broker.groups import BrokerGroups
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC
from wire.messages import (
    CreatableTopic,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    FindCoordinatorRequest,
)
from wire.messages.groups import COORDINATOR_GROUP, COORDINATOR_TRANSACTION
from wire.transaction_log import TRANSACTION_STATE_TOPIC


class _Coordinator:
    """What BrokerGroups reads of a coordinator: its config and the key's partition."""

    def __init__(self, config: object) -> None:
        self.config = config

    def partition_of(self, key: str) -> int:
        return 0


def _snapshot(alive: int) -> MetadataSnapshot:
    brokers = {
        b: AliveBroker(b, (BrokerEndpoint("PLAINTEXT", "127.0.0.1", 9092 + b),))
        for b in range(alive)
    }
    return MetadataSnapshot(brokers=brokers)


class _Cluster:
    def __init__(self, alive: int, properties: Mapping[str, object]) -> None:
        self.metadata = _snapshot(alive)
        self.created: list[CreatableTopic] = []
        self.groups = BrokerGroups(
            cast(
                GroupCoordinator,
                _Coordinator(GroupCoordinatorConfig.from_properties(properties)),
            ),
            metadata=lambda: self.metadata,
            create_topics=self._create,
            transactions=cast(
                TransactionCoordinator,
                _Coordinator(TransactionConfig.from_properties(properties)),
            ),
        )

    async def _create(self, request: CreateTopicsRequest) -> CreateTopicsResponse:
        self.created.extend(request.topics)
        return CreateTopicsResponse(
            topics=[CreatableTopicResult(name=t.name) for t in request.topics]
        )

    async def find(self, key_type: int) -> tuple[ErrorCode, str]:
        answer = await self.groups.find_coordinator(
            FindCoordinatorRequest(key_type=key_type, coordinator_keys=["k"]), "PLAINTEXT"
        )
        await asyncio.sleep(0)  # the creation task, when one was started, runs
        [coordinator] = answer.coordinators
        return ErrorCode.from_code(coordinator.error_code), coordinator.error_message or ""


async def test_too_few_live_brokers_create_no_internal_topic_and_say_why() -> None:
    cluster = _Cluster(alive=2, properties={})
    try:
        code, message = await cluster.find(COORDINATOR_GROUP)
        assert code is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert "offsets.topic.replication.factor" in message
        assert "2 are alive" in message
        code, message = await cluster.find(COORDINATOR_TRANSACTION)
        assert code is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert "transaction.state.log.replication.factor" in message
        assert cluster.created == []  # no topic with fewer replicas than configured, ever

        # The third broker registers: both topics are created with three replicas.
        cluster.metadata = _snapshot(3)
        assert (await cluster.find(COORDINATOR_GROUP))[0] is ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert (await cluster.find(COORDINATOR_TRANSACTION))[0] is (
            ErrorCode.COORDINATOR_NOT_AVAILABLE
        )
        factors = {t.name: t.replication_factor for t in cluster.created}
        assert factors == {OFFSETS_TOPIC: 3, TRANSACTION_STATE_TOPIC: 3}
        [txn] = [t for t in cluster.created if t.name == TRANSACTION_STATE_TOPIC]
        assert {c.name: c.value for c in txn.configs}["min.insync.replicas"] == "2"
    finally:
        await cluster.groups.stop()


async def test_a_lowered_factor_serves_a_one_broker_cluster() -> None:
    properties = {
        "offsets.topic.replication.factor": 1,
        "transaction.state.log.replication.factor": 1,
    }
    cluster = _Cluster(alive=1, properties=properties)
    try:
        await cluster.find(COORDINATOR_GROUP)
        await cluster.find(COORDINATOR_TRANSACTION)
        assert {t.name: t.replication_factor for t in cluster.created} == {
            OFFSETS_TOPIC: 1,
            TRANSACTION_STATE_TOPIC: 1,
        }
        # transaction.state.log.min.isr left at 2 is capped at the factor, or no transaction
        # could ever complete.
        [txn] = [t for t in cluster.created if t.name == TRANSACTION_STATE_TOPIC]
        assert {c.name: c.value for c in txn.configs}["min.insync.replicas"] == "1"
    finally:
        await cluster.groups.stop()
