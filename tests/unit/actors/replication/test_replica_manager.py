"""ReplicaManager control plane on one broker: LeaderAndIsr outcomes (seed 002 with DESIGN.md's
fixes), followers' fetchers waiting for the leader's endpoint, StopReplica, UpdateMetadata
(brokers in controlled shutdown included), the leadership hook, and the periodic ISR-expiration
and HW-checkpoint tasks on a ManualClock.

(Over 500 lines: every test drives the same ReplicaManager harness; they read as one set.)
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from actors.replication.fetch_state import BrokerEndpoint, InitialFetchState
from actors.replication.fetcher_manager import FetcherControl, ReplicaFetcherManager
from actors.replication.replica_manager_messages import SetBrokerEpoch
from actors.views import Role
from tests.unit.actors.replication.replica_manager_harness import (
    BROKER_ID,
    HW_CHECKPOINT_MS,
    LAG_MS,
    TP,
    Broker,
    advance,
    batch,
    broker_entry,
    close_broker,
    fail_writes,
    fetch_request,
    only_fetch_answer,
    only_produce_answer,
    open_broker,
    partition_state,
    produce_request,
    settle,
    update_metadata,
)
from wire.errors import ErrorCode
from wire.messages import (
    LEADER_AND_ISR_FULL,
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
    TopicConfigEntry,
    TopicConfigs,
    UpdateMetadataPartitionState,
)
from wire.topic import TopicPartition

REPLICAS = (0, 1, 2)


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    opened = await open_broker(tmp_path)
    yield opened
    await close_broker(opened)


def errors_of(response: object) -> list[ErrorCode]:
    partition_errors = getattr(response, "partition_errors")  # noqa: B009
    return [ErrorCode(entry.error_code) for entry in partition_errors]


# -- LeaderAndIsr ------------------------------------------------------------------------------


async def test_leader_and_isr_makes_a_leader_that_serves_produce_and_fetch(broker: Broker) -> None:
    response = await broker.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID]))
    assert response.error_code == 0
    assert errors_of(response) == [ErrorCode.NONE]
    actor = broker.manager.partition(TP)
    assert actor is not None
    assert actor.view.role is Role.LEADER
    assert actor.view.leader_epoch == 1
    # makeLeaders takes the partition away from the fetchers before leading.
    assert broker.fetchers.calls[0] == ("remove", {TP})
    assert broker.leadership_changes == [([TP], [])]
    assert broker.fetchers.idle_shutdowns == 1
    # The topic id reached partition.metadata (Kafka's base64 form).
    assert broker.log_manager.topic_id_of(TP) == "AAECAwQFBgcICQoLDA0ODw"

    answer = only_produce_answer(await broker.path.produce(produce_request(batch(3), acks=1)))
    assert (answer.error_code, answer.base_offset) == (0, 0)
    fetched = only_fetch_answer(await broker.path.fetch(fetch_request(0)))
    assert fetched.error_code == 0
    assert fetched.high_watermark == 3  # RF=1: the leader alone is the ISR
    assert fetched.records


async def test_stale_controller_epoch_refuses_the_whole_request(broker: Broker) -> None:
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID]), controller_epoch=2)
    stale = await broker.leader_and_isr(
        partition_state(BROKER_ID, 5, [BROKER_ID], controller_epoch=1), controller_epoch=1
    )
    assert stale.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert errors_of(stale) == [ErrorCode.STALE_CONTROLLER_EPOCH]
    actor = broker.manager.partition(TP)
    assert actor is not None
    assert actor.view.leader_epoch == 1  # nothing changed
    assert broker.manager.controller_epoch == 2


async def test_stale_broker_epoch_refuses_the_whole_request(broker: Broker) -> None:
    await broker.manager.ask(SetBrokerEpoch(7))
    stale = await broker.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID]), broker_epoch=6)
    assert stale.error_code == ErrorCode.STALE_BROKER_EPOCH
    assert errors_of(stale) == [ErrorCode.STALE_BROKER_EPOCH]
    assert broker.manager.partition(TP) is None
    current = await broker.leader_and_isr(
        partition_state(BROKER_ID, 1, [BROKER_ID]), broker_epoch=7
    )
    assert errors_of(current) == [ErrorCode.NONE]


async def test_older_leader_epoch_is_stale_and_a_repeat_changes_nothing(broker: Broker) -> None:
    first = partition_state(BROKER_ID, 5, [BROKER_ID], partition_epoch=3)
    await broker.leader_and_isr(first)
    calls = list(broker.fetchers.calls)
    older = await broker.leader_and_isr(partition_state(BROKER_ID, 4, [BROKER_ID]))
    assert errors_of(older) == [ErrorCode.STALE_CONTROLLER_EPOCH]
    repeat = await broker.leader_and_isr(first)
    assert errors_of(repeat) == [ErrorCode.NONE]
    # Neither touched the fetchers nor ran the leadership hook again.
    assert broker.fetchers.calls == calls
    assert broker.leadership_changes == [([TP], [])]
    actor = broker.manager.partition(TP)
    assert actor is not None
    assert (actor.view.leader_epoch, actor.view.partition_epoch) == (5, 3)


async def test_a_broker_not_in_the_replicas_gets_unknown_partition(broker: Broker) -> None:
    response = await broker.leader_and_isr(partition_state(1, 1, [1, 2], replicas=(1, 2)))
    assert errors_of(response) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert broker.manager.partition(TP) is None
    assert broker.log_manager.get_log(TP) is None


# -- followers ---------------------------------------------------------------------------------


async def test_follower_fetcher_waits_for_the_leader_endpoint(broker: Broker) -> None:
    # Some data first, as leader, so the follower's LEO is not 0.
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID], replicas=REPLICAS))
    await broker.path.produce(produce_request(batch(2), acks=1))
    response = await broker.leader_and_isr(partition_state(1, 2, [0, 1], replicas=REPLICAS))
    assert errors_of(response) == [ErrorCode.NONE]
    actor = broker.manager.partition(TP)
    assert actor is not None
    # The role and epoch changed at once, although no fetcher could start.
    assert actor.view.role is Role.FOLLOWER
    assert actor.view.leader_epoch == 2
    assert TP not in broker.fetchers.fetching
    assert broker.manager.pending_fetchers == {TP}
    assert broker.leadership_changes[-1] == ([], [TP])
    # A deposed leader no longer takes writes.
    answer = only_produce_answer(await broker.path.produce(produce_request(batch(), acks=1)))
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

    # Metadata without broker 1 changes nothing; with it the fetcher starts from the LEO.
    await broker.update_metadata(update_metadata([0, 2]))
    assert TP not in broker.fetchers.fetching
    await broker.update_metadata(update_metadata([0, 1, 2]))
    assert broker.fetchers.fetching[TP] == (
        BrokerEndpoint(1, "b1", 9093),
        InitialFetchState(fetch_offset=2, leader_epoch=2),
    )
    assert broker.manager.pending_fetchers == frozenset()


async def test_follower_with_a_known_leader_fetches_at_once(broker: Broker) -> None:
    await broker.update_metadata(update_metadata(REPLICAS))
    await broker.leader_and_isr(partition_state(2, 4, [2, 0], replicas=REPLICAS))
    assert broker.fetchers.fetching[TP] == (
        BrokerEndpoint(2, "b2", 9094),
        InitialFetchState(fetch_offset=0, leader_epoch=4),
    )
    # A new leader epoch under another leader moves the fetch; the old state is removed first.
    await broker.leader_and_isr(partition_state(1, 5, [1, 0], replicas=REPLICAS))
    assert broker.fetchers.calls[-2] == ("remove", {TP})
    assert broker.fetchers.fetching[TP] == (
        BrokerEndpoint(1, "b1", 9093),
        InitialFetchState(fetch_offset=0, leader_epoch=5),
    )
    # Becoming leader takes it off the fetchers.
    await broker.leader_and_isr(partition_state(BROKER_ID, 6, [0, 1], replicas=REPLICAS))
    assert TP not in broker.fetchers.fetching


async def test_becoming_follower_answers_a_waiting_acks_all_produce(broker: Broker) -> None:
    await broker.update_metadata(update_metadata(REPLICAS))
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, REPLICAS, replicas=REPLICAS))
    produce = asyncio.create_task(broker.path.produce(produce_request(batch(), acks=-1)))
    await settle(lambda: broker.delayed.delayed[0] == 1)
    await broker.leader_and_isr(partition_state(1, 2, [0, 1], replicas=REPLICAS))
    await settle(produce.done)
    assert only_produce_answer(produce.result()).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER


# -- StopReplica and UpdateMetadata ------------------------------------------------------------


async def test_stop_replica_with_delete_removes_the_log(broker: Broker) -> None:
    await broker.update_metadata(update_metadata(REPLICAS))
    await broker.leader_and_isr(partition_state(1, 1, [1, 0], replicas=REPLICAS))
    assert TP in broker.fetchers.fetching
    partition_dir = broker.log_dir / TP.dir_name
    assert partition_dir.is_dir()
    response = await broker.stop_replica(delete=True)
    assert errors_of(response) == [ErrorCode.NONE]
    assert broker.manager.partition(TP) is None
    assert TP not in broker.manager.routes
    assert TP not in broker.fetchers.fetching
    assert broker.log_manager.get_log(TP) is None
    assert not partition_dir.exists()
    fetched = only_fetch_answer(await broker.path.fetch(fetch_request(0)))
    assert fetched.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def list_offset_error(broker: Broker) -> ErrorCode:
    response = await broker.path.list_offsets(
        ListOffsetsRequest(
            topics=[
                ListOffsetsTopic(
                    name=TP.topic,
                    partitions=[ListOffsetsPartition(partition_index=TP.partition, timestamp=-1)],
                )
            ]
        )
    )
    return ErrorCode(response.topics[0].partitions[0].error_code)


async def test_stop_replica_without_delete_keeps_the_partition_hosted_not_leader_or_follower(
    broker: Broker,
) -> None:
    """Kafka keeps a partition stopped without delete hosted while its log stays: clients get
    NOT_LEADER_OR_FOLLOWER (refresh metadata, retry), not UNKNOWN_TOPIC_OR_PARTITION."""
    await broker.update_metadata(update_metadata(REPLICAS))
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, REPLICAS, replicas=REPLICAS))
    await broker.path.produce(produce_request(batch(2), acks=1))
    waiting = asyncio.create_task(broker.path.produce(produce_request(batch(), acks=-1)))
    await settle(lambda: broker.delayed.delayed[0] == 1)
    response = await broker.stop_replica(delete=False)
    assert errors_of(response) == [ErrorCode.NONE]
    await settle(waiting.done)
    assert only_produce_answer(waiting.result()).error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    stopped = broker.manager.partition(TP)
    assert stopped is not None, "still routed"
    assert stopped.view.role is Role.STOPPED
    produced = only_produce_answer(await broker.path.produce(produce_request(batch(), acks=1)))
    assert produced.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    fetched = only_fetch_answer(await broker.path.fetch(fetch_request(0)))
    assert fetched.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert await list_offset_error(broker) is ErrorCode.NOT_LEADER_OR_FOLLOWER
    kept = broker.log_manager.get_log(TP)
    assert kept is not None
    assert kept.log_end_offset == 3
    # Hosting it again picks the same log up, in a new actor.
    await broker.leader_and_isr(partition_state(BROKER_ID, 2, [BROKER_ID]))
    actor = broker.manager.partition(TP)
    assert actor is not None
    assert actor is not stopped
    assert actor.view.role is Role.LEADER
    assert actor.view.log_end_offset.message_offset == 3


async def test_stop_replica_with_delete_after_a_stop_without_unroutes_the_partition(
    broker: Broker,
) -> None:
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID]))
    await broker.stop_replica(delete=False)
    assert TP in broker.manager.routes
    assert broker.manager.partition_counts().partitions == 1
    assert errors_of(await broker.stop_replica(delete=True)) == [ErrorCode.NONE]
    assert TP not in broker.manager.routes
    assert broker.log_manager.get_log(TP) is None
    fetched = only_fetch_answer(await broker.path.fetch(fetch_request(0)))
    assert fetched.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_full_leader_and_isr_stops_unlisted_partitions_and_keeps_their_logs(
    broker: Broker,
) -> None:
    other = TopicPartition(TP.topic, TP.partition + 1)
    await broker.leader_and_isr(
        partition_state(BROKER_ID, 1, [BROKER_ID]),
        partition_state(BROKER_ID, 1, [BROKER_ID], tp=other),
    )
    await broker.path.produce(produce_request(batch(2), acks=1))
    # An incremental request naming only `other` leaves TP alone ...
    await broker.leader_and_isr(partition_state(BROKER_ID, 2, [BROKER_ID], tp=other))
    assert broker.manager.partition(TP) is not None
    # ... a FULL one naming only `other` makes TP a stray: no longer served, log kept.
    response = await broker.leader_and_isr(
        partition_state(BROKER_ID, 3, [BROKER_ID], tp=other), request_type=LEADER_AND_ISR_FULL
    )
    assert errors_of(response) == [ErrorCode.NONE]
    assert broker.manager.partition(TP) is None
    assert TP not in broker.manager.routes
    assert broker.manager.partition(other) is not None
    kept = broker.log_manager.get_log(TP)
    assert kept is not None
    assert kept.log_end_offset == 2
    fetched = only_fetch_answer(await broker.path.fetch(fetch_request(0)))
    assert fetched.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_a_fenced_full_leader_and_isr_stops_nothing(broker: Broker) -> None:
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID]), controller_epoch=2)
    response = await broker.leader_and_isr(controller_epoch=1, request_type=LEADER_AND_ISR_FULL)
    assert response.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert broker.manager.partition(TP) is not None


def topic_configs(**configs: str) -> TopicConfigs:
    return TopicConfigs(
        topic_name=TP.topic,
        configs=[
            TopicConfigEntry(name=name.replace("_", "."), value=value)
            for name, value in configs.items()
        ],
    )


async def test_topic_configs_reach_new_logs_and_the_produce_path(broker: Broker) -> None:
    assert broker.manager.min_insync_replicas(TP.topic) == 1  # the broker's default
    await broker.leader_and_isr(
        partition_state(BROKER_ID, 1, [BROKER_ID]),
        topic_configs=[topic_configs(segment_bytes="20000", min_insync_replicas="2")],
    )
    created = broker.log_manager.get_log(TP)
    assert created is not None
    assert created.config.segment_bytes == 20_000
    assert broker.manager.min_insync_replicas(TP.topic) == 2
    assert broker.manager.min_insync_replicas("other-topic") == 1
    # An UpdateMetadata replaces the whole set: min.insync.replicas falls back to the broker's.
    request = update_metadata((BROKER_ID,))
    await broker.update_metadata(
        dataclasses.replace(
            request,
            controller_epoch=1,
            topic_configs=[topic_configs(segment_bytes="30000")],
        )
    )
    assert created.config.segment_bytes == 30_000
    assert broker.manager.min_insync_replicas(TP.topic) == 1


async def test_invalid_topic_configs_keep_the_old_settings(broker: Broker) -> None:
    await broker.leader_and_isr(
        partition_state(BROKER_ID, 1, [BROKER_ID]),
        topic_configs=[topic_configs(min_insync_replicas="2")],
    )
    await broker.leader_and_isr(
        partition_state(BROKER_ID, 2, [BROKER_ID]),
        topic_configs=[topic_configs(min_insync_replicas="0", segment_bytes="oops")],
    )
    assert broker.manager.min_insync_replicas(TP.topic) == 2


async def test_stop_replica_with_an_older_leader_epoch_is_fenced(broker: Broker) -> None:
    await broker.leader_and_isr(partition_state(BROKER_ID, 3, [BROKER_ID]))
    response = await broker.stop_replica(delete=True, leader_epoch=2)
    assert errors_of(response) == [ErrorCode.FENCED_LEADER_EPOCH]
    assert broker.manager.partition(TP) is not None
    assert broker.log_manager.get_log(TP) is not None


async def test_update_metadata_from_an_older_controller_is_refused(broker: Broker) -> None:
    assert (
        await broker.update_metadata(update_metadata([0, 1], controller_epoch=3))
    ).error_code == 0
    stale = await broker.update_metadata(update_metadata([0, 1, 2], controller_epoch=2))
    assert stale.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    assert broker.manager.metadata.alive_broker_ids() == {0, 1}
    # The LeaderAndIsr fence knows that controller epoch too.
    refused = await broker.leader_and_isr(
        partition_state(BROKER_ID, 1, [BROKER_ID]), controller_epoch=2
    )
    assert refused.error_code == ErrorCode.STALE_CONTROLLER_EPOCH


async def test_update_metadata_deleting_a_partition_stops_it(broker: Broker) -> None:
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID]))
    deleting = UpdateMetadataPartitionState(
        topic_name=TP.topic,
        partition_index=TP.partition,
        controller_epoch=1,
        leader=-2,
        leader_epoch=2,
        isr=[],
        partition_epoch=1,
        replicas=[BROKER_ID],
    )
    await broker.update_metadata(update_metadata([BROKER_ID], [deleting]))
    assert broker.manager.partition(TP) is None
    assert broker.deletions == [[TP]], "the group coordinator's hook hears of it"


async def test_a_broker_in_controlled_shutdown_neither_joins_the_isr_nor_holds_back_the_hw(
    broker: Broker,
) -> None:
    """KIP-841 on the leader: the controller refuses to add a shutting-down broker to an ISR, so
    the leader must not propose it (again on every fetch), and such a replica, however caught
    up, must not hold back the HW from outside the ISR."""
    leaving = dataclasses.replace(broker_entry(2), in_controlled_shutdown=True)
    request = update_metadata((0, 1))
    await broker.update_metadata(
        dataclasses.replace(request, live_brokers=[*request.live_brokers, leaving])
    )
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, [0, 1], replicas=REPLICAS))
    await broker.path.produce(produce_request(batch(2), acks=1))
    await broker.follower_fetch(1, 2, epoch=1)
    await broker.follower_fetch(2, 2, epoch=1)  # replica 2 caught up: would join the ISR
    await broker.path.produce(produce_request(batch(2, tag=1), acks=1))
    await broker.follower_fetch(1, 4, epoch=1)
    actor = broker.manager.partition(TP)
    assert actor is not None
    assert broker.sink.submitted == [], "no expansion the controller would refuse"
    assert actor.view.maximal_isr == (0, 1)
    assert actor.view.high_watermark.message_offset == 4, "replica 2 (at 2) holds nothing back"
    # Its shutdown is over (the flag is gone): its next fetch proposes it.
    await broker.update_metadata(update_metadata(REPLICAS))
    await broker.follower_fetch(2, 4, epoch=1)
    assert broker.sink.last.new_isr == (0, 1, 2)


# -- the leadership hook -----------------------------------------------------------------------


@pytest.mark.parametrize("delete", [False, True], ids=["stop", "delete"])
async def test_stop_replica_of_a_led_partition_reports_it_no_longer_led(
    broker: Broker, delete: bool
) -> None:
    """The group coordinator unloads a shard only when told (Kafka resigns on StopReplica)."""
    other = TopicPartition(TP.topic, TP.partition + 1)
    await broker.update_metadata(update_metadata(REPLICAS))
    await broker.leader_and_isr(
        partition_state(BROKER_ID, 1, [BROKER_ID]),
        partition_state(1, 1, [1, 0], replicas=REPLICAS, tp=other),
    )
    assert broker.leadership_changes == [([TP], [other])]
    await broker.stop_replica(delete=delete)
    assert broker.leadership_changes[-1] == ([], [TP])
    await broker.stop_replica(delete=delete, tp=other)
    assert len(broker.leadership_changes) == 2, "a follower was not led: nothing to report"


async def test_a_stray_led_partition_is_reported_no_longer_led(broker: Broker) -> None:
    other = TopicPartition(TP.topic, TP.partition + 1)
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID]))
    await broker.leader_and_isr(
        partition_state(BROKER_ID, 1, [BROKER_ID], tp=other), request_type=LEADER_AND_ISR_FULL
    )
    assert broker.leadership_changes == [([TP], []), ([], [TP]), ([other], [])]


async def test_a_log_failure_reports_the_partition_no_longer_led(broker: Broker) -> None:
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID]))
    await broker.path.produce(produce_request(batch(), acks=1))
    fail_writes(broker, TP)
    failed = only_produce_answer(await broker.path.produce(produce_request(batch(), acks=1)))
    assert failed.error_code == ErrorCode.KAFKA_STORAGE_ERROR
    await settle(lambda: len(broker.leadership_changes) == 2)
    assert broker.leadership_changes[-1] == ([], [TP])
    actor = broker.manager.partition(TP)
    assert actor is not None
    assert actor.view.role is Role.OFFLINE


# -- periodic tasks ----------------------------------------------------------------------------


async def test_isr_expiration_shrinks_a_lagging_replica_on_the_clock(broker: Broker) -> None:
    await broker.update_metadata(update_metadata(REPLICAS))
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, REPLICAS, replicas=REPLICAS))
    await broker.path.produce(produce_request(batch(), acks=1))
    # Replica 1 keeps up; replica 2 never fetches.
    for _ in range(3):
        await broker.follower_fetch(1, 1, epoch=1)
        await advance(broker.clock, LAG_MS // 2)
    assert broker.sink.submitted, "no ISR shrink was proposed"
    proposal = broker.sink.last
    assert proposal.new_isr == (0, 1)
    assert (proposal.leader_epoch, proposal.partition_epoch) == (1, 0)
    broker.sink.accept(partition_epoch=1)
    actor = broker.manager.partition(TP)
    assert actor is not None
    await settle(lambda: actor.view.isr == (0, 1))


async def test_isr_expiration_leaves_caught_up_replicas_alone(broker: Broker) -> None:
    await broker.update_metadata(update_metadata(REPLICAS))
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, REPLICAS, replicas=REPLICAS))
    for _ in range(6):
        await broker.follower_fetch(1, 0, epoch=1)
        await broker.follower_fetch(2, 0, epoch=1)
        await advance(broker.clock, LAG_MS // 2)
    assert broker.sink.submitted == []


async def test_high_watermark_checkpoint_is_written_on_the_interval(broker: Broker) -> None:
    checkpoint = broker.log_dir / "replication-offset-checkpoint"
    await advance(broker.clock, HW_CHECKPOINT_MS)
    assert not checkpoint.exists()  # not before the first LeaderAndIsr
    await broker.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID]))
    await broker.path.produce(produce_request(batch(4), acks=1))
    assert broker.log_manager.read_high_watermarks() == {}
    await advance(broker.clock, HW_CHECKPOINT_MS)
    assert broker.log_manager.read_high_watermarks() == {TP: 4}
    await broker.path.produce(produce_request(batch(1), acks=1))
    await advance(broker.clock, HW_CHECKPOINT_MS - 1)
    assert broker.log_manager.read_high_watermarks() == {TP: 4}
    await advance(broker.clock, 1)
    assert broker.log_manager.read_high_watermarks() == {TP: 5}


async def test_stop_writes_a_last_checkpoint_and_stops_partitions(tmp_path: Path) -> None:
    opened = await open_broker(tmp_path)
    await opened.leader_and_isr(partition_state(BROKER_ID, 1, [BROKER_ID]))
    await opened.path.produce(produce_request(batch(2), acks=1))
    actor = opened.manager.partition(TP)
    assert actor is not None
    await close_broker(opened)
    assert not actor.running
    assert opened.manager.routes == {}
    assert (tmp_path / "broker-0" / "replication-offset-checkpoint").read_text().splitlines() == [
        "0",
        "1",
        "orders 0 2",
    ]


def test_the_replica_fetcher_manager_is_a_fetcher_control() -> None:
    # Checked by mypy (structural typing): the real fetchers fit the protocol the ReplicaManager
    # drives. At run time only the methods' presence is checked.
    control: type[FetcherControl] = ReplicaFetcherManager
    for method in ("add_partitions", "remove_partitions", "shutdown_idle"):
        assert callable(getattr(control, method))
