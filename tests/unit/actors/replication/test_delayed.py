"""DelayedOperations, the broker's two purgatories: which keys each partition change wakes, as the
PartitionListener a partition actor calls (tests/unit/actors/replication/delayed_harness.py)."""

from __future__ import annotations

from actors.replication.delayed_fetch import FetchWakeReason
from runtime.clock import ManualClock
from tests.unit.actors.replication.delayed_harness import (
    CONSUMER,
    EPOCH,
    FOLLOWER,
    TP0,
    Cluster,
    appended,
    fetch,
    leader_view,
    produce,
    reading,
)
from wire.errors import ErrorCode


async def test_delayed_operations_is_a_partition_listener() -> None:
    """The PartitionListener methods a partition actor calls (actors/replication/partition.py)
    wake the right keys: leader append -> follower fetches, HW -> produces and consumer fetches,
    leadership -> everything."""
    cluster = Cluster(ManualClock())
    cluster.publish(leader_view(TP0, hw=0, leo=0))
    listener = cluster.ops
    produce_op, responses = produce(cluster, [appended(TP0, 0, 1)])
    follower_op, follower_ready = fetch(cluster, FOLLOWER, [reading(TP0, 0)])
    consumer_op, consumer_ready = fetch(cluster, CONSUMER, [reading(TP0, 0)])
    for watched in (cluster.ops.watch_produce(produce_op), cluster.ops.watch_fetch(follower_op)):
        assert not watched
    assert not cluster.ops.watch_fetch(consumer_op)
    cluster.views[TP0] = leader_view(TP0, hw=0, leo=1)
    listener.on_leader_append(TP0)
    assert (len(follower_ready.calls), len(consumer_ready.calls), responses.calls) == (1, 0, [])
    cluster.views[TP0] = leader_view(TP0, hw=1, leo=1)
    listener.on_high_watermark_advanced(TP0)
    assert responses.errors() == {TP0: ErrorCode.NONE}
    assert consumer_ready.once()[0] is FetchWakeReason.MIN_BYTES
    waiting, waiting_ready = fetch(cluster, CONSUMER, [reading(TP0, 1)])
    assert not cluster.ops.watch_fetch(waiting)
    cluster.views[TP0] = leader_view(TP0, hw=1, leo=1, epoch=EPOCH + 1)
    listener.on_leadership_changed(TP0)
    assert waiting_ready.once()[0] is FetchWakeReason.LEADERSHIP
