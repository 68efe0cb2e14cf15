"""Transactions, version 0 of ketch's native protocol: WriteTxnMarkers (27).

WriteTxnMarkers (KIP-98, control plane): the transaction coordinator asks each partition leader
to end a producer's transaction there, by appending a COMMIT or ABORT control batch (a
"marker"). The leader answers once the marker is replicated to the ISR, as for an acks=all
produce, with an error code per partition: NOT_LEADER_OR_FOLLOWER and UNKNOWN_TOPIC_OR_PARTITION
as for a produce, INVALID_PRODUCER_EPOCH for a marker of an older producer epoch than the
partition has seen, TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch than the last
marker's. Only cluster members may send it (it needs the cluster credential); Kafka clients
never do.

Field names are Kafka's JSON message-spec names in snake_case.
"""

# No `from __future__ import annotations`: the codec reads each field's type at class creation.

from dataclasses import dataclass, field

from wire.messages.base import ApiKey, Request, Response
from wire.messages.fields import Int16, Int32


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarkerTopic:
    name: str
    partition_indexes: list[Int32]


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarker:
    """`transaction_result`: True commits, False aborts."""

    producer_id: int
    producer_epoch: Int16
    transaction_result: bool
    topics: list[WritableTxnMarkerTopic]
    coordinator_epoch: Int32


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarkerPartitionResult:
    partition_index: Int32
    error_code: Int16 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarkerTopicResult:
    name: str
    partitions: list[WritableTxnMarkerPartitionResult]


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarkerResult:
    producer_id: int
    topics: list[WritableTxnMarkerTopicResult]


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteTxnMarkersResponse(Response):
    API_KEY = ApiKey.WRITE_TXN_MARKERS
    API_VERSION = 0
    markers: list[WritableTxnMarkerResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteTxnMarkersRequest(Request):
    API_KEY = ApiKey.WRITE_TXN_MARKERS
    API_VERSION = 0
    RESPONSE = WriteTxnMarkersResponse
    markers: list[WritableTxnMarker]
