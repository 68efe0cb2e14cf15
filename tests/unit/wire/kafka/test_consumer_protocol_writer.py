"""The consumer protocol blobs a ketch group member writes (`write_subscription`,
`write_assignment`): byte for byte version 0, and read back by Kafka's own schemas (kio's
ConsumerProtocolSubscription / ConsumerProtocolAssignment v0) and by `read_*`."""

from __future__ import annotations

import struct

from kio.schema.consumer_protocol_assignment.v0 import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_subscription.v0 import ConsumerProtocolSubscription
from kio.serial import entity_reader

from wire.kafka.consumer_protocol import (
    read_assignment,
    read_subscription,
    write_assignment,
    write_subscription,
)


def test_a_subscription_byte_for_byte() -> None:
    assert write_subscription(["t", "ab"]) == (
        b"\x00\x00"  # version 0
        + b"\x00\x00\x00\x02"  # two topics
        + b"\x00\x01t"
        + b"\x00\x02ab"
        + b"\xff\xff\xff\xff"  # null user data
    )


def test_an_assignment_byte_for_byte_with_topics_and_partitions_sorted() -> None:
    assert write_assignment({"u": [1], "t": [2, 0]}) == (
        b"\x00\x00"
        + b"\x00\x00\x00\x02"
        + b"\x00\x01t"
        + b"\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x02"
        + b"\x00\x01u"
        + b"\x00\x00\x00\x01\x00\x00\x00\x01"
        + b"\xff\xff\xff\xff"
    )


def test_kafkas_schemas_read_what_is_written() -> None:
    blob = write_subscription(["orders", "audit"])
    (version,) = struct.unpack_from(">h", blob)
    subscription, _ = entity_reader(ConsumerProtocolSubscription)(blob, 2)
    assert version == 0
    assert subscription.topics == ("orders", "audit")
    assert subscription.user_data is None
    assert read_subscription(blob) == ("orders", "audit")

    blob = write_assignment({"orders": [3, 1], "audit": [0]})
    assignment, _ = entity_reader(ConsumerProtocolAssignment)(blob, 2)
    assert {a.topic: tuple(a.partitions) for a in assignment.assigned_partitions} == {
        "audit": (0,),
        "orders": (1, 3),
    }
    assert read_assignment(blob) == {"audit": (0,), "orders": (1, 3)}
    assert read_assignment(write_assignment({})) == {}
