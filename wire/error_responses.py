"""One error answer per request type: the request's own topics and partitions, each with the code.

Kafka answers a request it cannot serve (an unexpected exception, a forward that timed out) with
`AbstractRequest.getErrorResponse`: every topic and partition the request named, each carrying the
error, so a client handles it exactly as a per-partition failure. `error_response` does the same
for the native messages; both listeners use it (the Kafka dialect for a failed handler, the
broker's controller forwarder for a forward that could not be delivered). A request type with no
per-partition shape gets the top-level `error_code` (and `error_message` where it has one).

DescribeTransactions has no partitions but is answered per transactional id, DeleteGroups per
group, IncrementalAlterConfigs per resource, AlterClientQuotas per entity and
AlterUserScramCredentials per user, as Kafka's
`getErrorResponse` does: their Kafka responses have no top-level error code, so a code only
there would reach a Kafka client as "nothing described", "nothing deleted" or "altered".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Final

from wire.errors import ErrorCode
from wire.messages import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    AlterConfigsResourceResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeletableGroupResult,
    DeletableTopicResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribedTransaction,
    DescribeProducersPartitionResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeProducersTopicResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    MetadataRequest,
    MetadataResponse,
    MetadataResponseTopic,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    Request,
    Response,
    TopicProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from wire.messages.quotas import AlterClientQuotasEntryResult


def error_response(request: Request, code: ErrorCode, message: str | None = None) -> Response:
    """The answer to `request` with `code` on each of its topics and partitions; `message` goes
    where the answer has room for one."""
    builder = _BUILDERS.get(type(request))
    if builder is not None:
        return builder(request, code, message)
    response = type(request).RESPONSE.error_response(code)
    if message is not None and "error_message" in _field_names(type(response)):
        response = dataclasses.replace(response, error_message=message)  # type: ignore[call-arg]
    return response


def _write_txn_markers(request: Any, code: ErrorCode, message: str | None) -> Response:
    return WriteTxnMarkersResponse(
        markers=[
            WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=[
                    WritableTxnMarkerTopicResult(
                        name=topic.name,
                        partitions=[
                            WritableTxnMarkerPartitionResult(partition_index=p, error_code=code)
                            for p in topic.partition_indexes
                        ],
                    )
                    for topic in marker.topics
                ],
            )
            for marker in request.markers
        ]
    )


def _field_names(cls: type[Response]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def _produce(request: Any, code: ErrorCode, message: str | None) -> Response:
    return ProduceResponse(
        responses=[
            TopicProduceResponse(
                name=topic.name,
                partition_responses=[
                    PartitionProduceResponse(index=p.index, error_code=code, error_message=message)
                    for p in topic.partition_data
                ],
            )
            for topic in request.topic_data
        ]
    )


def _fetch(request: Any, code: ErrorCode, message: str | None) -> Response:
    return FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic=topic.topic,
                partitions=[
                    FetchResponsePartition(partition_index=p.partition, error_code=code)
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def _list_offsets(request: Any, code: ErrorCode, message: str | None) -> Response:
    return ListOffsetsResponse(
        topics=[
            ListOffsetsTopicResponse(
                name=topic.name,
                partitions=[
                    ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=code)
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def _offset_for_leader_epoch(request: Any, code: ErrorCode, message: str | None) -> Response:
    return OffsetForLeaderEpochResponse(
        topics=[
            OffsetForLeaderTopicResult(
                topic=topic.topic,
                partitions=[
                    EpochEndOffset(partition=p.partition, error_code=code) for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def _metadata(request: Any, code: ErrorCode, message: str | None) -> Response:
    names = [t.name for t in request.topics or () if t.name is not None]
    return MetadataResponse(topics=[MetadataResponseTopic(name=n, error_code=code) for n in names])


def _create_topics(request: Any, code: ErrorCode, message: str | None) -> Response:
    return CreateTopicsResponse(
        topics=[
            CreatableTopicResult(name=t.name, error_code=code, error_message=message)
            for t in request.topics
        ]
    )


def _delete_topics(request: Any, code: ErrorCode, message: str | None) -> Response:
    return DeleteTopicsResponse(
        responses=[
            DeletableTopicResult(name=n, error_code=code, error_message=message)
            for n in request.topic_names
        ]
    )


def _create_partitions(request: Any, code: ErrorCode, message: str | None) -> Response:
    return CreatePartitionsResponse(
        results=[
            CreatePartitionsTopicResult(name=t.name, error_code=code, error_message=message)
            for t in request.topics
        ]
    )


def _incremental_alter_configs(request: Any, code: ErrorCode, message: str | None) -> Response:
    return IncrementalAlterConfigsResponse(
        responses=[
            AlterConfigsResourceResponse(
                error_code=code,
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
            for r in request.resources
        ]
    )


def _describe_configs(request: Any, code: ErrorCode, message: str | None) -> Response:
    return DescribeConfigsResponse(
        results=[
            DescribeConfigsResult(
                error_code=code,
                error_message=message,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
            for r in request.resources
        ]
    )


def _add_partitions_to_txn(request: Any, code: ErrorCode, message: str | None) -> Response:
    return AddPartitionsToTxnResponse(
        results_by_transaction=[
            AddPartitionsToTxnResult(
                transactional_id=transaction.transactional_id,
                topic_results=[
                    AddPartitionsToTxnTopicResult(
                        name=topic.name,
                        results_by_partition=[
                            AddPartitionsToTxnPartitionResult(
                                partition_index=p, partition_error_code=code
                            )
                            for p in topic.partitions
                        ],
                    )
                    for topic in transaction.topics
                ],
            )
            for transaction in request.transactions
        ]
    )


def _txn_offset_commit(request: Any, code: ErrorCode, message: str | None) -> Response:
    return TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponseTopic(
                name=topic.name,
                partitions=[
                    TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in topic.partitions
                ],
            )
            for topic in request.topics
        ]
    )


def _describe_producers(request: Any, code: ErrorCode, message: str | None) -> Response:
    return DescribeProducersResponse(
        topics=[
            DescribeProducersTopicResponse(
                name=topic.name,
                partitions=[
                    DescribeProducersPartitionResponse(
                        partition_index=p, error_code=code, error_message=message
                    )
                    for p in topic.partition_indexes
                ],
            )
            for topic in request.topics
        ]
    )


def _describe_transactions(request: Any, code: ErrorCode, message: str | None) -> Response:
    return DescribeTransactionsResponse(
        transaction_states=[
            DescribedTransaction(transactional_id=t, error_code=code)
            for t in request.transactional_ids
        ]
    )


def _delete_groups(request: Any, code: ErrorCode, message: str | None) -> Response:
    return DeleteGroupsResponse(
        results=[DeletableGroupResult(group_id=g, error_code=code) for g in request.groups_names]
    )


def _alter_user_scram_credentials(request: Any, code: ErrorCode, message: str | None) -> Response:
    users = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    return AlterUserScramCredentialsResponse(
        results=[
            AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message)
            for user in dict.fromkeys(users)
        ]
    )


def _alter_client_quotas(request: Any, code: ErrorCode, message: str | None) -> Response:
    # Per entity: Kafka's AlterClientQuotasResponse has no top-level error code.
    return AlterClientQuotasResponse(
        entries=[
            AlterClientQuotasEntryResult(error_code=code, error_message=message, entity=e.entity)
            for e in request.entries
        ]
    )


_BUILDERS: Final[dict[type[Request], Callable[[Any, ErrorCode, str | None], Response]]] = {
    ProduceRequest: _produce,
    FetchRequest: _fetch,
    ListOffsetsRequest: _list_offsets,
    OffsetForLeaderEpochRequest: _offset_for_leader_epoch,
    MetadataRequest: _metadata,
    CreateTopicsRequest: _create_topics,
    DeleteTopicsRequest: _delete_topics,
    CreatePartitionsRequest: _create_partitions,
    IncrementalAlterConfigsRequest: _incremental_alter_configs,
    DescribeConfigsRequest: _describe_configs,
    WriteTxnMarkersRequest: _write_txn_markers,
    AddPartitionsToTxnRequest: _add_partitions_to_txn,
    TxnOffsetCommitRequest: _txn_offset_commit,
    DescribeProducersRequest: _describe_producers,
    DescribeTransactionsRequest: _describe_transactions,
    DeleteGroupsRequest: _delete_groups,
    AlterUserScramCredentialsRequest: _alter_user_scram_credentials,
    AlterClientQuotasRequest: _alter_client_quotas,
}
