"""The leader epoch rule (DESIGN.md, Epochs; issue 18, finding 2): a partition's leader epoch
moves when its leader changes or its replica set loses a member, never for an ISR change alone —
also not when the controller itself shrinks the ISR on a broker failure (KAFKA-15021). The rule
(`leader_epoch_moves`), a `Change` moving each epoch once per event, and the controller applying
it on a follower's broker failure."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from actors.controller.journal import Change, leader_epoch_moves
from actors.controller.model import ControllerModel
from tests.unit.actors.controller.harness import ControllerHarness, cluster, kill, of_type
from wire.messages import LeaderAndIsrRequest, UpdateMetadataRequest
from wire.metadata_records import PartitionRecord, TopicRecord

TOPIC_ID = bytes(range(1, 17))
BEFORE = PartitionRecord(TOPIC_ID, 0, (0, 1, 2), (0, 1, 2), 0, 4, 7)


@pytest.mark.parametrize(
    ("fields", "moves"),
    [
        ({"isr": (0, 1)}, False),  # a shrink, by the leader or by the controller
        ({"isr": (0,)}, False),
        ({"leader": 1}, True),  # a new leader
        ({"leader": 1, "isr": (1, 2)}, True),
        ({"leader": -1}, True),  # no leader any more
        ({"replicas": (0, 1)}, True),  # the replica set lost a member
        ({"replicas": (0, 1, 3)}, True),  # ... also when another one took its place
        ({"replicas": (0, 1, 2, 3)}, False),  # it only grew
        ({}, False),
    ],
)
def test_a_new_leader_epoch_only_for_a_new_leader_or_a_lost_replica(
    fields: dict[str, Any], moves: bool
) -> None:
    assert leader_epoch_moves(BEFORE, replace(BEFORE, **fields)) is moves


def model_with(partition: PartitionRecord) -> ControllerModel:
    model = ControllerModel()
    model.apply(TopicRecord("t", TOPIC_ID))
    model.apply(partition)
    return model


def test_a_change_moves_each_epoch_once_per_event() -> None:
    model = model_with(BEFORE)
    shrink = Change(model)
    shrunk = shrink.move(BEFORE, isr=(0, 1))
    shrunk = shrink.move(BEFORE, isr=(0,))
    assert (shrunk.leader_epoch, shrunk.partition_epoch) == (4, 8)
    # Elect, then shrink, in one event: one new leader epoch, one new partition epoch.
    elect = Change(model)
    elect.move(BEFORE, leader=1, isr=(1, 2))
    elected = elect.move(BEFORE, isr=(1,))
    assert (elected.leader, elected.isr, elected.leader_epoch, elected.partition_epoch) == (
        1,
        (1,),
        5,
        8,
    )
    assert elect.changed_partitions() == [elected]


async def test_a_follower_broker_failure_shrinks_the_isr_under_the_same_leader_epoch(
    harness: ControllerHarness,
) -> None:
    await cluster(harness)
    await harness.create_topic("t", 1, 3, assignments=[[0, 1, 2]])
    before = harness.partition("t")
    harness.channels.take()
    await kill(harness, 2, alive=(0, 1))
    after = harness.partition("t")
    assert (after.leader, after.isr) == (0, (0, 1))
    # The leader did not change: the same leader epoch, so broker 0 goes on leading and its
    # writes waiting for acks=all are not failed; a new partition epoch for the new ISR.
    assert after.leader_epoch == before.leader_epoch
    assert after.partition_epoch == before.partition_epoch + 1
    sent = harness.channels.take()
    for broker_id in (0, 1):
        (request,) = of_type(sent, LeaderAndIsrRequest, broker_id)
        (state,) = request.partition_states
        assert (state.leader, state.leader_epoch, state.isr, state.partition_epoch) == (
            0,
            before.leader_epoch,
            [0, 1],
            after.partition_epoch,
        )
        (metadata,) = of_type(sent, UpdateMetadataRequest, broker_id)
        assert [s.leader_epoch for s in metadata.partition_states] == [before.leader_epoch]
