"""wire/error_responses.py: one error answer per request type, with the message where it fits
(the Kafka-side conversion of every answer is tested in tests/unit/wire/kafka/test_codec.py)."""

from __future__ import annotations

from wire.error_responses import error_response
from wire.errors import ErrorCode
from wire.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
    AlterConfigsResource,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeProducersTopic,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)

TIMED_OUT = ErrorCode.REQUEST_TIMED_OUT


def test_each_topic_gets_the_code_and_the_message() -> None:
    request = CreateTopicsRequest(
        topics=[
            CreatableTopic(name="a", num_partitions=1, replication_factor=1),
            CreatableTopic(name="b", num_partitions=1, replication_factor=1),
        ]
    )
    answer = error_response(request, TIMED_OUT, "unreachable")
    assert isinstance(answer, CreateTopicsResponse)
    assert [(t.name, t.error_code, t.error_message) for t in answer.topics] == [
        ("a", TIMED_OUT, "unreachable"),
        ("b", TIMED_OUT, "unreachable"),
    ]
    deleted = error_response(DeleteTopicsRequest(topic_names=["a"]), TIMED_OUT)
    assert isinstance(deleted, DeleteTopicsResponse)
    assert [(r.name, r.error_code, r.error_message) for r in deleted.responses] == [
        ("a", TIMED_OUT, None)
    ]


def test_a_request_without_partitions_gets_the_top_level_code() -> None:
    described = error_response(DescribeClusterRequest(), TIMED_OUT, "unreachable")
    assert isinstance(described, DescribeClusterResponse)
    assert (described.error_code, described.error_message) == (TIMED_OUT, "unreachable")
    # No room for a message: the code alone.
    heartbeat = error_response(
        HeartbeatRequest(group_id="g", generation_id=1, member_id="m"), TIMED_OUT, "dropped"
    )
    assert isinstance(heartbeat, HeartbeatResponse)
    assert heartbeat.error is TIMED_OUT


def test_transaction_requests_get_the_code_on_each_partition_or_transactional_id() -> None:
    add = AddPartitionsToTxnRequest(
        transactions=[
            AddPartitionsToTxnTransaction(
                transactional_id=name,
                producer_id=1,
                producer_epoch=0,
                topics=[AddPartitionsToTxnTopic(name="o", partitions=partitions)],
            )
            for name, partitions in (("a", [0, 1]), ("b", [2]))
        ]
    )
    added = error_response(add, TIMED_OUT)
    assert isinstance(added, AddPartitionsToTxnResponse)
    assert added.error_code == 0  # per partition, as Kafka answers a client's v0-3
    assert [
        (r.transactional_id, t.name, p.partition_index, p.partition_error_code)
        for r in added.results_by_transaction
        for t in r.topic_results
        for p in t.results_by_partition
    ] == [("a", "o", 0, TIMED_OUT), ("a", "o", 1, TIMED_OUT), ("b", "o", 2, TIMED_OUT)]

    commit = TxnOffsetCommitRequest(
        transactional_id="a",
        group_id="g",
        producer_id=1,
        producer_epoch=0,
        topics=[
            TxnOffsetCommitRequestTopic(
                name="o",
                partitions=[
                    TxnOffsetCommitRequestPartition(partition_index=i, committed_offset=9)
                    for i in (3, 4)
                ],
            )
        ],
    )
    committed = error_response(commit, TIMED_OUT)
    assert isinstance(committed, TxnOffsetCommitResponse)
    assert [(p.partition_index, p.error_code) for p in committed.topics[0].partitions] == [
        (3, TIMED_OUT),
        (4, TIMED_OUT),
    ]

    producers = DescribeProducersRequest(
        topics=[DescribeProducersTopic(name="o", partition_indexes=[0, 5])]
    )
    described = error_response(producers, TIMED_OUT, "unreachable")
    assert isinstance(described, DescribeProducersResponse)
    assert [
        (p.partition_index, p.error_code, p.error_message) for p in described.topics[0].partitions
    ] == [(0, TIMED_OUT, "unreachable"), (5, TIMED_OUT, "unreachable")]

    # No top-level code in Kafka's DescribeTransactions response: each id carries it.
    ids = DescribeTransactionsRequest(transactional_ids=["a", "b"])
    transactions = error_response(ids, TIMED_OUT)
    assert isinstance(transactions, DescribeTransactionsResponse)
    assert [(s.transactional_id, s.error_code) for s in transactions.transaction_states] == [
        ("a", TIMED_OUT),
        ("b", TIMED_OUT),
    ]

    offsets = AddOffsetsToTxnRequest(
        transactional_id="a", producer_id=1, producer_epoch=0, group_id="g"
    )
    assert error_response(offsets, TIMED_OUT) == AddOffsetsToTxnResponse(error_code=TIMED_OUT)


def test_topic_alterations_get_the_code_on_each_topic_or_resource() -> None:
    grow = CreatePartitionsRequest(
        topics=[CreatePartitionsTopic(name="a", count=3), CreatePartitionsTopic(name="b", count=2)]
    )
    grown = error_response(grow, TIMED_OUT, "unreachable")
    assert isinstance(grown, CreatePartitionsResponse)
    assert grown.error_code == 0  # Kafka's response has no top-level code
    assert [(r.name, r.error_code, r.error_message) for r in grown.results] == [
        ("a", TIMED_OUT, "unreachable"),
        ("b", TIMED_OUT, "unreachable"),
    ]
    alter = IncrementalAlterConfigsRequest(
        resources=[
            AlterConfigsResource(resource_type=2, resource_name="a"),
            AlterConfigsResource(resource_type=4, resource_name="0"),
        ]
    )
    altered = error_response(alter, TIMED_OUT)
    assert isinstance(altered, IncrementalAlterConfigsResponse)
    assert altered.error_code == 0
    assert [(r.resource_type, r.resource_name, r.error_code) for r in altered.responses] == [
        (2, "a", TIMED_OUT),
        (4, "0", TIMED_OUT),
    ]
