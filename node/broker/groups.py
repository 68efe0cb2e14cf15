"""A broker's consumer-group service: the GroupCoordinator and FindCoordinator (the group APIs'
handlers are in node/broker/apis.py, with every other API's).

FindCoordinator answers with the leader of the group's `__consumer_offsets` partition at the
asking listener's address (so a Kafka client gets a Kafka-listener address). The first
FindCoordinator on a cluster without the offsets topic creates it through the controller, as
Kafka's brokers do on first use: offsets.topic.num.partitions partitions,
min(offsets.topic.replication.factor, live brokers) replicas, compacted; the answer meanwhile
is COORDINATOR_NOT_AVAILABLE, which clients retry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from actors.group.coordinator import GroupCoordinator
from actors.metadata_cache import MetadataSnapshot
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC
from wire.messages import (
    Coordinator,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from wire.messages.groups import COORDINATOR_GROUP
from wire.topic import TopicPartition

log = logging.getLogger(__name__)

OFFSETS_SEGMENT_BYTES: Final = "104857600"  # Kafka's offsets.topic.segment.bytes
NO_TRANSACTIONS: Final = "ketch has no transaction coordinator: transactions are not supported"


class BrokerGroups:
    def __init__(
        self,
        coordinator: GroupCoordinator,
        *,
        metadata: Callable[[], MetadataSnapshot],
        create_topics: Callable[[CreateTopicsRequest], Awaitable[CreateTopicsResponse]],
    ) -> None:
        self.coordinator = coordinator
        self._metadata = metadata
        self._create_topics = create_topics
        self._creating: asyncio.Task[None] | None = None

    async def find_coordinator(
        self, request: FindCoordinatorRequest, listener: str
    ) -> FindCoordinatorResponse:
        if request.key_type != COORDINATOR_GROUP:
            return _unavailable(request.coordinator_keys, NO_TRANSACTIONS)
        metadata = self._metadata()
        if not metadata.has_topic(OFFSETS_TOPIC):
            self._create_offsets_topic(metadata)
            return _unavailable(request.coordinator_keys, f"creating {OFFSETS_TOPIC}")
        answers = []
        for key in request.coordinator_keys:
            tp = TopicPartition(OFFSETS_TOPIC, self.coordinator.partition_of(key))
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

    def _create_offsets_topic(self, metadata: MetadataSnapshot) -> None:
        if self._creating is not None and not self._creating.done():
            return
        config = self.coordinator.config
        replicas = min(config.offsets_topic_replication_factor, len(metadata.alive_broker_ids()))
        request = CreateTopicsRequest(
            topics=[
                CreatableTopic(
                    name=OFFSETS_TOPIC,
                    num_partitions=config.offsets_topic_num_partitions,
                    replication_factor=max(replicas, 1),
                    configs=[
                        CreatableTopicConfig(name="cleanup.policy", value="compact"),
                        CreatableTopicConfig(
                            name="segment.bytes", value=str(OFFSETS_SEGMENT_BYTES)
                        ),
                    ],
                )
            ]
        )

        async def create() -> None:
            response = await self._create_topics(request)
            for result in response.topics:
                if result.error_code not in (ErrorCode.NONE, ErrorCode.TOPIC_ALREADY_EXISTS):
                    log.warning(
                        "creating %s failed: %s %s",
                        OFFSETS_TOPIC,
                        ErrorCode.from_code(result.error_code).name,
                        result.error_message or "",
                    )

        self._creating = asyncio.get_running_loop().create_task(create())

    async def stop(self) -> None:
        task, self._creating = self._creating, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _unavailable(keys: list[str], message: str) -> FindCoordinatorResponse:
    return FindCoordinatorResponse(
        coordinators=[
            Coordinator(
                key=key, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE, error_message=message
            )
            for key in keys
        ]
    )
