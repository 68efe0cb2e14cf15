"""Typed messages: round trips for every registered message, type validation, registry rules,
Kafka's field names, API keys and error codes."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire import messages as m
from wire.envelope import (
    RequestEnvelope,
    ResponseEnvelope,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from wire.errors import ErrorCode, KafkaError, ProtocolError, raise_for_code
from wire.messages import (
    ApiKey,
    FixedLen,
    IntRange,
    MessageError,
    Request,
    Response,
    UnsupportedVersionError,
)

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def strategy_for(hint: Any) -> st.SearchStrategy[Any]:
    """A hypothesis strategy for one field type, mirroring the codec's supported types."""
    origin = typing.get_origin(hint)
    if origin is Annotated:
        base, *meta = typing.get_args(hint)
        for mark in meta:
            if isinstance(mark, FixedLen):
                return st.binary(min_size=mark.size, max_size=mark.size)
            if isinstance(mark, IntRange):
                return st.integers(min_value=mark.low, max_value=mark.high)
        return strategy_for(base)
    if origin in (typing.Union, types.UnionType):
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return st.none() | strategy_for(inner)
    if origin is list:
        (inner,) = typing.get_args(hint)
        return st.lists(strategy_for(inner), max_size=3)
    simple: dict[Any, st.SearchStrategy[Any]] = {
        int: INT64,
        bool: st.booleans(),
        str: st.text(max_size=12),
        bytes: st.binary(max_size=48),
        float: st.floats(allow_nan=False),
    }
    if hint in simple:
        return simple[hint]
    assert isinstance(hint, type), hint
    assert dataclasses.is_dataclass(hint), hint
    return dataclass_strategy(hint)


def dataclass_strategy(cls: type) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    kwargs = {f.name: strategy_for(hints[f.name]) for f in dataclasses.fields(cls)}
    return st.builds(cls, **kwargs)


REQUESTS = m.registered_requests()
MESSAGES: list[type[m.Message]] = [c for r in REQUESTS for c in (r, r.RESPONSE)]


def _ids(cls: type) -> str:
    return cls.__name__


# -- round trips ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", MESSAGES, ids=_ids)
@settings(max_examples=25)
@given(data=st.data())
def test_body_round_trip(cls: type[m.Message], data: st.DataObject) -> None:
    msg = data.draw(dataclass_strategy(cls))
    body = msg.to_body()
    assert type(cls.from_body(body)) is cls
    assert cls.from_body(body) == msg


@pytest.mark.parametrize("cls", REQUESTS, ids=_ids)
@settings(max_examples=15)
@given(data=st.data())
def test_request_round_trip_through_envelope(cls: type[Request], data: st.DataObject) -> None:
    msg = data.draw(dataclass_strategy(cls))
    payload = encode_request(RequestEnvelope(cls.API_KEY, cls.API_VERSION, 7, "c", msg.to_body()))
    env = decode_request(payload)
    decoded = m.request_class(env.api_key, env.api_version).from_body(env.body)
    assert decoded == msg
    assert env.correlation_id == 7


@pytest.mark.parametrize("cls", [r.RESPONSE for r in REQUESTS], ids=_ids)
@settings(max_examples=15)
@given(data=st.data())
def test_response_round_trip_through_envelope(cls: type[Response], data: st.DataObject) -> None:
    msg = data.draw(dataclass_strategy(cls))
    env = decode_response(encode_response(ResponseEnvelope(-3, msg.to_body())))
    assert cls.from_body(env.body) == msg


def test_produce_body_layout_is_kafkas() -> None:
    req = m.ProduceRequest(
        acks=-1,
        timeout_ms=1500,
        topic_data=[
            m.TopicProduceData(
                name="t", partition_data=[m.PartitionProduceData(index=2, records=b"\x00batch")]
            )
        ],
    )
    assert req.to_body() == {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 1500,
        "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": b"\x00batch"}]}],
    }
    # Records travel as msgpack bin (0xc4 = bin 8), never as str.
    assert b"\xc4\x06\x00batch" in msgpack.packb(req.to_body(), use_bin_type=True)


def test_fetch_field_names_follow_kafka() -> None:
    assert _field_names(m.FetchRequest) >= {
        "replica_id",
        "max_wait_ms",
        "min_bytes",
        "max_bytes",
        "isolation_level",
        "topics",
    }
    assert _field_names(m.FetchTopic) == {"topic", "partitions"}
    assert _field_names(m.FetchPartition) == {
        "partition",
        "current_leader_epoch",
        "fetch_offset",
        "log_start_offset",
        "partition_max_bytes",
    }
    assert _field_names(m.FetchResponsePartition) == {
        "partition_index",
        "error_code",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "records",
    }


def test_control_field_names_follow_kafka() -> None:
    for cls in (m.LeaderAndIsrRequest, m.StopReplicaRequest, m.UpdateMetadataRequest):
        assert {"controller_id", "controller_epoch", "broker_epoch"} <= _field_names(cls)
    assert {
        "topic_name",
        "partition_index",
        "controller_epoch",
        "leader",
        "leader_epoch",
        "isr",
        "partition_epoch",
        "replicas",
        "adding_replicas",
        "removing_replicas",
        "is_new",
    } <= _field_names(m.LeaderAndIsrPartitionState)
    assert {"broker_id", "broker_epoch", "topics"} <= _field_names(m.AlterPartitionRequest)
    assert {"leader_epoch", "new_isr", "partition_epoch"} <= _field_names(
        m.AlterPartitionPartitionData
    )
    assert _field_names(m.SaslAuthenticateResponse) == {
        "error_code",
        "error_message",
        "auth_bytes",
        "session_lifetime_ms",
    }


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_topic_id_is_16_bytes() -> None:
    topic = m.MetadataResponseTopic(name="t", topic_id=bytes(range(16)))
    resp = m.MetadataResponse(topics=[topic])
    assert m.MetadataResponse.from_body(resp.to_body()) == resp
    body = resp.to_body()
    body["topics"][0]["topic_id"] = b"short"
    with pytest.raises(
        MessageError, match=r"topics\[0\]\.topic_id: expected 16 bytes, got bytes of length 5"
    ):
        m.MetadataResponse.from_body(body)
    assert bytes(16) == m.ZERO_UUID


# -- validation -----------------------------------------------------------------------------------


def _produce_body() -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 100,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"r"}]}],
    }


def _mutated(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    body = _produce_body()
    target: Any = body
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return body


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        (("acks",), True, r"ProduceRequest\.acks: expected int16, got bool"),
        (("acks",), 1.0, r"ProduceRequest\.acks: expected int16, got float"),
        (("acks",), 2**15, r"ProduceRequest\.acks: expected int16, got int 32768"),
        (("acks",), None, r"ProduceRequest\.acks: expected int16, got nil"),
        (("timeout_ms",), "100", r"ProduceRequest\.timeout_ms: expected int32, got str"),
        (("timeout_ms",), -(2**31) - 1, r"timeout_ms: expected int32, got int -2147483649"),
        (("transactional_id",), b"tx", r"transactional_id: expected str or nil, got bytes of"),
        (("topic_data",), None, r"ProduceRequest\.topic_data: expected list, got nil"),
        (("topic_data",), {}, r"ProduceRequest\.topic_data: expected list, got dict"),
        (
            ("topic_data", 0, "name"),
            b"t",
            r"topic_data\[0\]\.name: expected str, got bytes of length 1",
        ),
        (("topic_data", 0), [], r"topic_data\[0\]: expected map, got list"),
        (
            ("topic_data", 0, "partition_data", 0, "records"),
            "r",
            r"topic_data\[0\]\.partition_data\[0\]\.records: expected bytes, got str",
        ),
        (
            ("topic_data", 0, "partition_data", 0, "records"),
            None,
            r"partition_data\[0\]\.records: expected bytes, got nil",
        ),
    ],
)
def test_from_body_rejects_wrong_types(path: tuple[Any, ...], value: Any, match: str) -> None:
    with pytest.raises(MessageError, match=match) as info:
        m.ProduceRequest.from_body(_mutated(path, value))
    assert info.value.message_name == "ProduceRequest"
    assert isinstance(info.value, ProtocolError)


def test_from_body_rejects_missing_and_unknown_fields() -> None:
    body = _produce_body()
    del body["acks"]
    with pytest.raises(MessageError, match=r"ProduceRequest\.acks: missing field"):
        m.ProduceRequest.from_body(body)
    body = _produce_body()
    body["surprise"] = 1
    with pytest.raises(MessageError, match=r"ProduceRequest: unknown field\(s\) 'surprise'"):
        m.ProduceRequest.from_body(body)
    body = _produce_body()
    del body["acks"]
    body["ack"] = 1  # right count, wrong key
    with pytest.raises(MessageError, match=r"acks: missing field"):
        m.ProduceRequest.from_body(body)
    body = _produce_body()
    del body["topic_data"][0]["partition_data"][0]["index"]
    with pytest.raises(MessageError, match=r"partition_data\[0\]\.index: missing field"):
        m.ProduceRequest.from_body(body)


def test_from_body_rejects_non_map_body() -> None:
    with pytest.raises(MessageError, match="expected map, got list"):
        m.ApiVersionsRequest.from_body([])  # type: ignore[arg-type]


def test_list_of_ints_reports_index() -> None:
    state = m.LeaderAndIsrPartitionState(
        topic_name="t",
        partition_index=0,
        controller_epoch=1,
        leader=1,
        leader_epoch=1,
        isr=[1, 2],
        partition_epoch=1,
        replicas=[1, 2],
    )
    req = m.LeaderAndIsrRequest(controller_id=9, controller_epoch=1, partition_states=[state])
    body = req.to_body()
    body["partition_states"][0]["isr"] = [1, False]
    with pytest.raises(
        MessageError, match=r"partition_states\[0\]\.isr\[1\]: expected int32, got bool"
    ):
        m.LeaderAndIsrRequest.from_body(body)


def test_int_fields_have_kafkas_widths() -> None:
    resp = m.ProduceResponse(
        responses=[
            m.TopicProduceResponse(
                name="t", partition_responses=[m.PartitionProduceResponse(index=0, base_offset=5)]
            )
        ]
    )
    body = resp.to_body()
    part = body["responses"][0]["partition_responses"][0]
    part["base_offset"] = 2**63 - 1  # int64
    assert m.ProduceResponse.from_body(body).responses[0].partition_responses[0].base_offset == (
        2**63 - 1
    )
    part["base_offset"] = 2**63  # msgpack uint64, beyond Kafka's int64
    with pytest.raises(
        MessageError, match=r"base_offset: expected int64, got int 9223372036854775808"
    ):
        m.ProduceResponse.from_body(body)
    part["base_offset"] = 0
    part["index"] = 2**31  # int32
    with pytest.raises(MessageError, match=r"partition_responses\[0\]\.index: expected int32"):
        m.ProduceResponse.from_body(body)
    fetch = m.FetchRequest(max_wait_ms=1, min_bytes=1, topics=[]).to_body()
    fetch["isolation_level"] = 128  # int8
    with pytest.raises(MessageError, match=r"isolation_level: expected int8, got int 128"):
        m.FetchRequest.from_body(fetch)


def test_optional_nested_list() -> None:
    all_topics = m.MetadataRequest()
    assert all_topics.to_body() == {"topics": None, "allow_auto_topic_creation": False}
    assert m.MetadataRequest.from_body(all_topics.to_body()) == all_topics
    some = m.MetadataRequest(topics=[m.MetadataRequestTopic(name="a")])
    assert m.MetadataRequest.from_body(some.to_body()) == some
    body = some.to_body()
    body["topics"][0]["name"] = 5
    with pytest.raises(MessageError, match=r"topics\[0\]\.name: expected str or nil, got int 5"):
        m.MetadataRequest.from_body(body)


# -- error responses ------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [r.RESPONSE for r in REQUESTS], ids=_ids)
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
    "SASL_AUTHENTICATE": 36,
    "ALTER_PARTITION": 56,
    "DESCRIBE_CLUSTER": 60,
    "BROKER_REGISTRATION": 62,
    "BROKER_HEARTBEAT": 63,
    "ALLOCATE_PRODUCER_IDS": 67,
}


def test_api_keys_are_kafkas() -> None:
    assert {k.name: k.value for k in ApiKey} == KAFKA_API_KEYS


def test_supported_versions_lists_every_implemented_api() -> None:
    implemented = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22}
    implemented |= {23, 32, 36, 56, 60, 62, 63, 67}
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
    assert {4, 5, 6, 7, 56, 62, 63, 67} == m.CONTROL_PLANE_API_KEYS


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


def test_unsupported_field_type_raises() -> None:
    with pytest.raises(TypeError, match="unsupported field type"):

        @dataclass(frozen=True, slots=True, kw_only=True)
        class Weird(Response):
            API_KEY = 992
            API_VERSION = 0
            when: dict[str, int] = dataclasses.field(default_factory=dict)


# -- error codes ----------------------------------------------------------------------------------

# (name, code, retriable) from Kafka's Errors.java and its exception hierarchy.
KAFKA_ERRORS = [
    ("UNKNOWN_SERVER_ERROR", -1, False),
    ("NONE", 0, False),
    ("OFFSET_OUT_OF_RANGE", 1, False),
    ("CORRUPT_MESSAGE", 2, True),
    ("UNKNOWN_TOPIC_OR_PARTITION", 3, True),
    ("LEADER_NOT_AVAILABLE", 5, True),
    ("NOT_LEADER_OR_FOLLOWER", 6, True),
    ("REQUEST_TIMED_OUT", 7, True),
    ("MESSAGE_TOO_LARGE", 10, False),
    ("STALE_CONTROLLER_EPOCH", 11, False),
    ("NETWORK_EXCEPTION", 13, True),
    ("NOT_ENOUGH_REPLICAS", 19, True),
    ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", 20, True),
    ("CLUSTER_AUTHORIZATION_FAILED", 31, False),
    ("UNSUPPORTED_SASL_MECHANISM", 33, False),
    ("UNSUPPORTED_VERSION", 35, False),
    ("TOPIC_ALREADY_EXISTS", 36, False),
    ("NOT_CONTROLLER", 41, True),
    ("INVALID_REQUEST", 42, False),
    ("KAFKA_STORAGE_ERROR", 56, True),
    ("SASL_AUTHENTICATION_FAILED", 58, False),
    ("FENCED_LEADER_EPOCH", 74, True),
    ("UNKNOWN_LEADER_EPOCH", 75, True),
    ("STALE_BROKER_EPOCH", 77, False),
    ("OFFSET_NOT_AVAILABLE", 78, True),
    ("INVALID_RECORD", 87, False),
    ("UNKNOWN_TOPIC_ID", 100, True),
    ("INCONSISTENT_TOPIC_ID", 103, True),
    ("INELIGIBLE_REPLICA", 107, False),
    ("NEW_LEADER_ELECTED", 108, False),
    ("INVALID_REGISTRATION", 119, False),
    ("TRANSACTION_ABORTABLE", 120, False),
]


@pytest.mark.parametrize(("name", "code", "retriable"), KAFKA_ERRORS)
def test_error_codes_match_kafka(name: str, code: int, retriable: bool) -> None:
    assert ErrorCode[name] == code
    assert ErrorCode(code).name == name
    assert ErrorCode(code).retriable is retriable


def test_error_table_is_complete_through_120() -> None:
    assert set(range(-1, 121)) <= {int(c) for c in ErrorCode}


def test_unknown_error_code_maps_to_unknown_server_error() -> None:
    assert ErrorCode.from_code(31) is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert ErrorCode.from_code(30000) is ErrorCode.UNKNOWN_SERVER_ERROR


def test_kafka_error() -> None:
    raise_for_code(0)
    with pytest.raises(KafkaError, match="NOT_LEADER_OR_FOLLOWER: moved") as info:
        raise_for_code(6, "moved")
    assert info.value.code is ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert info.value.retriable
    assert str(KafkaError(30000)) == "UNKNOWN_SERVER_ERROR"
