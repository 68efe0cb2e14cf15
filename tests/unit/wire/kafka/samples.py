"""Native requests and responses with every field set, for the Kafka codec tests."""

from __future__ import annotations

from typing import Final

import wire.messages.quotas as quota_messages
from wire.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTopicResult,
    AddPartitionsToTxnTransaction,
    AlterableConfig,
    AlterConfigsResource,
    AlterConfigsResourceResponse,
    ApiKey,
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreatableTopicResult,
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribedProducer,
    DescribedTransaction,
    DescribedTransactionTopic,
    DescribeProducersPartitionResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeProducersTopic,
    DescribeProducersTopicResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchAbortedTransaction,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    FetchTopic,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListedTransaction,
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    ListOffsetsTopicResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
    OffsetForLeaderTopicResult,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TopicProduceData,
    TopicProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

TOPIC_ID: Final = bytes(range(1, 17))
RECORDS: Final = b"\x00" * 61 + b"opaque batch bytes"
TRANSACTIONAL_ID: Final = "payments-7"

REQUESTS: Final[dict[int, Request]] = {
    ApiKey.METADATA: MetadataRequest(
        topics=[MetadataRequestTopic(name="orders"), MetadataRequestTopic(name="audit")],
        allow_auto_topic_creation=False,
    ),
    ApiKey.PRODUCE: ProduceRequest(
        acks=-1,
        timeout_ms=1500,
        topic_data=[
            TopicProduceData(
                name="orders",
                partition_data=[
                    PartitionProduceData(index=0, records=RECORDS),
                    PartitionProduceData(index=2, records=RECORDS + b"x"),
                ],
            )
        ],
    ),
    ApiKey.FETCH: FetchRequest(
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52_428_800,
        isolation_level=1,
        topics=[
            FetchTopic(
                topic="orders",
                partitions=[
                    FetchPartition(
                        partition=1,
                        current_leader_epoch=4,
                        fetch_offset=1234,
                        log_start_offset=-1,
                        partition_max_bytes=1_048_576,
                    )
                ],
            )
        ],
    ),
    ApiKey.LIST_OFFSETS: ListOffsetsRequest(
        isolation_level=1,
        topics=[
            ListOffsetsTopic(
                name="orders",
                partitions=[
                    ListOffsetsPartition(partition_index=0, current_leader_epoch=3, timestamp=-2),
                    ListOffsetsPartition(partition_index=1, timestamp=1_700_000_000_000),
                ],
            )
        ],
    ),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: OffsetForLeaderEpochRequest(
        topics=[
            OffsetForLeaderTopic(
                topic="orders",
                partitions=[
                    OffsetForLeaderPartition(partition=0, current_leader_epoch=5, leader_epoch=4)
                ],
            )
        ]
    ),
    ApiKey.CREATE_TOPICS: CreateTopicsRequest(
        topics=[
            CreatableTopic(
                name="orders",
                num_partitions=3,
                replication_factor=3,
                configs=[CreatableTopicConfig(name="min.insync.replicas", value="2")],
            ),
            CreatableTopic(
                name="placed",
                num_partitions=-1,
                replication_factor=-1,
                assignments=[CreatableReplicaAssignment(partition_index=0, broker_ids=[2, 0])],
            ),
        ],
        timeout_ms=30_000,
        validate_only=False,
    ),
    ApiKey.DELETE_TOPICS: DeleteTopicsRequest(topic_names=["orders", "audit"], timeout_ms=9000),
    ApiKey.CREATE_PARTITIONS: CreatePartitionsRequest(
        topics=[
            CreatePartitionsTopic(name="orders", count=6),
            CreatePartitionsTopic(
                name="audit",
                count=3,
                assignments=[
                    CreatePartitionsAssignment(broker_ids=[1, 2]),
                    CreatePartitionsAssignment(broker_ids=[2, 0]),
                ],
            ),
        ],
        timeout_ms=25_000,
        validate_only=True,
    ),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: quota_messages.DescribeClientQuotasRequest(
        components=[
            quota_messages.ComponentData(entity_type="user", match_type=0, match="alice"),
            quota_messages.ComponentData(entity_type="client-id", match_type=1, match=None),
        ],
        strict=True,
    ),
    ApiKey.ALTER_CLIENT_QUOTAS: quota_messages.AlterClientQuotasRequest(
        entries=[
            quota_messages.AlterClientQuotasEntry(
                entity=[quota_messages.EntityData(entity_type="client-id", entity_name=None)],
                ops=[
                    quota_messages.OpData(key="producer_byte_rate", value=102400.0),
                    quota_messages.OpData(key="consumer_byte_rate", value=0.0, remove=True),
                ],
            )
        ],
        validate_only=True,
    ),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsRequest(
        resources=[
            AlterConfigsResource(
                resource_type=2,
                resource_name="orders",
                configs=[
                    AlterableConfig(name="retention.ms", config_operation=0, value="3600000"),
                    AlterableConfig(name="segment.bytes", config_operation=1, value=None),
                    AlterableConfig(name="cleanup.policy", config_operation=2, value="compact"),
                ],
            ),
            AlterConfigsResource(resource_type=4, resource_name="1", configs=[]),
        ],
        validate_only=True,
    ),
    ApiKey.DESCRIBE_CONFIGS: DescribeConfigsRequest(
        resources=[
            DescribeConfigsResource(resource_type=2, resource_name="orders"),
            DescribeConfigsResource(
                resource_type=2, resource_name="audit", configuration_keys=["retention.ms"]
            ),
        ],
        include_synonyms=False,
        include_documentation=True,
    ),
    ApiKey.INIT_PRODUCER_ID: InitProducerIdRequest(
        transaction_timeout_ms=60_000, producer_id=4000, producer_epoch=3
    ),
    # One transaction: what Kafka's v0-3 (a client's form) can carry too.
    ApiKey.ADD_PARTITIONS_TO_TXN: AddPartitionsToTxnRequest(
        transactions=[
            AddPartitionsToTxnTransaction(
                transactional_id=TRANSACTIONAL_ID,
                producer_id=4000,
                producer_epoch=3,
                topics=[
                    AddPartitionsToTxnTopic(name="orders", partitions=[0, 2]),
                    AddPartitionsToTxnTopic(name="audit", partitions=[1]),
                ],
            )
        ]
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: AddOffsetsToTxnRequest(
        transactional_id=TRANSACTIONAL_ID, producer_id=4000, producer_epoch=3, group_id="billing"
    ),
    ApiKey.END_TXN: EndTxnRequest(
        transactional_id=TRANSACTIONAL_ID, producer_id=4000, producer_epoch=3, committed=True
    ),
    ApiKey.TXN_OFFSET_COMMIT: TxnOffsetCommitRequest(
        transactional_id=TRANSACTIONAL_ID,
        group_id="billing",
        producer_id=4000,
        producer_epoch=3,
        generation_id=5,
        member_id="consumer-1",
        group_instance_id="billing-0",
        topics=[
            TxnOffsetCommitRequestTopic(
                name="orders",
                partitions=[
                    TxnOffsetCommitRequestPartition(
                        partition_index=0,
                        committed_offset=41,
                        committed_leader_epoch=6,
                        committed_metadata="m",
                    ),
                    TxnOffsetCommitRequestPartition(partition_index=2, committed_offset=7),
                ],
            )
        ],
    ),
    ApiKey.DESCRIBE_PRODUCERS: DescribeProducersRequest(
        topics=[DescribeProducersTopic(name="orders", partition_indexes=[0, 1])]
    ),
    ApiKey.DESCRIBE_TRANSACTIONS: DescribeTransactionsRequest(
        transactional_ids=[TRANSACTIONAL_ID, "idle-1"]
    ),
    ApiKey.LIST_TRANSACTIONS: ListTransactionsRequest(
        state_filters=["Ongoing", "PrepareCommit"],
        producer_id_filters=[4000, 2**40],
        duration_filter=60_000,
    ),
}

RESPONSES: Final[dict[int, Response]] = {
    ApiKey.METADATA: MetadataResponse(
        brokers=[
            MetadataResponseBroker(node_id=0, host="127.0.0.1", port=19092),
            MetadataResponseBroker(node_id=1, host="127.0.0.1", port=19093, rack="r1"),
        ],
        cluster_id="ketch-test",
        controller_id=1,
        topics=[
            MetadataResponseTopic(
                name="orders",
                topic_id=TOPIC_ID,
                partitions=[
                    MetadataResponsePartition(
                        partition_index=0,
                        leader_id=1,
                        leader_epoch=7,
                        replica_nodes=[1, 0],
                        isr_nodes=[1],
                        offline_replicas=[0],
                    )
                ],
            ),
            MetadataResponseTopic(name="missing", error_code=3),
        ],
    ),
    ApiKey.PRODUCE: ProduceResponse(
        responses=[
            TopicProduceResponse(
                name="orders",
                partition_responses=[
                    PartitionProduceResponse(index=0, base_offset=41, log_start_offset=3),
                    PartitionProduceResponse(index=2, error_code=19, error_message="no quorum"),
                ],
            )
        ]
    ),
    ApiKey.FETCH: FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic="orders",
                partitions=[
                    FetchResponsePartition(
                        partition_index=1,
                        high_watermark=2000,
                        last_stable_offset=1990,
                        log_start_offset=5,
                        aborted_transactions=[
                            FetchAbortedTransaction(producer_id=7, first_offset=1500)
                        ],
                        records=RECORDS,
                    ),
                    FetchResponsePartition(partition_index=2, error_code=6),
                ],
            )
        ]
    ),
    ApiKey.LIST_OFFSETS: ListOffsetsResponse(
        topics=[
            ListOffsetsTopicResponse(
                name="orders",
                partitions=[
                    ListOffsetsPartitionResponse(
                        partition_index=0, timestamp=-1, offset=17, leader_epoch=3
                    )
                ],
            )
        ]
    ),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: OffsetForLeaderEpochResponse(
        topics=[
            OffsetForLeaderTopicResult(
                topic="orders",
                partitions=[EpochEndOffset(partition=0, leader_epoch=4, end_offset=99)],
            )
        ]
    ),
    ApiKey.CREATE_TOPICS: CreateTopicsResponse(
        topics=[
            CreatableTopicResult(
                name="orders", topic_id=TOPIC_ID, num_partitions=3, replication_factor=3
            ),
            CreatableTopicResult(name="placed", error_code=36, error_message="exists"),
        ]
    ),
    ApiKey.DELETE_TOPICS: DeleteTopicsResponse(
        responses=[
            DeletableTopicResult(name="orders"),
            DeletableTopicResult(name="audit", error_code=3, error_message="unknown"),
        ]
    ),
    ApiKey.CREATE_PARTITIONS: CreatePartitionsResponse(
        results=[
            CreatePartitionsTopicResult(name="orders"),
            CreatePartitionsTopicResult(
                name="audit", error_code=37, error_message="Topic already has 3 partitions."
            ),
        ]
    ),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: quota_messages.DescribeClientQuotasResponse(
        throttle_time_ms=25,
        entries=[
            quota_messages.EntryData(
                entity=[
                    quota_messages.EntityData(entity_type="user", entity_name="alice"),
                    quota_messages.EntityData(entity_type="client-id", entity_name=None),
                ],
                values=[quota_messages.ValueData(key="producer_byte_rate", value=1024.0)],
            )
        ],
    ),
    ApiKey.ALTER_CLIENT_QUOTAS: quota_messages.AlterClientQuotasResponse(
        entries=[
            quota_messages.AlterClientQuotasEntryResult(
                error_code=42,
                error_message="Quota producer_byte_rate must be greater than 0",
                entity=[quota_messages.EntityData(entity_type="client-id", entity_name=None)],
            )
        ]
    ),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: IncrementalAlterConfigsResponse(
        responses=[
            AlterConfigsResourceResponse(resource_type=2, resource_name="orders"),
            AlterConfigsResourceResponse(
                error_code=42,
                error_message="dynamic broker configs are not supported",
                resource_type=4,
                resource_name="1",
            ),
        ]
    ),
    ApiKey.DESCRIBE_CONFIGS: DescribeConfigsResponse(
        results=[
            DescribeConfigsResult(
                resource_type=2,
                resource_name="orders",
                configs=[
                    DescribeConfigsResourceResult(
                        name="min.insync.replicas", value="2", config_source=1
                    ),
                    DescribeConfigsResourceResult(
                        name="retention.ms", value="604800000", config_source=5
                    ),
                ],
            ),
            DescribeConfigsResult(
                error_code=3, error_message="unknown topic", resource_type=2, resource_name="x"
            ),
        ]
    ),
    ApiKey.INIT_PRODUCER_ID: InitProducerIdResponse(producer_id=4000, producer_epoch=4),
    ApiKey.ADD_PARTITIONS_TO_TXN: AddPartitionsToTxnResponse(
        results_by_transaction=[
            AddPartitionsToTxnResult(
                transactional_id=TRANSACTIONAL_ID,
                topic_results=[
                    AddPartitionsToTxnTopicResult(
                        name="orders",
                        results_by_partition=[
                            AddPartitionsToTxnPartitionResult(partition_index=0),
                            AddPartitionsToTxnPartitionResult(
                                partition_index=2, partition_error_code=55
                            ),
                        ],
                    ),
                    AddPartitionsToTxnTopicResult(
                        name="audit",
                        results_by_partition=[
                            AddPartitionsToTxnPartitionResult(
                                partition_index=1, partition_error_code=3
                            )
                        ],
                    ),
                ],
            )
        ]
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: AddOffsetsToTxnResponse(error_code=51),
    ApiKey.END_TXN: EndTxnResponse(error_code=48),
    ApiKey.TXN_OFFSET_COMMIT: TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponseTopic(
                name="orders",
                partitions=[
                    TxnOffsetCommitResponsePartition(partition_index=0),
                    TxnOffsetCommitResponsePartition(partition_index=2, error_code=22),
                ],
            )
        ]
    ),
    ApiKey.DESCRIBE_PRODUCERS: DescribeProducersResponse(
        topics=[
            DescribeProducersTopicResponse(
                name="orders",
                partitions=[
                    DescribeProducersPartitionResponse(
                        partition_index=0,
                        active_producers=[
                            DescribedProducer(
                                producer_id=4000,
                                producer_epoch=3,
                                last_sequence=99,
                                last_timestamp=1_700_000_000_000,
                                coordinator_epoch=2,
                                current_txn_start_offset=1500,
                            ),
                            DescribedProducer(
                                producer_id=12, producer_epoch=0, coordinator_epoch=-1
                            ),
                        ],
                    ),
                    DescribeProducersPartitionResponse(
                        partition_index=1, error_code=6, error_message="not the leader"
                    ),
                ],
            )
        ]
    ),
    ApiKey.DESCRIBE_TRANSACTIONS: DescribeTransactionsResponse(
        transaction_states=[
            DescribedTransaction(
                transactional_id=TRANSACTIONAL_ID,
                transaction_state="Ongoing",
                transaction_timeout_ms=60_000,
                transaction_start_time_ms=1_700_000_000_123,
                producer_id=4000,
                producer_epoch=3,
                topics=[DescribedTransactionTopic(topic="orders", partitions=[0, 2])],
            ),
            # Start time 0, not the native -1 ("none"): kio cannot read a negative time back.
            DescribedTransaction(
                transactional_id="idle-1", error_code=105, transaction_start_time_ms=0
            ),
        ]
    ),
    ApiKey.LIST_TRANSACTIONS: ListTransactionsResponse(
        unknown_state_filters=["Hanging"],
        transaction_states=[
            ListedTransaction(
                transactional_id=TRANSACTIONAL_ID, producer_id=4000, transaction_state="Ongoing"
            )
        ],
    ),
}
