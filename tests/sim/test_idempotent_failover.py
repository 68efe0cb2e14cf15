"""An idempotent producer's retry across a leader failover writes nothing twice (issue 19), on a
3-broker in-process cluster (seeded MemoryNetwork, ManualClock).

The producer's batch is appended by the leader and replicated to the followers, and its answer
is lost: the producer sends the same bytes again, to the same leader, and, after that leader is
killed, to the new one. Each retry is answered NONE with the first copy's offset and appends
nothing, because every follower built the producer's state from the replicated batches. A batch
that skips sequences is refused OUT_OF_ORDER_SEQUENCE_NUMBER, and one from an older producer
epoch INVALID_PRODUCER_EPOCH.
"""

from __future__ import annotations

from pathlib import Path

from client.client import Client
from testkit.cluster import Cluster
from testkit.probes import only_answer
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.messages import PartitionProduceData, ProduceRequest, TopicProduceData
from wire.messages.data import PartitionProduceResponse
from wire.topic import TopicPartition

TOPIC = "payments"
TP = TopicPartition(TOPIC, 0)
PID = 77
PROPERTIES: dict[str, object] = {
    "min.insync.replicas": 2,
    "broker.session.timeout.ms": 1_000,
    "broker.heartbeat.interval.ms": 100,
    "replica.fetch.wait.max.ms": 20,
    "replica.fetch.backoff.ms": 20,
    "request.timeout.ms": 1_000,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 50,
}


def idempotent_produce(sequence: int, *, epoch: int = 0, count: int = 2) -> ProduceRequest:
    records = [(None, b"%d-%d" % (sequence, i)) for i in range(count)]
    batch = build_batch(
        records, base_timestamp=0, producer_id=PID, producer_epoch=epoch, base_sequence=sequence
    )
    return ProduceRequest(
        acks=-1,
        timeout_ms=1_000,
        topic_data=[
            TopicProduceData(
                name=TOPIC, partition_data=[PartitionProduceData(index=0, records=batch)]
            )
        ],
    )


async def test_an_idempotent_retry_is_written_once_across_a_leader_failover(
    tmp_path: Path,
) -> None:
    seed = 19
    cluster = Cluster.in_memory(tmp_path, 3, seed=seed, properties=PROPERTIES)
    await cluster.drive(cluster.start())
    assert cluster.network is not None
    client = Client(
        cluster.addresses, transport=cluster.network.transport("producer"), clock=cluster.clock
    )
    try:
        await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=3))

        async def send(request: ProduceRequest) -> PartitionProduceResponse:
            address = cluster.leader(TP).address
            return only_answer(await cluster.drive(client.send(address, request)))

        def answered(answer: PartitionProduceResponse) -> tuple[ErrorCode, int]:
            return ErrorCode.from_code(answer.error_code), answer.base_offset

        assert answered(await send(idempotent_produce(0))) == (ErrorCode.NONE, 0)
        assert answered(await send(idempotent_produce(2))) == (ErrorCode.NONE, 2)
        # The answer was lost; the producer sends the same batch again.
        assert answered(await send(idempotent_produce(2))) == (ErrorCode.NONE, 2), f"seed={seed}"

        old = cluster.record(TP).leader
        await cluster.run_until(
            lambda: all(_log_end(cluster, b) == 4 for b in cluster.record(TP).replicas),
            max_ms=2_000,
            what="replicated",
        )
        await cluster.drive(cluster.kill(old))
        new = await cluster.new_leader(TP, old)
        # The new leader recognises the retry of a write the old one acknowledged.
        assert answered(await send(idempotent_produce(2))) == (ErrorCode.NONE, 2), f"seed={seed}"
        assert _log_end(cluster, new) == 4, f"seed={seed}"
        assert answered(await send(idempotent_produce(4))) == (ErrorCode.NONE, 4)
        skipped = answered(await send(idempotent_produce(9)))
        assert skipped[0] is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, f"seed={seed}"
        # A bumped epoch starts again at 0; the old epoch is fenced from then on.
        assert answered(await send(idempotent_produce(0, epoch=1))) == (ErrorCode.NONE, 6)
        stale = answered(await send(idempotent_produce(6, epoch=0)))
        assert stale[0] is ErrorCode.INVALID_PRODUCER_EPOCH, f"seed={seed}"
        assert _log_end(cluster, new) == 8
    finally:
        await cluster.drive(client.close())
        await cluster.drive(cluster.stop())


def _log_end(cluster: Cluster, broker_id: int) -> int:
    if not cluster.running(broker_id):
        return -1
    actor = cluster.node(broker_id).replica_manager.partition(TP)
    return -1 if actor is None else actor.view.log_end_offset.message_offset
