"""`throttle_time_ms` on every response (wire/messages/base.py): left out of a native body while
it is 0 (wire/messages/fields.py, OMITTED_WHEN_ZERO), decoded as 0 when absent, type-checked
when present; and written by the hand-made Kafka Produce and Fetch encoders."""

from __future__ import annotations

import datetime

import pytest
from kio.static.constants import EntityType

from wire.kafka.codec import schema
from wire.kafka.fetch_codec import encode_fetch_response
from wire.kafka.produce_codec import encode_produce_response
from wire.messages import (
    AddOffsetsToTxnResponse,
    ApiKey,
    FetchResponse,
    MessageError,
    MetadataResponse,
    ProduceResponse,
)
from wire.messages.quotas import DescribeClientQuotasResponse

from ..kafka.helpers import NoTopicIds, response_body


def test_a_zero_throttle_time_is_not_sent_and_reads_back_as_zero() -> None:
    body = MetadataResponse(controller_id=3).to_body()
    assert "throttle_time_ms" not in body
    assert MetadataResponse.from_body(body) == MetadataResponse(controller_id=3)
    assert AddOffsetsToTxnResponse().to_body() == {"error_code": 0}


def test_a_throttle_time_is_sent_and_reads_back() -> None:
    throttled = DescribeClientQuotasResponse(throttle_time_ms=1234, entries=[])
    body = throttled.to_body()
    assert body["throttle_time_ms"] == 1234
    assert DescribeClientQuotasResponse.from_body(body) == throttled


def test_a_bad_throttle_time_is_refused_and_other_fields_are_still_required() -> None:
    body = MetadataResponse().to_body()
    with pytest.raises(MessageError, match=r"throttle_time_ms: expected int32"):
        MetadataResponse.from_body({**body, "throttle_time_ms": "5"})
    with pytest.raises(MessageError, match=r"throttle_time_ms: expected int32"):
        MetadataResponse.from_body({**body, "throttle_time_ms": 2**31})
    del body["brokers"]
    with pytest.raises(MessageError, match=r"MetadataResponse\.brokers: missing field"):
        MetadataResponse.from_body(body)
    with pytest.raises(MessageError, match=r"unknown field"):
        MetadataResponse.from_body({**MetadataResponse().to_body(), "surprise": 1})


@pytest.mark.parametrize("version", [3, 8, 9])
def test_the_produce_encoder_writes_the_throttle_time(version: int) -> None:
    frame = encode_produce_response(7, version, ProduceResponse(throttle_time_ms=4321))
    response_cls = schema(ApiKey.PRODUCE, version, EntityType.response)
    correlation_id, body = response_body(frame, response_cls)
    assert correlation_id == 7
    assert body.throttle_time == datetime.timedelta(milliseconds=4321)


@pytest.mark.parametrize("version", [4, 12, 16])
def test_the_fetch_encoder_writes_the_throttle_time(version: int) -> None:
    response = FetchResponse(throttle_time_ms=250, responses=[])
    buffers = encode_fetch_response(8, version, response, None, NoTopicIds())
    frame = b"".join(bytes(b) for b in buffers)
    _, body = response_body(frame, schema(ApiKey.FETCH, version, EntityType.response))
    assert body.throttle_time == datetime.timedelta(milliseconds=250)
