"""The body codec generated from the message field types (wire/messages/fields.py): every
registered message round-trips through its body, and a body of the wrong shape - a wrong type,
an int out of Kafka's width, a missing or unknown field, a short topic id - is rejected with
the path of the field; an unsupported field type is refused when the class is defined."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.wire.messages.strategies import MESSAGES, class_name, dataclass_strategy
from wire import messages as m
from wire.errors import ProtocolError
from wire.messages import MessageError, Response, build_all_codecs
from wire.messages import base as message_base
from wire.messages.fields import codecs

# -- round trips ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", MESSAGES, ids=class_name)
@settings(max_examples=25)
@given(data=st.data())
def test_body_round_trip(cls: type[m.Message], data: st.DataObject) -> None:
    msg = data.draw(dataclass_strategy(cls))
    body = msg.to_body()
    assert type(cls.from_body(body)) is cls
    assert cls.from_body(body) == msg


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


def test_unsupported_field_type_raises_on_first_use() -> None:
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Weird(Response):
        API_KEY = 992
        API_VERSION = 0
        when: dict[str, int] = dataclasses.field(default_factory=dict)

    try:
        with pytest.raises(TypeError, match="unsupported field type"):
            Weird().to_body()
        with pytest.raises(TypeError, match="unsupported field type"):
            build_all_codecs()
    finally:
        del message_base._responses[(992, 0)]  # the registry is process-wide


def test_every_registered_message_has_a_codec() -> None:
    """Codecs are generated on first use: this generates all of them, so a field type the
    generator cannot handle fails here rather than on some rare request in production."""
    requests = m.registered_requests()
    assert build_all_codecs() == 2 * len(requests)  # each request and its response
    assert all(r in codecs and r.RESPONSE in codecs for r in requests)
