"""Leaders spread again after a broker returns (issue 23), on a 3-broker in-process cluster
(seeded MemoryNetwork, ManualClock) with the real controller and automatic rebalancing on: a
broker that crashed or shut down in a controlled way comes back, catches up on what was written
while it was away, rejoins the ISRs, and leads its preferred partitions again within a bounded
simulated time — far sooner than leader.imbalance.check.interval.seconds (300 s) — and never
leads one before it has caught up."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.controller.messages import ControllerConfig
from client.client import Client
from client.config import ClientConfig
from node.controller.node import ControllerNode
from node.layout import CONTROLLER_NODE
from testkit.cluster import SECRET, Cluster
from testkit.probes import one_record, only_answer
from wire.errors import ErrorCode
from wire.topic import TopicPartition

SEED = 23
PARTITIONS = 6  # preferred leaders round the brokers: partition p's is broker p % 3
WRITES = 5  # per partition, while broker 0 is away
DELAY_MS = 1_000  # leader.imbalance.election.delay.ms, its default
# Restart, catch-up (a fetch round or two), the ISR expansion and the delay, with room to spare:
# well within the 300 s periodic check.
SPREAD_WITHIN_MS = 4_000
PROPERTIES: dict[str, object] = {
    "replica.fetch.wait.max.ms": 20,
    "replica.fetch.backoff.ms": 20,
    "request.timeout.ms": 1_000,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 50,
    "retry.backoff.ms": 10,
    "retry.backoff.max.ms": 50,
    "leader.imbalance.election.delay.ms": DELAY_MS,
}


class RebalancingCluster(Cluster):
    """testkit's cluster pins auto.leader.rebalance.enable off for its controller (the
    simulation wants no leader moves it did not cause); this one leaves it on, Kafka's
    default, as `ketch up` does."""

    def _controller_node(self) -> ControllerNode:
        config = ControllerConfig.from_properties(self.properties)
        assert config.auto_leader_rebalance_enable
        return ControllerNode(
            config,
            self.layout.controller_dir,
            transport=self._transport_for(CONTROLLER_NODE),
            clock=self.clock,
            cluster_secret=SECRET,
            listen=self._address_for(CONTROLLER_NODE),
        )


async def write_while_away(cluster: Cluster, tps: list[TopicPartition]) -> None:
    """WRITES records to each partition, acknowledged by its current leader: broker 0 has to
    fetch them all before it is back in the ISR."""
    assert cluster.network is not None
    client = Client(
        cluster.addresses,
        transport=cluster.network.transport("producer"),
        clock=cluster.clock,
        config=ClientConfig(request_timeout_ms=5_000),
    )
    try:
        for tp in tps:
            for n in range(WRITES):
                request = one_record(tp.topic, tp.partition, b"v%d" % n, timeout_ms=2_000, acks=-1)
                address = cluster.leader(tp).address
                answer = only_answer(await cluster.drive(client.send(address, request)))
                assert ErrorCode.from_code(answer.error_code) is ErrorCode.NONE, (tp, answer)
    finally:
        await cluster.drive(client.close())


def log_end_offset(cluster: Cluster, broker_id: int, tp: TopicPartition) -> int:
    replica = cluster.node(broker_id).replica_manager.partition(tp)
    assert replica is not None, (broker_id, tp)
    return replica.view.log_end_offset.message_offset


@pytest.mark.parametrize("away", ["crash", "controlled shutdown"])
async def test_a_returning_broker_leads_its_preferred_partitions_again(
    tmp_path: Path, away: str
) -> None:
    cluster = RebalancingCluster.in_memory(tmp_path, 3, seed=SEED, properties=PROPERTIES)
    await cluster.drive(cluster.start())
    try:
        tps = await cluster.drive(cluster.create_topic("t", PARTITIONS, replication_factor=3))
        preferred = {tp: cluster.record(tp).replicas[0] for tp in tps}
        assert sorted(preferred.values()) == [0, 0, 1, 1, 2, 2], f"seed={SEED}"

        if away == "crash":
            await cluster.drive(cluster.kill(0))
        else:
            await cluster.drive(cluster.node(0).stop())
        await cluster.run_until(
            lambda: (
                all(cluster.record(tp).leader not in (0, -1) for tp in tps)
                and all(cluster.serving(tp) for tp in tps)
            ),
            max_ms=3_000,
            what="broker 0's partitions led by the others",
        )
        await write_while_away(cluster, tps)
        written = {tp: log_end_offset(cluster, cluster.record(tp).leader, tp) for tp in tps}
        assert min(written.values()) >= WRITES

        await cluster.drive(cluster.restart(0))
        restarted_ms = cluster.clock.monotonic_ms()
        premature: list[str] = []

        def spread() -> bool:
            """Every partition led and served by its preferred replica; on the way, broker 0
            never leads a partition it has not caught up on."""
            for tp in tps:
                if cluster.record(tp).leader == 0 and log_end_offset(cluster, 0, tp) < written[tp]:
                    premature.append(f"{tp} at {log_end_offset(cluster, 0, tp)}")
            return all(
                cluster.record(tp).leader == preferred[tp] and cluster.serving(tp) for tp in tps
            )

        await cluster.run_until(spread, max_ms=SPREAD_WITHIN_MS, what="leaders spread again")
        assert not premature, premature
        took_ms = cluster.clock.monotonic_ms() - restarted_ms
        assert took_ms >= DELAY_MS, f"elected {took_ms} ms after the restart: before the delay"
        for tp in tps:
            record = cluster.record(tp)
            assert set(record.isr) == {0, 1, 2}, record  # the election left the ISR whole
    finally:
        await cluster.drive(cluster.stop())
