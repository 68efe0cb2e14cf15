"""wire/kafka/fetch_codec.py's fetch-session fields (KIP-227): over every served Fetch version,
random requests decode to the session id, epoch and forgotten topics kio reads (from v13 the
forgotten ids the broker knows, by name; unknown ones left out); an answer carries the session
id it is given. Hypothesis runs derandomized (tests/conftest.py, and explicitly here)."""

from __future__ import annotations

from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.static.constants import EntityType

from wire.kafka.codec import decode_request, read_prefix, schema
from wire.kafka.fetch_codec import (
    FETCH_VERSIONS,
    SESSIONLESS,
    FetchSessionFields,
    decode_fetch,
    encode_fetch_response,
)
from wire.messages import ApiKey, FetchResponse

from .helpers import response_body
from .kio_entities import KnownIds, request_frames

SESSIONS: Final = 7
BY_TOPIC_ID: Final = 13


def kio_session_fields(frame: bytes, version: int) -> FetchSessionFields:
    """The session fields as kio reads them, forgotten ids resolved as the broker would."""
    body = decode_request(frame, read_prefix(frame)).body
    if version < SESSIONS:
        return SESSIONLESS
    forgotten = []
    for topic in body.forgotten_topics_data:
        by_id = version >= BY_TOPIC_ID
        name = KnownIds().name_of(topic.topic_id.bytes) if by_id else topic.topic
        if name is not None:
            forgotten.append((name, list(topic.partitions)))
    return FetchSessionFields(body.session_id, body.session_epoch, forgotten)


@pytest.mark.parametrize("version", list(FETCH_VERSIONS))
@settings(max_examples=30, derandomize=True)
@given(data=st.data())
def test_session_fields_match_kio(version: int, data: st.DataObject) -> None:
    frame = data.draw(request_frames(ApiKey.FETCH, version))
    _, _, _, session = decode_fetch(frame, read_prefix(frame), KnownIds())
    assert session == kio_session_fields(frame, version)


@pytest.mark.parametrize("version", [v for v in FETCH_VERSIONS if v >= SESSIONS])
@pytest.mark.parametrize("session_id", [0, 1, 0x7FFFFFFF])
def test_the_answer_carries_the_session_id(version: int, session_id: int) -> None:
    response_cls = schema(ApiKey.FETCH, version, EntityType.response)
    parts = encode_fetch_response(5, version, FetchResponse(), None, KnownIds(), session_id)
    correlation_id, body = response_body(b"".join(parts), response_cls)
    assert (correlation_id, body.session_id) == (5, session_id)
