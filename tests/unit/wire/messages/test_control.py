"""The control-plane messages (wire/messages/control.py) carry Kafka's field names: the
controller's epochs on LeaderAndIsr, StopReplica and UpdateMetadata, the partition state,
AlterPartition; and SaslAuthenticateResponse's (wire/messages/auth.py)."""

from __future__ import annotations

import dataclasses

from wire import messages as m


def test_control_field_names_follow_kafka() -> None:
    for cls in (m.LeaderAndIsrRequest, m.StopReplicaRequest, m.UpdateMetadataRequest):
        assert {"controller_id", "controller_epoch", "broker_epoch"} <= _field_names(cls)
    assert {
        "topic_name",
        "partition_index",
        "controller_epoch",
        "leader",
        "leader_epoch",
        "isr",
        "partition_epoch",
        "replicas",
        "adding_replicas",
        "removing_replicas",
        "is_new",
    } <= _field_names(m.LeaderAndIsrPartitionState)
    assert {"broker_id", "broker_epoch", "topics"} <= _field_names(m.AlterPartitionRequest)
    assert {"leader_epoch", "new_isr", "partition_epoch"} <= _field_names(
        m.AlterPartitionPartitionData
    )
    assert _field_names(m.SaslAuthenticateResponse) == {
        "error_code",
        "error_message",
        "auth_bytes",
        "session_lifetime_ms",
        "throttle_time_ms",
    }


def _field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}
