"""A broker's coordinators and FindCoordinator: the GroupCoordinator on `__consumer_offsets` and
the TransactionCoordinator on `__transaction_state` (their APIs' handlers are in
node/broker/apis.py, with every other API's, except DeleteGroups, OffsetDelete,
ConsumerGroupHeartbeat and ConsumerGroupDescribe, whose handlers are here and which apis.py's
table names).

OffsetDelete answers a partition the cluster does not have UNKNOWN_TOPIC_OR_PARTITION without
asking the coordinator, as Kafka's KafkaApis does; the group's own errors come from the
coordinator either way.

FindCoordinator answers with the leader of the key's partition of the coordinator's topic at the
asking listener's address (so a Kafka client gets a Kafka-listener address). The first
FindCoordinator on a cluster without that topic creates it through the controller, as Kafka's
brokers do on first use: compacted, with the coordinator's partition count and exactly its
replication factor (`offsets.topic.replication.factor`,
`transaction.state.log.replication.factor`); the answer meanwhile is COORDINATOR_NOT_AVAILABLE,
which clients retry.

While fewer brokers are alive than that factor, the topic is not created, as in Kafka since
KAFKA-3959: capping the factor at the live brokers (as ketch once did) made a cluster whose
other brokers had not yet registered create `__consumer_offsets` with one replica for good, so
that one broker's death later lost every group on it. A cluster with fewer than three brokers
sets the factors to its size (`ketch up` and the test harness do; see node/layout.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from actors.group.coordinator import GroupCoordinator
from actors.metadata_cache import MetadataSnapshot
from actors.transactions.coordinator import TransactionCoordinator
from runtime.net.dialect import RequestContext
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC
from wire.messages import (
    ZERO_UUID,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    Coordinator,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    OffsetDeleteRequest,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from wire.messages.groups import COORDINATOR_GROUP, COORDINATOR_TRANSACTION
from wire.topic import TopicPartition
from wire.transaction_log import TRANSACTION_STATE_TOPIC

log = logging.getLogger(__name__)

OFFSETS_SEGMENT_BYTES: Final = "104857600"  # Kafka's offsets.topic.segment.bytes
NO_TRANSACTIONS: Final = "ketch has no transaction coordinator: transactions are not supported"


@dataclass(frozen=True, slots=True)
class _InternalTopic:
    """An internal topic a coordinator lives on: how a key maps to its partition, and how to
    create it on first use."""

    name: str
    partition_of: Callable[[str], int]
    create: Callable[[], CreatableTopic]
    factor_property: str  # the property naming its replication factor


class BrokerGroups:
    def __init__(
        self,
        coordinator: GroupCoordinator,
        *,
        metadata: Callable[[], MetadataSnapshot],
        create_topics: Callable[[CreateTopicsRequest], Awaitable[CreateTopicsResponse]],
        transactions: TransactionCoordinator | None = None,
    ) -> None:
        self.coordinator = coordinator
        self.transactions = transactions
        self._metadata = metadata
        self._create_topics = create_topics
        self._creating: dict[str, asyncio.Task[None]] = {}
        # The live-broker count last logged as too few for each internal topic.
        self._short_logged: dict[str, int] = {}
        self._view: tuple[MetadataSnapshot | None, Mapping[str, tuple[bytes, int]]] = (None, {})
        self._topics = {
            COORDINATOR_GROUP: _InternalTopic(
                OFFSETS_TOPIC,
                coordinator.partition_of,
                self._offsets_topic,
                "offsets.topic.replication.factor",
            )
        }
        if transactions is not None:
            self._topics[COORDINATOR_TRANSACTION] = _InternalTopic(
                TRANSACTION_STATE_TOPIC,
                transactions.partition_of,
                self._transaction_topic,
                "transaction.state.log.replication.factor",
            )

    async def find_coordinator(
        self, request: FindCoordinatorRequest, listener: str
    ) -> FindCoordinatorResponse:
        topic = self._topics.get(request.key_type)
        if topic is None:
            if request.key_type == COORDINATOR_TRANSACTION:
                return _unavailable(request.coordinator_keys, NO_TRANSACTIONS)
            return FindCoordinatorResponse(
                coordinators=[
                    Coordinator(
                        key=key,
                        error_code=ErrorCode.INVALID_REQUEST,
                        error_message=f"unknown coordinator key type {request.key_type}",
                    )
                    for key in request.coordinator_keys
                ]
            )
        metadata = self._metadata()
        if not metadata.has_topic(topic.name):
            creatable = topic.create()
            alive = len(metadata.alive_broker_ids())
            if alive < creatable.replication_factor:
                message = (
                    f"{topic.name} needs {creatable.replication_factor} live brokers "
                    f"({topic.factor_property}) and {alive} are alive; it is created once "
                    "enough brokers are up"
                )
                if self._short_logged.get(topic.name) != alive:  # once per count, not per ask
                    self._short_logged[topic.name] = alive
                    log.warning("%s (expected while a cluster starts)", message)
                return _unavailable(request.coordinator_keys, message)
            self._create_topic(topic.name, creatable)
            return _unavailable(request.coordinator_keys, f"creating {topic.name}")
        answers = []
        for key in request.coordinator_keys:
            tp = TopicPartition(topic.name, topic.partition_of(key))
            state = metadata.partition_state(tp)
            endpoint = metadata.leader_endpoint(tp, listener)
            if state is None or endpoint is None:
                answers.append(
                    Coordinator(
                        key=key,
                        error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        error_message=f"{tp.topic}-{tp.partition} has no leader",
                    )
                )
            else:
                answers.append(
                    Coordinator(
                        key=key, node_id=state.leader, host=endpoint.host, port=endpoint.port
                    )
                )
        return FindCoordinatorResponse(coordinators=answers)

    async def delete_groups(
        self, request: DeleteGroupsRequest, ctx: RequestContext
    ) -> DeleteGroupsResponse:
        return await self.coordinator.delete_groups(request)

    async def consumer_group_heartbeat(
        self, request: ConsumerGroupHeartbeatRequest, ctx: RequestContext
    ) -> ConsumerGroupHeartbeatResponse:
        return await self.coordinator.consumer_group_heartbeat(
            request,
            client_id=ctx.client_id or "",
            client_host="/" + ctx.peer.rsplit(":", 1)[0],
            topics=self._topics_view(),
        )

    async def consumer_group_describe(
        self, request: ConsumerGroupDescribeRequest, ctx: RequestContext
    ) -> ConsumerGroupDescribeResponse:
        return await self.coordinator.consumer_group_describe(request)

    def _topics_view(self) -> Mapping[str, tuple[bytes, int]]:
        """The topics a consumer group's assignor sees (name -> id, partition count), built
        once per metadata snapshot: heartbeats come often, metadata changes seldom."""
        metadata = self._metadata()
        if self._view[0] is not metadata:
            view = {
                name: (topic.topic_id, len(topic.partitions))
                for name, topic in metadata.topics.items()
                if topic.topic_id != ZERO_UUID  # a consumer group names topics by id
            }
            self._view = (metadata, MappingProxyType(view))
        return self._view[1]

    async def offset_delete(
        self, request: OffsetDeleteRequest, ctx: RequestContext
    ) -> OffsetDeleteResponse:
        metadata = self._metadata()
        unknown: set[tuple[str, int]] = set()
        known: list[OffsetDeleteRequestTopic] = []
        for topic in request.topics:
            present = []
            for p in topic.partitions:
                if metadata.contains(TopicPartition(topic.name, p.partition_index)):
                    present.append(p)
                else:
                    unknown.add((topic.name, p.partition_index))
            if present:
                known.append(OffsetDeleteRequestTopic(name=topic.name, partitions=present))
        answered = await self.coordinator.offset_delete(
            OffsetDeleteRequest(group_id=request.group_id, topics=known)
        )
        if answered.error_code != ErrorCode.NONE or not unknown:
            return answered
        codes = {
            (topic.name, p.partition_index): p.error_code
            for topic in answered.topics
            for p in topic.partitions
        }
        codes.update(dict.fromkeys(unknown, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        return OffsetDeleteResponse(
            topics=[
                OffsetDeleteResponseTopic(
                    name=topic.name,
                    partitions=[
                        OffsetDeleteResponsePartition(
                            partition_index=p.partition_index,
                            error_code=codes[(topic.name, p.partition_index)],
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ]
        )

    def _offsets_topic(self) -> CreatableTopic:
        config = self.coordinator.config
        return CreatableTopic(
            name=OFFSETS_TOPIC,
            num_partitions=config.offsets_topic_num_partitions,
            replication_factor=config.offsets_topic_replication_factor,
            configs=[
                CreatableTopicConfig(name="cleanup.policy", value="compact"),
                CreatableTopicConfig(name="segment.bytes", value=str(OFFSETS_SEGMENT_BYTES)),
            ],
        )

    def _transaction_topic(self) -> CreatableTopic:
        """Its replication factor and min.insync.replicas (Kafka's 3 and 2 by default). The
        min ISR is capped at the factor: a one-broker cluster that lowered only the factor could
        otherwise never complete a transaction (Kafka leaves it stuck on NOT_ENOUGH_REPLICAS)."""
        assert self.transactions is not None
        config = self.transactions.config
        replicas = config.replication_factor
        return CreatableTopic(
            name=TRANSACTION_STATE_TOPIC,
            num_partitions=config.num_partitions,
            replication_factor=replicas,
            configs=[
                CreatableTopicConfig(name="cleanup.policy", value="compact"),
                CreatableTopicConfig(name="segment.bytes", value=str(config.segment_bytes)),
                CreatableTopicConfig(
                    name="min.insync.replicas", value=str(min(config.min_isr, replicas))
                ),
            ],
        )

    def _create_topic(self, name: str, topic: CreatableTopic) -> None:
        running = self._creating.get(name)
        if running is not None and not running.done():
            return
        request = CreateTopicsRequest(topics=[topic])

        async def create() -> None:
            response = await self._create_topics(request)
            for result in response.topics:
                if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                    log.warning(
                        "creating %s failed: %s %s",
                        name,
                        ErrorCode.from_code(result.error_code).name,
                        result.error_message or "",
                    )

        self._creating[name] = asyncio.get_running_loop().create_task(create())

    async def stop(self) -> None:
        tasks, self._creating = list(self._creating.values()), {}
        for task in tasks:
            if not task.done():
                task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _unavailable(keys: list[str], message: str) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(
        coordinators=[
            Coordinator(
                key=key, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=message
            )
            for key in keys
        ]
    )
