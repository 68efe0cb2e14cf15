"""The transaction messages (wire/messages/transactions.py): registration under Kafka's keys and
outside the control plane (except WriteTxnMarkers), body layout with Kafka's field names and
defaults, round trips through the envelope, error-only answers, and type and range checks on
decoding."""

from __future__ import annotations

from typing import Any

import pytest

from wire.envelope import (
    RequestEnvelope,
    ResponseEnvelope,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from wire.errors import ErrorCode
from wire.messages import (
    CONTROL_PLANE_API_KEYS,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTopicResult,
    AddPartitionsToTxnTransaction,
    ApiKey,
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
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResponse,
    MessageError,
    Request,
    Response,
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
    error_body,
    request_class,
    supported_versions,
)

KEYS: dict[type[Request], int] = {
    AddPartitionsToTxnRequest: 24,
    AddOffsetsToTxnRequest: 25,
    EndTxnRequest: 26,
    TxnOffsetCommitRequest: 28,
    DescribeProducersRequest: 61,
    DescribeTransactionsRequest: 65,
    ListTransactionsRequest: 66,
}

SAMPLES: list[Request | Response] = [
    AddPartitionsToTxnRequest(
        transactions=[
            AddPartitionsToTxnTransaction(
                transactional_id="t-1",
                producer_id=2**62,
                producer_epoch=2**15 - 1,
                topics=[AddPartitionsToTxnTopic(name="orders", partitions=[0, 2**31 - 1])],
            ),
            AddPartitionsToTxnTransaction(
                transactional_id="t-2",
                producer_id=7,
                producer_epoch=0,
                verify_only=True,
                topics=[],
            ),
        ]
    ),
    AddPartitionsToTxnResponse(
        results_by_transaction=[
            AddPartitionsToTxnResult(
                transactional_id="t-1",
                topic_results=[
                    AddPartitionsToTxnTopicResult(
                        name="orders",
                        results_by_partition=[
                            AddPartitionsToTxnPartitionResult(
                                partition_index=0, partition_error_code=ErrorCode.PRODUCER_FENCED
                            )
                        ],
                    )
                ],
            )
        ]
    ),
    AddPartitionsToTxnResponse(error_code=ErrorCode.NOT_COORDINATOR),
    AddOffsetsToTxnRequest(transactional_id="t", producer_id=1, producer_epoch=2, group_id="g"),
    AddOffsetsToTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS),
    EndTxnRequest(transactional_id="t", producer_id=1, producer_epoch=2, committed=False),
    EndTxnResponse(),
    TxnOffsetCommitRequest(
        transactional_id="t",
        group_id="g",
        producer_id=1,
        producer_epoch=2,
        topics=[
            TxnOffsetCommitRequestTopic(
                name="orders",
                partitions=[
                    TxnOffsetCommitRequestPartition(
                        partition_index=3, committed_offset=2**40, committed_metadata=None
                    )
                ],
            )
        ],
    ),
    TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponseTopic(
                name="orders",
                partitions=[TxnOffsetCommitResponsePartition(partition_index=3, error_code=22)],
            )
        ]
    ),
    DescribeProducersRequest(topics=[DescribeProducersTopic(name="o", partition_indexes=[0])]),
    DescribeProducersResponse(
        topics=[
            DescribeProducersTopicResponse(
                name="o",
                partitions=[
                    DescribeProducersPartitionResponse(
                        partition_index=0,
                        active_producers=[
                            DescribedProducer(
                                producer_id=5, producer_epoch=2**31 - 1, coordinator_epoch=3
                            )
                        ],
                    )
                ],
            )
        ]
    ),
    DescribeTransactionsRequest(transactional_ids=["t", ""]),
    DescribeTransactionsResponse(
        transaction_states=[
            DescribedTransaction(
                transactional_id="t",
                transaction_state="Ongoing",
                transaction_timeout_ms=60_000,
                transaction_start_time_ms=1_700_000_000_000,
                producer_id=1,
                producer_epoch=2,
                topics=[DescribedTransactionTopic(topic="orders", partitions=[1])],
            )
        ]
    ),
    ListTransactionsRequest(),
    ListTransactionsResponse(
        unknown_state_filters=["Nope"],
        transaction_states=[
            ListedTransaction(transactional_id="t", producer_id=1, transaction_state="Empty")
        ],
    ),
]


def test_keys_versions_and_the_control_plane() -> None:
    for cls, key in KEYS.items():
        assert key == cls.API_KEY
        assert request_class(key, 0) is cls
        assert supported_versions()[key] == (0, 0)
        # Clients send all of them: none needs the cluster credential.
        assert key not in CONTROL_PLANE_API_KEYS
    assert ApiKey.WRITE_TXN_MARKERS in CONTROL_PLANE_API_KEYS


@pytest.mark.parametrize("message", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip_through_the_envelope(message: Request | Response) -> None:
    if isinstance(message, Request):
        payload = encode_request(
            RequestEnvelope(message.API_KEY, message.API_VERSION, 9, "c", message.to_body())
        )
        envelope = decode_request(payload)
        cls = request_class(envelope.api_key, envelope.api_version)
        assert cls.from_body(envelope.body) == message
    else:
        response = decode_response(encode_response(ResponseEnvelope(9, message.to_body())))
        assert type(message).from_body(response.body) == message


def test_field_names_and_defaults_are_kafkas() -> None:
    transaction = AddPartitionsToTxnTransaction(
        transactional_id="t", producer_id=1, producer_epoch=2, topics=[]
    )
    assert AddPartitionsToTxnRequest(transactions=[transaction]).to_body() == {
        "transactions": [
            {
                "transactional_id": "t",
                "producer_id": 1,
                "producer_epoch": 2,
                "verify_only": False,
                "topics": [],
            }
        ]
    }
    result = AddPartitionsToTxnResult(
        transactional_id="t",
        topic_results=[
            AddPartitionsToTxnTopicResult(
                name="o",
                results_by_partition=[AddPartitionsToTxnPartitionResult(partition_index=4)],
            )
        ],
    )
    assert AddPartitionsToTxnResponse(results_by_transaction=[result]).to_body() == {
        "error_code": 0,
        "results_by_transaction": [
            {
                "transactional_id": "t",
                "topic_results": [
                    {
                        "name": "o",
                        "results_by_partition": [{"partition_index": 4, "partition_error_code": 0}],
                    }
                ],
            }
        ],
    }
    end = EndTxnRequest(transactional_id="t", producer_id=1, producer_epoch=2, committed=True)
    assert end.to_body() == {
        "transactional_id": "t",
        "producer_id": 1,
        "producer_epoch": 2,
        "committed": True,
    }
    assert AddOffsetsToTxnResponse().to_body() == {"error_code": 0}
    commit = TxnOffsetCommitRequest(
        transactional_id="t", group_id="g", producer_id=1, producer_epoch=2, topics=[]
    )
    # No member named (Kafka's v0-2): generation -1, member "", no instance id.
    assert (commit.generation_id, commit.member_id, commit.group_instance_id) == (-1, "", None)
    partition = TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5)
    assert (partition.committed_leader_epoch, partition.committed_metadata) == (-1, None)
    producer = DescribedProducer(producer_id=1, producer_epoch=0, coordinator_epoch=0)
    assert (producer.last_sequence, producer.last_timestamp, producer.current_txn_start_offset) == (
        -1,
        -1,
        -1,
    )
    described = DescribedTransaction(transactional_id="t")
    assert (described.transaction_start_time_ms, described.producer_id) == (-1, -1)
    assert ListTransactionsRequest().to_body() == {
        "state_filters": [],
        "producer_id_filters": [],
        "duration_filter": -1,
    }


@pytest.mark.parametrize("cls", [type(s) for s in SAMPLES if isinstance(s, Response)])
def test_error_only_answers(cls: type[Response]) -> None:
    code = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert cls.from_body(error_body(code)) == cls.error_response(code)
    assert cls.error_response(code).error is code


@pytest.mark.parametrize(
    ("cls", "body", "match"),
    [
        (
            EndTxnRequest,
            {"transactional_id": "t", "producer_id": 1, "producer_epoch": 2, "committed": 1},
            r"EndTxnRequest\.committed: expected bool",
        ),
        (
            AddOffsetsToTxnRequest,
            {"transactional_id": "t", "producer_id": 1, "producer_epoch": 2},
            r"AddOffsetsToTxnRequest\.group_id: missing field",
        ),
        (
            AddPartitionsToTxnRequest,
            {
                "transactions": [
                    {
                        "transactional_id": None,
                        "producer_id": 1,
                        "producer_epoch": 2,
                        "verify_only": False,
                        "topics": [],
                    }
                ]
            },
            r"AddPartitionsToTxnRequest\.transactions\[0\]\.transactional_id: expected str",
        ),
        (
            AddPartitionsToTxnResponse,
            {
                "error_code": 0,
                "results_by_transaction": [
                    {
                        "transactional_id": "t",
                        "topic_results": [
                            {
                                "name": "o",
                                "results_by_partition": [
                                    {"partition_index": 0, "partition_error_code": 2**15}
                                ],
                            }
                        ],
                    }
                ],
            },
            r"results_by_partition\[0\]\.partition_error_code: expected int16",
        ),
        (
            ListTransactionsRequest,
            {"state_filters": [], "producer_id_filters": [2**63], "duration_filter": -1},
            r"ListTransactionsRequest\.producer_id_filters\[0\]: expected int64",
        ),
    ],
)
def test_malformed_bodies_are_refused(
    cls: type[Request | Response], body: dict[str, Any], match: str
) -> None:
    with pytest.raises(MessageError, match=match):
        cls.from_body(body)
