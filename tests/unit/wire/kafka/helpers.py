"""Kafka frames written and read with kio as a Kafka client would, and a `TopicIds` that knows
no topic; shared by the Kafka codec and group-conversion tests here and by the Kafka listener's
dialect tests (tests/unit/runtime/net/test_kafka_dialect.py). Pure functions and a stateless
stub."""

from __future__ import annotations

import io
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer


def request_frame(api_key: int, version: int, body: Any, correlation_id: int = 9) -> bytes:
    """A request as a Kafka client sends it (without the 4-byte length)."""
    request_cls = type(body)
    header_cls = request_cls.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_cls)(
        buffer,
        header_cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id="test-client",
        ),
    )
    entity_writer(request_cls)(buffer, body)
    return buffer.getvalue()


def response_body(frame: bytes, response_cls: type[Any]) -> tuple[int, Any]:
    """(correlation id, body) of a response frame, read with the header version it names."""
    (length,) = struct.unpack_from(">i", frame)
    assert length == len(frame) - 4
    header, used = entity_reader(response_cls.__header_schema__)(frame, 4)
    body, size = entity_reader(response_cls)(frame, 4 + used)
    assert 4 + used + size == len(frame), "trailing bytes after the response body"
    return header.correlation_id, body


class NoTopicIds:
    def name_of(self, topic_id: bytes) -> str | None:
        return None

    def id_of(self, name: str) -> bytes:
        return bytes(16)
