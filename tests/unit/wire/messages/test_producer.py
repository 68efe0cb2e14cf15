"""InitProducerId (22) and AllocateProducerIds (67): registration under Kafka's keys, body layout
with Kafka's field names, round trips through the envelope, defaults, error-only answers, and
type and range checks on decoding."""

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
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    ApiKey,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MessageError,
    Request,
    Response,
    error_body,
    request_class,
    supported_versions,
)

SAMPLES: list[Request | Response] = [
    InitProducerIdRequest(transaction_timeout_ms=60_000),
    InitProducerIdRequest(
        transactional_id="payments",
        transaction_timeout_ms=15_000,
        producer_id=2**62,
        producer_epoch=2**15 - 1,
    ),
    InitProducerIdResponse(producer_id=4_321, producer_epoch=0),
    InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS),
    AllocateProducerIdsRequest(broker_id=2, broker_epoch=2**40),
    AllocateProducerIdsResponse(producer_id_start=3_000, producer_id_len=1_000),
    AllocateProducerIdsResponse(error_code=ErrorCode.STALE_BROKER_EPOCH),
]


def test_keys_versions_and_the_control_plane() -> None:
    assert (ApiKey.INIT_PRODUCER_ID, ApiKey.ALLOCATE_PRODUCER_IDS) == (22, 67)
    assert request_class(22, 0) is InitProducerIdRequest
    assert request_class(67, 0) is AllocateProducerIdsRequest
    assert supported_versions()[22] == supported_versions()[67] == (0, 0)
    # Only cluster members may take blocks of ids; any client may ask for a producer id.
    assert ApiKey.ALLOCATE_PRODUCER_IDS in CONTROL_PLANE_API_KEYS
    assert ApiKey.INIT_PRODUCER_ID not in CONTROL_PLANE_API_KEYS


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
    assert InitProducerIdRequest(transaction_timeout_ms=1).to_body() == {
        "transactional_id": None,
        "transaction_timeout_ms": 1,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    assert InitProducerIdResponse().to_body() == {
        "error_code": 0,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    assert AllocateProducerIdsRequest(broker_id=1, broker_epoch=7).to_body() == {
        "broker_id": 1,
        "broker_epoch": 7,
    }
    assert AllocateProducerIdsResponse().to_body() == {
        "error_code": 0,
        "producer_id_start": -1,
        "producer_id_len": 0,
    }


@pytest.mark.parametrize("cls", [InitProducerIdResponse, AllocateProducerIdsResponse])
def test_error_only_answers(cls: type[Response]) -> None:
    code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert cls.from_body(error_body(code)) == cls.error_response(code)
    assert cls.error_response(code).error is code


@pytest.mark.parametrize(
    ("cls", "body", "match"),
    [
        (
            InitProducerIdRequest,
            {
                "transactional_id": None,
                "transaction_timeout_ms": 1,
                "producer_id": -1,
                "producer_epoch": 2**15,
            },
            r"InitProducerIdRequest\.producer_epoch: expected int16",
        ),
        (
            InitProducerIdRequest,
            {
                "transactional_id": 5,
                "transaction_timeout_ms": 1,
                "producer_id": -1,
                "producer_epoch": -1,
            },
            r"InitProducerIdRequest\.transactional_id: expected str or nil",
        ),
        (
            InitProducerIdRequest,
            {"transactional_id": None, "producer_id": -1, "producer_epoch": -1},
            r"InitProducerIdRequest\.transaction_timeout_ms: missing field",
        ),
        (
            AllocateProducerIdsRequest,
            {"broker_id": 2**31, "broker_epoch": 1},
            r"AllocateProducerIdsRequest\.broker_id: expected int32",
        ),
        (
            AllocateProducerIdsResponse,
            {"error_code": 0, "producer_id_start": 2**63, "producer_id_len": 1},
            r"AllocateProducerIdsResponse\.producer_id_start: expected int64",
        ),
    ],
)
def test_malformed_bodies_are_refused(
    cls: type[Request | Response], body: dict[str, Any], match: str
) -> None:
    with pytest.raises(MessageError, match=match):
        cls.from_body(body)
