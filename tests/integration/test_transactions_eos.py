"""Exactly-once consume-transform-produce with librdkafka (confluent-kafka) against a ketch
cluster in real processes (issue 19, KIP-98 / KIP-447), the loop of eos_loop.py. A first run
processes the whole input; a second run, over more input, has the transaction coordinator's
broker killed with kill -9 in the middle of a transaction, before its commit; a third the leader
of a partition the transactions write to; in a fourth the application itself, a process of its
own, is killed with kill -9 inside its first transaction (records written, offsets sent), and
its next instance takes over (its InitProducerId fences the dead one and aborts that
transaction; its consumer joins once the dead member's session expires). Afterwards the output
read with read_committed holds every input record exactly once, and the group's committed
offsets (asked for stable offsets, as a read_committed consumer does) are the end of the input.

Bounded: every wait has a timeout; the processes are killed by PID whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, Final

import confluent_kafka
import pytest

from testkit.probes import partitions_of, wait_until
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import CLUSTER_PROPERTIES
from tests.integration.eos_loop import (
    BATCH,
    GROUP,
    INPUT,
    MID_TRANSACTION,
    OUTPUT,
    RUN_S,
    TRANSACTIONAL_ID,
    WAIT_S,
    consume_transform_produce,
    transform,
)
from tests.integration.kafka_drivers import ConfluentDriver
from tests.integration.test_transactions_kafka import coordinator_of, read_all

pytestmark = pytest.mark.slow

PARTITIONS: Final = 2
RECORDS_PER_RUN: Final = 40
KILL_AT_TRANSACTION: Final = 2  # of the second run: its coordinator dies before the commit
REPO: Final = Path(__file__).resolve().parents[2]


def fill_input(bootstrap: str, run: int) -> list[bytes]:
    values = [b"in-%d-%03d" % (run, i) for i in range(RECORDS_PER_RUN)]
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i, value in enumerate(values):
        producer.produce(INPUT, value=value, partition=i % PARTITIONS)
    assert producer.flush(WAIT_S) == 0, "input not acknowledged"
    return values


class Pause:
    """The loop stops inside one transaction (records written, offsets sent, not committed)
    until the test has done what it must (kill the coordinator)."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.reached = threading.Event()
        self.go_on = threading.Event()

    def __call__(self, transaction: int, _producer: Any) -> None:
        if transaction != self.at:
            return
        self.reached.set()
        assert self.go_on.wait(WAIT_S), "the test never let the loop go on"


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


Between = Callable[[int, Any], None]  # runs inside transaction i, before its commit
# A consume-transform-produce loop: (bootstrap, records expected, between) -> transactions.
Loop = Callable[[str, int, Between], Coroutine[Any, Any, int]]


async def librdkafka_loop(bootstrap: str, expected: int, between: Between) -> int:
    return await asyncio.to_thread(consume_transform_produce, bootstrap, expected, between)


async def run_with_kill(
    cluster: ProcessCluster,
    loop: Loop,
    bootstrap: str,
    victim_of: Callable[[], Awaitable[int]],
) -> int:
    """A run of `loop` that, at transaction KILL_AT_TRANSACTION, before its commit, kill -9s
    the broker `victim_of()` names, then restarts it once the run is over; the loop goes on
    through the survivors. Returns the transactions committed."""
    pause = Pause(KILL_AT_TRANSACTION)
    victim = -1
    run = asyncio.create_task(loop(bootstrap, RECORDS_PER_RUN, pause))
    try:

        async def reached() -> bool:
            return pause.reached.is_set() or run.done()

        await wait_until(reached, "the transaction to interrupt", timeout_s=RUN_S)
        if pause.reached.is_set():
            victim = await victim_of()
            await cluster.broker(victim).kill()
    finally:
        pause.go_on.set()  # the loop goes on whatever happened here
    try:
        committed = await run
    finally:
        if victim >= 0:
            await cluster.broker(victim).start()
            await cluster.wait_running([victim], timeout_s=WAIT_S)
    assert victim >= 0, "the loop ended before the transaction to interrupt"
    return committed


async def output_leader(cluster: ProcessCluster) -> int:
    """The leader of the output's partition 0: a partition the transaction writes to."""
    client = cluster.client()
    try:
        found = await partitions_of(client, cluster.addresses.values(), OUTPUT)
        return found[0].leader_id
    finally:
        await client.close()


async def kill_the_application(module_args: list[str], log_path: Path) -> None:
    """`python -m <module_args>`, a loop that prints MID_TRANSACTION inside its first
    transaction, killed with kill -9 once it has."""
    with log_path.open("wb") as log:
        app = await asyncio.create_subprocess_exec(
            sys.executable, "-m", *module_args,
            cwd=REPO, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=log,
        )  # fmt: skip
    try:
        assert app.stdout is not None
        line = await asyncio.wait_for(app.stdout.readline(), RUN_S)
        started = line.decode().strip() == MID_TRANSACTION
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(app.pid, signal.SIGKILL)
        await app.wait()
    if not started:
        raise AssertionError((line, await asyncio.to_thread(log_path.read_text)))


async def run_killing_the_application(bootstrap: str, tmp_path: Path) -> int:
    """The loop in a process of its own, killed with kill -9 inside its first transaction; then
    its next instance, here, takes over and processes the whole input. Returns the transactions
    the next instance committed."""
    module = ["tests.integration.eos_loop", bootstrap, str(RECORDS_PER_RUN)]
    await kill_the_application(module, tmp_path / "eos-app.log")
    return await asyncio.to_thread(consume_transform_produce, bootstrap, RECORDS_PER_RUN)


async def test_consume_transform_produce_exactly_once_across_kills(
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
            cluster, librdkafka_loop, bootstrap, lambda: coordinator_of(cluster, TRANSACTIONAL_ID)
        )
        assert committed_second > KILL_AT_TRANSACTION

        # A third run loses the leader of a partition it writes to, mid-transaction.
        third = await asyncio.to_thread(fill_input, bootstrap, 3)
        committed_third = await run_with_kill(
            cluster, librdkafka_loop, bootstrap, lambda: output_leader(cluster)
        )
        assert committed_third > KILL_AT_TRANSACTION

        # A fourth run's application dies inside its first transaction.
        fourth = await asyncio.to_thread(fill_input, bootstrap, 4)
        committed_fourth = await run_killing_the_application(bootstrap, tmp_path)
        assert committed_fourth >= RECORDS_PER_RUN // BATCH

        inputs = first + second + third + fourth
        output = await asyncio.to_thread(read_output, bootstrap, len(inputs))
        offsets, ends = await asyncio.to_thread(group_offsets, bootstrap)
    assert output == sorted(transform(value) for value in inputs), "every input exactly once"
    assert offsets == ends, (offsets, ends)
    assert sum(ends.values()) == len(inputs)
