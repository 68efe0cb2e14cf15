"""Transactions with librdkafka (confluent-kafka), aiokafka and kafka-python against a ketch
cluster in real processes (issue 19): a transactional producer at its default settings commits
and aborts; read_committed consumers see exactly the committed records and read_uncommitted ones
everything; a second producer with the same transactional.id fences the first; and a
transaction whose coordinator's broker is killed with kill -9 before the commit is committed by
the next coordinator, its records visible once.

The admin side (KIP-664): a transaction the producer leaves open shows as Ongoing in
ListTransactions and DescribeTransactions, and in DescribeProducers of its partition with its
first offset; asked through kafka-python's admin client, because confluent-kafka's has no
transaction admin calls in this version.

Consumer offsets in a transaction (a consume-transform-produce loop) are tested in
test_transactions_eos.py.

Bounded: every wait has a timeout; the processes are killed by PID whatever happens.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, Final

import aiokafka  # type: ignore[import-untyped]
import confluent_kafka
import kafka
import pytest

from testkit.probes import wait_until
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import PROPERTIES
from tests.integration.kafka_drivers import ConfluentDriver
from wire.messages import FindCoordinatorRequest, FindCoordinatorResponse
from wire.messages.groups import COORDINATOR_TRANSACTION

pytestmark = pytest.mark.slow

TOPIC: Final = "txn-out"
PARTITIONS: Final = 2
WAIT_S: Final = 30.0


def producer(bootstrap: str, transactional_id: str) -> Any:
    # librdkafka's defaults otherwise: what a user of transactions gets.
    return confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": transactional_id}
    )


def read_all(
    bootstrap: str, isolation: str, expected: int, topic: str = TOPIC, partitions: int = PARTITIONS
) -> list[bytes]:
    """Every record of `topic` from the start, waiting (bounded) for `expected` of them, and
    a little longer for any more (a duplicate would show then)."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{isolation}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
        got: list[bytes] = []
        deadline = time.monotonic() + WAIT_S
        settle: float | None = None
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                value = message.value()
                assert value is not None, message
                got.append(value)
            if len(got) >= expected:
                settle = settle or time.monotonic() + 1.0  # anything beyond would show here
                if time.monotonic() > settle:
                    break
        return sorted(got)
    finally:
        consumer.close()


async def coordinator_of(cluster: ProcessCluster, transactional_id: str) -> int:
    client = cluster.client()
    try:
        for _ in range(100):
            address = next(iter(cluster.addresses.values()))
            response = await client.send(
                address,
                FindCoordinatorRequest(
                    key_type=COORDINATOR_TRANSACTION, coordinator_keys=[transactional_id]
                ),
            )
            assert isinstance(response, FindCoordinatorResponse), response
            [found] = response.coordinators
            if found.error_code == 0:
                return found.node_id
            await asyncio.sleep(0.1)
        raise AssertionError(f"no coordinator for {transactional_id}")
    finally:
        await client.close()


async def test_commit_abort_isolation_and_fencing(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, dict(PROPERTIES), kafka=True) as cluster:
        bootstrap = cluster.kafka_bootstrap()
        await ConfluentDriver(bootstrap).create_topic(
            TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"}
        )

        def run() -> tuple[list[bytes], list[bytes], str]:
            first = producer(bootstrap, "payments")
            first.init_transactions(WAIT_S)
            first.begin_transaction()
            for i in range(4):
                first.produce(TOPIC, value=b"committed-%d" % i, partition=i % PARTITIONS)
            first.commit_transaction(WAIT_S)
            first.begin_transaction()
            for i in range(3):
                first.produce(TOPIC, value=b"aborted-%d" % i, partition=i % PARTITIONS)
            first.flush(WAIT_S)  # written to the partitions, then aborted
            first.abort_transaction(WAIT_S)
            # A second producer with the same id fences the first (a zombie).
            second = producer(bootstrap, "payments")
            second.init_transactions(WAIT_S)
            fenced = ""
            try:
                first.begin_transaction()
                first.produce(TOPIC, value=b"zombie", partition=0)
                first.commit_transaction(WAIT_S)
            except confluent_kafka.KafkaException as exc:
                fenced = exc.args[0].name()
            second.begin_transaction()
            second.produce(TOPIC, value=b"committed-last", partition=0)
            second.commit_transaction(WAIT_S)
            committed = read_all(bootstrap, "read_committed", 5)
            uncommitted = read_all(bootstrap, "read_uncommitted", 8)
            return committed, uncommitted, fenced

        committed, uncommitted, fenced = await asyncio.to_thread(run)
    assert committed == sorted([b"committed-%d" % i for i in range(4)] + [b"committed-last"])
    assert uncommitted == sorted(committed + [b"aborted-%d" % i for i in range(3)])
    assert fenced in ("_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), fenced


async def test_a_transaction_survives_its_coordinators_kill_9(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, dict(PROPERTIES), kafka=True) as cluster:
        bootstrap = cluster.kafka_bootstrap()
        await ConfluentDriver(bootstrap).create_topic(
            TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"}
        )
        txn = producer(bootstrap, "survivor")
        await asyncio.to_thread(txn.init_transactions, WAIT_S)

        def begin_and_write() -> None:
            txn.begin_transaction()
            for i in range(5):
                txn.produce(TOPIC, value=b"survived-%d" % i, partition=i % PARTITIONS)
            txn.flush(WAIT_S)

        await asyncio.to_thread(begin_and_write)
        victim = await coordinator_of(cluster, "survivor")
        await cluster.broker(victim).kill()
        # The commit finds the next coordinator, which loaded the ongoing transaction.
        await asyncio.to_thread(txn.commit_transaction, WAIT_S)
        await cluster.broker(victim).start()
        await cluster.wait_running([victim], timeout_s=WAIT_S)

        async def new_coordinator() -> bool:
            return await coordinator_of(cluster, "survivor") >= 0

        await wait_until(new_coordinator, "a coordinator", timeout_s=WAIT_S)
        committed = await asyncio.to_thread(read_all, bootstrap, "read_committed", 5)
    assert committed == sorted(b"survived-%d" % i for i in range(5))


async def test_aiokafka_and_kafka_python_transactions(tmp_path: Path) -> None:
    """The two Python clients' transactional producers commit and abort; an aiokafka
    read_committed consumer sees exactly the committed records."""
    async with running_cluster(tmp_path, dict(PROPERTIES), kafka=True) as cluster:
        bootstrap = cluster.kafka_bootstrap()
        await ConfluentDriver(bootstrap).create_topic(
            TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"}
        )
        aio = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="aio")
        await aio.start()
        try:
            async with aio.transaction():
                for i in range(3):
                    await aio.send(TOPIC, b"aio-committed-%d" % i, partition=i % PARTITIONS)
            await aio.begin_transaction()
            for i in range(2):
                await aio.send_and_wait(TOPIC, b"aio-aborted-%d" % i, partition=0)
            await aio.abort_transaction()
        finally:
            await aio.stop()

        def kafka_python() -> None:
            producer = kafka.KafkaProducer(
                bootstrap_servers=bootstrap.split(","), transactional_id="kafka-python"
            )
            try:
                producer.init_transactions()
                producer.begin_transaction()
                for i in range(3):
                    producer.send(TOPIC, b"kp-committed-%d" % i, partition=i % PARTITIONS)
                producer.commit_transaction()
                producer.begin_transaction()
                producer.send(TOPIC, b"kp-aborted", partition=1).get(WAIT_S)
                producer.abort_transaction()
            finally:
                producer.close()

        await asyncio.to_thread(kafka_python)
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=bootstrap, isolation_level="read_committed"
        )
        await consumer.start()
        try:
            partitions = [aiokafka.TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            got: list[bytes] = []
            deadline = time.monotonic() + WAIT_S
            while time.monotonic() < deadline and len(got) < 6:
                batches = await consumer.getmany(timeout_ms=200)
                got += [m.value for messages in batches.values() for m in messages if m.value]
            # Anything beyond the committed six would arrive within a few more polls.
            for _ in range(5):
                batches = await consumer.getmany(timeout_ms=200)
                got += [m.value for messages in batches.values() for m in messages if m.value]
        finally:
            await consumer.stop()
    expected = [b"aio-committed-%d" % i for i in range(3)] + [
        b"kp-committed-%d" % i for i in range(3)
    ]
    assert sorted(got) == sorted(expected)


def listed_transactions(admin: Any, **filters: Any) -> dict[str, str]:
    """Every broker's ListTransactions, id -> state name; retried (bounded) while a broker
    still loads a `__transaction_state` partition (COORDINATOR_LOAD_IN_PROGRESS)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            by_broker = admin.list_transactions(**filters)
        except kafka.errors.CoordinatorLoadInProgressError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
            continue
        return {t.transactional_id: t.state.value for found in by_broker.values() for t in found}


async def test_admin_clients_see_an_open_transaction_and_its_producer(tmp_path: Path) -> None:
    async with running_cluster(tmp_path, dict(PROPERTIES), kafka=True) as cluster:
        bootstrap = cluster.kafka_bootstrap()
        await ConfluentDriver(bootstrap).create_topic(
            TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"}
        )
        txn = producer(bootstrap, "left-open")
        written = kafka.TopicPartition(TOPIC, 1)

        def observe() -> dict[str, Any]:
            admin = kafka.admin.KafkaAdminClient(
                bootstrap_servers=bootstrap.split(","), request_timeout_ms=5_000
            )
            try:
                [producer_state] = admin.describe_producers([written])[written].active_producers
                return {
                    "listed": listed_transactions(admin),
                    "ongoing": listed_transactions(admin, state_filters=["Ongoing"]),
                    "running": listed_transactions(admin, duration_filter_ms=0),
                    "described": admin.describe_transactions(["left-open"])["left-open"],
                    "producer": producer_state,
                }
            finally:
                admin.close()

        def open_a_transaction() -> dict[str, Any]:
            txn.init_transactions(WAIT_S)
            txn.begin_transaction()
            for i in range(3):
                txn.produce(TOPIC, value=b"open-%d" % i, partition=written.partition)
            txn.flush(WAIT_S)  # written to the partition, the transaction left open
            return observe()

        def commit() -> dict[str, Any]:
            txn.commit_transaction(WAIT_S)
            # EndTxn is answered once PrepareCommit is written; the markers and CompleteCommit
            # follow.
            deadline = time.monotonic() + WAIT_S
            while (seen := observe())["listed"]["left-open"] != "CompleteCommit":
                assert time.monotonic() < deadline, seen
                time.sleep(0.1)
            return seen

        before = await asyncio.to_thread(open_a_transaction)
        after = await asyncio.to_thread(commit)

    described = before["described"]
    assert before["listed"]["left-open"] == "Ongoing"
    assert "left-open" in before["ongoing"]
    assert "left-open" in before["running"], "open for more than 0 ms"
    assert (described.state.value, described.topic_partitions) == ("Ongoing", {written})
    assert described.transaction_start_time_ms > 0
    assert described.producer_epoch >= 0
    assert (before["producer"].producer_id, before["producer"].producer_epoch) == (
        described.producer_id,
        described.producer_epoch,
    )
    assert before["producer"].current_transaction_start_offset == 0  # the partition's first
    assert before["producer"].last_sequence == 2

    assert after["listed"]["left-open"] == "CompleteCommit"
    assert "left-open" not in after["ongoing"]
    assert after["described"].state.value == "CompleteCommit"
    assert after["producer"].current_transaction_start_offset == -1
    assert after["producer"].producer_id == described.producer_id
