"""The message base (wire/messages/base.py): the registry of API keys and versions (Kafka's
keys, requests paired with their responses, registration rules enforced when a class is
defined), round trips of every registered message through the envelope, and the error-only
response body every response decodes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.wire.messages.strategies import REQUESTS, class_name, dataclass_strategy
from wire import messages as m
from wire.envelope import (
    RequestEnvelope,
    ResponseEnvelope,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from wire.errors import ErrorCode, ProtocolError
from wire.messages import ApiKey, MessageError, Request, Response, UnsupportedVersionError

# -- round trips through the envelope ------------------------------------------------------------


@pytest.mark.parametrize("cls", REQUESTS, ids=class_name)
@settings(max_examples=15)
@given(data=st.data())
def test_request_round_trip_through_envelope(cls: type[Request], data: st.DataObject) -> None:
    msg = data.draw(dataclass_strategy(cls))
    payload = encode_request(RequestEnvelope(cls.API_KEY, cls.API_VERSION, 7, "c", msg.to_body()))
    env = decode_request(payload)
    decoded = m.request_class(env.api_key, env.api_version).from_body(env.body)
    assert decoded == msg
    assert env.correlation_id == 7


@pytest.mark.parametrize("cls", [r.RESPONSE for r in REQUESTS], ids=class_name)
@settings(max_examples=15)
@given(data=st.data())
def test_response_round_trip_through_envelope(cls: type[Response], data: st.DataObject) -> None:
    msg = data.draw(dataclass_strategy(cls))
    env = decode_response(encode_response(ResponseEnvelope(-3, msg.to_body())))
    assert cls.from_body(env.body) == msg


# -- error responses ------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [r.RESPONSE for r in REQUESTS], ids=class_name)
def test_error_only_body_decodes_for_every_response(cls: type[Response]) -> None:
    body = m.error_body(ErrorCode.UNSUPPORTED_VERSION)
    assert body == {"error_code": 35}
    resp = cls.from_body(body)
    assert resp == cls.error_response(ErrorCode.UNSUPPORTED_VERSION)
    assert resp.error is ErrorCode.UNSUPPORTED_VERSION
    assert cls.from_body(resp.to_body()) == resp


def test_error_only_body_is_type_checked() -> None:
    with pytest.raises(MessageError, match=r"ProduceResponse\.error_code: expected int16, got str"):
        m.ProduceResponse.from_body({"error_code": "35"})
    with pytest.raises(MessageError, match=r"ProduceRequest\.acks: missing field"):
        m.ProduceRequest.from_body({"error_code": 35})  # requests have no error-only form


# -- registry -------------------------------------------------------------------------------------


KAFKA_API_KEYS = {
    "PRODUCE": 0,
    "FETCH": 1,
    "LIST_OFFSETS": 2,
    "METADATA": 3,
    "LEADER_AND_ISR": 4,
    "STOP_REPLICA": 5,
    "UPDATE_METADATA": 6,
    "CONTROLLED_SHUTDOWN": 7,
    "OFFSET_COMMIT": 8,
    "OFFSET_FETCH": 9,
    "FIND_COORDINATOR": 10,
    "JOIN_GROUP": 11,
    "HEARTBEAT": 12,
    "LEAVE_GROUP": 13,
    "SYNC_GROUP": 14,
    "DESCRIBE_GROUPS": 15,
    "LIST_GROUPS": 16,
    "SASL_HANDSHAKE": 17,
    "API_VERSIONS": 18,
    "CREATE_TOPICS": 19,
    "DELETE_TOPICS": 20,
    "INIT_PRODUCER_ID": 22,
    "DESCRIBE_CONFIGS": 32,
    "OFFSET_FOR_LEADER_EPOCH": 23,
    "ADD_PARTITIONS_TO_TXN": 24,
    "ADD_OFFSETS_TO_TXN": 25,
    "END_TXN": 26,
    "WRITE_TXN_MARKERS": 27,
    "TXN_OFFSET_COMMIT": 28,
    "DESCRIBE_ACLS": 29,
    "CREATE_ACLS": 30,
    "DELETE_ACLS": 31,
    "SASL_AUTHENTICATE": 36,
    "CREATE_PARTITIONS": 37,
    "DELETE_GROUPS": 42,
    "INCREMENTAL_ALTER_CONFIGS": 44,
    "OFFSET_DELETE": 47,
    "DESCRIBE_CLIENT_QUOTAS": 48,
    "ALTER_CLIENT_QUOTAS": 49,
    "DESCRIBE_USER_SCRAM_CREDENTIALS": 50,
    "ALTER_USER_SCRAM_CREDENTIALS": 51,
    "ALTER_PARTITION": 56,
    "DESCRIBE_CLUSTER": 60,
    "DESCRIBE_PRODUCERS": 61,
    "BROKER_REGISTRATION": 62,
    "BROKER_HEARTBEAT": 63,
    "DESCRIBE_TRANSACTIONS": 65,
    "LIST_TRANSACTIONS": 66,
    "ALLOCATE_PRODUCER_IDS": 67,
    "CONSUMER_GROUP_HEARTBEAT": 68,
    "CONSUMER_GROUP_DESCRIBE": 69,
}


def test_api_keys_are_kafkas() -> None:
    assert {k.name: k.value for k in ApiKey} == KAFKA_API_KEYS


def test_supported_versions_lists_every_implemented_api() -> None:
    implemented = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22}
    implemented |= {23, 24, 25, 26, 27, 28, 32, 36, 37, 42, 44, 47, 56, 60, 61, 62, 63, 65, 66}
    implemented |= {67}
    implemented |= {29, 30, 31}  # ACLs
    implemented |= {68, 69}  # consumer groups of the new protocol (KIP-848)
    implemented |= {48, 49}  # client quotas
    implemented |= {50, 51}  # SCRAM credentials
    assert m.supported_versions() == dict.fromkeys(sorted(implemented), (0, 0))


def test_requests_pair_with_their_responses() -> None:
    for req in REQUESTS:
        assert issubclass(req.RESPONSE, Response)
        assert (req.RESPONSE.API_KEY, req.RESPONSE.API_VERSION) == (req.API_KEY, req.API_VERSION)
        assert m.request_class(req.API_KEY, req.API_VERSION) is req
        assert req.__name__.removesuffix("Request") == req.RESPONSE.__name__.removesuffix(
            "Response"
        )


def test_control_plane_keys() -> None:
    assert {4, 5, 6, 7, 27, 56, 62, 63, 67} == m.CONTROL_PLANE_API_KEYS


@pytest.mark.parametrize(("key", "version"), [(0, 1), (99, 0), (10, 1), (-1, 0)])
def test_unknown_api_or_version_is_unsupported(key: int, version: int) -> None:
    with pytest.raises(UnsupportedVersionError) as info:
        m.request_class(key, version)
    assert (info.value.api_key, info.value.api_version) == (key, version)
    assert isinstance(info.value, ProtocolError)


def test_duplicate_registration_raises_at_definition() -> None:
    with pytest.raises(TypeError, match="already registered to ProduceRequest"):

        @dataclass(frozen=True, slots=True, kw_only=True)
        class AnotherProduce(Request):
            API_KEY = 0
            API_VERSION = 0
            RESPONSE = m.ProduceResponse

    assert m.request_class(0, 0) is m.ProduceRequest


def test_missing_api_key_raises_at_definition() -> None:
    with pytest.raises(TypeError, match="must define API_KEY"):

        @dataclass(frozen=True, slots=True, kw_only=True)
        class Keyless(Response):
            API_VERSION = 0


def test_request_without_response_raises() -> None:
    with pytest.raises(TypeError, match="must name its RESPONSE"):

        @dataclass(frozen=True, slots=True, kw_only=True)
        class Orphan(Request):
            API_KEY = 990
            API_VERSION = 0


def test_response_fields_need_defaults() -> None:
    with pytest.raises(TypeError, match=r"response fields need defaults: \['count'\]"):

        @dataclass(frozen=True, slots=True, kw_only=True)
        class Strict(Response):
            API_KEY = 991
            API_VERSION = 0
            count: int

    with pytest.raises(UnsupportedVersionError):
        m.request_class(991, 0)
