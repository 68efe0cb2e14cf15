"""Exactly-once consume-transform-produce with librdkafka (confluent-kafka) against a ketch
cluster in real processes (issue 19, KIP-98 / KIP-447), the loop of eos_loop.py. A first run
processes the whole input; a second run, over more input, has the transaction coordinator's
broker killed with kill -9 in the middle of a transaction, before its commit; a third the leader
of a partition the transactions write to; in a fourth the application itself is killed with
kill -9 inside its first transaction (records written, offsets sent), and its next instance
takes over (its InitProducerId fences the dead one and aborts that transaction; its consumer
joins once the dead member's session expires). Afterwards the output read with read_committed
holds every input record exactly once, and the group's committed offsets (asked for stable
offsets, as a read_committed consumer does) are the end of the input.

Each run of the loop is a process of its own (eos_app.py): killed by PID at its deadline, and a
failure shows the loop's journal and its librdkafka debug log. The test's own client calls run in
daemon threads awaited with a timeout. Bounded: every wait has a timeout; the processes are
killed by PID whatever happens.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Final

import confluent_kafka
import pytest

from testkit.probes import partitions_of
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import CLUSTER_PROPERTIES
from tests.integration.eos_app import (
    DUMP_S,
    EXIT_S,
    RUN_S,
    WAIT_S,
    LoopSpec,
    in_daemon_thread,
    kill_mid_transaction,
    run_app,
    running_app,
)
from tests.integration.eos_loop import BATCH, GROUP, INPUT, OUTPUT, TRANSACTIONAL_ID, transform
from tests.integration.kafka_drivers import ConfluentDriver
from tests.integration.test_transactions_kafka import coordinator_of, read_all

# Five processes, each bounded by its deadline, and the test's own calls: a failing run is
# reported at its deadline, well before this bound, which only catches what nothing else does.
TEST_TIMEOUT_S: Final = 5 * (RUN_S + DUMP_S + EXIT_S)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(TEST_TIMEOUT_S)]

PARTITIONS: Final = 2
RECORDS_PER_RUN: Final = 40
KILL_AT_TRANSACTION: Final = 2  # of the second run: its coordinator dies before the commit
APP: Final = ["tests.integration.eos_loop"]  # the librdkafka loop's process


def fill_input(bootstrap: str, run: int) -> list[bytes]:
    values = [b"in-%d-%03d" % (run, i) for i in range(RECORDS_PER_RUN)]
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(INPUT, value=value, partition=i % PARTITIONS)
    assert producer.flush(WAIT_S) == 0, "input not acknowledged"
    return values


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


# Bounds on the test's own client calls (each bounded inside by WAIT_S, or by WAIT_S per call).
FILL_S: Final = WAIT_S + EXIT_S
READ_S: Final = 2 * WAIT_S + EXIT_S


async def filled(bootstrap: str, run: int) -> list[bytes]:
    return await in_daemon_thread(lambda: fill_input(bootstrap, run), FILL_S)


async def offsets_and_ends(bootstrap: str) -> tuple[dict[int, int], dict[int, int]]:
    return await in_daemon_thread(lambda: group_offsets(bootstrap), READ_S)


async def output_of(bootstrap: str, expected: int) -> list[bytes]:
    return await in_daemon_thread(lambda: read_output(bootstrap, expected), READ_S)


def spec(
    bootstrap: str, journal: Path, pause_at: int | None = None, *, flush_at_pause: bool = False
) -> LoopSpec:
    """A run over RECORDS_PER_RUN input records, journaled at `journal`."""
    return LoopSpec(bootstrap, RECORDS_PER_RUN, str(journal), pause_at, flush_at_pause)


async def run_with_kill(
    cluster: ProcessCluster,
    app: list[str],
    run: LoopSpec,
    victim_of: Callable[[], Awaitable[int]],
) -> int:
    """A run of the application `app` that, paused at transaction run.pause_at before its
    commit, loses the broker `victim_of()` names to kill -9; the loop goes on through the
    survivors and the broker is restarted once the run is over. The transactions committed."""
    async with running_app(app, run) as running:
        await running.mid_transaction()
        victim = await victim_of()
        await cluster.broker(victim).kill()
        try:
            await running.go_on()
            return await running.result()
        finally:
            await cluster.broker(victim).start()
            await cluster.wait_running([victim], timeout_s=WAIT_S)


async def output_leader(cluster: ProcessCluster) -> int:
    """The leader of the output's partition 0: a partition the transaction writes to."""
    client = cluster.client()
    try:
        found = await partitions_of(client, cluster.addresses.values(), OUTPUT)
        return found[0].leader_id
    finally:
        await client.close()


async def test_consume_transform_produce_exactly_once_across_kills(
    tmp_path: Path,
) -> None:
    async with running_cluster(tmp_path, dict(CLUSTER_PROPERTIES), kafka=True) as cluster:
        await cluster.wait_running(range(3), timeout_s=WAIT_S)
        bootstrap = cluster.kafka_bootstrap()
        driver = ConfluentDriver(bootstrap)
        for topic in (INPUT, OUTPUT):
            await driver.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2"})

        first = await filled(bootstrap, 1)
        committed_first = await run_app(APP, spec(bootstrap, tmp_path / "run-1.journal"))
        assert committed_first >= RECORDS_PER_RUN // BATCH
        offsets, ends = await offsets_and_ends(bootstrap)
        assert offsets == ends, (offsets, ends)

        second = await filled(bootstrap, 2)
        committed_second = await run_with_kill(
            cluster,
            APP,
            spec(bootstrap, tmp_path / "run-2.journal", KILL_AT_TRANSACTION),
            lambda: coordinator_of(cluster, TRANSACTIONAL_ID),
        )
        assert committed_second > KILL_AT_TRANSACTION

        # A third run loses the leader of a partition it writes to, mid-transaction.
        third = await filled(bootstrap, 3)
        committed_third = await run_with_kill(
            cluster,
            APP,
            spec(bootstrap, tmp_path / "run-3.journal", KILL_AT_TRANSACTION),
            lambda: output_leader(cluster),
        )
        assert committed_third > KILL_AT_TRANSACTION

        # A fourth run's application dies inside its first transaction, its records written
        # and its offsets sent; its next instance takes over (its InitProducerId fences the
        # dead one and aborts that transaction; its consumer joins once the dead member's
        # session expires).
        fourth = await filled(bootstrap, 4)
        dying = spec(bootstrap, tmp_path / "run-4-killed.journal", 0, flush_at_pause=True)
        await kill_mid_transaction(APP, dying)
        committed_fourth = await run_app(APP, spec(bootstrap, tmp_path / "run-4.journal"))
        assert committed_fourth >= RECORDS_PER_RUN // BATCH

        inputs = first + second + third + fourth
        output = await output_of(bootstrap, len(inputs))
        offsets, ends = await offsets_and_ends(bootstrap)
    assert output == sorted(transform(value) for value in inputs), "every input exactly once"
    assert offsets == ends, (offsets, ends)
    assert sum(ends.values()) == len(inputs)
