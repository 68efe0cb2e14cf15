"""The data-plane messages (wire/messages/data.py) carry Kafka's field names and layout:
Produce's body as Kafka names it, with records as msgpack bin; Fetch's fields."""

from __future__ import annotations

import dataclasses

import msgpack

from wire import messages as m


def test_produce_body_layout_is_kafkas() -> None:
    req = m.ProduceRequest(
        acks=-1,
        timeout_ms=1500,
        topic_data=[
            m.TopicProduceData(
                name="t", partition_data=[m.PartitionProduceData(index=2, records=b"\x00batch")]
            )
        ],
    )
    assert req.to_body() == {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 1500,
        "topic_data": [{"name": "t", "partition_data": [{"index": 2, "records": b"\x00batch"}]}],
    }
    # Records travel as msgpack bin (0xc4 = bin 8), never as str.
    assert b"\xc4\x06\x00batch" in msgpack.packb(req.to_body(), use_bin_type=True)


def test_fetch_field_names_follow_kafka() -> None:
    assert _field_names(m.FetchRequest) >= {
        "replica_id",
        "max_wait_ms",
        "min_bytes",
        "max_bytes",
        "isolation_level",
        "topics",
    }
    assert _field_names(m.FetchTopic) == {"topic", "partitions"}
    assert _field_names(m.FetchPartition) == {
        "partition",
        "current_leader_epoch",
        "fetch_offset",
        "log_start_offset",
        "partition_max_bytes",
    }
    assert _field_names(m.FetchResponsePartition) == {
        "partition_index",
        "error_code",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "aborted_transactions",
        "records",
    }


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}
