"""A pause that is a real SIGSTOP (testkit/sim/loop.py `freeze`), on the simulation's own
building blocks: a 3-broker cluster on the simulated loop and clock and the seeded in-memory
network (as testkit/sim/simulation.py builds a run).

The leader of a partition is frozen past replica.lag.time.max.ms and the session timeout. While
it is frozen it does nothing at all: its view of the partition (high watermark, ISR, epoch) is
the same object throughout, although its ISR-shrink check fell due long before, and it sends not
one byte, although its connections stay open. The controller fences it when its session times
out and elects another leader, which takes acks=all writes. Thawed, the old leader learns it no
longer leads and rejoins the ISR as a follower of the new epoch; the acks=all write made before
the pause, and the one made during it, are in every replica's log.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Final

from actors.views import Role
from client.client import Client
from client.config import ClientConfig
from runtime.net.memory import LinkConfig, MemoryNetwork
from runtime.net.transport import Address
from testkit.cluster import Cluster
from testkit.probes import one_record, only_answer
from testkit.sim.loop import SimClock, SimulatedLoop, deterministic_entropy
from wire.errors import ErrorCode
from wire.record_reader import iter_records
from wire.records import iter_batches
from wire.topic import TopicPartition

SEED: Final = 23
TOPIC: Final = "orders"
TP: Final = TopicPartition(TOPIC, 0)
LAG_MS: Final = 1_000
PROPERTIES: Final[dict[str, object]] = {
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
CLIENT_CONFIG: Final = ClientConfig(
    request_timeout_ms=2_000, reconnect_backoff_ms=10, reconnect_backoff_max_ms=50
)


def test_a_paused_leader_is_fenced_replaced_and_rejoins_as_a_follower(tmp_path: Path) -> None:
    loop = SimulatedLoop()
    try:
        with deterministic_entropy(SEED):
            loop.run_until_complete(_paused_leader(tmp_path, loop))
    finally:
        loop.close()


async def _paused_leader(directory: Path, loop: SimulatedLoop) -> None:
    clock = SimClock(loop)
    network = MemoryNetwork(SEED, clock, default_link=LinkConfig(1, 1))
    chunks_sent: Counter[str] = Counter()
    network.tracer = lambda src, _dst, _chunk: chunks_sent.update([src])
    cluster = Cluster(
        directory,
        range(3),
        clock=clock,
        transport_for=network.transport,
        address_for=lambda name: Address(name, 9092),
        properties=PROPERTIES,
        network=network,
        seed=SEED,
    )
    await cluster.start()
    client = Client(
        cluster.addresses,
        transport=network.transport("producer"),
        clock=clock,
        config=CLIENT_CONFIG,
    )
    try:
        await cluster.create_topic(TOPIC, 1, 3)
        old = cluster.record(TP).leader
        before = await _produce(cluster, client, b"before")
        name = cluster.node_name(old)
        actor = cluster.node(old).replica_manager.partition(TP)
        assert actor is not None
        frozen_view = actor.view
        assert frozen_view.is_leader, frozen_view
        assert sorted(frozen_view.isr) == [0, 1, 2], frozen_view
        sent = chunks_sent[name]

        loop.freeze(name)
        paused_ms = clock.monotonic_ms()
        model = cluster.controller.actor.model

        def fenced_and_replaced() -> bool:
            assert actor.view is frozen_view, f"the frozen broker changed its view (seed={SEED})"
            broker = model.broker(old)
            return (
                clock.monotonic_ms() - paused_ms > 2 * LAG_MS
                and broker is not None
                and broker.fenced
                and cluster.record(TP).leader not in (old, -1)
            )

        await cluster.run_until(fenced_and_replaced, max_ms=5_000, what="fenced and replaced")
        new = cluster.record(TP).leader
        assert sorted(cluster.record(TP).isr) == sorted({0, 1, 2} - {old})
        during = await _produce(cluster, client, b"during")
        assert actor.view is frozen_view
        assert chunks_sent[name] == sent, "a frozen broker sent something"

        loop.thaw(name)
        await cluster.run_until(
            lambda: cluster.serving(TP) and old in cluster.record(TP).isr,
            max_ms=5_000,
            what="the old leader back in the ISR as a follower",
        )
        record = cluster.record(TP)
        assert record.leader == new
        assert record.leader_epoch > frozen_view.leader_epoch
        rejoined = cluster.node(old).replica_manager.partition(TP)
        assert rejoined is not None
        assert rejoined.view.role is Role.FOLLOWER
        assert rejoined.view.leader_epoch == record.leader_epoch
        assert chunks_sent[name] > sent
        await cluster.run_until(
            lambda: _log_of(cluster, old).get(during) == b"during",
            max_ms=5_000,
            what="the old leader caught up",
        )
        for broker_id in range(3):
            log = _log_of(cluster, broker_id)
            assert log.get(before) == b"before", (broker_id, log)
            assert log.get(during) == b"during", (broker_id, log)
    finally:
        await client.close()
        await cluster.stop()


async def _produce(cluster: Cluster, client: Client, value: bytes) -> int:
    """An acks=all write of one record to the partition's leader; its offset."""
    request = one_record(TOPIC, 0, value, timeout_ms=5_000)
    answer = only_answer(await client.send(cluster.leader(TP).address, request))
    assert answer.error_code == ErrorCode.NONE, answer
    return answer.base_offset


def _log_of(cluster: Cluster, broker_id: int) -> dict[int, bytes | None]:
    """Offset -> value of every data record in the broker's segment files of the partition."""
    log_dir = cluster.node(broker_id).log_manager.log_dir_of(TP)
    assert log_dir is not None
    records: dict[int, bytes | None] = {}
    for segment in sorted((log_dir / TP.dir_name).glob("*.log")):
        data = segment.read_bytes()
        for position, header in iter_batches(data):
            if not header.is_control:
                records.update((r.offset, r.value) for r in iter_records(data, position))
    return records
