"""ISR changes on a 3-broker in-process cluster (seeded MemoryNetwork, ManualClock), with the
real controller (issue 18, findings 1 and 2):

* a follower's broker dies while an acks=all write waits for it: the controller takes it out of
  the ISR under the same leader epoch (KAFKA-15021), so the leader goes on leading and the write
  is acknowledged, not failed with NOT_LEADER_OR_FOLLOWER;
* a leader's AlterPartition is applied but its answer is lost with the connection: the resent
  copy is answered with the state it made, so the leader takes its new ISR and acks=all writes
  go on instead of waiting for a follower that left the ISR.
"""

from __future__ import annotations

from pathlib import Path

from client.client import Client
from client.config import ClientConfig
from node.layout import CONTROLLER_NODE
from testkit.cluster import Cluster
from testkit.probes import one_record, only_answer
from wire.errors import ErrorCode
from wire.topic import TopicPartition

SEED = 18
TOPIC = "orders"
TP = TopicPartition(TOPIC, 0)
LAG_MS = 1_000
PROPERTIES: dict[str, object] = {
    "min.insync.replicas": 2,
    "replica.lag.time.max.ms": LAG_MS,
    "replica.fetch.wait.max.ms": 20,
    "replica.fetch.backoff.ms": 20,
    "request.timeout.ms": 1_000,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 50,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 50,
}
CLIENT_CONFIG = ClientConfig(
    request_timeout_ms=5_000, reconnect_backoff_ms=10, reconnect_backoff_max_ms=50
)


async def produce(
    cluster: Cluster, client: Client, value: bytes, *, timeout_ms: int, acks: int = -1
) -> ErrorCode:
    address = cluster.leader(TP).address
    request = one_record(TOPIC, 0, value, timeout_ms=timeout_ms, acks=acks)
    answer = only_answer(await cluster.drive(client.send(address, request)))
    return ErrorCode.from_code(answer.error_code)


def producer(cluster: Cluster) -> Client:
    assert cluster.network is not None
    return Client(
        cluster.addresses,
        transport=cluster.network.transport("producer"),
        clock=cluster.clock,
        config=CLIENT_CONFIG,
    )


def leader_view_isr(cluster: Cluster, leader: int) -> tuple[int, ...]:
    actor = cluster.node(leader).replica_manager.partition(TP)
    assert actor is not None
    return tuple(actor.view.isr)


async def test_a_follower_broker_failure_fails_no_acks_all_write_waiting_for_it(
    tmp_path: Path,
) -> None:
    cluster = Cluster.in_memory(tmp_path, 3, seed=SEED, properties=PROPERTIES)
    await cluster.drive(cluster.start())
    client = producer(cluster)
    try:
        await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=3))
        before = cluster.record(TP)
        leader = before.leader
        assert await produce(cluster, client, b"first", timeout_ms=5_000) is ErrorCode.NONE
        follower = next(b for b in before.replicas if b != leader)
        await cluster.drive(cluster.kill(follower))
        # The ISR still names the dead follower, so this write waits for it until the
        # controller notices the death and takes it out of the ISR; then it is acknowledged.
        answer = await produce(cluster, client, b"second", timeout_ms=5_000)
        after = cluster.record(TP)
        assert follower not in after.isr, f"seed={SEED}"
        assert answer is ErrorCode.NONE, f"seed={SEED}: {answer.name}"
        # The same leader, the same leader epoch: only the partition epoch moved.
        assert (after.leader, after.leader_epoch) == (leader, before.leader_epoch)
        assert after.partition_epoch > before.partition_epoch
        actor = cluster.node(leader).replica_manager.partition(TP)
        assert actor is not None
        assert actor.view.leader_epoch == before.leader_epoch
    finally:
        await cluster.drive(client.close())
        await cluster.drive(cluster.stop())


async def test_a_lost_answer_to_an_applied_alter_partition_does_not_freeze_the_isr(
    tmp_path: Path,
) -> None:
    cluster = Cluster.in_memory(tmp_path, 3, seed=SEED, properties=PROPERTIES)
    await cluster.drive(cluster.start())
    client = producer(cluster)
    network = cluster.network
    assert network is not None
    try:
        await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=3))
        before = cluster.record(TP)
        leader = before.leader
        assert await produce(cluster, client, b"first", timeout_ms=5_000) is ErrorCode.NONE
        # A follower cut off from the leader (but not from the controller: it stays live)
        # falls behind; after replica.lag.time.max.ms the leader proposes to drop it.
        follower = next(b for b in before.replicas if b != leader)
        leader_name, follower_name = cluster.node_name(leader), cluster.node_name(follower)
        network.partition(leader_name, follower_name)
        assert await produce(cluster, client, b"behind", timeout_ms=1_000, acks=1) is (
            ErrorCode.NONE
        )
        # Answers from the controller to the leader take a while, so the connection can be
        # cut after the controller applied the proposal and before its answer arrives.
        network.set_link(leader_name, CONTROLLER_NODE, delay_ms=20)
        await cluster.run_until(
            lambda: follower not in cluster.record(TP).isr,
            max_ms=4 * LAG_MS,
            what="the controller applied the shrink",
        )
        assert network.kill(leader_name, CONTROLLER_NODE) > 0, f"seed={SEED}"
        network.set_link(leader_name, CONTROLLER_NODE)
        applied = cluster.record(TP)
        assert leader_view_isr(cluster, leader) == before.isr  # the answer did not arrive
        # The broker resends the proposal; the leader takes the applied ISR from the answer...
        await cluster.run_until(
            lambda: leader_view_isr(cluster, leader) == applied.isr,
            max_ms=2_000,
            what=f"the leader took the ISR {applied.isr}",
        )
        actor = cluster.node(leader).replica_manager.partition(TP)
        assert actor is not None
        assert actor.pending_isr_change is None
        # ... and acks=all writes no longer wait for the follower that left.
        assert await produce(cluster, client, b"second", timeout_ms=1_000) is ErrorCode.NONE
        assert cluster.record(TP) == applied
    finally:
        network.heal_all()
        await cluster.drive(client.close())
        await cluster.drive(cluster.stop())
