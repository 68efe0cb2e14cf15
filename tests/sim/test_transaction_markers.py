"""Transaction markers and read_committed reads on a 3-broker in-process cluster (issue 19; the
partition side of transactions, driven here without the coordinator).

A producer's transactional batches are appended on the leader (as the coordinator-verified
produce path will), interleaved with plain records. A read_committed fetch stops at the first
offset of the open transaction (the last stable offset) while a read_uncommitted one reads up
to the high watermark. WriteTxnMarkers, sent as the coordinator will (with the cluster
credential, to the leader), writes an ABORT marker once the ISR has it; read_committed fetches
then read everything and name the aborted transaction, on the new leader too after the old one
is killed. A marker of an older producer epoch is refused.
"""

from __future__ import annotations

from pathlib import Path

from actors.replication.partition_messages import AppendAsLeader, LeaderAppendResult
from client.client import Client
from testkit.cluster import SECRET, Cluster
from testkit.probes import only_answer
from wire.batch_builder import build_batch
from wire.errors import ErrorCode
from wire.messages import (
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    FetchTopic,
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from wire.records import iter_batches
from wire.topic import TopicPartition

TOPIC = "ledger"
TP = TopicPartition(TOPIC, 0)
PID = 4_242
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
READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def transactional(sequence: int, *, epoch: int = 0) -> bytes:
    return build_batch(
        [(None, b"txn-%d-%d" % (sequence, i)) for i in range(2)],
        base_timestamp=0,
        producer_id=PID,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=True,
    )


def plain(value: bytes) -> ProduceRequest:
    return ProduceRequest(
        acks=-1,
        timeout_ms=1_000,
        topic_data=[
            TopicProduceData(
                name=TOPIC,
                partition_data=[
                    PartitionProduceData(
                        index=0, records=build_batch([(None, value)], base_timestamp=0)
                    )
                ],
            )
        ],
    )


def markers(*, commit: bool, epoch: int = 0) -> WriteTxnMarkersRequest:
    return WriteTxnMarkersRequest(
        markers=[
            WritableTxnMarker(
                producer_id=PID,
                producer_epoch=epoch,
                transaction_result=commit,
                topics=[WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])],
                coordinator_epoch=0,
            )
        ]
    )


def fetch(isolation_level: int, offset: int = 0) -> FetchRequest:
    return FetchRequest(
        max_wait_ms=0,
        min_bytes=1,
        isolation_level=isolation_level,
        topics=[
            FetchTopic(
                topic=TOPIC,
                partitions=[
                    FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)
                ],
            )
        ],
    )


def only_partition(response: object) -> FetchResponsePartition:
    assert isinstance(response, FetchResponse), response
    [topic] = response.responses
    [partition] = topic.partitions
    return partition


def marker_error(response: object) -> ErrorCode:
    assert isinstance(response, WriteTxnMarkersResponse), response
    [marker] = response.markers
    [topic] = marker.topics
    [partition] = topic.partitions
    return ErrorCode.from_code(partition.error_code)


def offsets_read(partition: FetchResponsePartition) -> list[int]:
    return [
        header.base_offset + i
        for _, header in iter_batches(partition.records)
        for i in range(header.records_count)
    ]


async def test_markers_end_transactions_and_read_committed_stops_at_the_lso(
    tmp_path: Path,
) -> None:
    seed = 27
    cluster = Cluster.in_memory(tmp_path, 3, seed=seed, properties=PROPERTIES)
    await cluster.drive(cluster.start())
    assert cluster.network is not None
    client = Client(
        cluster.addresses,
        transport=cluster.network.transport("coordinator"),
        clock=cluster.clock,
        credential=SECRET,
    )
    try:
        await cluster.drive(cluster.create_topic(TOPIC, 1, replication_factor=3))

        async def send(request: object) -> object:
            address = cluster.leader(TP).address
            return await cluster.drive(client.send(address, request))  # type: ignore[arg-type]

        async def append_transactional(sequence: int) -> None:
            actor = cluster.leader(TP).replica_manager.partition(TP)
            assert actor is not None
            result = await cluster.drive(actor.ask(AppendAsLeader(transactional(sequence))))
            assert isinstance(result, LeaderAppendResult)
            assert result.error is ErrorCode.NONE, (result, f"seed={seed}")

        assert only_answer(await send(plain(b"before"))).error_code == ErrorCode.NONE  # 0
        await append_transactional(0)  # 1-2
        assert only_answer(await send(plain(b"during"))).error_code == ErrorCode.NONE  # 3
        await append_transactional(2)  # 4-5

        committed = only_partition(await send(fetch(READ_COMMITTED)))
        assert committed.last_stable_offset == 1, f"seed={seed}"
        assert offsets_read(committed) == [0]
        assert committed.aborted_transactions == []
        uncommitted = only_partition(await send(fetch(READ_UNCOMMITTED)))
        assert uncommitted.high_watermark == 6
        assert uncommitted.aborted_transactions is None
        assert offsets_read(uncommitted) == [0, 1, 2, 3, 4, 5]

        assert marker_error(await send(markers(commit=False))) is ErrorCode.NONE  # 6
        committed = only_partition(await send(fetch(READ_COMMITTED)))
        assert committed.last_stable_offset == 7, f"seed={seed}"
        # (A fetch returns one segment's data; the marker's later timestamp rolled a segment.)
        assert offsets_read(committed)[:6] == [0, 1, 2, 3, 4, 5]
        [aborted] = committed.aborted_transactions or []
        assert (aborted.producer_id, aborted.first_offset) == (PID, 1)
        marker_batches = [
            header
            for _, header in iter_batches(
                only_partition(await send(fetch(READ_COMMITTED, 6))).records
            )
        ]
        assert [(h.base_offset, h.is_control, h.producer_id) for h in marker_batches] == [
            (6, True, PID)
        ]

        # The new leader built the same transaction state from what it replicated.
        old = cluster.record(TP).leader
        await cluster.drive(cluster.kill(old))
        await cluster.new_leader(TP, old)
        await cluster.run_until(
            lambda: only_partition_lso(cluster) == 7, max_ms=5_000, what="new leader's LSO"
        )
        committed = only_partition(await send(fetch(READ_COMMITTED)))
        [aborted] = committed.aborted_transactions or []
        assert (aborted.producer_id, aborted.first_offset) == (PID, 1), f"seed={seed}"
        # A zombie's marker (an older producer epoch than the partition has seen) is refused.
        assert marker_error(await send(markers(commit=True, epoch=1))) is ErrorCode.NONE
        stale = marker_error(await send(markers(commit=True, epoch=0)))
        assert stale is ErrorCode.INVALID_PRODUCER_EPOCH, f"seed={seed}"
    finally:
        await cluster.drive(client.close())
        await cluster.drive(cluster.stop())


def only_partition_lso(cluster: Cluster) -> int:
    actor = cluster.leader(TP).replica_manager.partition(TP)
    return -1 if actor is None else actor.view.last_stable_offset
