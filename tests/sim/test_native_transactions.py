"""ketch's own client runs transactions over the native listener (issue 19), on a 3-broker
in-process cluster (seeded MemoryNetwork, ManualClock).

A transactional `Producer` commits (its records become visible to a read_committed `Consumer`
once the markers are written, and not before), aborts (invisible to read_committed, visible to
read_uncommitted), is fenced by a second instance with its transactional id (whose
init_transactions aborts the first one's open transaction), survives the death of its
transaction coordinator mid-transaction and while the coordinator writes its commit decision
(every record exactly once in the output), and commits a group's offsets with
`send_offsets_to_transaction` (visible through OffsetFetch only after the commit, dropped by an
abort). Everything goes through the native listener, which serves FindCoordinator (group and
transaction keys), InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn
and read_committed fetches from the brokers' one API table.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path

import pytest

from client.client import Client
from client.config import ClientConfig, ConsumerConfig, ProducerConfig
from client.consumer import Consumer
from client.errors import ProducerFencedError, TransactionAbortableError
from client.producer import Producer
from client.transactions import TransactionState, find_coordinator
from testkit.cluster import Cluster
from wire.errors import ErrorCode
from wire.messages import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)
from wire.messages.groups import COORDINATOR_GROUP, COORDINATOR_TRANSACTION
from wire.topic import TopicPartition
from wire.transaction_log import TransactionState as TxnLogState

OUT = "out"
OUT_PARTITIONS = [TopicPartition(OUT, p) for p in range(3)]
PROPERTIES: dict[str, object] = {
    "min.insync.replicas": 2,
    "broker.session.timeout.ms": 1_000,
    "broker.heartbeat.interval.ms": 100,
    "replica.fetch.wait.max.ms": 20,
    "replica.fetch.backoff.ms": 20,
    "request.timeout.ms": 1_000,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 50,
    # Few coordinator partitions: each is a shard to load.
    "transaction.state.log.num.partitions": 3,
    "offsets.topic.num.partitions": 3,
}
CLIENT = ClientConfig(
    request_timeout_ms=1_000,
    reconnect_backoff_ms=10,
    reconnect_backoff_max_ms=50,
    retry_backoff_ms=20,
    retry_backoff_max_ms=200,
    delivery_timeout_ms=20_000,
)
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"


@contextlib.asynccontextmanager
async def running(tmp_path: Path, seed: int, *topics: tuple[str, int]) -> AsyncIterator[Cluster]:
    """Three brokers with topic `out` (3 partitions) and `topics`, all RF 3."""
    cluster = Cluster.in_memory(tmp_path, 3, seed=seed, properties=PROPERTIES)
    await cluster.drive(cluster.start())
    try:
        for topic, partitions in ((OUT, 3), *topics):
            await cluster.drive(cluster.create_topic(topic, partitions, replication_factor=3))
        yield cluster
    finally:
        await cluster.drive(cluster.stop())


def client(cluster: Cluster, name: str) -> Client:
    assert cluster.network is not None
    return Client(
        cluster.addresses,
        transport=cluster.network.transport(name),
        clock=cluster.clock,
        config=CLIENT,
        seed=cluster.seed,
    )


def transactional(cluster: Cluster, transactional_id: str, name: str) -> Producer:
    config = ProducerConfig(
        transactional_id=transactional_id,
        linger_ms=0,
        request_timeout_ms=1_000,
        delivery_timeout_ms=20_000,
        retry_backoff_ms=20,
        retry_backoff_max_ms=200,
        partitioner_seed=cluster.seed,
    )
    return Producer(client(cluster, name), config=config, owns_client=True)


def _leader_view(cluster: Cluster, tp: TopicPartition) -> tuple[int, int, int]:
    """(last stable offset, high watermark, log end offset) on the partition's leader."""
    actor = cluster.leader(tp).replica_manager.partition(tp)
    assert actor is not None, tp
    view = actor.view
    return (
        view.last_stable_offset,
        view.high_watermark.message_offset,
        view.log_end_offset.message_offset,
    )


async def settled(
    cluster: Cluster, partitions: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """Wait until no transaction is open on `partitions` and everything is replicated; returns
    each one's end offset."""
    wanted = list(partitions)

    def stable() -> bool:
        if not all(cluster.serving(tp) for tp in wanted):
            return False
        views = [_leader_view(cluster, tp) for tp in wanted]
        return all(lso == hw == leo for lso, hw, leo in views)

    await cluster.run_until(
        stable, max_ms=10_000, what=f"no open transaction (seed={cluster.seed})"
    )
    return {tp: _leader_view(cluster, tp)[2] for tp in wanted}


async def read_values(
    cluster: Cluster, isolation_level: str, partitions: Sequence[TopicPartition], name: str
) -> list[bytes]:
    """Every value of `partitions` a consumer with `isolation_level` reads up to their end
    offsets (once no transaction is open on them), in partition order."""
    ends = await settled(cluster, partitions)
    consumer = Consumer(
        client(cluster, name),
        config=ConsumerConfig(
            auto_offset_reset="earliest",
            isolation_level=isolation_level,
            fetch_max_wait_ms=50,
            request_timeout_ms=1_000,
            retry_backoff_ms=20,
        ),
        owns_client=True,
    )
    consumer.assign(partitions)
    by_partition: dict[TopicPartition, list[bytes]] = {tp: [] for tp in partitions}
    try:
        for _ in range(200):
            positions = {tp: await cluster.drive(consumer.position(tp)) for tp in partitions}
            if all(positions[tp] >= ends[tp] for tp in partitions):
                break
            for record in await cluster.drive(consumer.poll(timeout_ms=100)):
                assert record.value is not None
                by_partition[TopicPartition(record.topic, record.partition)].append(record.value)
        else:
            raise AssertionError(f"{name} did not reach {ends} (seed={cluster.seed})")
    finally:
        await cluster.drive(consumer.close())
    return [value for tp in partitions for value in by_partition[tp]]


async def end_offsets(
    cluster: Cluster, isolation_level: str, name: str
) -> dict[TopicPartition, int]:
    """The output's end offsets as a consumer with `isolation_level` asks for them."""
    consumer = Consumer(
        client(cluster, name),
        config=ConsumerConfig(isolation_level=isolation_level, request_timeout_ms=1_000),
        owns_client=True,
    )
    try:
        return await cluster.drive(consumer.end_offsets(OUT_PARTITIONS))
    finally:
        await cluster.drive(consumer.close())


async def send_all(producer: Producer, cluster: Cluster, values: Iterable[bytes]) -> None:
    """Send `values` (keyed by themselves, so they spread over the partitions) and wait for
    every acknowledgement."""
    futures = [await cluster.drive(producer.send(OUT, value, value)) for value in values]
    await cluster.drive(producer.flush())
    for future in futures:
        assert future.exception() is None, (future.exception(), f"seed={cluster.seed}")


def values(prefix: str, count: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(count)]


# -- commit and abort ------------------------------------------------------------------------------


async def test_a_commit_is_visible_to_read_committed_only_once_committed(tmp_path: Path) -> None:
    seed = 98
    async with running(tmp_path, seed) as cluster:
        producer = transactional(cluster, "committer", "producer")
        try:
            await cluster.drive(producer.init_transactions())
            producer.begin_transaction()
            await send_all(producer, cluster, values("c", 12))
            # Open: read_committed stops at the transaction's first offsets; the records are
            # in the log (read_uncommitted sees them).
            views = [_leader_view(cluster, tp) for tp in OUT_PARTITIONS]
            assert any(lso < hw for lso, hw, _ in views), (views, f"seed={seed}")
            assert all(lso == 0 for lso, _, _ in views), (views, f"seed={seed}")
            # A read_committed consumer's end offsets are the LSOs, read_uncommitted's the HWs.
            hws = {tp: hw for tp, (_, hw, _) in zip(OUT_PARTITIONS, views, strict=True)}
            assert await end_offsets(cluster, READ_COMMITTED, "rc-ends") == dict.fromkeys(hws, 0)
            assert await end_offsets(cluster, READ_UNCOMMITTED, "ru-ends") == hws
            await cluster.drive(producer.commit_transaction())
            assert producer.transactions is not None
            assert producer.transactions.state is TransactionState.READY
        finally:
            await cluster.drive(producer.close())
        committed = await read_values(cluster, READ_COMMITTED, OUT_PARTITIONS, "rc")
        assert sorted(committed) == sorted(values("c", 12)), f"seed={seed}"


async def test_an_abort_is_invisible_to_read_committed_and_visible_to_read_uncommitted(
    tmp_path: Path,
) -> None:
    seed = 99
    async with running(tmp_path, seed) as cluster:
        producer = transactional(cluster, "aborter", "producer")
        try:
            await cluster.drive(producer.init_transactions())
            producer.begin_transaction()
            await send_all(producer, cluster, values("aborted", 9))
            await cluster.drive(producer.abort_transaction())
            # The producer goes on: the next transaction commits.
            producer.begin_transaction()
            await send_all(producer, cluster, values("kept", 6))
            await cluster.drive(producer.commit_transaction())
        finally:
            await cluster.drive(producer.close())
        committed = await read_values(cluster, READ_COMMITTED, OUT_PARTITIONS, "rc")
        assert sorted(committed) == sorted(values("kept", 6)), f"seed={seed}"
        everything = await read_values(cluster, READ_UNCOMMITTED, OUT_PARTITIONS, "ru")
        assert sorted(everything) == sorted(values("aborted", 9) + values("kept", 6))


# -- fencing ---------------------------------------------------------------------------------------


async def test_a_second_instance_fences_the_first_and_aborts_its_transaction(
    tmp_path: Path,
) -> None:
    seed = 100
    async with running(tmp_path, seed) as cluster:
        zombie = transactional(cluster, "fenced", "zombie")
        successor = transactional(cluster, "fenced", "successor")
        try:
            await cluster.drive(zombie.init_transactions())
            zombie.begin_transaction()
            await send_all(zombie, cluster, values("zombie", 6))
            # The same transactional id again: the coordinator bumps the epoch and aborts the
            # open transaction before it answers.
            await cluster.drive(successor.init_transactions())
            with pytest.raises(ProducerFencedError):
                await cluster.drive(zombie.commit_transaction())
            assert zombie.transactions is not None
            assert zombie.transactions.state is TransactionState.FATAL_ERROR
            # Every later call fails with the same error.
            with pytest.raises(ProducerFencedError):
                zombie.begin_transaction()
            with pytest.raises(ProducerFencedError):
                await cluster.drive(zombie.send(OUT, b"late", b"late"))
            with pytest.raises(ProducerFencedError):
                await cluster.drive(zombie.abort_transaction())
            successor.begin_transaction()
            await send_all(successor, cluster, values("successor", 4))
            await cluster.drive(successor.commit_transaction())
        finally:
            await cluster.drive(zombie.close())
            await cluster.drive(successor.close())
        committed = await read_values(cluster, READ_COMMITTED, OUT_PARTITIONS, "rc")
        assert sorted(committed) == sorted(values("successor", 4)), f"seed={seed}"
        everything = await read_values(cluster, READ_UNCOMMITTED, OUT_PARTITIONS, "ru")
        assert sorted(everything) == sorted(values("zombie", 6) + values("successor", 4))


# -- the coordinator dies --------------------------------------------------------------------------


async def test_every_record_once_after_the_coordinator_dies_mid_transaction(
    tmp_path: Path,
) -> None:
    seed = 101
    extra = TopicPartition("late", 0)
    async with running(tmp_path, seed, ("late", 1)) as cluster:
        producer = transactional(cluster, "survivor", "producer")
        admin = client(cluster, "admin")
        expected = values("before", 10) + values("after", 10) + values("late", 3)
        try:
            await cluster.drive(producer.init_transactions())
            coordinator = await cluster.drive(
                find_coordinator(admin, COORDINATOR_TRANSACTION, "survivor", timeout_ms=1_000)
            )
            producer.begin_transaction()
            await send_all(producer, cluster, values("before", 10))
            await cluster.drive(cluster.kill(coordinator.node_id))
            aborts = 0
            for _ in range(3):
                try:
                    if aborts:  # the client had to abort: the whole transaction again
                        producer.begin_transaction()
                        await send_all(producer, cluster, values("before", 10))
                    await send_all(producer, cluster, values("after", 10))
                    # A partition new to the transaction: AddPartitionsToTxn after the death.
                    for value in values("late", 3):
                        await cluster.drive(producer.send(extra.topic, None, value))
                    await cluster.drive(producer.commit_transaction(), max_ms=30_000)
                    break
                except TransactionAbortableError:
                    aborts += 1
                    await cluster.drive(producer.abort_transaction(), max_ms=30_000)
            else:
                raise AssertionError(f"no commit after {aborts} aborts (seed={seed})")
            successor = await cluster.drive(
                find_coordinator(admin, COORDINATOR_TRANSACTION, "survivor", timeout_ms=1_000)
            )
            assert successor.node_id != coordinator.node_id, f"seed={seed}"
        finally:
            await cluster.drive(admin.close())
            await cluster.drive(producer.close())
        output = await read_values(cluster, READ_COMMITTED, [*OUT_PARTITIONS, extra], "rc")
        assert sorted(output) == sorted(expected), (aborts, f"seed={seed}")


async def test_every_record_once_when_the_coordinator_dies_during_the_commit(
    tmp_path: Path,
) -> None:
    seed = 103
    async with running(tmp_path, seed) as cluster:
        producer = transactional(cluster, "decider", "producer")
        admin = client(cluster, "admin")
        try:
            await cluster.drive(producer.init_transactions())
            coordinator = await cluster.drive(
                find_coordinator(admin, COORDINATOR_TRANSACTION, "decider", timeout_ms=1_000)
            )
            producer.begin_transaction()
            await send_all(producer, cluster, values("decided", 12))
            commit = asyncio.ensure_future(producer.commit_transaction())
            # The coordinator dies while it writes PrepareCommit, before it answers: the next
            # coordinator finds the transaction Ongoing or PrepareCommit (then it writes the
            # markers itself), and the client's EndTxn retry commits or learns it committed.
            await cluster.run_until(
                lambda: (
                    pending_state(cluster, coordinator.node_id, "decider")
                    is TxnLogState.PREPARE_COMMIT
                ),
                max_ms=5_000,
                what="PrepareCommit being written",
            )
            await cluster.drive(cluster.kill(coordinator.node_id))
            await cluster.drive(commit, max_ms=30_000)
        finally:
            await cluster.drive(admin.close())
            await cluster.drive(producer.close())
        output = await read_values(cluster, READ_COMMITTED, OUT_PARTITIONS, "rc")
        assert sorted(output) == sorted(values("decided", 12)), f"seed={seed}"


def pending_state(cluster: Cluster, broker_id: int, transactional_id: str) -> TxnLogState | None:
    """The state the coordinator on `broker_id` is writing for the id (None: none)."""
    coordinator = cluster.node(broker_id).txn_coordinator
    shard = coordinator.shards.get(coordinator.partition_of(transactional_id))
    metadata = None if shard is None else shard.txns.get(transactional_id)
    pending = None if metadata is None else metadata.pending
    return None if pending is None else pending.state


# -- consumer offsets in the transaction -----------------------------------------------------------


async def test_offsets_sent_to_the_transaction_are_committed_with_it(tmp_path: Path) -> None:
    seed = 102
    source = TopicPartition("in", 0)
    async with running(tmp_path, seed, ("in", 1)) as cluster:
        producer = transactional(cluster, "processor", "producer")
        admin = client(cluster, "admin")
        try:
            await cluster.drive(producer.init_transactions())
            producer.begin_transaction()
            await send_all(producer, cluster, values("processed", 3))
            await cluster.drive(producer.send_offsets_to_transaction({source: 3}, GROUP))
            # Pending: not committed yet, and unstable for a read_committed reader.
            assert await offset_fetch(cluster, admin, source, stable=False) == (ErrorCode.NONE, -1)
            unstable = await offset_fetch(cluster, admin, source, stable=True)
            assert unstable == (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1), f"seed={seed}"
            await cluster.drive(producer.commit_transaction())
            # Committed once the COMMIT marker reaches the group's offsets partition.
            for _ in range(100):
                if await offset_fetch(cluster, admin, source, stable=True) == (ErrorCode.NONE, 3):
                    break
                await cluster.run_for(20)
            else:
                raise AssertionError(f"the offset was not committed (seed={seed})")
            # An aborted transaction's offsets are dropped.
            producer.begin_transaction()
            await send_all(producer, cluster, values("dropped", 2))
            await cluster.drive(producer.send_offsets_to_transaction({source: 5}, GROUP))
            await cluster.drive(producer.abort_transaction())
            await settled(cluster, OUT_PARTITIONS)
            stable = await offset_fetch(cluster, admin, source, stable=True)
            assert stable == (ErrorCode.NONE, 3), f"seed={seed}"
        finally:
            await cluster.drive(admin.close())
            await cluster.drive(producer.close())


GROUP = "readers"


async def offset_fetch(
    cluster: Cluster, admin: Client, tp: TopicPartition, *, stable: bool
) -> tuple[ErrorCode, int]:
    """OffsetFetch of `tp` for the group at its coordinator: (partition error, offset)."""

    async def attempt() -> OffsetFetchResponse:
        coordinator = await find_coordinator(admin, COORDINATOR_GROUP, GROUP, timeout_ms=1_000)
        request = OffsetFetchRequest(
            group_id=GROUP,
            topics=[OffsetFetchRequestTopic(name=tp.topic, partition_indexes=[tp.partition])],
            require_stable=stable,
        )
        return await admin.send_expect(coordinator.address, request, OffsetFetchResponse)

    response = await cluster.drive(admin.call(attempt, what="OffsetFetch"))
    [topic] = response.topics
    [partition] = topic.partitions
    return ErrorCode.from_code(partition.error_code), partition.committed_offset
