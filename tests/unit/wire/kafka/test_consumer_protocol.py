"""The consumer protocol's subscription and assignment blobs, as `ketch group describe` reads
them."""

from __future__ import annotations

import io
import struct
from typing import Any

import pytest
from kio.schema.consumer_protocol_assignment.v1 import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_assignment.v1.data import TopicPartition as AssignedPartitions
from kio.schema.consumer_protocol_subscription.v3 import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v3.data import TopicPartition as OwnedPartitions
from kio.serial import entity_writer
from kio.static.primitive import i32

from wire.kafka.consumer_protocol import read_assignment, read_subscription


def _blob(version: int, entity: Any) -> bytes:
    buffer = io.BytesIO()
    buffer.write(struct.pack(">h", version))
    entity_writer(type(entity))(buffer, entity)
    return buffer.getvalue()


def test_a_v0_assignment_written_by_hand_reads_back() -> None:
    # version 0; one topic "t" with partitions 2 and 0; null user data
    blob = (
        b"\x00\x00"
        + b"\x00\x00\x00\x01"
        + b"\x00\x01t"
        + b"\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x00"
        + b"\xff\xff\xff\xff"
    )
    assert read_assignment(blob) == {"t": (0, 2)}


def test_an_assignment_of_two_topics_is_sorted() -> None:
    entity = ConsumerProtocolAssignment(
        assigned_partitions=(
            AssignedPartitions(topic="orders", partitions=(i32(3), i32(1))),  # type: ignore[arg-type]
            AssignedPartitions(topic="audit", partitions=(i32(0),)),  # type: ignore[arg-type]
        ),
        user_data=b"sticky",
    )
    assert read_assignment(_blob(1, entity)) == {"audit": (0,), "orders": (1, 3)}


def test_a_v3_subscription_reads_its_topics() -> None:
    entity = ConsumerProtocolSubscription(
        topics=("orders", "audit"),
        owned_partitions=(OwnedPartitions(topic="orders", partitions=(i32(0),)),),  # type: ignore[arg-type]
        generation_id=i32(4),
        rack_id="r1",
    )
    assert read_subscription(_blob(3, entity)) == ("orders", "audit")


def test_a_newer_version_is_read_with_the_newest_schema() -> None:
    """Later versions only append fields: a v9 blob with v3's fields and more still reads."""
    entity = ConsumerProtocolSubscription(topics=("orders",), owned_partitions=())
    assert read_subscription(_blob(9, entity) + b"future fields") == ("orders",)


@pytest.mark.parametrize(
    "blob",
    [b"", b"\x00", b"\xff\xff", b"\x00\x00\x00\x00\x00\x09", b"\x00\x00\x7f\xff\xff\xff"],
    ids=["empty", "half a version", "negative version", "truncated", "huge array"],
)
def test_bytes_that_are_no_consumer_blob_read_as_none(blob: bytes) -> None:
    assert read_assignment(blob) is None
    assert read_subscription(blob) is None
