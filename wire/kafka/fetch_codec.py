"""Fetch (API 1) v4-v16 requests decoded and responses encoded by hand, without kio — sans-IO.

The fast path for the API that carries every record out of the broker. A request is read
straight from the frame into `wire.messages.FetchRequest`, with the same note
(`wire.kafka.apis.FetchByIds`) and the same topic-id resolution as `KafkaApi.native_request`;
a response is written from `wire.messages.FetchResponse` as a list of buffers in which every
non-empty record set is its own element, never copied or joined, ready for a vectored write.
Both give what the general path (kio) gives for the same input, which
tests/unit/wire/kafka/test_fetch_codec.py checks over every version; where the two differ on a
malformed request, wire/kafka/primitives.py says how and why. One deliberate difference: a
v13+ topic id of all zeros, which kio reads as None (and `_fetch_request` then fails on with an
AttributeError), is an unknown topic id here, answered UNKNOWN_TOPIC_ID as any other.

Request (Kafka's FetchRequest.json; v12 is the first flexible version: compact strings and
arrays, tagged fields at the end of every struct; header v1, v2 from v12, as for Produce):

    v4-14: replica id int32 (v15+: in the tagged replica state)
    max wait ms int32, min bytes int32, max bytes int32, isolation level int8,
    v7+: session id int32, session epoch int32,
    topics [v4-12: topic string | v13+: topic id uuid,
            partitions [partition int32, v9+: current leader epoch int32, fetch offset int64,
                        v12+: last fetched epoch int32, v5+: log start offset int64,
                        partition max bytes int32]],
    v7+: forgotten topics [topic string | v13+: topic id uuid, partitions [int32]],
    v11+: rack id string,
    v12+ tagged fields: 0 cluster id (string), v15+: 1 replica state (replica id int32,
                        replica epoch int64, tagged fields)

The native request keeps what ketch serves (no rack-aware reads): the rack id, cluster id, last
fetched epoch and replica epoch are read and checked, then dropped, as the general path drops
them. The session id and epoch and the forgotten topics (by name; from v13 the ids the broker
knows, resolved to names) come back beside the native request as `FetchSessionFields`, for the
listener's fetch sessions (runtime/net/fetch_session.py).

Response (FetchResponse.json; header v0, v1 from v12):

    throttle time ms int32, v7+: error code int16, session id int32,
    responses [v4-12: topic string | v13+: topic id uuid,
               partitions [partition index int32, error code int16, high watermark int64,
                           last stable offset int64, v5+: log start offset int64,
                           aborted transactions nullable [producer id int64, first offset
                           int64], v11+: preferred read replica int32, records nullable]]

What the native response does not carry is sent as Kafka sends it when unset, as the general
path does: preferred read replica -1, and none of the v12+ tagged fields
(diverging epoch, current leader, snapshot id, node endpoints). The session id is the caller's
(`encode_fetch_response(..., session_id)`; 0, no session, unless it says otherwise).

State: none.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Final

from wire.errors import ErrorCode
from wire.kafka.apis import FETCH_BY_TOPIC_ID, FETCH_REPLICA_STATE, FetchByIds, TopicIds
from wire.kafka.codec import KafkaFrameError, RequestPrefix
from wire.kafka.primitives import (
    I32,
    I64,
    NO_TAGGED_FIELDS,
    Buffer,
    Reader,
    kafka_error_code,
    write_array_length,
    write_bytes_length,
    write_nullable_string,
)
from wire.messages import (
    ApiKey,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    FetchTopic,
)
from wire.messages.fields import ZERO_UUID

FETCH_VERSIONS: Final = range(4, 17)
"""The versions this codec reads and writes (the Kafka listener's Fetch range)."""

FIRST_FLEXIBLE: Final = 12
_LOG_START_OFFSET: Final = 5
_SESSIONS: Final = 7  # session id and epoch, forgotten topics; the response's error code
_CURRENT_LEADER_EPOCH: Final = 9
_RACK_ID: Final = 11  # the request's rack id; the response's preferred read replica

_CLUSTER_ID_TAG: Final = 0
_REPLICA_STATE_TAG: Final = 1

_FETCH_LIMITS: Final = struct.Struct(">iiib")  # max wait ms, min bytes, max bytes, isolation
_SESSION: Final = struct.Struct(">ii")  # session id, session epoch

# A request partition's fixed fields by version, read in one unpack: (layout, index of the
# current leader epoch or None, index of the log start offset or None). The partition is the
# first value, the partition max bytes the last, and the fetch offset comes right after the
# partition, or after the current leader epoch where the version has one.
_PartitionLayout = tuple[struct.Struct, int | None, int | None]
_PARTITION_V4: Final[_PartitionLayout] = (struct.Struct(">iqi"), None, None)
_PARTITION_V5: Final[_PartitionLayout] = (struct.Struct(">iqqi"), None, 2)
_PARTITION_V9: Final[_PartitionLayout] = (struct.Struct(">iiqqi"), 1, 3)
_PARTITION_V12: Final[_PartitionLayout] = (struct.Struct(">iiqiqi"), 1, 4)  # + last fetched epoch

_NO_SESSION: Final = 0  # a sessionless answer
_SESSIONLESS_EPOCH: Final = -1  # with session id 0: a fetch outside any session
_NO_PREFERRED_READ_REPLICA: Final = I32.pack(-1)
_RESPONSE_PARTITION: Final = struct.Struct(">ihqq")  # index, error, high watermark, LSO
_ABORTED_TRANSACTION: Final = struct.Struct(">qq")  # producer id, first offset
_ERROR_AND_SESSION: Final = struct.Struct(">hi")


def _partition_layout(version: int) -> _PartitionLayout:
    if version >= FIRST_FLEXIBLE:
        return _PARTITION_V12
    if version >= _CURRENT_LEADER_EPOCH:
        return _PARTITION_V9
    if version >= _LOG_START_OFFSET:
        return _PARTITION_V5
    return _PARTITION_V4


# -- request ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FetchSessionFields:
    """A request's fetch-session fields (v7+; before v7 those of a sessionless fetch): the
    session id and epoch, and the forgotten partitions by topic name."""

    session_id: int = _NO_SESSION
    session_epoch: int = _SESSIONLESS_EPOCH
    forgotten: list[tuple[str, list[int]]] = field(default_factory=list)


SESSIONLESS: Final = FetchSessionFields()


def decode_fetch_request(
    frame: Buffer, prefix: RequestPrefix, topics: TopicIds
) -> tuple[str | None, FetchRequest, FetchByIds | None]:
    """(client id, native request, note for the response) of a Fetch request frame (after its
    4-byte length); the note is a `FetchByIds` from v13 on, None before."""
    client_id, request, note, _ = decode_fetch(frame, prefix, topics)
    return client_id, request, note


def decode_fetch(
    frame: Buffer, prefix: RequestPrefix, topics: TopicIds
) -> tuple[str | None, FetchRequest, FetchByIds | None, FetchSessionFields]:
    """`decode_fetch_request`'s three, and the request's session fields."""
    assert prefix.api_key == ApiKey.FETCH
    version = prefix.api_version
    if version not in FETCH_VERSIONS:
        raise KafkaFrameError(f"Fetch v{version} is not served by the fast codec")
    flexible = version >= FIRST_FLEXIBLE
    by_id = version >= FETCH_BY_TOPIC_ID
    reader = Reader(frame, prefix, flexible)
    client_id = reader.client_id()
    if flexible:
        reader.no_tagged_fields()
    replica_id = reader.int32() if version < FETCH_REPLICA_STATE else -1
    max_wait_ms, min_bytes, max_bytes, isolation_level = reader.fields(_FETCH_LIMITS)
    session_id, session_epoch = reader.fields(_SESSION) if version >= _SESSIONS else (0, -1)
    layout = _partition_layout(version)
    note = FetchByIds({}, []) if by_id else None
    native_topics = []
    for _ in range(reader.array_length()):
        if note is None:
            name: str | None = reader.string()
            partitions = _partitions(reader, flexible, layout)
        else:
            topic_id = reader.uuid()
            partitions = _partitions(reader, flexible, layout)
            name = topics.name_of(topic_id)
            if name is None:
                note.unknown.append((topic_id, [p.partition for p in partitions]))
            else:
                note.ids[name] = topic_id
        if flexible:
            reader.no_tagged_fields()
        if name is not None:
            native_topics.append(FetchTopic(topic=name, partitions=partitions))
    forgotten = _forgotten_topics(reader, flexible, topics, by_id) if version >= _SESSIONS else []
    if version >= _RACK_ID:
        reader.string()  # no rack-aware reads: read, not kept
    if flexible:
        replica_id = _request_tags(reader, version, replica_id)
    request = FetchRequest(
        replica_id=replica_id,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=isolation_level,
        topics=native_topics,
    )
    if session_id == _NO_SESSION and session_epoch == _SESSIONLESS_EPOCH and not forgotten:
        session = SESSIONLESS
    else:
        session = FetchSessionFields(session_id, session_epoch, forgotten)
    return client_id, request, note, session


def _partitions(reader: Reader, flexible: bool, layout: _PartitionLayout) -> list[FetchPartition]:
    fixed, leader_epoch_at, log_start_at = layout
    partitions = []
    for _ in range(reader.array_length()):
        values = reader.fields(fixed)
        if flexible:
            reader.no_tagged_fields()
        partitions.append(
            FetchPartition(
                partition=values[0],
                current_leader_epoch=-1 if leader_epoch_at is None else values[leader_epoch_at],
                fetch_offset=values[1 if leader_epoch_at is None else 2],
                log_start_offset=-1 if log_start_at is None else values[log_start_at],
                partition_max_bytes=values[-1],
            )
        )
    return partitions


def _forgotten_topics(
    reader: Reader, flexible: bool, topics: TopicIds, by_id: bool
) -> list[tuple[str, list[int]]]:
    """The forgotten partitions by topic name; a topic id the broker does not know is left out
    (it cannot be in a session: unknown ids are never added to one)."""
    forgotten = []
    for _ in range(reader.array_length()):
        name = topics.name_of(reader.uuid()) if by_id else reader.string()
        indexes = reader.int32_array()
        if flexible:
            reader.no_tagged_fields()
        if name is not None:
            forgotten.append((name, indexes))
    return forgotten


def _request_tags(reader: Reader, version: int, replica_id: int) -> int:
    """The request's tagged fields; the replica id, from the replica state if one is given."""
    for _ in range(reader.tag_count()):
        tag = reader.uvarint()
        reader.uvarint()  # the size: as kio and Kafka do, a known field is read by its type
        if tag == _CLUSTER_ID_TAG:
            reader.string()  # kio reads the tagged cluster id as a non-nullable string
        elif tag == _REPLICA_STATE_TAG and version >= FETCH_REPLICA_STATE:
            replica_id = reader.int32()
            reader.int64()  # the replica epoch (KIP-903), which ketch does not check
            reader.no_tagged_fields()
        else:
            raise reader.unknown_tag(tag)
    return replica_id


# -- response --------------------------------------------------------------------------------------


def encode_fetch_response(
    correlation_id: int,
    version: int,
    response: FetchResponse,
    note: FetchByIds | None,
    topics: TopicIds,
    session_id: int = _NO_SESSION,
) -> list[Buffer]:
    """The whole response frame, its 4-byte length included, as buffers to send back to back:
    each non-empty record set is its own element, the very object the response holds;
    `session_id` is the fetch session the answer is in (v7+; 0: none)."""
    assert version in FETCH_VERSIONS, version
    flexible = version >= FIRST_FLEXIBLE
    parts: list[Buffer] = []
    head = out = bytearray(4)  # the frame length, filled in at the end
    out += I32.pack(correlation_id)
    if flexible:
        out.append(NO_TAGGED_FIELDS)  # response header v1
    out += I32.pack(response.throttle_time_ms)  # client quotas (node/broker/quotas.py)
    if version >= _SESSIONS:
        out += _ERROR_AND_SESSION.pack(kafka_error_code(response.error_code), session_id)
    answers = _answers(version, response, note, topics)
    write_array_length(out, len(answers), flexible)
    for topic, partitions in answers:
        if isinstance(topic, bytes):
            out += topic
        else:
            write_nullable_string(out, topic, flexible)
        write_array_length(out, len(partitions), flexible)
        for partition in partitions:
            records = _write_partition(out, version, flexible, partition)
            if records:
                # The record set goes out as it is; what follows starts a new buffer.
                parts.append(out)
                parts.append(records)
                out = bytearray()
            if flexible:
                out.append(NO_TAGGED_FIELDS)
        if flexible:
            out.append(NO_TAGGED_FIELDS)
    if flexible:
        out.append(NO_TAGGED_FIELDS)
    parts.append(out)
    I32.pack_into(head, 0, sum(len(part) for part in parts) - 4)
    return parts


def _answers(
    version: int, response: FetchResponse, note: FetchByIds | None, topics: TopicIds
) -> list[tuple[str | bytes, list[FetchResponsePartition]]]:
    """Each answered topic (its name, or from v13 its 16-byte id) and its partitions: v13+
    answers the ids the broker did not know as well, UNKNOWN_TOPIC_ID for each partition."""
    if version < FETCH_BY_TOPIC_ID:
        return [(topic.topic, topic.partitions) for topic in response.responses]
    if note is None:
        # No ids were resolved for this answer: Kafka's "no id" for each topic, as the
        # general path writes for a field the native answer lacks.
        return [(ZERO_UUID, topic.partitions) for topic in response.responses]
    answers: list[tuple[str | bytes, list[FetchResponsePartition]]] = []
    for topic in response.responses:
        topic_id = note.ids.get(topic.topic)
        if topic_id is None:
            topic_id = topics.id_of(topic.topic)
        assert len(topic_id) == len(ZERO_UUID), topic_id
        answers.append((topic_id, topic.partitions))
    for topic_id, indexes in note.unknown:
        unknown = [
            FetchResponsePartition(partition_index=index, error_code=ErrorCode.UNKNOWN_TOPIC_ID)
            for index in indexes
        ]
        answers.append((topic_id, unknown))
    return answers


def _write_partition(
    out: bytearray, version: int, flexible: bool, partition: FetchResponsePartition
) -> bytes | memoryview:
    """Write a partition's fields up to its records' length; return the records (not written)."""
    out += _RESPONSE_PARTITION.pack(
        partition.partition_index,
        kafka_error_code(partition.error_code),
        partition.high_watermark,
        partition.last_stable_offset,
    )
    if version >= _LOG_START_OFFSET:
        out += I64.pack(partition.log_start_offset)
    aborted = partition.aborted_transactions
    write_array_length(out, None if aborted is None else len(aborted), flexible)
    for transaction in aborted or ():
        out += _ABORTED_TRANSACTION.pack(transaction.producer_id, transaction.first_offset)
        if flexible:
            out.append(NO_TAGGED_FIELDS)
    if version >= _RACK_ID:
        out += _NO_PREFERRED_READ_REPLICA
    records = partition.records
    write_bytes_length(out, len(records), flexible)
    return records
