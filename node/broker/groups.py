"""A broker's consumer-group service: the GroupCoordinator, FindCoordinator, and the handlers of
the group APIs for both listeners.

FindCoordinator answers with the leader of the group's `__consumer_offsets` partition at the
asking listener's address (so a Kafka client gets a Kafka-listener address). The first
FindCoordinator on a cluster without the offsets topic creates it through the controller, as
Kafka's brokers do on first use: offsets.topic.num.partitions partitions,
min(offsets.topic.replication.factor, live brokers) replicas, compacted; the answer meanwhile
is COORDINATOR_NOT_AVAILABLE, which clients retry.

JoinGroup from a Kafka client of version 4 or later first gets MEMBER_ID_REQUIRED with its
member id (KIP-394); older Kafka versions and native clients get it in the join's answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from actors.group.coordinator import GroupCoordinator
from actors.metadata_cache import MetadataSnapshot
from runtime.net.server import Handler, RequestContext
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC
from wire.messages import (
    ApiKey,
    Coordinator,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from wire.messages.groups import COORDINATOR_GROUP
from wire.topic import TopicPartition

log = logging.getLogger(__name__)

# KIP-394: from JoinGroup v4 a new member first learns its id from MEMBER_ID_REQUIRED.
KNOWN_MEMBER_ID_VERSION: Final = 4
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

    def handlers(self, listener: str, *, kafka: bool) -> dict[int, Handler]:
        async def find_coordinator(
            request: FindCoordinatorRequest, ctx: RequestContext
        ) -> FindCoordinatorResponse:
            return await self.find_coordinator(request, listener)

        async def join_group(request: JoinGroupRequest, ctx: RequestContext) -> JoinGroupResponse:
            return await self.coordinator.join_group(
                request,
                client_id=ctx.client_id or "",
                client_host="/" + ctx.peer.rsplit(":", 1)[0],
                require_known_member_id=not kafka or ctx.api_version >= KNOWN_MEMBER_ID_VERSION,
            )

        async def sync_group(request: SyncGroupRequest, ctx: RequestContext) -> SyncGroupResponse:
            return await self.coordinator.sync_group(request)

        async def heartbeat(request: HeartbeatRequest, ctx: RequestContext) -> HeartbeatResponse:
            return await self.coordinator.heartbeat(request)

        async def leave_group(
            request: LeaveGroupRequest, ctx: RequestContext
        ) -> LeaveGroupResponse:
            return await self.coordinator.leave_group(request)

        async def offset_commit(
            request: OffsetCommitRequest, ctx: RequestContext
        ) -> OffsetCommitResponse:
            return await self.coordinator.offset_commit(request)

        async def offset_fetch(
            request: OffsetFetchRequest, ctx: RequestContext
        ) -> OffsetFetchResponse:
            return await self.coordinator.offset_fetch(request)

        async def describe_groups(
            request: DescribeGroupsRequest, ctx: RequestContext
        ) -> DescribeGroupsResponse:
            return await self.coordinator.describe_groups(request)

        async def list_groups(
            request: ListGroupsRequest, ctx: RequestContext
        ) -> ListGroupsResponse:
            return await self.coordinator.list_groups(request)

        return {
            ApiKey.FIND_COORDINATOR: find_coordinator,
            ApiKey.JOIN_GROUP: join_group,
            ApiKey.SYNC_GROUP: sync_group,
            ApiKey.HEARTBEAT: heartbeat,
            ApiKey.LEAVE_GROUP: leave_group,
            ApiKey.OFFSET_COMMIT: offset_commit,
            ApiKey.OFFSET_FETCH: offset_fetch,
            ApiKey.DESCRIBE_GROUPS: describe_groups,
            ApiKey.LIST_GROUPS: list_groups,
        }

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
