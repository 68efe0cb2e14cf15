"""The Kafka codec: every advertised version of every API encodes and decodes through kio, and
the native messages survive the trip."""

from __future__ import annotations

import dataclasses
import datetime
import struct
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode
from kio.static.constants import EntityType

from wire.error_responses import error_response
from wire.errors import ErrorCode, ProtocolError
from wire.kafka.apis import ADD_PARTITIONS_TO_TXN_BATCHED, APIS, FetchByIds
from wire.kafka.codec import (
    KafkaFrameError,
    decode_request,
    encode_response,
    read_prefix,
    schema,
    unsupported_api_versions,
)
from wire.kafka.convert import SchemaMismatch, element_class, to_kio, to_native
from wire.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
    ApiKey,
    FetchableTopicResponse,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    MetadataRequest,
    MetadataResponse,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    Response,
)

from .helpers import request_frame, response_body
from .samples import REQUESTS, RESPONSES, TOPIC_ID

SERVED = [
    (api.key, version)
    for api in APIS.values()
    if api.key in REQUESTS  # the group APIs: test_group_conversion.py
    for version in range(api.low, api.high + 1)
]


FETCH_NO_TOPICS = FetchRequest(max_wait_ms=500, min_bytes=1, isolation_level=1, topics=[])


def kio_request(api_key: int, version: int) -> Any:
    request_cls = schema(api_key, version, EntityType.request)
    native = REQUESTS[api_key]
    if api_key == ApiKey.ADD_PARTITIONS_TO_TXN and version < ADD_PARTITIONS_TO_TXN_BATCHED:
        return add_partitions_client_form(native, request_cls)
    if api_key != ApiKey.FETCH or version < 13:
        return to_kio(native, request_cls)
    assert isinstance(native, FetchRequest)
    topic_cls = element_class(request_cls, "topics")
    partition_cls = element_class(topic_cls, "partitions")
    topics = tuple(
        topic_cls(
            topic_id=uuid.UUID(bytes=TOPICS.id_of(t.topic)),
            partitions=tuple(to_kio(p, partition_cls) for p in t.partitions),
        )
        for t in native.topics
    )
    return to_kio(native, request_cls, topics=topics)


def add_partitions_client_form(native: Any, request_cls: type[Any]) -> Any:
    """AddPartitionsToTxn v0-3 as a client sends it: its one transaction in fields of their own."""
    assert isinstance(native, AddPartitionsToTxnRequest)
    (transaction,) = native.transactions
    topic_cls = element_class(request_cls, "v3_and_below_topics")
    return request_cls(
        v3_and_below_transactional_id=transaction.transactional_id,
        v3_and_below_producer_id=transaction.producer_id,
        v3_and_below_producer_epoch=transaction.producer_epoch,
        v3_and_below_topics=tuple(to_kio(t, topic_cls) for t in transaction.topics),
    )


def native_round_trip_request(api_key: int, version: int) -> tuple[Any, object]:
    """(native request, the API's note) of the sample request sent at `version`."""
    frame = request_frame(api_key, version, kio_request(api_key, version))
    request = decode_request(frame, read_prefix(frame))
    assert (request.api_key, request.api_version, request.correlation_id) == (api_key, version, 9)
    assert request.client_id == "test-client"
    native, note = APIS[api_key].native_request(request.body, version, TOPICS)
    if isinstance(note, FetchByIds):  # Fetch by topic id: fetched under the name the id resolves to
        assert note == FetchByIds({"orders": TOPIC_ID}, [])
    return native, note


def kafka_answer(api_key: int, version: int, response: Response, note: object) -> Any:
    """A native response as a Kafka client reads it at `version`, and back as a native one."""
    response_cls = schema(api_key, version, EntityType.response)
    kio_body = APIS[api_key].kio_response(response, response_cls, note, TOPICS)
    correlation_id, body = response_body(encode_response(77, kio_body), response_cls)
    assert correlation_id == 77
    if isinstance(note, FetchByIds):
        return fetch_by_name(body)
    if api_key == ApiKey.ADD_PARTITIONS_TO_TXN and version < ADD_PARTITIONS_TO_TXN_BATCHED:
        return add_partitions_batched(body, note)
    return to_native(body, type(response))


class Topics:
    """The broker's topic ids: only "orders" has one."""

    def name_of(self, topic_id: bytes) -> str | None:
        return "orders" if topic_id == TOPIC_ID else None

    def id_of(self, name: str) -> bytes:
        return TOPIC_ID if name == "orders" else bytes(16)


TOPICS = Topics()


def fetch_by_name(body: Any) -> FetchResponse:
    """A Fetch v13+ answer (topics by id) as the native answer (topics by name)."""
    return FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic=TOPICS.name_of(t.topic_id.bytes) or t.topic_id.hex,
                partitions=[to_native(p, FetchResponsePartition) for p in t.partitions],
            )
            for t in body.responses
        ]
    )


def add_partitions_batched(body: Any, note: object) -> AddPartitionsToTxnResponse:
    """An AddPartitionsToTxn v0-3 answer (per partition) as the native one (per transaction)."""
    assert isinstance(note, AddPartitionsToTxnRequest)
    (transaction,) = note.transactions
    return AddPartitionsToTxnResponse(
        results_by_transaction=[
            AddPartitionsToTxnResult(
                transactional_id=transaction.transactional_id,
                topic_results=[
                    to_native(t, AddPartitionsToTxnTopicResult)
                    for t in body.results_by_topic_v3_and_below
                ],
            )
        ]
    )


@pytest.mark.parametrize(("api_key", "version"), SERVED)
def test_every_served_version_round_trips_and_is_stable(api_key: int, version: int) -> None:
    request, note = native_round_trip_request(api_key, version)
    assert isinstance(request, type(REQUESTS[api_key]))
    response = kafka_answer(api_key, version, RESPONSES[api_key], note)
    # What a version can carry comes back unchanged on a second trip (no drift, no invention).
    assert kafka_answer(api_key, version, response, note) == response


# What the newest served version does not carry: API -> (result list, {field: native default}).
_NOT_CARRIED: dict[int, tuple[str, dict[str, Any]]] = {
    ApiKey.CREATE_TOPICS: ("topics", {"topic_id": bytes(16)}),  # topic ids from v7
    ApiKey.DELETE_TOPICS: ("responses", {"error_message": None}),  # messages from v5
}


@pytest.mark.parametrize("api_key", sorted(REQUESTS))
def test_the_newest_version_carries_every_native_field(api_key: int) -> None:
    newest = APIS[api_key].high
    request, note = native_round_trip_request(api_key, newest)
    assert request == REQUESTS[api_key]
    response = kafka_answer(api_key, newest, RESPONSES[api_key], note)
    expected = RESPONSES[api_key]
    if api_key in _NOT_CARRIED:
        results, defaults = _NOT_CARRIED[api_key]
        lost = [dataclasses.replace(r, **defaults) for r in getattr(expected, results)]
        expected = dataclasses.replace(expected, **{results: lost})  # type: ignore[arg-type]
    assert response == expected


def test_kio_types_at_the_boundary() -> None:
    """Error codes, durations, times, topic ids and null records convert both ways."""
    response_cls = schema(ApiKey.PRODUCE, 9, EntityType.response)
    body = to_kio(RESPONSES[ApiKey.PRODUCE], response_cls)
    first, second = body.responses[0].partition_responses
    assert first.error_code is KioErrorCode.none
    assert second.error_code is KioErrorCode.not_enough_replicas
    assert first.log_append_time is None  # -1: CreateTime topic
    assert body.throttle_time == datetime.timedelta(0)
    stamped = PartitionProduceResponse(index=0, log_append_time_ms=1_700_000_000_123)
    partition_cls = type(first)
    converted = to_kio(stamped, partition_cls)
    assert converted.log_append_time == datetime.datetime(
        2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.UTC
    )
    assert to_native(converted, PartitionProduceResponse) == stamped

    metadata = to_kio(RESPONSES[ApiKey.METADATA], schema(ApiKey.METADATA, 12, EntityType.response))
    assert metadata.topics[0].topic_id == uuid.UUID(bytes=TOPIC_ID)
    produce = schema(ApiKey.PRODUCE, 9, EntityType.request)
    kio_request = to_kio(REQUESTS[ApiKey.PRODUCE], produce)
    assert kio_request.timeout == datetime.timedelta(milliseconds=1500)
    partition = kio_request.topic_data[0].partition_data[0]
    null_records = to_native(
        dataclasses.replace(partition, records=None),
        PartitionProduceData,
    )
    assert null_records.records == b""


def test_metadata_v0_asks_for_every_topic_with_an_empty_list() -> None:
    api = APIS[ApiKey.METADATA]
    cases: list[tuple[int, tuple[Any, ...] | None, list[Any] | None]] = [
        (0, (), None),
        (1, (), []),
        (1, None, None),
    ]
    for version, topics, expected in cases:
        body = schema(ApiKey.METADATA, version, EntityType.request)(topics=topics)
        request, _ = api.native_request(body, version, TOPICS)
        assert isinstance(request, MetadataRequest)
        assert request.topics == expected, version


def test_a_missing_native_value_is_a_schema_mismatch_not_an_invented_number() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoOffset:
        partition_index: int
        error_code: int = 0

    partition_cls = type(
        to_kio(RESPONSES[ApiKey.FETCH], schema(ApiKey.FETCH, 12, EntityType.response))
        .responses[0]
        .partitions[0]
    )
    with pytest.raises(SchemaMismatch, match="high_watermark"):
        to_kio(NoOffset(partition_index=1), partition_cls)


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00\x03\x00",  # shorter than the fixed header prefix
        struct.pack(">hhi", ApiKey.METADATA, 9, 1),  # flexible header cut before the client id
        struct.pack(">hhih", ApiKey.METADATA, 1, 1, 5) + b"ab",  # client id longer than the frame
        struct.pack(">hhih", ApiKey.PRODUCE, 7, 1, -1) + b"\x00\x01\x00",  # body cut short
        struct.pack(">hhih", ApiKey.METADATA, 4, 1, -1) + struct.pack(">i", 3) + b"\xff\xff",
        # a flexible request whose header carries an unknown tagged field (tag 7, 1 byte)
        struct.pack(">hhih", ApiKey.METADATA, 12, 1, -1) + b"\x01\x07\x01\x00",
        # a string that is not UTF-8
        struct.pack(">hhih", ApiKey.DELETE_TOPICS, 1, 1, -1)
        + struct.pack(">ih", 1, 2)
        + b"\xff\xfe",
    ],
)
def test_undecodable_requests_are_frame_errors(frame: bytes) -> None:
    with pytest.raises(KafkaFrameError) as caught:
        decode_request(frame, read_prefix(frame))
    assert isinstance(caught.value, ProtocolError)


def test_unknown_api_or_version_has_no_schema() -> None:
    with pytest.raises(KafkaFrameError, match="no schema"):
        schema(9999, 0, EntityType.request)
    with pytest.raises(KafkaFrameError, match="no schema"):
        schema(ApiKey.PRODUCE, 99, EntityType.request)


def test_unsupported_api_versions_answer_is_v0_format() -> None:
    frame = unsupported_api_versions(42, 0, 3)
    response_cls = schema(ApiKey.API_VERSIONS, 0, EntityType.response)
    correlation_id, body = response_body(frame, response_cls)
    assert correlation_id == 42
    assert body.error_code is KioErrorCode.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 3)]


def test_api_versions_answers_with_response_header_v0_at_every_version() -> None:
    for version in range(4):
        response_cls = schema(ApiKey.API_VERSIONS, version, EntityType.response)
        assert response_cls.__header_schema__.__version__ == 0


def test_error_response_names_every_requested_partition() -> None:
    produce = error_response(REQUESTS[ApiKey.PRODUCE], ErrorCode.UNKNOWN_SERVER_ERROR)
    assert [
        (p.index, p.error_code)
        for t in produce.responses  # type: ignore[attr-defined]
        for p in t.partition_responses
    ] == [(0, -1), (2, -1)]
    fetch = error_response(REQUESTS[ApiKey.FETCH], ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    assert [
        (t.topic, p.partition_index, p.error_code)
        for t in fetch.responses  # type: ignore[attr-defined]
        for p in t.partitions
    ] == [("orders", 1, 31)]
    for api_key, request in REQUESTS.items():
        answer = error_response(request, ErrorCode.UNKNOWN_SERVER_ERROR)
        # Each converts to every served version (a failed handler is answered at any version).
        api = APIS[api_key]
        for version in range(api.low, api.high + 1):
            response_cls = schema(api_key, version, EntityType.response)
            note = native_round_trip_request(api_key, version)[1]
            encode_response(1, api.kio_response(answer, response_cls, note, TOPICS))
    assert isinstance(REQUESTS[ApiKey.FETCH], FetchRequest)
    assert isinstance(REQUESTS[ApiKey.PRODUCE], ProduceRequest)
    assert isinstance(RESPONSES[ApiKey.METADATA], MetadataResponse)


@pytest.mark.parametrize("version", [13, 15, 16])
def test_fetch_by_topic_id_answers_unknown_ids_with_unknown_topic_id(version: int) -> None:
    request_cls = schema(ApiKey.FETCH, version, EntityType.request)
    unknown = uuid.UUID(int=99)
    partition_cls = _element(request_cls, "topics", "partitions")
    topic_cls = _element(request_cls, "topics")
    body = to_kio(
        FETCH_NO_TOPICS,
        request_cls,
        topics=tuple(
            topic_cls(
                topic_id=topic_id,
                partitions=(partition_cls(partition=0, fetch_offset=5, partition_max_bytes=9),),
            )
            for topic_id in (uuid.UUID(bytes=TOPIC_ID), unknown)
        ),
    )
    api = APIS[ApiKey.FETCH]
    native, note = api.native_request(body, version, TOPICS)
    assert isinstance(native, FetchRequest)
    # The unknown id is left out of the native fetch (no name to fetch it under).
    assert [t.topic for t in native.topics] == ["orders"]
    answer = FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic="orders", partitions=[FetchResponsePartition(partition_index=0)]
            )
        ]
    )
    response_cls = schema(ApiKey.FETCH, version, EntityType.response)
    kio_answer = api.kio_response(answer, response_cls, note, TOPICS)
    _, decoded = response_body(encode_response(3, kio_answer), response_cls)
    assert [(t.topic_id, t.partitions[0].error_code) for t in decoded.responses] == [
        (uuid.UUID(bytes=TOPIC_ID), KioErrorCode.none),
        (unknown, KioErrorCode.unknown_topic_id),
    ]


def test_fetch_v15_reads_the_replica_id_from_the_replica_state() -> None:
    request_cls = schema(ApiKey.FETCH, 15, EntityType.request)
    state_cls = type(request_cls.__dataclass_fields__["replica_state"].default)
    body = to_kio(
        FETCH_NO_TOPICS,
        request_cls,
        replica_state=state_cls(replica_id=2, replica_epoch=7),
    )
    native, _ = APIS[ApiKey.FETCH].native_request(body, 15, TOPICS)
    assert isinstance(native, FetchRequest)
    assert native.replica_id == 2
    refuse = APIS[ApiKey.FETCH].refuse
    assert refuse is not None
    assert refuse(native) is ErrorCode.CLUSTER_AUTHORIZATION_FAILED


def _element(cls: type[Any], *path: str) -> type[Any]:
    for name in path:
        cls = element_class(cls, name)
    return cls
