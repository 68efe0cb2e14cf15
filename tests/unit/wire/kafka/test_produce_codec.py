"""wire/kafka/produce_codec.py against the general path (kio + `KafkaApi` conversion), which it
replaces on the Kafka listener: over every served Produce version, random requests decode to
the same client id and native request, random native responses encode to the same bytes, and
malformed frames (every truncation of a valid one, overwritten bytes, garbage) raise
`KafkaFrameError` and nothing else. Hypothesis runs derandomized (tests/conftest.py, and
explicitly here), so every run draws the same examples.
"""

from __future__ import annotations

import datetime
import struct
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.errors import ErrorCode
from wire.kafka.apis import APIS
from wire.kafka.codec import KafkaFrameError, read_prefix
from wire.kafka.produce_codec import (
    PRODUCE_VERSIONS,
    decode_produce_request,
    encode_produce_response,
)
from wire.messages import (
    ApiKey,
    BatchIndexAndErrorMessage,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)

from .kio_entities import (
    INT16,
    INT32,
    INT64,
    TEXT,
    UNSAFE_FOR_KIO,
    KnownIds,
    general_decode,
    general_encode,
    mutated,
    request_frames,
)

VERSIONS: Final = list(PRODUCE_VERSIONS)
FLEXIBLE: Final = 9

# The latest log append time the general path can write: kio carries it as a datetime, whose
# range ends in the year 9999 (a later time raises OverflowError there; the hand codec writes it).
KIO_LATEST_TIME_MS: Final = (
    datetime.datetime.max.replace(tzinfo=datetime.UTC)
    - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
) // datetime.timedelta(milliseconds=1)

ERROR_CODES: Final = st.sampled_from(list(ErrorCode)) | INT16  # unknown codes included

PRODUCE_RESPONSES: Final = st.builds(
    ProduceResponse,
    error_code=ERROR_CODES,  # no Kafka field carries it: both paths drop it
    responses=st.lists(
        st.builds(
            TopicProduceResponse,
            name=TEXT,
            partition_responses=st.lists(
                st.builds(
                    PartitionProduceResponse,
                    index=INT32,
                    error_code=ERROR_CODES,
                    base_offset=INT64,
                    log_append_time_ms=st.integers(-(2**63), KIO_LATEST_TIME_MS),
                    log_start_offset=INT64,
                    record_errors=st.lists(
                        st.builds(
                            BatchIndexAndErrorMessage,
                            batch_index=INT32,
                            batch_index_error_message=st.none() | TEXT,
                        ),
                        max_size=2,
                    ),
                    error_message=st.none() | TEXT,
                ),
                max_size=3,
            ),
        ),
        max_size=3,
    ),
)


def test_the_codec_serves_the_listeners_produce_versions() -> None:
    api = APIS[ApiKey.PRODUCE]
    assert range(api.low, api.high + 1) == PRODUCE_VERSIONS


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=45, derandomize=True)
@given(data=st.data())
def test_decode_matches_the_general_path(version: int, data: st.DataObject) -> None:
    frame = data.draw(request_frames(ApiKey.PRODUCE, version))
    expected_client_id, expected, note = general_decode(frame, KnownIds())
    # The server hands the dialect a read-only view of the frame.
    client_id, request = decode_produce_request(memoryview(frame).toreadonly(), read_prefix(frame))
    assert note is None
    assert (client_id, request) == (expected_client_id, expected)
    view = memoryview(frame)
    for topic in request.topic_data:
        for partition in topic.partition_data:
            records = partition.records
            if records:
                # A read-only view into the frame itself: the record set is not copied.
                assert isinstance(records, memoryview)
                assert records.readonly
                assert records.obj is view.obj


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=45, derandomize=True)
@given(correlation_id=INT32, response=PRODUCE_RESPONSES)
def test_encode_matches_the_general_path(
    version: int, correlation_id: int, response: ProduceResponse
) -> None:
    expected = general_encode(ApiKey.PRODUCE, version, correlation_id, response, None)
    assert encode_produce_response(correlation_id, version, response) == expected


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=4, derandomize=True)
@given(data=st.data())
def test_every_truncation_is_a_frame_error(version: int, data: st.DataObject) -> None:
    frame = data.draw(request_frames(ApiKey.PRODUCE, version))
    prefix = read_prefix(frame)
    for size in range(len(frame)):
        with pytest.raises(KafkaFrameError):
            decode_produce_request(frame[:size], prefix)
        if size >= 8:  # shorter ones never reach the decoders (read_prefix refuses them)
            with pytest.raises(KafkaFrameError):
                general_decode(frame[:size], KnownIds())


def check_against_the_general_path(frame: bytes) -> None:
    """A frame that is not a valid request either raises KafkaFrameError in both paths, or
    decodes to the same in both (what both accept)."""
    try:
        decoded = decode_produce_request(frame, read_prefix(frame))
    except KafkaFrameError as exc:
        if not any(reason in str(exc) for reason in UNSAFE_FOR_KIO):
            with pytest.raises(KafkaFrameError):
                general_decode(frame, KnownIds())
        return
    client_id, request, _ = general_decode(frame, KnownIds())
    assert decoded == (client_id, request)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=30, derandomize=True)
@given(
    data=st.data(),
    changes=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
)
def test_overwritten_bytes_agree_with_the_general_path(
    version: int, data: st.DataObject, changes: list[tuple[int, int]]
) -> None:
    frame = data.draw(request_frames(ApiKey.PRODUCE, version))
    check_against_the_general_path(mutated(frame, changes))


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=30, derandomize=True)
@given(garbage=st.binary(max_size=64))
def test_garbage_agrees_with_the_general_path(version: int, garbage: bytes) -> None:
    check_against_the_general_path(struct.pack(">hhi", ApiKey.PRODUCE, version, 7) + garbage)


# -- hand-made frames --------------------------------------------------------------------------


def legacy_frame(*, topics: bytes = b"\x00\x00\x00\x01", version: int = 3) -> bytes:
    """Produce v3-8: header (no client id), no transactional id, acks 1, timeout 1000, then
    `topics` as given."""
    return struct.pack(">hhihhhi", ApiKey.PRODUCE, version, 7, -1, -1, 1, 1000) + topics


def topic(name: bytes, partitions: bytes) -> bytes:
    return struct.pack(">h", len(name)) + name + partitions


def test_a_null_record_set_is_empty_records() -> None:
    frame = legacy_frame(topics=b"\x00\x00\x00\x01" + topic(b"t", struct.pack(">iii", 1, 4, -1)))
    _, request = decode_produce_request(frame, read_prefix(frame))
    assert request.topic_data[0].partition_data[0].records == b""
    assert general_decode(frame, KnownIds())[1] == request


def test_bytes_after_the_body_are_ignored_as_the_general_path_does() -> None:
    frame = legacy_frame(topics=b"\x00\x00\x00\x00") + b"trailing"
    assert decode_produce_request(frame, read_prefix(frame))[1].topic_data == []
    assert general_decode(frame, KnownIds())[1].topic_data == []


@pytest.mark.parametrize(
    ("topics", "reason"),
    [
        (b"\xff\xff\xff\xff", "null where the array is not nullable"),
        (b"\x00\x00\x00\x01" + topic(b"t", b"\xff\xff\xff\xff"), "null where the array"),
        (b"\xff\xff\xff\xfe", "negative array length -2"),
        (b"\x7f\xff\xff\xff", "array length 2147483647 runs past the end"),
        (b"\x00\x00\x00\x01" + topic(b"\xff", b"\x00\x00\x00\x00"), "not UTF-8"),
        (b"\x00\x00\x00\x01\xff\xfe", "negative string length -2"),
        (b"\x00\x00\x00\x01\xff\xff", "null where the string is not nullable"),
        (
            b"\x00\x00\x00\x01" + topic(b"t", struct.pack(">iii", 1, 4, -2)),
            "negative bytes length -2",
        ),
        (
            b"\x00\x00\x00\x01" + topic(b"t", struct.pack(">iii", 1, 4, 100) + b"short"),
            "bytes length 100 runs past the end",
        ),
    ],
)
def test_malformed_legacy_requests_name_what_is_wrong(topics: bytes, reason: str) -> None:
    frame = legacy_frame(topics=topics)
    with pytest.raises(KafkaFrameError, match=reason):
        decode_produce_request(frame, read_prefix(frame))


def test_a_null_array_is_refused_where_kio_reads_none() -> None:
    # The one request the general path takes and the hand codec refuses, as Kafka does: a
    # non-nullable array sent as null (kio makes it None, which no handler can serve).
    frame = legacy_frame(topics=b"\xff\xff\xff\xff")
    assert general_decode(frame, KnownIds())[1].topic_data is None
    with pytest.raises(KafkaFrameError, match="null where the array"):
        decode_produce_request(frame, read_prefix(frame))


def flexible_frame(body: bytes) -> bytes:
    """Produce v9: header v2 (no client id, no tagged fields), then `body` as given."""
    return struct.pack(">hhihB", ApiKey.PRODUCE, FLEXIBLE, 7, -1, 0) + body


def test_a_huge_compact_array_count_is_refused_before_anything_is_allocated() -> None:
    # 2**32 - 2 topics (never handed to kio here: its reader would try to reserve ~34 GB and
    # abort the process).
    frame = flexible_frame(b"\x00" + struct.pack(">hi", 1, 1000) + b"\xff\xff\xff\xff\x0f")
    with pytest.raises(KafkaFrameError, match="array length 4294967294 runs past the end"):
        decode_produce_request(frame, read_prefix(frame))


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"\x00" + struct.pack(">hi", 1, 1000) + b"\x01\x01\x05\x00", "unknown tagged field 5"),
        (b"\x00" + struct.pack(">hi", 1, 1000) + b"\x01\x01\x00\x00", "unknown tagged field 0"),
        (b"\x00" + struct.pack(">hi", 1, 1000) + b"\x80\x80\x80\x80\x80\x01", "varint longer"),
        (b"\x00" + struct.pack(">hi", 1, 1000) + b"\x01\x80", "varint runs past the end"),
    ],
)
def test_malformed_flexible_requests_are_refused_by_both_paths(body: bytes, reason: str) -> None:
    frame = flexible_frame(body)
    with pytest.raises(KafkaFrameError, match=reason):
        decode_produce_request(frame, read_prefix(frame))
    with pytest.raises(KafkaFrameError):
        general_decode(frame, KnownIds())


def test_an_unknown_tag_in_the_request_header_is_refused_by_both_paths() -> None:
    frame = struct.pack(">hhihB", ApiKey.PRODUCE, FLEXIBLE, 7, -1, 1) + b"\x03\x00"
    with pytest.raises(KafkaFrameError, match="unknown tagged field 3"):
        decode_produce_request(frame, read_prefix(frame))
    with pytest.raises(KafkaFrameError):
        general_decode(frame, KnownIds())


def test_a_negative_log_append_time_is_sent_as_kafkas_none() -> None:
    partition = PartitionProduceResponse(index=0, log_append_time_ms=-5)
    response = ProduceResponse(
        responses=[TopicProduceResponse(name="t", partition_responses=[partition])]
    )
    frame = encode_produce_response(1, 3, response)
    assert frame == general_encode(ApiKey.PRODUCE, 3, 1, response, None)
    # length, correlation id, one topic "t", one partition: index, error, base offset, time
    assert frame[-12:-4] == struct.pack(">q", -1)


def test_a_version_it_does_not_serve_is_a_frame_error() -> None:
    frame = struct.pack(">hhihhhi", ApiKey.PRODUCE, 10, 7, -1, -1, 1, 1000) + b"\x00"
    with pytest.raises(KafkaFrameError, match="v10 is not served"):
        decode_produce_request(frame, read_prefix(frame))
