"""The Kafka listener's mapping of the transaction APIs beyond field by field (wire/kafka/apis.py):
AddPartitionsToTxn v0-3 as one transaction of the batched native message, top-level errors
moved onto each item where Kafka's response has no top-level code, the error codes older clients
do not know, and ListTransactions v0 (no duration filter). Every version's plain round trip is in
test_codec.py."""

from __future__ import annotations

import datetime
import struct
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.static.constants import EntityType

from wire.errors import ErrorCode
from wire.kafka.apis import APIS
from wire.kafka.codec import decode_request, encode_response, read_prefix, schema
from wire.kafka.convert import element_class, to_kio
from wire.messages import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTopicResult,
    AddPartitionsToTxnTransaction,
    ApiKey,
    DescribedTransaction,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnResponse,
    InitProducerIdResponse,
    ListTransactionsRequest,
    Request,
    Response,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

from .helpers import NoTopicIds, request_frame, response_body
from .samples import REQUESTS, TRANSACTIONAL_ID

TOPICS = NoTopicIds()
FENCED = ErrorCode.PRODUCER_FENCED


def served(api_key: int, version: int, body: Any) -> tuple[Request, object]:
    """A kio request body sent at `version` and mapped as the Kafka listener maps it."""
    frame = request_frame(api_key, version, body)
    decoded = decode_request(frame, read_prefix(frame)).body
    return APIS[api_key].native_request(decoded, version, TOPICS)


def answered(api_key: int, version: int, response: Response, note: object) -> Any:
    """A native answer as the Kafka client reads it at `version`."""
    response_cls = schema(api_key, version, EntityType.response)
    kio_body = APIS[api_key].kio_response(response, response_cls, note, TOPICS)
    return response_body(encode_response(3, kio_body), response_cls)[1]


def client_add_partitions(version: int) -> Any:
    """The sample AddPartitionsToTxn as a client sends it at v0-3."""
    request_cls = schema(ApiKey.ADD_PARTITIONS_TO_TXN, version, EntityType.request)
    topic_cls = element_class(request_cls, "v3_and_below_topics")
    return request_cls(
        v3_and_below_transactional_id=TRANSACTIONAL_ID,
        v3_and_below_producer_id=4000,
        v3_and_below_producer_epoch=3,
        v3_and_below_topics=(
            topic_cls(name="orders", partitions=(0, 2)),
            topic_cls(name="audit", partitions=(1,)),
        ),
    )


def partition_codes(body: Any) -> list[tuple[str, int, KioErrorCode]]:
    return [
        (t.name, p.partition_index, p.partition_error_code)
        for t in body.results_by_topic_v3_and_below
        for p in t.results_by_partition
    ]


def topic_codes(body: Any) -> list[tuple[str, int, KioErrorCode]]:
    return [(t.name, p.partition_index, p.error_code) for t in body.topics for p in t.partitions]


@pytest.mark.parametrize("version", range(4))
def test_add_partitions_v0_to_v3_are_one_transaction_answered_per_partition(version: int) -> None:
    native, note = served(ApiKey.ADD_PARTITIONS_TO_TXN, version, client_add_partitions(version))
    assert native == REQUESTS[ApiKey.ADD_PARTITIONS_TO_TXN]  # one transaction, not verify-only
    fenced_on_audit = AddPartitionsToTxnResponse(
        results_by_transaction=[
            AddPartitionsToTxnResult(
                transactional_id=TRANSACTIONAL_ID,
                topic_results=[
                    AddPartitionsToTxnTopicResult(
                        name="audit",
                        results_by_partition=[
                            AddPartitionsToTxnPartitionResult(
                                partition_index=1, partition_error_code=FENCED
                            )
                        ],
                    )
                ],
            )
        ]
    )
    body = answered(ApiKey.ADD_PARTITIONS_TO_TXN, version, fenced_on_audit, note)
    # Clients before v2 do not know PRODUCER_FENCED: they get INVALID_PRODUCER_EPOCH.
    expected = KioErrorCode.producer_fenced if version >= 2 else KioErrorCode.invalid_producer_epoch
    assert partition_codes(body) == [("audit", 1, expected)]
    # A top-level error (v0-3 have no field for it) reaches each requested partition.
    not_coordinator = AddPartitionsToTxnResponse(error_code=ErrorCode.NOT_COORDINATOR)
    body = answered(ApiKey.ADD_PARTITIONS_TO_TXN, version, not_coordinator, note)
    assert partition_codes(body) == [
        ("orders", 0, KioErrorCode.not_coordinator),
        ("orders", 2, KioErrorCode.not_coordinator),
        ("audit", 1, KioErrorCode.not_coordinator),
    ]


def test_add_partitions_v4_is_the_batched_form_with_its_top_level_error() -> None:
    request = AddPartitionsToTxnRequest(
        transactions=[
            AddPartitionsToTxnTransaction(
                transactional_id=name,
                producer_id=producer_id,
                producer_epoch=1,
                verify_only=verify_only,
                topics=[AddPartitionsToTxnTopic(name="orders", partitions=[producer_id])],
            )
            for name, producer_id, verify_only in (("a", 1, True), ("b", 2, False))
        ]
    )
    request_cls = schema(ApiKey.ADD_PARTITIONS_TO_TXN, 4, EntityType.request)
    native, note = served(ApiKey.ADD_PARTITIONS_TO_TXN, 4, to_kio(request, request_cls))
    assert native == request
    body = answered(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        4,
        AddPartitionsToTxnResponse(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
        note,
    )
    assert body.error_code is KioErrorCode.cluster_authorization_failed
    assert body.results_by_transaction == ()
    # PRODUCER_FENCED is left alone at v4.
    result = AddPartitionsToTxnResult(
        transactional_id="b",
        topic_results=[
            AddPartitionsToTxnTopicResult(
                name="orders",
                results_by_partition=[
                    AddPartitionsToTxnPartitionResult(
                        partition_index=2, partition_error_code=FENCED
                    )
                ],
            )
        ],
    )
    body = answered(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        4,
        AddPartitionsToTxnResponse(results_by_transaction=[result]),
        note,
    )
    (only,) = body.results_by_transaction
    assert only.topic_results[0].results_by_partition[0].partition_error_code is (
        KioErrorCode.producer_fenced
    )


@pytest.mark.parametrize(
    ("api_key", "since", "fenced"),
    [
        (ApiKey.INIT_PRODUCER_ID, 4, InitProducerIdResponse(error_code=FENCED)),
        (ApiKey.ADD_OFFSETS_TO_TXN, 2, AddOffsetsToTxnResponse(error_code=FENCED)),
        (ApiKey.END_TXN, 2, EndTxnResponse(error_code=FENCED)),
    ],
)
def test_producer_fenced_is_an_invalid_epoch_to_older_clients(
    api_key: int, since: int, fenced: Response
) -> None:
    api = APIS[api_key]
    for version in range(api.low, api.high + 1):
        request_cls = schema(api_key, version, EntityType.request)
        _, note = served(api_key, version, to_kio(REQUESTS[api_key], request_cls))
        body = answered(api_key, version, fenced, note)
        expected = KioErrorCode.producer_fenced
        if version < since:
            expected = KioErrorCode.invalid_producer_epoch
        assert body.error_code is expected, version
        # Other codes pass unchanged at every version.
        other = type(fenced).error_response(ErrorCode.CONCURRENT_TRANSACTIONS)
        body = answered(api_key, version, other, note)
        assert body.error_code is KioErrorCode.concurrent_transactions, version


@pytest.mark.parametrize("version", range(4))
def test_txn_offset_commit_errors_per_partition_and_loading_before_v2(version: int) -> None:
    request_cls = schema(ApiKey.TXN_OFFSET_COMMIT, version, EntityType.request)
    _, note = served(
        ApiKey.TXN_OFFSET_COMMIT, version, to_kio(REQUESTS[ApiKey.TXN_OFFSET_COMMIT], request_cls)
    )
    loading = TxnOffsetCommitResponse(
        topics=[
            TxnOffsetCommitResponseTopic(
                name="orders",
                partitions=[
                    TxnOffsetCommitResponsePartition(
                        partition_index=0, error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                    ),
                    TxnOffsetCommitResponsePartition(
                        partition_index=2, error_code=ErrorCode.ILLEGAL_GENERATION
                    ),
                ],
            )
        ]
    )
    body = answered(ApiKey.TXN_OFFSET_COMMIT, version, loading, note)
    first = (
        KioErrorCode.coordinator_load_in_progress
        if version >= 2
        else KioErrorCode.coordinator_not_available
    )
    assert [(p.partition_index, p.error_code) for p in body.topics[0].partitions] == [
        (0, first),
        (2, KioErrorCode.illegal_generation),
    ]
    # The response has no top-level code: a top-level error reaches each requested partition.
    body = answered(
        ApiKey.TXN_OFFSET_COMMIT,
        version,
        TxnOffsetCommitResponse(error_code=ErrorCode.NOT_COORDINATOR),
        note,
    )
    assert topic_codes(body) == [
        ("orders", 0, KioErrorCode.not_coordinator),
        ("orders", 2, KioErrorCode.not_coordinator),
    ]


def test_describe_producers_and_transactions_answer_a_top_level_error_per_item() -> None:
    describe_producers = REQUESTS[ApiKey.DESCRIBE_PRODUCERS]
    request_cls = schema(ApiKey.DESCRIBE_PRODUCERS, 0, EntityType.request)
    _, note = served(ApiKey.DESCRIBE_PRODUCERS, 0, to_kio(describe_producers, request_cls))
    body = answered(
        ApiKey.DESCRIBE_PRODUCERS,
        0,
        DescribeProducersResponse(error_code=ErrorCode.REQUEST_TIMED_OUT),
        note,
    )
    assert topic_codes(body) == [
        ("orders", 0, KioErrorCode.request_timed_out),
        ("orders", 1, KioErrorCode.request_timed_out),
    ]
    request = DescribeTransactionsRequest(transactional_ids=["a", "b"])
    request_cls = schema(ApiKey.DESCRIBE_TRANSACTIONS, 0, EntityType.request)
    _, note = served(ApiKey.DESCRIBE_TRANSACTIONS, 0, to_kio(request, request_cls))
    response_cls = schema(ApiKey.DESCRIBE_TRANSACTIONS, 0, EntityType.response)
    kio_body = APIS[ApiKey.DESCRIBE_TRANSACTIONS].kio_response(
        DescribeTransactionsResponse(error_code=ErrorCode.NOT_COORDINATOR),
        response_cls,
        note,
        TOPICS,
    )
    assert [(s.transactional_id, s.error_code) for s in kio_body.transaction_states] == [
        ("a", KioErrorCode.not_coordinator),
        ("b", KioErrorCode.not_coordinator),
    ]


def test_a_transaction_without_a_start_time_is_written_as_minus_one() -> None:
    """Kafka sends -1 for an Empty transactional id; kio's reader refuses a negative time, so
    the bytes are checked instead of reading them back."""
    response_cls = schema(ApiKey.DESCRIBE_TRANSACTIONS, 0, EntityType.response)
    empty = DescribeTransactionsResponse(
        transaction_states=[
            DescribedTransaction(transactional_id="t", transaction_state="Empty", producer_id=9)
        ]
    )
    kio_body = to_kio(empty, response_cls)
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    (state,) = kio_body.transaction_states
    assert state.transaction_start_time == epoch - datetime.timedelta(milliseconds=1)
    frame = encode_response(3, kio_body)
    assert struct.pack(">q", -1) + struct.pack(">q", 9) in frame  # start time, then producer id


def test_list_transactions_v0_has_no_duration_filter() -> None:
    request = REQUESTS[ApiKey.LIST_TRANSACTIONS]
    assert isinstance(request, ListTransactionsRequest)
    assert request.duration_filter != -1
    request_cls = schema(ApiKey.LIST_TRANSACTIONS, 0, EntityType.request)
    native, _ = served(ApiKey.LIST_TRANSACTIONS, 0, to_kio(request, request_cls))
    assert isinstance(native, ListTransactionsRequest)
    assert native.duration_filter == -1  # every transaction, whatever its age
    assert (native.state_filters, native.producer_id_filters) == (
        request.state_filters,
        request.producer_id_filters,
    )
