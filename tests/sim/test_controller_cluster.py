"""The controller with real brokers in one process (seeded MemoryNetwork, ManualClock):
controlled shutdown moves leadership before the broker leaves, topic deletion reaches every
replica (also one that was down), and a restarted controller takes over with a higher epoch
while the brokers fence its predecessor."""

from __future__ import annotations

from pathlib import Path

from client.client import Client
from testkit.cluster import SECRET, Cluster
from wire.errors import ErrorCode
from wire.messages import (
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
)

SEED = 7


async def test_controlled_shutdown_moves_leadership_before_the_broker_leaves(
    tmp_path: Path,
) -> None:
    cluster = Cluster.in_memory(tmp_path, 3, seed=SEED)
    await cluster.drive(cluster.start())
    try:
        tps = await cluster.drive(cluster.create_topic("t", 3, replication_factor=3))
        led_by_0 = [tp for tp in tps if cluster.record(tp).leader == 0]
        assert led_by_0, f"seed={SEED}"
        lifecycle = cluster.node(0).lifecycle
        assert lifecycle is not None
        assert await cluster.drive(lifecycle.controlled_shutdown())
        # Before broker 0 stops serving anything, its leaderships have moved and the new
        # leaders serve them; broker 0 is out of every ISR.
        for tp in tps:
            record = cluster.record(tp)
            assert record.leader != 0, (tp, record)
            assert 0 not in record.isr, (tp, record)

        def new_leaders_lead() -> bool:
            for tp in tps:
                record = cluster.record(tp)
                actor = cluster.node(record.leader).replica_manager.partition(tp)
                if actor is None or actor.view.leader_epoch != record.leader_epoch:
                    return False
            return True

        await cluster.run_until(new_leaders_lead, max_ms=2_000, what="new leaders")
        await cluster.drive(cluster.node(0).stop())
        await cluster.run_until(
            lambda: all(cluster.serving(tp) for tp in tps), max_ms=2_000, what="served"
        )
        # A client asks any broker; the broker forwards DescribeCluster to the controller.
        status = await cluster.drive(cluster.admin(DescribeClusterRequest()))
        assert isinstance(status, DescribeClusterResponse)
        assert status.controller_epoch == cluster.controller.actor.model.controller_epoch
        assert [b.state for b in status.brokers][1:] == ["running", "running"]
        assert status.brokers[0].state in ("shutting_down", "fenced")
        assert [b.port for b in status.brokers][1:] == [9092, 9092]
        assert status.offline_partitions == 0
    finally:
        await cluster.drive(cluster.stop())


async def test_deletion_reaches_a_replica_that_was_down_when_it_returns(tmp_path: Path) -> None:
    cluster = Cluster.in_memory(tmp_path, 3, seed=SEED)
    await cluster.drive(cluster.start())
    try:
        (tp,) = await cluster.drive(cluster.create_topic("doomed", 1, replication_factor=3))
        partition_dirs = [cluster.log_dir(b) / tp.dir_name for b in range(3)]
        assert all(d.is_dir() for d in partition_dirs)
        await cluster.drive(cluster.kill(2))
        await cluster.run_until(
            lambda: 2 not in cluster.record(tp).isr, max_ms=2_000, what="broker 2 fenced"
        )
        response = await cluster.drive(cluster.admin(DeleteTopicsRequest(topic_names=["doomed"])))
        assert isinstance(response, DeleteTopicsResponse)
        assert response.responses[0].error_code == ErrorCode.NONE
        await cluster.run_until(
            lambda: not partition_dirs[0].exists() and not partition_dirs[1].exists(),
            max_ms=2_000,
            what="live replicas deleted",
        )
        model = cluster.controller.actor.model
        assert model.topic_by_name("doomed") is not None  # waiting for broker 2
        assert partition_dirs[2].is_dir()
        await cluster.drive(cluster.restart(2))
        await cluster.run_until(
            lambda: model.topic_by_name("doomed") is None, max_ms=2_000, what="topic removed"
        )
        assert not partition_dirs[2].exists()
        # The name is free again.
        await cluster.drive(cluster.create_topic("doomed", 1, replication_factor=3))
    finally:
        await cluster.drive(cluster.stop())


async def test_a_restarted_controller_takes_over_and_the_old_epoch_is_fenced(
    tmp_path: Path,
) -> None:
    cluster = Cluster.in_memory(tmp_path, 3, seed=SEED)
    await cluster.drive(cluster.start())
    try:
        (tp,) = await cluster.drive(cluster.create_topic("t", 1, replication_factor=3))
        old_epoch = cluster.controller.actor.model.controller_epoch
        before = cluster.record(tp)
        await cluster.drive(cluster.restart_controller())
        model = cluster.controller.actor.model
        assert model.controller_epoch == old_epoch + 1
        assert cluster.record(tp) == before  # replayed from the metadata log
        await cluster.run_until(
            lambda: all(
                cluster.node(b).replica_manager.controller_epoch == old_epoch + 1 for b in range(3)
            ),
            max_ms=2_000,
            what="brokers heard the new controller",
        )
        # The brokers kept serving, and a request of the old controller is refused.
        assert cluster.serving(tp)
        assert cluster.network is not None
        old = Client(
            [cluster.node(0).address],
            transport=cluster.network.transport("old-controller"),
            clock=cluster.clock,
            credential=SECRET,
        )
        try:
            stale = await cluster.drive(
                old.send(
                    cluster.node(0).address,
                    LeaderAndIsrRequest(
                        controller_id=3_000, controller_epoch=old_epoch, partition_states=[]
                    ),
                )
            )
        finally:
            await cluster.drive(old.close())
        assert isinstance(stale, LeaderAndIsrResponse)
        assert stale.error is ErrorCode.STALE_CONTROLLER_EPOCH
        # Failover still works under the new controller.
        leader = cluster.record(tp).leader
        await cluster.drive(cluster.kill(leader))
        assert await cluster.new_leader(tp, leader) != leader
    finally:
        await cluster.drive(cluster.stop())
