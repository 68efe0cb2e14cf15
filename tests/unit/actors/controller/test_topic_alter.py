"""CreatePartitions and IncrementalAlterConfigs at the controller (issue 23's `ketch topic
alter`), on a ManualClock with a real metadata log and recording channels: a topic grows with
placed or given replicas and its new partitions are led and announced; every refusal answers
Kafka's code and writes nothing; validate_only changes nothing; config operations (SET, DELETE,
APPEND, SUBTRACT) are checked as CreateTopics' configs and announced to every live broker; and
both survive a controller restart and a snapshot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from actors.controller.messages import CreatePartitions, IncrementalAlterConfigs
from actors.controller.model import ControllerModel
from actors.controller.states import PartitionState, ReplicaKey, ReplicaState
from tests.unit.actors.controller.harness import (
    BROKERS,
    ControllerHarness,
    cluster,
    kill,
    of_type,
)
from wire.errors import ErrorCode
from wire.group_records import OFFSETS_TOPIC
from wire.messages import (
    AlterableConfig,
    AlterConfigsResource,
    AlterConfigsResourceResponse,
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreatePartitionsTopicResult,
    IncrementalAlterConfigsRequest,
    LeaderAndIsrRequest,
    UpdateMetadataRequest,
)
from wire.messages.admin import RESOURCE_BROKER, RESOURCE_TOPIC
from wire.messages.alter import (
    CONFIG_OPERATION_APPEND,
    CONFIG_OPERATION_DELETE,
    CONFIG_OPERATION_SET,
    CONFIG_OPERATION_SUBTRACT,
)
from wire.topic import TopicPartition

SET, DELETE = CONFIG_OPERATION_SET, CONFIG_OPERATION_DELETE
APPEND, SUBTRACT = CONFIG_OPERATION_APPEND, CONFIG_OPERATION_SUBTRACT


async def grow(
    h: ControllerHarness,
    name: str,
    count: int,
    assignments: Sequence[Sequence[int]] | None = None,
    *,
    validate_only: bool = False,
) -> CreatePartitionsTopicResult:
    topic = CreatePartitionsTopic(
        name=name,
        count=count,
        assignments=(
            None
            if assignments is None
            else [CreatePartitionsAssignment(broker_ids=list(a)) for a in assignments]
        ),
    )
    response = await h.controller.ask(
        CreatePartitions(CreatePartitionsRequest(topics=[topic], validate_only=validate_only))
    )
    (result,) = response.results
    return result


async def alter(
    h: ControllerHarness,
    name: str,
    *operations: tuple[str, int, str | None],
    resource_type: int = RESOURCE_TOPIC,
    validate_only: bool = False,
) -> AlterConfigsResourceResponse:
    resource = AlterConfigsResource(
        resource_type=resource_type,
        resource_name=name,
        configs=[AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in operations],
    )
    response = await h.controller.ask(
        IncrementalAlterConfigs(
            IncrementalAlterConfigsRequest(resources=[resource], validate_only=validate_only)
        )
    )
    (result,) = response.responses
    return result


def partition_count(h: ControllerHarness, name: str) -> int:
    topic = h.controller.model.topic_by_name(name)
    assert topic is not None, name
    return len(h.controller.model.partitions_of(topic.topic_id))


def configs(h: ControllerHarness, name: str) -> dict[str, str]:
    topic = h.controller.model.topic_by_name(name)
    assert topic is not None, name
    return dict(topic.configs)


# -- CreatePartitions ------------------------------------------------------------------------------


async def test_a_topic_grows_and_its_new_partitions_are_led_and_announced(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("orders", assignments=[[0, 1], [1, 2]])
    harness.channels.take()

    result = await grow(harness, "orders", 5)

    assert (result.error_code, result.error_message) == (ErrorCode.NONE, None)
    assert partition_count(harness, "orders") == 5
    new = [TopicPartition("orders", p) for p in (2, 3, 4)]
    for tp in new:
        record = harness.controller.model.partition_by_name(tp)
        assert record is not None
        assert len(record.replicas) == 2, record  # the topic's replication factor
        assert record.leader == record.replicas[0]
        assert record.isr == record.replicas
        assert (record.leader_epoch, record.partition_epoch) == (0, 0)
        assert harness.controller.partition_states.state(tp) is PartitionState.ONLINE
        for broker_id in record.replicas:
            key = ReplicaKey(tp, broker_id)
            assert harness.controller.replica_states.state(key) is ReplicaState.ONLINE
    # Placed as CreateTopics places a topic's: leaders go round the brokers.
    assert {harness.partition("orders", p).leader for p in (2, 3, 4)} == set(BROKERS)
    sent = harness.channels.take()
    hosted: dict[int, set[int]] = {}
    for broker_id in BROKERS:
        for request in of_type(sent, LeaderAndIsrRequest, broker_id):
            for state in request.partition_states:
                assert state.is_new, state  # the broker creates the log
                hosted.setdefault(broker_id, set()).add(state.partition_index)
        (metadata,) = of_type(sent, UpdateMetadataRequest, broker_id)
        assert sorted(s.partition_index for s in metadata.partition_states) == [2, 3, 4]
    expected = {
        b: {p for p in (2, 3, 4) if b in harness.partition("orders", p).replicas} for b in BROKERS
    }
    assert hosted == {b: ps for b, ps in expected.items() if ps}


async def test_given_assignments_are_kept_and_a_dead_replica_does_not_lead(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("orders", assignments=[[0, 1, 2]])
    await kill(harness, 2, alive=(0, 1))
    harness.channels.take()

    result = await grow(harness, "orders", 3, [[2, 0, 1], [1, 2, 0]])

    assert result.error_code == ErrorCode.NONE, result
    first, second = harness.partition("orders", 1), harness.partition("orders", 2)
    assert (first.replicas, first.leader, first.isr) == ((2, 0, 1), 0, (0, 1))
    assert (second.replicas, second.leader, second.isr) == ((1, 2, 0), 1, (1, 0))
    sent = harness.channels.take()
    assert of_type(sent, LeaderAndIsrRequest, 2) == []  # dead: hears at registration


@pytest.mark.parametrize(
    ("count", "assignments", "code", "message"),
    [
        (
            1,
            None,
            ErrorCode.INVALID_PARTITIONS,
            "Topic currently has 2 partitions, which is higher than the requested 1.",
        ),
        (2, None, ErrorCode.INVALID_PARTITIONS, "Topic already has 2 partitions."),
        (
            4,
            [[0, 1]],
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "Increasing the number of partitions by 2 but 1 assignments provided.",
        ),
        (3, [[0, 0]], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "assignment 0 ([0, 0]) names a"),
        (3, [[0, 7]], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "names unregistered brokers [7]"),
        (3, [[0, 1, 2]], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "has 3 replicas; the topic's"),
        (3, [[]], ErrorCode.INVALID_REPLICA_ASSIGNMENT, "assignment 0 ([]) names no broker"),
    ],
)
async def test_counts_and_assignments_are_checked_as_kafka_does(
    harness: ControllerHarness,
    count: int,
    assignments: list[list[int]] | None,
    code: ErrorCode,
    message: str,
) -> None:
    await cluster(harness)
    await harness.create_topic("orders", assignments=[[0, 1], [1, 2]])
    harness.channels.take()

    result = await grow(harness, "orders", count, assignments)

    assert result.error_code == code, result
    assert message in (result.error_message or ""), result.error_message
    assert partition_count(harness, "orders") == 2
    assert harness.channels.take() == []


async def test_unknown_duplicate_internal_and_deleting_topics_are_refused(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("orders", 1, 3)
    await harness.create_topic(OFFSETS_TOPIC, 3, 3)
    await harness.create_topic("doomed", 1, 3)
    await harness.delete_topics("doomed")
    harness.channels.take()
    response = await harness.controller.ask(
        CreatePartitions(
            CreatePartitionsRequest(
                topics=[
                    CreatePartitionsTopic(name="never-was", count=2),
                    CreatePartitionsTopic(name="orders", count=2),
                    CreatePartitionsTopic(name="orders", count=3),
                    CreatePartitionsTopic(name=OFFSETS_TOPIC, count=6),
                    CreatePartitionsTopic(name="doomed", count=2),
                ]
            )
        )
    )
    assert [(r.name, r.error_code) for r in response.results] == [
        ("never-was", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("orders", ErrorCode.INVALID_REQUEST),
        ("orders", ErrorCode.INVALID_REQUEST),
        (OFFSETS_TOPIC, ErrorCode.INVALID_PARTITIONS),
        ("doomed", ErrorCode.INVALID_TOPIC_EXCEPTION),
    ]
    assert response.results[1].error_message == "Duplicate topic in request."
    assert "internal topic __consumer_offsets" in (response.results[3].error_message or "")
    assert response.results[4].error_message == "The topic is queued for deletion."
    assert partition_count(harness, "orders") == 1
    assert partition_count(harness, OFFSETS_TOPIC) == 3
    assert harness.channels.take() == []


async def test_placing_needs_as_many_live_brokers_as_the_replication_factor(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("orders", 1, 3)
    await kill(harness, 2, alive=(0, 1))

    result = await grow(harness, "orders", 2)

    assert result.error_code == ErrorCode.INVALID_REPLICATION_FACTOR, result
    assert "replication factor 3 needs that many live brokers; 2 are live" in (
        result.error_message or ""
    )
    assert partition_count(harness, "orders") == 1


async def test_validate_only_answers_without_growing(harness: ControllerHarness) -> None:
    await cluster(harness)
    await harness.create_topic("orders", 1, 3)
    harness.channels.take()

    ok = await grow(harness, "orders", 4, validate_only=True)
    refused = await grow(harness, "orders", 1, validate_only=True)

    assert ok.error_code == ErrorCode.NONE
    assert refused.error_code == ErrorCode.INVALID_PARTITIONS
    assert partition_count(harness, "orders") == 1
    assert harness.channels.take() == []


# -- IncrementalAlterConfigs -----------------------------------------------------------------------


async def test_set_and_delete_change_the_overrides_and_every_broker_hears(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("orders", 2, 2, configs={"segment.bytes": "1048576"})
    harness.channels.take()

    result = await alter(
        harness,
        "orders",
        ("retention.ms", SET, "3600000"),
        ("min.insync.replicas", SET, "2"),
        ("segment.bytes", DELETE, None),
    )

    assert result.error_code == ErrorCode.NONE, result
    assert configs(harness, "orders") == {"retention.ms": "3600000", "min.insync.replicas": "2"}
    sent = harness.channels.take()
    assert of_type(sent, LeaderAndIsrRequest) == []
    for broker_id in BROKERS:  # every live broker, replica of the topic or not
        (metadata,) = of_type(sent, UpdateMetadataRequest, broker_id)
        assert sorted(s.partition_index for s in metadata.partition_states) == [0, 1]
        (topic,) = metadata.topic_configs
        assert topic.topic_name == "orders"
        assert {c.name: c.value for c in topic.configs} == {
            "retention.ms": "3600000",
            "min.insync.replicas": "2",
        }


async def test_append_and_subtract_edit_a_list_config(harness: ControllerHarness) -> None:
    await cluster(harness)
    await harness.create_topic("orders", 1, 3)

    # From Kafka's default (delete), as no override is set yet.
    assert (await alter(harness, "orders", ("cleanup.policy", APPEND, "compact"))).error_code == 0
    assert configs(harness, "orders") == {"cleanup.policy": "delete,compact"}
    assert (await alter(harness, "orders", ("cleanup.policy", APPEND, "delete"))).error_code == 0
    assert configs(harness, "orders") == {"cleanup.policy": "delete,compact"}
    assert (await alter(harness, "orders", ("cleanup.policy", SUBTRACT, "delete"))).error_code == 0
    assert configs(harness, "orders") == {"cleanup.policy": "compact"}

    emptied = await alter(harness, "orders", ("cleanup.policy", SUBTRACT, "compact"))
    assert emptied.error_code == ErrorCode.INVALID_CONFIG, emptied
    assert "cleanup.policy must be one of" in (emptied.error_message or "")
    not_a_list = await alter(harness, "orders", ("retention.ms", APPEND, "5"))
    assert (not_a_list.error_code, not_a_list.error_message) == (
        ErrorCode.INVALID_CONFIG,
        "Config value append is not allowed for config key: retention.ms",
    )
    assert configs(harness, "orders") == {"cleanup.policy": "compact"}


@pytest.mark.parametrize(
    ("operations", "code", "message"),
    [
        ([("retention.msx", SET, "1")], ErrorCode.INVALID_CONFIG, "unknown topic config"),
        ([("retention.msx", DELETE, None)], ErrorCode.INVALID_CONFIG, "unknown topic config"),
        ([("min.insync.replicas", SET, "abc")], ErrorCode.INVALID_CONFIG, "'abc'"),
        ([("min.insync.replicas", SET, "0")], ErrorCode.INVALID_CONFIG, "min.insync.replicas"),
        ([("segment.bytes", SET, "10")], ErrorCode.INVALID_CONFIG, "segment.bytes must be"),
        ([("retention.ms", SET, None)], ErrorCode.INVALID_REQUEST, "Null value not supported"),
        (
            [("retention.ms", SET, "1"), ("retention.ms", DELETE, None)],
            ErrorCode.INVALID_REQUEST,
            "Error due to duplicate config keys: ['retention.ms']",
        ),
        ([("retention.ms", 9, "1")], ErrorCode.INVALID_REQUEST, "unknown config operation 9"),
    ],
)
async def test_bad_changes_are_refused_whole_with_the_reason(
    harness: ControllerHarness,
    operations: list[tuple[str, int, str | None]],
    code: ErrorCode,
    message: str,
) -> None:
    await cluster(harness)
    await harness.create_topic("orders", 1, 3, configs={"retention.ms": "1000"})
    harness.channels.take()

    result = await alter(harness, "orders", ("segment.ms", SET, "60000"), *operations)

    assert result.error_code == code, result
    assert message in (result.error_message or ""), result.error_message
    assert configs(harness, "orders") == {"retention.ms": "1000"}
    assert harness.channels.take() == []


async def test_broker_resources_unknown_and_deleting_topics_are_refused(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("doomed", 1, 3)
    await harness.delete_topics("doomed")

    broker = await alter(
        harness, "0", ("log.retention.ms", SET, "1"), resource_type=RESOURCE_BROKER
    )
    assert (broker.error_code, broker.error_message) == (
        ErrorCode.INVALID_REQUEST,
        "dynamic broker configs are not supported",
    )
    assert broker.resource_type == RESOURCE_BROKER
    unknown = await alter(harness, "never-was", ("retention.ms", SET, "1"))
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    deleting = await alter(harness, "doomed", ("retention.ms", SET, "1"))
    assert deleting.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    other_type = await alter(harness, "g", ("x", SET, "1"), resource_type=32)
    assert other_type.error_code == ErrorCode.INVALID_REQUEST


async def test_validate_only_and_a_no_op_change_write_nothing(harness: ControllerHarness) -> None:
    await cluster(harness)
    await harness.create_topic("orders", 1, 3, configs={"retention.ms": "1000"})
    harness.channels.take()

    checked = await alter(harness, "orders", ("retention.ms", SET, "5"), validate_only=True)
    same = await alter(harness, "orders", ("retention.ms", SET, "1000"))

    assert (checked.error_code, same.error_code) == (ErrorCode.NONE, ErrorCode.NONE)
    assert configs(harness, "orders") == {"retention.ms": "1000"}
    assert harness.channels.take() == []


# -- durability ------------------------------------------------------------------------------------


async def test_new_partitions_and_configs_survive_a_restart_and_a_snapshot(
    tmp_path: Path,
) -> None:
    first = ControllerHarness(tmp_path / "controller")
    await first.start()
    try:
        await cluster(first)
        await first.create_topic("orders", 1, 2, configs={"segment.bytes": "1048576"})
        assert (await grow(first, "orders", 3)).error_code == ErrorCode.NONE
        changed = await alter(
            first, "orders", ("retention.ms", SET, "60000"), ("segment.bytes", DELETE, None)
        )
        assert changed.error_code == ErrorCode.NONE
        before = [first.partition("orders", p) for p in range(3)]
    finally:
        await first.stop()

    second = ControllerHarness(tmp_path / "controller")
    await second.start()
    try:
        assert partition_count(second, "orders") == 3
        assert [second.partition("orders", p).replicas for p in range(3)] == [
            p.replicas for p in before
        ]
        assert configs(second, "orders") == {"retention.ms": "60000"}
        # A snapshot (the records a cut log starts from) rebuilds the same model.
        rebuilt = ControllerModel()
        for record in second.controller.model.snapshot():
            rebuilt.apply(record)
        assert rebuilt == second.controller.model
    finally:
        await second.stop()
