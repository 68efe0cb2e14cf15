"""`BrokerApis`: every API a broker serves, one handler each, for both listeners (KafkaApis).

One table maps an API key to its handler; the native listener and the Kafka listener serve the
same table. What differs between them is decided from the request's `RequestContext.listener`,
in the handler, not by a second table:

    Metadata         the listener's own addresses; on the Kafka listener the answering broker
                     named as controller (below)
    DescribeCluster  native: forwarded to the controller; Kafka: answered from the broker's
                     metadata, as Kafka's brokers answer it
    FindCoordinator  the coordinator's address on the asking listener
    JoinGroup        MEMBER_ID_REQUIRED first for Kafka JoinGroup v4+ (KIP-394) and for every
                     native client; older Kafka versions get the member id in the join's answer

Metadata carries the cluster id on both listeners, and on both may create the unknown topics it
is asked for (allow_auto_topic_creation and auto.create.topics.enable: node/broker/auto_topics.py).

What each listener may reach is decided by the listener, not here: the native server refuses the
control-plane APIs (LeaderAndIsr, StopReplica, UpdateMetadata) on connections that did not prove
the cluster secret, and the Kafka listener serves only the APIs in `wire.kafka.apis.APIS`, none
of them control-plane.

WriteTxnMarkers tells the group coordinator which `__consumer_offsets` partitions got a marker
(`GroupCoordinator.on_transaction_completed`, as Kafka's KafkaApis does) and answers only after,
so a transaction's offsets are committed or dropped before the transaction coordinator ends it.

Ownership: the handlers run on the event loop and only forward to the parts that own state (the
ReplicaManager's actor, the request path, the group coordinator, the controller forwarder), so
nothing here needs a lock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Final

from actors.replication.partition_messages import ACKS_NONE
from actors.replication.replica_manager import ReplicaManager
from actors.replication.replica_manager_messages import (
    HandleLeaderAndIsr,
    HandleStopReplica,
    HandleUpdateMetadata,
)
from actors.replication.request_path import RequestPath
from node.broker.auto_topics import AutoTopicCreationManager
from node.broker.config import KAFKA_LISTENER
from node.broker.describe_configs import BrokerConfigSource, TopicConfigSource, describe_configs
from node.broker.forwarder import ControllerForwarder
from node.broker.groups import BrokerGroups
from node.broker.producer_ids import ProducerIdManager
from runtime.net.dialect import Handler, RequestContext
from wire.error_responses import error_response
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC
from wire.kafka.apis import ADD_PARTITIONS_TO_TXN_BATCHED
from wire.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    ApiKey,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribedTransaction,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
    StopReplicaRequest,
    StopReplicaResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    UpdateMetadataRequest,
    UpdateMetadataResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from wire.topic import TopicPartition

# KIP-394: from JoinGroup v4 a new Kafka member first learns its id from MEMBER_ID_REQUIRED.
KNOWN_MEMBER_ID_VERSION: Final = 4
# DescribeCluster's endpoint types (KIP-919).
BROKER_ENDPOINT_TYPE: Final = 1
CONTROLLER_ENDPOINT_TYPE: Final = 2


class BrokerApis:
    """The broker's request handlers; `table()` is what both listeners' servers serve."""

    def __init__(
        self,
        *,
        broker_id: int,
        cluster_id: Callable[[], str | None],
        replica_manager: ReplicaManager,
        request_path: RequestPath,
        forwarder: ControllerForwarder,
        auto_topics: AutoTopicCreationManager,
        groups: BrokerGroups,
        producer_ids: ProducerIdManager,
        topic_configs: TopicConfigSource,
        broker_configs: BrokerConfigSource | None = None,
    ) -> None:
        self._broker_id = broker_id
        self._cluster_id = cluster_id
        self._replica_manager = replica_manager
        self._request_path = request_path
        self._forwarder = forwarder
        self._auto_topics = auto_topics
        self._groups = groups
        self._producer_ids = producer_ids
        self._topic_configs = topic_configs
        self._broker_configs = broker_configs

    def table(self) -> dict[int, Handler]:
        return {
            # data plane
            ApiKey.PRODUCE: self.produce,
            ApiKey.FETCH: self.fetch,
            ApiKey.LIST_OFFSETS: self.list_offsets,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self.offset_for_leader_epoch,
            ApiKey.METADATA: self.metadata,
            ApiKey.INIT_PRODUCER_ID: self.init_producer_id,
            # transactions (the coordinator on __transaction_state)
            ApiKey.ADD_PARTITIONS_TO_TXN: self.add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.add_offsets_to_txn,
            ApiKey.END_TXN: self.end_txn,
            # transactions, admin (KIP-664): coordinators and partition leaders describe them
            ApiKey.DESCRIBE_TRANSACTIONS: self.describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.list_transactions,
            ApiKey.DESCRIBE_PRODUCERS: self.describe_producers,
            # admin, forwarded to the controller (KIP-590), and configs
            ApiKey.CREATE_TOPICS: self.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics,
            ApiKey.CREATE_PARTITIONS: self.create_partitions,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.incremental_alter_configs,
            ApiKey.DESCRIBE_CLUSTER: self.describe_cluster,
            ApiKey.DESCRIBE_CONFIGS: self.describe_configs,
            # consumer groups
            ApiKey.FIND_COORDINATOR: self.find_coordinator,
            ApiKey.JOIN_GROUP: self.join_group,
            ApiKey.SYNC_GROUP: self.sync_group,
            ApiKey.HEARTBEAT: self.heartbeat,
            ApiKey.LEAVE_GROUP: self.leave_group,
            ApiKey.OFFSET_COMMIT: self.offset_commit,
            ApiKey.TXN_OFFSET_COMMIT: self.txn_offset_commit,
            ApiKey.OFFSET_FETCH: self.offset_fetch,
            ApiKey.DESCRIBE_GROUPS: self.describe_groups,
            ApiKey.LIST_GROUPS: self.list_groups,
            ApiKey.DELETE_GROUPS: self._groups.delete_groups,
            ApiKey.OFFSET_DELETE: self._groups.offset_delete,
            ApiKey.CONSUMER_GROUP_HEARTBEAT: self._groups.consumer_group_heartbeat,
            ApiKey.CONSUMER_GROUP_DESCRIBE: self._groups.consumer_group_describe,
            # control plane (the native listener, cluster members only)
            ApiKey.LEADER_AND_ISR: self.leader_and_isr,
            ApiKey.STOP_REPLICA: self.stop_replica,
            ApiKey.UPDATE_METADATA: self.update_metadata,
            ApiKey.WRITE_TXN_MARKERS: self.write_txn_markers,
        }

    # -- data plane -------------------------------------------------------------------------------

    async def produce(self, request: ProduceRequest, ctx: RequestContext) -> ProduceResponse | None:
        response = await self._request_path.produce(request)
        # With acks=0 Kafka sends no response (the appends are done either way).
        return None if request.acks == ACKS_NONE else response

    async def fetch(self, request: FetchRequest, ctx: RequestContext) -> FetchResponse:
        return await self._request_path.fetch(request)

    async def list_offsets(
        self, request: ListOffsetsRequest, ctx: RequestContext
    ) -> ListOffsetsResponse:
        return await self._request_path.list_offsets(request)

    async def offset_for_leader_epoch(
        self, request: OffsetForLeaderEpochRequest, ctx: RequestContext
    ) -> OffsetForLeaderEpochResponse:
        return await self._request_path.offset_for_leader_epoch(request)

    async def write_txn_markers(
        self, request: WriteTxnMarkersRequest, ctx: RequestContext
    ) -> WriteTxnMarkersResponse:
        response = await self._request_path.write_txn_markers(request)
        # The request path answers each marker in request order.
        for marker, result in zip(request.markers, response.markers, strict=True):
            written = [
                TopicPartition(topic.name, partition.partition_index)
                for topic in result.topics
                if topic.name == OFFSETS_TOPIC
                for partition in topic.partitions
                if partition.error_code == ErrorCode.NONE
            ]
            if written:
                await self._groups.coordinator.on_transaction_completed(
                    marker.producer_id, written, commit=marker.transaction_result
                )
        return response

    async def metadata(self, request: MetadataRequest, ctx: RequestContext) -> MetadataResponse:
        metadata = self._replica_manager.metadata
        response = self._auto_topics.answer(
            request,
            metadata.metadata_response(
                request, listener=ctx.listener, cluster_id=self._cluster_id()
            ),
        )
        if ctx.listener != KAFKA_LISTENER:
            return response
        # Kafka clients send admin requests to the controller the answer names; ketch's
        # controller is no broker, and every broker forwards them to it (KIP-590), so the
        # answering broker names itself, as a KRaft broker names a live broker.
        return dataclasses.replace(response, controller_id=self._broker_id)

    async def init_producer_id(
        self, request: InitProducerIdRequest, ctx: RequestContext
    ) -> InitProducerIdResponse:
        if request.transactional_id is not None and self._groups.transactions is not None:
            return await self._groups.transactions.init_producer_id(request)
        return await self._producer_ids.init_producer_id(request)

    async def add_partitions_to_txn(
        self, request: AddPartitionsToTxnRequest, ctx: RequestContext
    ) -> AddPartitionsToTxnResponse:
        transactions = self._groups.transactions
        # v4's batched form is for brokers (KIP-890): a Kafka client may not send it.
        refused = ctx.listener == KAFKA_LISTENER and (
            ctx.api_version >= ADD_PARTITIONS_TO_TXN_BATCHED and not ctx.cluster_member
        )
        if transactions is None or refused:
            code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED if refused else ErrorCode.NOT_COORDINATOR
            response = error_response(request, code)
            assert isinstance(response, AddPartitionsToTxnResponse), response
            return response
        return await transactions.add_partitions_to_txn(request)

    async def add_offsets_to_txn(
        self, request: AddOffsetsToTxnRequest, ctx: RequestContext
    ) -> AddOffsetsToTxnResponse:
        if self._groups.transactions is None:
            return AddOffsetsToTxnResponse(error_code=ErrorCode.NOT_COORDINATOR)
        offsets_partition = TopicPartition(
            OFFSETS_TOPIC, self._groups.coordinator.partition_of(request.group_id)
        )
        return await self._groups.transactions.add_offsets_to_txn(request, offsets_partition)

    async def end_txn(self, request: EndTxnRequest, ctx: RequestContext) -> EndTxnResponse:
        if self._groups.transactions is None:
            return EndTxnResponse(error_code=ErrorCode.NOT_COORDINATOR)
        return await self._groups.transactions.end_txn(request)

    async def describe_transactions(
        self, request: DescribeTransactionsRequest, ctx: RequestContext
    ) -> DescribeTransactionsResponse:
        if self._groups.transactions is None:
            return DescribeTransactionsResponse(
                transaction_states=[
                    DescribedTransaction(
                        error_code=ErrorCode.NOT_COORDINATOR, transactional_id=transactional_id
                    )
                    for transactional_id in request.transactional_ids
                ]
            )
        return await self._groups.transactions.describe_transactions(request)

    async def list_transactions(
        self, request: ListTransactionsRequest, ctx: RequestContext
    ) -> ListTransactionsResponse:
        if self._groups.transactions is None:
            return ListTransactionsResponse()  # coordinates no transactional id: none to list
        return await self._groups.transactions.list_transactions(request)

    async def describe_producers(
        self, request: DescribeProducersRequest, ctx: RequestContext
    ) -> DescribeProducersResponse:
        return await self._request_path.describe_producers(
            request, known=self._replica_manager.metadata.contains
        )

    # -- admin ------------------------------------------------------------------------------------

    async def create_topics(
        self, request: CreateTopicsRequest, ctx: RequestContext
    ) -> CreateTopicsResponse:
        return await self._forwarder.create_topics(request)

    async def delete_topics(
        self, request: DeleteTopicsRequest, ctx: RequestContext
    ) -> DeleteTopicsResponse:
        return await self._forwarder.delete_topics(request)

    async def create_partitions(
        self, request: CreatePartitionsRequest, ctx: RequestContext
    ) -> CreatePartitionsResponse:
        return await self._forwarder.create_partitions(request)

    async def incremental_alter_configs(
        self, request: IncrementalAlterConfigsRequest, ctx: RequestContext
    ) -> IncrementalAlterConfigsResponse:
        # Topic configs live in the controller's metadata; broker resources are refused there
        # too (ketch has no dynamic broker configs), so the whole request goes to it.
        return await self._forwarder.incremental_alter_configs(request)

    async def describe_cluster(
        self, request: DescribeClusterRequest, ctx: RequestContext
    ) -> DescribeClusterResponse:
        if ctx.listener != KAFKA_LISTENER:
            # ketch's own (`ketch cluster status`): the controller's view, with the fenced and
            # shutting-down brokers and its epoch.
            return await self._forwarder.describe_cluster(request)
        # Kafka's brokers answer from their metadata: the live brokers at this listener's
        # addresses, and the answering broker as controller, as in Metadata. They describe
        # brokers, not controllers (KIP-919's endpoint types).
        if request.endpoint_type != BROKER_ENDPOINT_TYPE:
            return DescribeClusterResponse.error_response(
                ErrorCode.MISMATCHED_ENDPOINT_TYPE
                if request.endpoint_type == CONTROLLER_ENDPOINT_TYPE
                else ErrorCode.UNSUPPORTED_ENDPOINT_TYPE
            )
        return DescribeClusterResponse(
            cluster_id=self._cluster_id() or "",
            controller_id=self._broker_id,
            brokers=[
                DescribeClusterBroker(broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                for b in self._replica_manager.metadata.response_brokers(ctx.listener)
            ],
        )

    async def describe_configs(
        self, request: DescribeConfigsRequest, ctx: RequestContext
    ) -> DescribeConfigsResponse:
        return describe_configs(request, self._topic_configs, self._broker_configs)

    # -- consumer groups --------------------------------------------------------------------------

    async def find_coordinator(
        self, request: FindCoordinatorRequest, ctx: RequestContext
    ) -> FindCoordinatorResponse:
        return await self._groups.find_coordinator(request, ctx.listener)

    async def join_group(self, request: JoinGroupRequest, ctx: RequestContext) -> JoinGroupResponse:
        kafka = ctx.listener == KAFKA_LISTENER
        return await self._groups.coordinator.join_group(
            request,
            client_id=ctx.client_id or "",
            client_host="/" + ctx.peer.rsplit(":", 1)[0],
            require_known_member_id=not kafka or ctx.api_version >= KNOWN_MEMBER_ID_VERSION,
        )

    async def sync_group(self, request: SyncGroupRequest, ctx: RequestContext) -> SyncGroupResponse:
        return await self._groups.coordinator.sync_group(request)

    async def heartbeat(self, request: HeartbeatRequest, ctx: RequestContext) -> HeartbeatResponse:
        return await self._groups.coordinator.heartbeat(request)

    async def leave_group(
        self, request: LeaveGroupRequest, ctx: RequestContext
    ) -> LeaveGroupResponse:
        return await self._groups.coordinator.leave_group(request)

    async def offset_commit(
        self, request: OffsetCommitRequest, ctx: RequestContext
    ) -> OffsetCommitResponse:
        return await self._groups.coordinator.offset_commit(request)

    async def txn_offset_commit(
        self, request: TxnOffsetCommitRequest, ctx: RequestContext
    ) -> TxnOffsetCommitResponse:
        return await self._groups.coordinator.txn_offset_commit(request)

    async def offset_fetch(
        self, request: OffsetFetchRequest, ctx: RequestContext
    ) -> OffsetFetchResponse:
        return await self._groups.coordinator.offset_fetch(request)

    async def describe_groups(
        self, request: DescribeGroupsRequest, ctx: RequestContext
    ) -> DescribeGroupsResponse:
        return await self._groups.coordinator.describe_groups(request)

    async def list_groups(
        self, request: ListGroupsRequest, ctx: RequestContext
    ) -> ListGroupsResponse:
        return await self._groups.coordinator.list_groups(request)

    # -- control plane ----------------------------------------------------------------------------

    async def leader_and_isr(
        self, request: LeaderAndIsrRequest, ctx: RequestContext
    ) -> LeaderAndIsrResponse:
        return await self._replica_manager.ask(HandleLeaderAndIsr(request))

    async def stop_replica(
        self, request: StopReplicaRequest, ctx: RequestContext
    ) -> StopReplicaResponse:
        return await self._replica_manager.ask(HandleStopReplica(request))

    async def update_metadata(
        self, request: UpdateMetadataRequest, ctx: RequestContext
    ) -> UpdateMetadataResponse:
        return await self._replica_manager.ask(HandleUpdateMetadata(request))
