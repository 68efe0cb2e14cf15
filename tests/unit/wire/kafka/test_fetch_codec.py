"""wire/kafka/fetch_codec.py against the general path (kio + `KafkaApi` conversion, with its
Fetch hooks), which it replaces on the Kafka listener: over every served Fetch version, random
requests (every field of the version, tagged cluster id and replica state included; topic ids
known, unknown and duplicated) decode to the same client id, native request and `FetchByIds`
note; random native responses (with and without a note) encode to the same bytes, every
non-empty record set passed through as its own buffer; and malformed frames raise
`KafkaFrameError` and nothing else. Hypothesis runs derandomized (tests/conftest.py, and
explicitly here), so every run draws the same examples.
"""

from __future__ import annotations

import struct
import uuid
from typing import Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.errors import ErrorCode
from wire.kafka.apis import APIS, FetchByIds
from wire.kafka.codec import KafkaFrameError, read_prefix
from wire.kafka.fetch_codec import FETCH_VERSIONS, decode_fetch_request, encode_fetch_response
from wire.messages import (
    ApiKey,
    FetchableTopicResponse,
    FetchAbortedTransaction,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
)
from wire.messages.fields import ZERO_UUID

from .kio_entities import (
    INT16,
    INT32,
    INT64,
    KNOWN_IDS,
    RECORDS,
    TEXT,
    TOPIC_IDS,
    UNKNOWN_ID,
    UNSAFE_FOR_KIO,
    KnownIds,
    general_decode,
    general_encode,
    mutated,
    request_frames,
)

VERSIONS: Final = list(FETCH_VERSIONS)
BY_TOPIC_ID: Final = 13

ERROR_CODES: Final = st.sampled_from(list(ErrorCode)) | INT16  # unknown codes included
TOPIC_NAMES: Final = st.sampled_from(sorted(set(KNOWN_IDS.values()))) | TEXT

RESPONSE_PARTITIONS: Final = st.builds(
    FetchResponsePartition,
    partition_index=INT32,
    error_code=ERROR_CODES,
    high_watermark=INT64,
    last_stable_offset=INT64,
    log_start_offset=INT64,
    # Kafka's null (read_uncommitted), an empty list and entries are three different answers.
    aborted_transactions=st.none()
    | st.lists(
        st.builds(FetchAbortedTransaction, producer_id=INT64, first_offset=INT64), max_size=2
    ),
    records=RECORDS,
)
FETCH_RESPONSES: Final = st.builds(
    FetchResponse,
    error_code=ERROR_CODES,
    responses=st.lists(
        st.builds(
            FetchableTopicResponse,
            topic=TOPIC_NAMES,
            partitions=st.lists(RESPONSE_PARTITIONS, max_size=3),
        ),
        max_size=3,
    ),
)
# What a v13+ request's decode noted: ids of some names (others fall back to the broker's
# metadata), and ids the broker did not know, answered UNKNOWN_TOPIC_ID.
NOTES: Final = st.builds(
    FetchByIds,
    ids=st.dictionaries(TOPIC_NAMES, TOPIC_IDS, max_size=3),
    unknown=st.lists(st.tuples(TOPIC_IDS, st.lists(INT32, max_size=3)), max_size=2),
)


def test_the_codec_serves_the_listeners_fetch_versions() -> None:
    api = APIS[ApiKey.FETCH]
    assert range(api.low, api.high + 1) == FETCH_VERSIONS


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=35, derandomize=True)
@given(data=st.data())
def test_decode_matches_the_general_path(version: int, data: st.DataObject) -> None:
    frame = data.draw(request_frames(ApiKey.FETCH, version))
    expected = general_decode(frame, KnownIds())
    # The server hands the dialect a read-only view of the frame.
    view = memoryview(frame).toreadonly()
    assert decode_fetch_request(view, read_prefix(frame), KnownIds()) == expected


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=35, derandomize=True)
@given(data=st.data(), correlation_id=INT32, response=FETCH_RESPONSES)
def test_encode_matches_the_general_path(
    version: int, data: st.DataObject, correlation_id: int, response: FetchResponse
) -> None:
    note = data.draw(st.none() | NOTES) if version >= BY_TOPIC_ID else None
    parts = encode_fetch_response(correlation_id, version, response, note, KnownIds())
    expected = general_encode(ApiKey.FETCH, version, correlation_id, response, note)
    assert b"".join(parts) == expected
    # Each non-empty record set is one buffer of its own, the response's very object; the rest
    # is one buffer before, between and after them.
    record_sets = [p.records for t in response.responses for p in t.partitions if p.records]
    assert parts[1::2] == record_sets
    assert all(part is records for part, records in zip(parts[1::2], record_sets, strict=True))


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=3, derandomize=True)
@given(data=st.data())
def test_every_truncation_is_a_frame_error(version: int, data: st.DataObject) -> None:
    frame = data.draw(request_frames(ApiKey.FETCH, version))
    prefix = read_prefix(frame)
    for size in range(len(frame)):
        with pytest.raises(KafkaFrameError):
            decode_fetch_request(frame[:size], prefix, KnownIds())
        if size >= 8:  # shorter ones never reach the decoders (read_prefix refuses them)
            with pytest.raises(KafkaFrameError):
                general_decode(frame[:size], KnownIds())


def check_against_the_general_path(frame: bytes) -> None:
    """A frame that is not a valid request either raises KafkaFrameError in both paths, or
    decodes to the same in both (what both accept)."""
    try:
        decoded = decode_fetch_request(frame, read_prefix(frame), KnownIds())
    except KafkaFrameError as exc:
        if not any(reason in str(exc) for reason in UNSAFE_FOR_KIO):
            with pytest.raises(KafkaFrameError):
                general_decode(frame, KnownIds())
        return
    _, _, note = decoded
    if note is not None and any(topic_id == ZERO_UUID for topic_id, _ in note.unknown):
        return  # the general path cannot decode a zero topic id (see test_a_zero_topic_id...)
    assert decoded == general_decode(frame, KnownIds())


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=25, derandomize=True)
@given(
    data=st.data(),
    changes=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=3),
)
def test_overwritten_bytes_agree_with_the_general_path(
    version: int, data: st.DataObject, changes: list[tuple[int, int]]
) -> None:
    frame = data.draw(request_frames(ApiKey.FETCH, version))
    check_against_the_general_path(mutated(frame, changes))


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=25, derandomize=True)
@given(garbage=st.binary(max_size=64))
def test_garbage_agrees_with_the_general_path(version: int, garbage: bytes) -> None:
    check_against_the_general_path(struct.pack(">hhi", ApiKey.FETCH, version, 7) + garbage)


# -- hand-made frames --------------------------------------------------------------------------

KNOWN: Final = uuid.UUID(int=1).bytes  # "orders" in KnownIds
MAX_WAIT_MS: Final = 500


def flexible_frame(
    *,
    version: int = 15,
    tags: bytes = b"\x00",
    forgotten: bytes = b"\x01",
    topic_ids: tuple[bytes, ...] = (KNOWN,),
) -> bytes:
    """A Fetch v12+ request of partition 0 of each topic (v12: of "orders", by name; v13+: of
    each of `topic_ids`); its forgotten topics and its own tagged fields are the bytes given."""
    header = struct.pack(">hhihB", ApiKey.FETCH, version, 7, -1, 0)
    replica_id = struct.pack(">i", 4) if version < 15 else b""
    limits = struct.pack(">iiibii", MAX_WAIT_MS, 1, 1 << 20, 0, 0, -1)
    names = [b"\x07orders"] if version < BY_TOPIC_ID else list(topic_ids)
    # partition, current leader epoch, fetch offset, last fetched epoch, log start, max bytes
    partition = struct.pack(">iiqiqi", 0, 3, 100, 2, 0, 1 << 20) + b"\x00"
    topics = bytes([len(names) + 1]) + b"".join(
        name + b"\x02" + partition + b"\x00" for name in names
    )
    return header + replica_id + limits + topics + forgotten + b"\x01" + tags


def decode(frame: bytes) -> tuple[str | None, FetchRequest, FetchByIds | None]:
    return decode_fetch_request(frame, read_prefix(frame), KnownIds())


def test_the_hand_made_frame_is_a_valid_request() -> None:
    for version in (12, 13, 15):
        frame = flexible_frame(version=version)
        assert decode(frame) == general_decode(frame, KnownIds())
    _, request, note = decode(flexible_frame())
    assert note == FetchByIds({"orders": KNOWN}, [])
    assert request == general_decode(flexible_frame(), KnownIds())[1]


REPLICA_STATE: Final = b"\x01\x0d" + struct.pack(">iq", 4, 9) + b"\x00"  # tag 1: replica 4
CLUSTER_ID: Final = b"\x00\x04\x04abc"  # tag 0: "abc"


@pytest.mark.parametrize(
    "tags",
    [
        b"\x01" + REPLICA_STATE,
        b"\x02" + CLUSTER_ID + REPLICA_STATE,
        b"\x02" + REPLICA_STATE + CLUSTER_ID,  # out of order: read, as kio and Kafka do
        b"\x02" + REPLICA_STATE + b"\x01\x0d" + struct.pack(">iq", 5, 9) + b"\x00",  # later wins
        b"\x01\x01\x63" + struct.pack(">iq", 4, 9) + b"\x00",  # size not checked, as by both
    ],
)
def test_the_replica_state_gives_the_replica_id_as_in_the_general_path(tags: bytes) -> None:
    frame = flexible_frame(tags=tags)
    _, request, _ = decode(frame)
    assert decode(frame) == general_decode(frame, KnownIds())
    assert request.replica_id in (4, 5)


@pytest.mark.parametrize(
    ("version", "tags", "reason"),
    [
        (14, b"\x01" + REPLICA_STATE, "unknown tagged field 1"),  # replica state is v15+
        (15, b"\x01\x02\x00", "unknown tagged field 2"),
        (15, b"\x01\x00\x01\x00", "null where the string is not nullable"),  # kio's reading
        (15, b"\x01\x01\x0d" + struct.pack(">iq", 4, 9) + b"\x01\x00\x00", "unknown tagged"),
        (15, b"\x02" + CLUSTER_ID, "varint runs past the end"),
    ],
)
def test_malformed_tagged_fields_are_refused_by_both_paths(
    version: int, tags: bytes, reason: str
) -> None:
    frame = flexible_frame(version=version, tags=tags)
    with pytest.raises(KafkaFrameError, match=reason):
        decode(frame)
    with pytest.raises(KafkaFrameError):
        general_decode(frame, KnownIds())


def test_forgotten_topics_are_read_and_checked_though_not_kept() -> None:
    forgotten = b"\x02" + KNOWN + b"\x03" + struct.pack(">ii", 1, 2) + b"\x00"
    frame = flexible_frame(forgotten=forgotten)
    assert decode(frame) == decode(flexible_frame())
    assert decode(frame) == general_decode(frame, KnownIds())
    with pytest.raises(KafkaFrameError, match="array length 4294967294 runs past the end"):
        # A partition count of 2**32 - 2, never handed to kio here: its reader would try to
        # reserve ~34 GB for it and abort the process.
        decode(flexible_frame(forgotten=b"\x02" + KNOWN + b"\xff\xff\xff\xff\x0f"))
    with pytest.raises(KafkaFrameError, match="bytes wanted"):
        decode(flexible_frame(forgotten=b"\x02" + KNOWN + b"\x03" + struct.pack(">i", 1)))


def test_a_null_forgotten_topics_array_is_refused_where_kio_reads_none() -> None:
    # As Kafka does; kio reads the non-nullable array as None, and the general path drops it.
    frame = flexible_frame(forgotten=b"\x00")
    with pytest.raises(KafkaFrameError, match="null where the array"):
        decode(frame)
    assert general_decode(frame, KnownIds())[1] == decode(flexible_frame())[1]


def test_of_two_ids_of_one_name_the_later_names_it_in_the_note() -> None:
    # KnownIds: ids 1 and 3 are both "orders"; the answer names the topic by the later one.
    later = uuid.UUID(int=3).bytes
    frame = flexible_frame(topic_ids=(KNOWN, UNKNOWN_ID, later))
    _, request, note = decode(frame)
    assert note == FetchByIds({"orders": later}, [(UNKNOWN_ID, [0])])
    assert [topic.topic for topic in request.topics] == ["orders", "orders"]
    assert decode(frame) == general_decode(frame, KnownIds())


def test_a_zero_topic_id_is_an_unknown_topic() -> None:
    # kio reads an all-zero id as None, on which the general path's Fetch hook fails
    # (AttributeError); the hand codec answers it as any id the broker does not know.
    _, request, note = decode(flexible_frame(topic_ids=(ZERO_UUID,)))
    assert request.topics == []
    assert note == FetchByIds({}, [(ZERO_UUID, [0])])


def test_each_record_set_is_sent_as_the_object_the_response_holds() -> None:
    records = [bytes([i]) * 1000 for i in range(3)]
    response = FetchResponse(
        responses=[
            FetchableTopicResponse(
                topic="orders",
                partitions=[
                    FetchResponsePartition(partition_index=i, records=r)
                    for i, r in enumerate([records[0], b"", records[1], records[2]])
                ],
            )
        ]
    )
    for version in VERSIONS:
        parts = encode_fetch_response(1, version, response, None, KnownIds())
        assert [part is r for part, r in zip(parts[1::2], records, strict=True)] == [True] * 3
        assert len(parts) == 7  # metadata, then each record set followed by what comes after it
        (length,) = struct.unpack_from(">i", parts[0])
        assert length == sum(len(part) for part in parts) - 4


def test_an_unknown_topic_id_is_answered_unknown_topic_id() -> None:
    unknown = uuid.UUID(int=99).bytes
    note = FetchByIds({}, [(unknown, [0, 1])])
    parts = encode_fetch_response(1, 16, FetchResponse(), note, KnownIds())
    frame = b"".join(parts)
    assert frame == general_encode(ApiKey.FETCH, 16, 1, FetchResponse(), note)
    code = struct.pack(">ih", 0, ErrorCode.UNKNOWN_TOPIC_ID)
    assert unknown in frame
    assert code in frame


def test_a_version_it_does_not_serve_is_a_frame_error() -> None:
    frame = struct.pack(">hhihi", ApiKey.FETCH, 17, 7, -1, 0)
    with pytest.raises(KafkaFrameError, match="v17 is not served"):
        decode(frame)
