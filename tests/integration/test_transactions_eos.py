"""Exactly-once consume-transform-produce with librdkafka (confluent-kafka) against a ketch
cluster in real processes (issue 19, KIP-98 / KIP-447): a consumer in group "eos" reads the input
with read_committed, and a transactional producer writes each batch's transformed records and
sends the consumer's positions with `send_offsets_to_transaction` (AddOffsetsToTxn, then
TxnOffsetCommit to the group coordinator) before committing. A first run processes the whole
input; a second run, over more input, has the transaction coordinator's broker killed with
kill -9 in the middle of a transaction, before its commit; a third the leader of a partition the
transactions write to. Afterwards the output read with
read_committed holds every input record exactly once, and the group's committed offsets (asked
for stable offsets, as a read_committed consumer does) are the end of the input.

Bounded: every wait has a timeout; the processes are killed by PID whatever happens.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import confluent_kafka
import pytest

from testkit.probes import partitions_of
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import CLUSTER_PROPERTIES
from tests.integration.kafka_drivers import ConfluentDriver
from tests.integration.test_transactions_kafka import coordinator_of, read_all

pytestmark = pytest.mark.slow

INPUT: Final = "eos-in"
OUTPUT: Final = "eos-out"
PARTITIONS: Final = 2
GROUP: Final = "eos"
TRANSACTIONAL_ID: Final = "eos-app"
RECORDS_PER_RUN: Final = 40
BATCH: Final = 8  # records per transaction, at most
KILL_AT_TRANSACTION: Final = 2  # of the second run: its coordinator dies before the commit
WAIT_S: Final = 30.0
RUN_S: Final = 120.0  # one run's bound, failover included


def fill_input(bootstrap: str, run: int) -> list[bytes]:
    values = [b"in-%d-%03d" % (run, i) for i in range(RECORDS_PER_RUN)]
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(INPUT, value=value, partition=i % PARTITIONS)
    assert producer.flush(WAIT_S) == 0, "input not acknowledged"
    return values


def transform(value: bytes) -> bytes:
    return b"out:" + value


class Pause:
    """The loop stops inside one transaction (records written, offsets sent, not committed)
    until the test has done what it must (kill the coordinator)."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.reached = threading.Event()
        self.go_on = threading.Event()

    def __call__(self, transaction: int) -> None:
        if transaction != self.at:
            return
        self.reached.set()
        assert self.go_on.wait(WAIT_S), "the test never let the loop go on"


def rewind(consumer: Any) -> None:
    """After an aborted transaction: back to the group's committed offsets."""
    for tp in consumer.committed(consumer.assignment(), timeout=WAIT_S):
        if tp.offset >= 0:
            consumer.seek(tp)
        else:
            consumer.seek(confluent_kafka.TopicPartition(tp.topic, tp.partition, 0))


def commit(producer: Any, consumer: Any) -> bool:
    """Commit the open transaction, retrying what librdkafka calls retriable (a coordinator
    moving); an abortable error aborts it and rewinds the consumer. Whether it committed."""
    for _ in range(5):
        try:
            producer.commit_transaction(WAIT_S)
            return True
        except confluent_kafka.KafkaException as exc:
            error = exc.args[0]
            if error.retriable():
                continue
            if error.txn_requires_abort():
                producer.abort_transaction(WAIT_S)
                rewind(consumer)
                return False
            raise
    raise AssertionError("the commit never succeeded")


def consume_transform_produce(
    bootstrap: str, expected: int, between: Callable[[int], None] = lambda _: None
) -> int:
    """The loop, until `expected` input records were committed (bounded); the number of
    transactions committed. `between(i)` runs in transaction i before its commit."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": TRANSACTIONAL_ID}
    )
    try:
        producer.init_transactions(WAIT_S)
        consumer.subscribe([INPUT])
        done = transactions = 0
        deadline = time.monotonic() + RUN_S
        while done < expected:
            assert time.monotonic() < deadline, f"only {done} of {expected} records processed"
            messages = [
                m for m in consumer.consume(num_messages=BATCH, timeout=0.5) if m.error() is None
            ]
            if not messages:
                continue
            producer.begin_transaction()
            for message in messages:
                value, partition = message.value(), message.partition()
                assert value is not None, message
                assert partition is not None, message
                producer.produce(OUTPUT, value=transform(value), partition=partition)
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()),
                consumer.consumer_group_metadata(),
                WAIT_S,
            )
            between(transactions)
            if commit(producer, consumer):
                done += len(messages)
                transactions += 1
        return transactions
    finally:
        consumer.close()


def read_output(bootstrap: str, expected: int) -> list[bytes]:
    """Every committed output record, waiting (bounded) for `expected` and a little longer for
    any more."""
    return read_all(bootstrap, "read_committed", expected, OUTPUT, PARTITIONS)


def group_offsets(bootstrap: str) -> tuple[dict[int, int], dict[int, int]]:
    """The group's committed offsets of the input (asked for stable offsets: a read_committed
    consumer's OffsetFetch) and the input's end offsets."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        wanted = [confluent_kafka.TopicPartition(INPUT, p) for p in range(PARTITIONS)]
        committed = {tp.partition: tp.offset for tp in consumer.committed(wanted, WAIT_S)}
        ends = {
            p: consumer.get_watermark_offsets(
                confluent_kafka.TopicPartition(INPUT, p), timeout=WAIT_S
            )[1]
            for p in range(PARTITIONS)
        }
        return committed, ends
    finally:
        consumer.close()


async def run_with_kill(
    cluster: ProcessCluster,
    bootstrap: str,
    expected: int,
    victim_of: Callable[[], Awaitable[int]],
) -> int:
    """A run that, at transaction KILL_AT_TRANSACTION, before its commit, kill -9s the broker
    `victim_of()` names, then restarts it once the run is over; the loop goes on through the
    survivors. Returns the transactions committed."""
    pause = Pause(KILL_AT_TRANSACTION)
    victim = -1
    loop = asyncio.create_task(
        asyncio.to_thread(consume_transform_produce, bootstrap, expected, pause)
    )
    try:
        reached = await asyncio.to_thread(pause.reached.wait, RUN_S)
        assert reached, "the loop never reached the transaction to interrupt"
        victim = await victim_of()
        await cluster.broker(victim).kill()
    finally:
        pause.go_on.set()  # the loop goes on whatever happened here
    committed = await loop
    if victim >= 0:
        await cluster.broker(victim).start()
        await cluster.wait_running([victim], timeout_s=WAIT_S)
    return committed


async def output_leader(cluster: ProcessCluster) -> int:
    """The leader of the output's partition 0: a partition the transaction writes to."""
    client = cluster.client()
    try:
        found = await partitions_of(client, cluster.addresses.values(), OUTPUT)
        return found[0].leader_id
    finally:
        await client.close()


async def test_consume_transform_produce_exactly_once_across_a_coordinator_kill(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path, dict(CLUSTER_PROPERTIES), kafka=True) as cluster:
        await cluster.wait_running(range(3), timeout_s=WAIT_S)
        bootstrap = cluster.kafka_bootstrap()
        driver = ConfluentDriver(bootstrap)
        for topic in (INPUT, OUTPUT):
            await driver.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})

        first = await asyncio.to_thread(fill_input, bootstrap, 1)
        committed_first = await asyncio.to_thread(
            consume_transform_produce, bootstrap, RECORDS_PER_RUN
        )
        assert committed_first >= RECORDS_PER_RUN // BATCH
        offsets, ends = await asyncio.to_thread(group_offsets, bootstrap)
        assert offsets == ends, (offsets, ends)

        second = await asyncio.to_thread(fill_input, bootstrap, 2)
        committed_second = await run_with_kill(
            cluster, bootstrap, RECORDS_PER_RUN, lambda: coordinator_of(cluster, TRANSACTIONAL_ID)
        )
        assert committed_second > KILL_AT_TRANSACTION

        # A third run loses the leader of a partition it writes to, mid-transaction.
        third = await asyncio.to_thread(fill_input, bootstrap, 3)
        committed_third = await run_with_kill(
            cluster, bootstrap, RECORDS_PER_RUN, lambda: output_leader(cluster)
        )
        assert committed_third > KILL_AT_TRANSACTION

        inputs = first + second + third
        output = await asyncio.to_thread(read_output, bootstrap, len(inputs))
        offsets, ends = await asyncio.to_thread(group_offsets, bootstrap)
    assert output == sorted(transform(value) for value in inputs), "every input exactly once"
    assert offsets == ends, (offsets, ends)
    assert sum(ends.values()) == len(inputs)
