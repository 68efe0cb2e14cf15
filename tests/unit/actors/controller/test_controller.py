"""The controller actor (seed 004) on a ManualClock: registration and liveness, elections from
the ISR (unclean only when enabled), topic creation, preferred leaders, restart from the
metadata log. AlterPartition, controlled shutdown and topic deletion have files of their own
(test_alter_partition.py, test_controlled_shutdown.py, test_topic_deletion.py); the epoch rules
are in test_epochs.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.controller.messages import (
    ControllerConfig,
    DescribeCluster,
    RebalanceTick,
)
from actors.controller.states import PartitionState
from actors.controller.topics import TopicRefusal, validate_topic_configs
from tests.unit.actors.controller.harness import (
    BROKERS,
    HEARTBEAT_MS,
    SESSION_MS,
    ControllerHarness,
    cluster,
    kill,
    of_type,
)
from wire.errors import ErrorCode
from wire.messages import (
    LEADER_AND_ISR_FULL,
    LEADER_AND_ISR_INCREMENTAL,
    LeaderAndIsrRequest,
    UpdateMetadataRequest,
)
from wire.topic import TopicPartition

# -- registration and liveness ---------------------------------------------------------------------


async def test_registration_gives_growing_epochs_and_a_retry_the_same(
    harness: ControllerHarness,
) -> None:
    assert await harness.register(0) is ErrorCode.NONE
    assert await harness.register(1) is ErrorCode.NONE
    assert harness.epochs[1] > harness.epochs[0]
    first = harness.epochs[0]
    assert await harness.register(0, new_process=False) is ErrorCode.NONE
    assert harness.epochs[0] == first
    assert set(harness.channels.channels) == {0, 1}
    assert harness.channels.channels[1].port == 9_001


async def test_a_new_process_of_a_live_broker_waits_for_the_old_session(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    old_epoch = harness.epochs[0]
    assert await harness.register(0) is ErrorCode.DUPLICATE_BROKER_REGISTRATION
    await kill(harness, 0, alive=(1, 2))
    assert await harness.register(0) is ErrorCode.NONE
    assert harness.epochs[0] > old_epoch
    # The old incarnation's heartbeats are refused: it must register again.
    new_epoch = harness.epochs[0]
    harness.epochs[0] = old_epoch
    stale = await harness.heartbeat(0)
    harness.epochs[0] = new_epoch
    assert stale.error is ErrorCode.STALE_BROKER_EPOCH


async def test_a_new_broker_gets_its_full_state_and_everyone_the_metadata(
    harness: ControllerHarness,
) -> None:
    await cluster(harness, (0, 1))
    await harness.create_topic("t", 2, 2)
    harness.channels.take()
    assert await harness.register(2) is ErrorCode.NONE
    sent = harness.channels.take()
    full = of_type(sent, LeaderAndIsrRequest, 2)
    assert [r.type for r in full] == [LEADER_AND_ISR_FULL]
    assert full[0].partition_states == []  # broker 2 hosts nothing yet
    assert full[0].broker_epoch == harness.epochs[2]
    for broker_id in (0, 1, 2):
        (metadata,) = of_type(sent, UpdateMetadataRequest, broker_id)
        assert [b.id for b in metadata.live_brokers] == [0, 1, 2]
        assert len(metadata.partition_states) == 2


async def test_missed_heartbeats_fence_the_broker_and_move_leadership(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("t", 1, 3, assignments=[[0, 1, 2]])
    before = harness.partition("t")
    assert (before.leader, before.isr) == (0, (0, 1, 2))
    harness.channels.take()
    await kill(harness, 0, alive=(1, 2))
    after = harness.partition("t")
    # The first live ISR replica in assignment order; the dead one leaves the ISR.
    assert (after.leader, after.isr) == (1, (1, 2))
    assert after.leader_epoch == before.leader_epoch + 1
    assert after.partition_epoch > before.partition_epoch
    sent = harness.channels.take()
    assert harness.channels.removed == [0]
    for broker_id in (1, 2):
        (request,) = of_type(sent, LeaderAndIsrRequest, broker_id)
        assert request.partition_states[0].leader == 1
    assert not of_type(sent, LeaderAndIsrRequest, 0)
    status = await harness.controller.ask(DescribeCluster())
    assert [(b.broker_id, b.state) for b in status.brokers] == [
        (0, "fenced"),
        (1, "running"),
        (2, "running"),
    ]
    tp = TopicPartition("t", 0)
    assert harness.controller.partition_states.state(tp) is PartitionState.ONLINE
    # The old leader returns: it gets its state as a follower; the leader stays (no election).
    assert await harness.register(0) is ErrorCode.NONE
    assert harness.partition("t") == after
    (full,) = of_type(harness.channels.take(), LeaderAndIsrRequest, 0)
    assert [(s.leader, s.leader_epoch) for s in full.partition_states] == [(1, after.leader_epoch)]


async def test_no_election_outside_the_isr_and_the_last_member_stays(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("t", 1, 3, assignments=[[0, 1, 2]])
    # The leader shrank the ISR to itself (followers lagging).
    response = await harness.alter_isr("t", [0])
    assert response.topics[0].partitions[0].error_code == ErrorCode.NONE
    await kill(harness, 0, alive=(1, 2))
    p = harness.partition("t")
    assert (p.leader, p.isr) == (-1, (0,))  # offline, waiting for broker 0
    tp = TopicPartition("t", 0)
    assert harness.controller.partition_states.state(tp) is PartitionState.OFFLINE
    assert (await harness.controller.ask(DescribeCluster())).offline_partitions == 1
    # Broker 0 returns: it is the ISR, so it leads again; nothing acknowledged was lost.
    assert await harness.register(0) is ErrorCode.NONE
    p = harness.partition("t")
    assert (p.leader, p.isr) == (0, (0,))
    assert harness.controller.partition_states.state(tp) is PartitionState.ONLINE
    assert harness.controller.unclean_elections == 0


async def test_unclean_election_only_when_enabled_and_counted(tmp_path: Path) -> None:
    harness = ControllerHarness(
        tmp_path / "controller",
        ControllerConfig(
            broker_session_timeout_ms=SESSION_MS,
            broker_heartbeat_interval_ms=HEARTBEAT_MS,
            auto_leader_rebalance_enable=False,
        ),
    )
    await harness.start()
    try:
        await cluster(harness)
        await harness.create_topic(
            "unclean",
            1,
            3,
            assignments=[[0, 1, 2]],
            configs={"unclean.leader.election.enable": "true"},
        )
        await harness.create_topic("clean", 1, 3, assignments=[[0, 1, 2]])
        await harness.alter_isr("unclean", [0])
        await harness.alter_isr("clean", [0])
        await kill(harness, 0, alive=(1, 2))
        assert (harness.partition("unclean").leader, harness.partition("unclean").isr) == (
            1,
            (1,),
        )
        assert harness.partition("clean").leader == -1
        assert harness.controller.unclean_elections == 1
    finally:
        await harness.stop()


# -- topics ----------------------------------------------------------------------------------------


async def test_create_topic_assigns_elects_and_tells_the_replicas(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    response = await harness.create_topic(
        "orders", 3, 2, configs={"min.insync.replicas": "2", "cleanup.policy": "compact"}
    )
    (result,) = response.topics
    assert (result.error_code, result.num_partitions, result.replication_factor) == (0, 3, 2)
    assert result.topic_id != bytes(16)
    partitions = [harness.partition("orders", i) for i in range(3)]
    # Leaders spread over the brokers; each leads from the first replica with the full ISR.
    assert sorted(p.leader for p in partitions) == [0, 1, 2]
    for p in partitions:
        assert p.leader == p.replicas[0]
        assert p.isr == p.replicas
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
    sent = harness.channels.take()
    for broker_id in BROKERS:
        (request,) = of_type(sent, LeaderAndIsrRequest, broker_id)
        assert request.type == LEADER_AND_ISR_INCREMENTAL
        assert all(s.is_new for s in request.partition_states)
        assert len(request.partition_states) == 2  # 3 partitions x RF 2 over 3 brokers
        (configs,) = request.topic_configs
        assert {c.name: c.value for c in configs.configs} == {
            "min.insync.replicas": "2",
            "cleanup.policy": "compact",
        }
        assert of_type(sent, UpdateMetadataRequest, broker_id)
    tp = TopicPartition("orders", 0)
    assert harness.controller.partition_states.state(tp) is PartitionState.ONLINE


@pytest.mark.parametrize(
    ("name", "partitions", "rf", "configs", "error"),
    [
        ("bad/name", 1, 1, {}, ErrorCode.INVALID_TOPIC_EXCEPTION),
        ("t", 1, 4, {}, ErrorCode.INVALID_REPLICATION_FACTOR),
        ("t", 0, 1, {}, ErrorCode.INVALID_PARTITIONS),
        ("t", 1, 1, {"no.such.config": "1"}, ErrorCode.INVALID_CONFIG),
        ("t", 1, 1, {"min.insync.replicas": "0"}, ErrorCode.INVALID_CONFIG),
        ("t", 1, 1, {"cleanup.policy": "shred"}, ErrorCode.INVALID_CONFIG),
    ],
)
async def test_create_topic_refusals_change_nothing(
    harness: ControllerHarness,
    name: str,
    partitions: int,
    rf: int,
    configs: dict[str, str],
    error: ErrorCode,
) -> None:
    await cluster(harness)
    response = await harness.create_topic(name, partitions, rf, configs=configs)
    assert response.topics[0].error_code == error, response
    assert response.topics[0].error_message
    assert harness.controller.model.topics() == []
    assert not harness.channels.take()


async def test_create_existing_colliding_and_validate_only(harness: ControllerHarness) -> None:
    await cluster(harness)
    assert (await harness.create_topic("a.b", 1, 1)).topics[0].error_code == 0
    again = await harness.create_topic("a.b", 1, 1)
    assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS
    collide = await harness.create_topic("a_b", 1, 1)
    assert collide.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
    dry = await harness.create_topic("dry", 2, 3, validate_only=True)
    assert (dry.topics[0].error_code, dry.topics[0].num_partitions) == (0, 2)
    assert [t.name for t in harness.controller.model.topics()] == ["a.b"]


# -- preferred leaders -----------------------------------------------------------------------------


async def test_preferred_leaders_come_back_when_imbalanced(harness: ControllerHarness) -> None:
    await cluster(harness)
    await harness.create_topic("t", 1, 3, assignments=[[0, 1, 2]])
    await kill(harness, 0, alive=(1, 2))
    assert harness.partition("t").leader == 1
    assert await harness.register(0) is ErrorCode.NONE
    await harness.alter_isr("t", [1, 2, 0])
    await harness.controller.tell(RebalanceTick())
    await harness.settle()
    p = harness.partition("t")
    assert (p.leader, p.isr) == (0, (1, 2, 0))


# -- restart ---------------------------------------------------------------------------------------


async def test_a_restarted_controller_resumes_with_a_higher_epoch(tmp_path: Path) -> None:
    first = ControllerHarness(tmp_path / "controller")
    await first.start()
    await cluster(first)
    await first.create_topic("t", 2, 3)
    await first.alter_isr("t", [first.partition("t").leader, first.partition("t").replicas[1]])
    old_epoch = first.controller.model.controller_epoch
    old_model = first.controller.model
    await first.stop()

    second = ControllerHarness(tmp_path / "controller")
    await second.start()
    try:
        assert second.controller.model.controller_epoch == old_epoch + 1
        assert second.controller.model.all_partitions() == old_model.all_partitions()
        sent = second.channels.take()
        for broker_id in BROKERS:
            (full,) = of_type(sent, LeaderAndIsrRequest, broker_id)
            assert full.type == LEADER_AND_ISR_FULL
            assert full.controller_epoch == old_epoch + 1
            assert len(full.partition_states) == 2
        # The brokers it found live get a grace session, then are fenced without heartbeats.
        await second.pass_time(SESSION_MS + 2 * HEARTBEAT_MS, alive=())
        status = await second.controller.ask(DescribeCluster())
        assert {b.state for b in status.brokers} == {"fenced"}
        assert {p.leader for p in second.controller.model.all_partitions()} == {-1}
    finally:
        await second.stop()


async def test_an_illegal_topic_name_is_refused_with_the_reason(harness: ControllerHarness) -> None:
    await cluster(harness)
    for name, reason in [
        ("bad/name", "character 4, '/'"),
        ("x" * 300, "at most 249 characters; this one has 300"),
    ]:
        response = await harness.create_topic(name, 1, 1)
        [topic] = response.topics
        assert topic.error_code == ErrorCode.INVALID_TOPIC_EXCEPTION
        assert topic.error_message is not None
        assert reason in topic.error_message


def test_a_non_integer_topic_config_is_refused_in_a_users_words() -> None:
    """`ketch topic create --config min.insync.replicas=abc` once answered Python's "invalid
    literal for int() with base 10"."""
    for name in ("min.insync.replicas", "retention.ms", "min.compaction.lag.ms"):
        refusal = validate_topic_configs({name: "abc"})
        assert isinstance(refusal, TopicRefusal)
        assert refusal.error == ErrorCode.INVALID_CONFIG
        assert refusal.message == f"{name}: expected an integer, got 'abc'"
