"""A broker that comes back without its log directory (issue 18, finding 9), on a 3-broker
in-process cluster (seeded MemoryNetwork, ManualClock).

The partition's followers die first, so its ISR shrinks to the leader (min.insync.replicas 1
lets writes go on); then the leader dies and its directory is wiped. The followers return out of
the ISR, and the old leader returns on an empty directory with a new directory id. It used to be
elected at once (it was the last ISR member) and the followers truncated their logs to its
nothing: every record was lost. Now the controller sees the directory it registered before is
gone and empties the ISR: the partition stays offline, and the followers keep every record they
had.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from client.client import Client
from testkit.cluster import Cluster
from testkit.probes import one_record, only_answer
from wire.errors import ErrorCode
from wire.topic import TopicPartition

TOPIC = "ledger"
TP = TopicPartition(TOPIC, 0)
SESSION_MS = 1_000
PROPERTIES: dict[str, object] = {
    "min.insync.replicas": 1,
    "broker.session.timeout.ms": SESSION_MS,
    "broker.heartbeat.interval.ms": 100,
    "replica.fetch.wait.max.ms": 20,
    "replica.fetch.backoff.ms": 20,
    "request.timeout.ms": 1_000,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 50,
}


async def test_a_leader_back_on_a_wiped_log_dir_is_not_elected_and_nothing_is_truncated(
    tmp_path: Path,
) -> None:
    seed = 9
    cluster = Cluster.in_memory(tmp_path, 3, seed=seed, properties=PROPERTIES)
    await cluster.drive(cluster.start())
    try:
        await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=3))
        leader = cluster.record(TP).leader
        followers = [b for b in cluster.record(TP).replicas if b != leader]
        assert cluster.network is not None
        client = Client(
            [cluster.node(leader).address],
            transport=cluster.network.transport("producer"),
            clock=cluster.clock,
        )

        async def produce(value: bytes) -> None:
            request = one_record(TOPIC, 0, value, timeout_ms=500)
            answer = only_answer(
                await cluster.drive(client.send(cluster.node(leader).address, request))
            )
            assert answer.error_code == ErrorCode.NONE, (answer, f"seed={seed}")

        for i in range(5):
            await produce(b"replicated-%d" % i)
        await cluster.run_until(
            lambda: all(_log_end(cluster, b) == 5 for b in followers),
            max_ms=2_000,
            what="followers caught up",
        )
        for follower in followers:
            await cluster.drive(cluster.kill(follower))
        # The leader itself must know the shrunk ISR, not only the controller, or acks=all
        # still waits for the dead followers.
        await cluster.run_until(
            lambda: _leaders_isr(cluster, leader) == (leader,),
            max_ms=4 * SESSION_MS,
            what="ISR shrink",
        )
        for i in range(3):
            await produce(b"leader-only-%d" % i)
        await cluster.drive(client.close())

        await cluster.drive(cluster.kill(leader))
        await cluster.run_until(
            lambda: cluster.record(TP).leader == -1, max_ms=4 * SESSION_MS, what="leaderless"
        )
        assert cluster.record(TP).isr == (leader,), "the last ISR member keeps its place"
        shutil.rmtree(cluster.log_dir(leader))
        for follower in followers:
            await cluster.drive(cluster.restart(follower))
        await cluster.drive(cluster.restart(leader))
        await cluster.run_for(2 * SESSION_MS)

        record = cluster.record(TP)
        assert record.leader == -1, (record, f"seed={seed}")
        assert record.isr == (), (record, f"seed={seed}")
        for follower in followers:
            assert _log_end(cluster, follower) == 5, (follower, f"seed={seed}")
    finally:
        await cluster.drive(cluster.stop())


def _log_end(cluster: Cluster, broker_id: int) -> int:
    actor = cluster.node(broker_id).replica_manager.partition(TP)
    return -1 if actor is None else actor.view.log_end_offset.message_offset


def _leaders_isr(cluster: Cluster, leader: int) -> tuple[int, ...]:
    actor = cluster.node(leader).replica_manager.partition(TP)
    return () if actor is None else tuple(actor.view.isr)
