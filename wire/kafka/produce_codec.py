"""Produce (API 0) v3-v9 requests decoded and responses encoded by hand, without kio — sans-IO.

The fast path for the API that carries every record into the broker: the request is read
straight from the frame into `wire.messages.ProduceRequest`, and the response is written
straight from `wire.messages.ProduceResponse`. The result is what the general path
(`wire.kafka.codec.decode_request` + `KafkaApi.native_request`, and `KafkaApi.kio_response` +
`encode_response`) gives for the same bytes, which tests/unit/wire/kafka/test_produce_codec.py
checks over every version; where the two differ on a malformed request, wire/kafka/primitives.py
says how and why.

Layouts (Kafka's ProduceRequest.json / ProduceResponse.json; v9 is the first flexible version:
compact strings, arrays and records, and tagged fields at the end of every struct):

    request header v1 (v3-8) / v2 (v9)
        api key int16, api version int16, correlation id int32, client id nullable legacy
        string (legacy even in v2), v2: tagged fields
    request   transactional id (nullable string), acks int16, timeout ms int32,
              topic data [name string, partition data [index int32, records (nullable)]]
    response header v0 (v3-8) / v1 (v9): correlation id int32, v1: tagged fields
    response  responses [name string, partition responses [index int32, error code int16,
              base offset int64, log append time ms int64, v5+: log start offset int64,
              v8+: record errors [batch index int32, message nullable string], v8+: error
              message nullable string]], throttle time ms int32 (the response's, client quotas)

State: none.
"""

from __future__ import annotations

import struct
from typing import Final

from wire.kafka.codec import KafkaFrameError, RequestPrefix
from wire.kafka.primitives import (
    I32,
    I64,
    NO_TAGGED_FIELDS,
    Buffer,
    Reader,
    kafka_error_code,
    write_array_length,
    write_nullable_string,
)
from wire.messages import (
    ApiKey,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)

PRODUCE_VERSIONS: Final = range(3, 10)
"""The versions this codec reads and writes (the Kafka listener's Produce range)."""

FIRST_FLEXIBLE: Final = 9
_LOG_START_OFFSET: Final = 5  # the first response version with a partition's log start offset
_RECORD_ERRORS: Final = 8  # ... with record errors and an error message

_ACKS_TIMEOUT: Final = struct.Struct(">hi")
_PARTITION_RESPONSE: Final = struct.Struct(">ihqq")  # index, error, base offset, append time


def decode_produce_request(
    frame: Buffer, prefix: RequestPrefix
) -> tuple[str | None, ProduceRequest]:
    """(client id, native request) of a Produce request frame (after its 4-byte length)."""
    assert prefix.api_key == ApiKey.PRODUCE
    version = prefix.api_version
    if version not in PRODUCE_VERSIONS:
        raise KafkaFrameError(f"Produce v{version} is not served by the fast codec")
    flexible = version >= FIRST_FLEXIBLE
    reader = Reader(frame, prefix, flexible)
    client_id = reader.client_id()
    if flexible:
        reader.no_tagged_fields()
    transactional_id = reader.nullable_string()
    acks, timeout_ms = reader.fields(_ACKS_TIMEOUT)
    topics = [_topic(reader, flexible) for _ in range(reader.array_length())]
    if flexible:
        reader.no_tagged_fields()
    request = ProduceRequest(
        transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms, topic_data=topics
    )
    return client_id, request


def _topic(reader: Reader, flexible: bool) -> TopicProduceData:
    name = reader.string()
    partitions = []
    for _ in range(reader.array_length()):
        index = reader.int32()
        span = reader.nullable_bytes()
        if flexible:
            reader.no_tagged_fields()
        records = b"" if span is None else _record_set(reader.view, *span)
        partitions.append(PartitionProduceData(index=index, records=records))
    if flexible:
        reader.no_tagged_fields()
    return TopicProduceData(name=name, partition_data=partitions)


def _record_set(view: memoryview, start: int, end: int) -> memoryview:
    # A view of the request frame, not a copy: the records reach the log's write as received
    # (the frame's buffer is never written over while a view of it is held; wire/frames.py).
    return view[start:end]


def encode_produce_response(correlation_id: int, version: int, response: ProduceResponse) -> bytes:
    """The whole response frame, its 4-byte length included."""
    assert version in PRODUCE_VERSIONS, version
    flexible = version >= FIRST_FLEXIBLE
    out = bytearray(4)  # the frame length, filled in at the end
    out += I32.pack(correlation_id)
    if flexible:
        out.append(NO_TAGGED_FIELDS)  # response header v1
    write_array_length(out, len(response.responses), flexible)
    for topic in response.responses:
        write_nullable_string(out, topic.name, flexible)
        write_array_length(out, len(topic.partition_responses), flexible)
        for partition in topic.partition_responses:
            _write_partition(out, version, flexible, partition)
        if flexible:
            out.append(NO_TAGGED_FIELDS)
    # Kafka's ProduceResponse has no top-level error code: `response.error_code` is not sent
    # (the general path drops it the same way).
    out += I32.pack(response.throttle_time_ms)  # client quotas (node/broker/quotas.py)
    if flexible:
        out.append(NO_TAGGED_FIELDS)
    I32.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def _write_partition(
    out: bytearray, version: int, flexible: bool, partition: PartitionProduceResponse
) -> None:
    # Kafka's -1 means "no log append time" (CreateTime); any negative time is sent as -1.
    append_time_ms = max(partition.log_append_time_ms, -1)
    out += _PARTITION_RESPONSE.pack(
        partition.index,
        kafka_error_code(partition.error_code),
        partition.base_offset,
        append_time_ms,
    )
    if version >= _LOG_START_OFFSET:
        out += I64.pack(partition.log_start_offset)
    if version >= _RECORD_ERRORS:
        write_array_length(out, len(partition.record_errors), flexible)
        for error in partition.record_errors:
            out += I32.pack(error.batch_index)
            write_nullable_string(out, error.batch_index_error_message, flexible)
            if flexible:
                out.append(NO_TAGGED_FIELDS)
        write_nullable_string(out, partition.error_message, flexible)
    if flexible:
        out.append(NO_TAGGED_FIELDS)
