"""Exactly-once consume-transform-produce with aiokafka and kafka-python against a ketch cluster
in real processes (issue 19, KIP-98 / KIP-447): test_transactions_eos.py's proof, for the two
other Python clients. A first run processes the whole input; each following run, over more
input, loses a broker to kill -9 inside a transaction, before its commit: the leader of the
output partitions (a broker that coordinates nothing of the application's), then, for aiokafka
only (see below), the transaction coordinator's; the loop goes on through the survivors and the
killed broker is restarted after the run. In the last run the application is killed with kill -9
inside its first transaction and its next instance takes over. Afterwards the output read with
read_committed holds every input record exactly once, and the group's committed offsets are the
end of the input.

Each client's loop (the shape of eos_loop.py's: read a batch with read_committed, write its
transformed records and the positions after it in one transaction, commit; an abortable error
aborts and rewinds to the committed offsets) lives here. What each client can and cannot do:

- aiokafka 0.14 sends the offsets with the group id alone (`send_offsets_to_transaction(offsets,
  group_id)`, TxnOffsetCommit v0): the group coordinator cannot fence a commit made across a
  rebalance (KIP-447), so the loop itself notices an assignment handed out during its
  transaction (`Rebalances`) and puts the consumer back where that transaction left it.
- kafka-python 3.0 sends the consumer's `group_metadata()` (generation and member id, KIP-447),
  but its `commit_transaction`, `abort_transaction` and `send_offsets_to_transaction` wait
  without a bound (only the process's deadline bounds them).
- kafka-python 3.0.12 cannot lose a coordinator's broker (KILLS says why): that run is
  aiokafka's alone.
- Neither surfaces a retriable error from `commit_transaction`: both retry a moving
  coordinator (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost connection) themselves, and
  what reaches the caller is abortable or fatal.

Each run of a loop is a process of its own (this module's `main`, eos_app.py's protocol):
killed by PID at its deadline, and a failure shows the loop's journal and its log. Bounded:
every wait has a timeout; the processes are killed by PID whatever happens.
"""

from __future__ import annotations

import asyncio
import functools
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

import aiokafka  # type: ignore[import-untyped]
import aiokafka.abc  # type: ignore[import-untyped]
import aiokafka.errors  # type: ignore[import-untyped]
import confluent_kafka.admin
import kafka
import kafka.errors
import pytest
from confluent_kafka.cimpl import NewTopic

from testkit.probes import ask_any, wait_until
from testkit.processes import ProcessCluster, running_cluster
from tests.integration.cluster_properties import CLUSTER_PROPERTIES
from tests.integration.eos_app import (
    EXIT_S,
    RUN_S,
    WAIT_S,
    Between,
    Journal,
    LoopSpec,
    child_main,
    in_daemon_thread,
    kill_mid_transaction,
    pausing,
    run_app,
)
from tests.integration.eos_loop import (
    BATCH,
    GROUP,
    INPUT,
    OUTPUT,
    SESSION_TIMEOUT_MS,
    TRANSACTIONAL_ID,
    transform,
)
from tests.integration.kafka_drivers import ConfluentDriver
from tests.integration.test_kafka_clients import stop_aiokafka
from tests.integration.test_transactions_eos import (
    KILL_AT_TRANSACTION,
    PARTITIONS,
    RECORDS_PER_RUN,
    TEST_TIMEOUT_S,
    filled,
    offsets_and_ends,
    output_leader,
    output_of,
    run_with_kill,
    spec,
)
from tests.integration.test_transactions_kafka import coordinator_of
from wire.messages import FindCoordinatorRequest, FindCoordinatorResponse
from wire.messages.groups import COORDINATOR_GROUP

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TEST_TIMEOUT_S)]


# -- aiokafka ------------------------------------------------------------------------------------

# What aiokafka's sender treats as fatal (it re-raises them and the producer is done); any other
# error of a transaction is abortable.
AIOKAFKA_FATAL: Final = (
    aiokafka.errors.ProducerFenced,
    aiokafka.errors.OutOfOrderSequenceNumber,
    aiokafka.errors.TransactionalIdAuthorizationFailed,
)


class Rebalances(aiokafka.abc.ConsumerRebalanceListener):  # type: ignore[misc]
    """Counts the assignments aiokafka hands the consumer. An assignment resets the consumer's
    positions to the group's committed offsets, which, during a transaction, are those from
    before it: the loop then puts the positions back where the transaction committed them."""

    def __init__(self) -> None:
        self.assigned = 0

    async def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.assigned += 1


async def aiokafka_rewind(consumer: Any, journal: Journal) -> None:
    """After an aborted transaction: back to the group's committed offsets."""
    rewound = {}
    for tp in consumer.assignment():
        committed = await asyncio.wait_for(consumer.committed(tp), WAIT_S)
        consumer.seek(tp, 0 if committed is None else committed)
        rewound[tp.partition] = committed
    journal.event("rewound", committed=rewound)


async def aiokafka_transaction(
    producer: Any, messages: list[Any], between: Between, transaction: int, journal: Journal
) -> dict[Any, int]:
    """Transaction number `transaction`: its records and offsets, then `between`, then its
    commit; the offsets it committed. Raises what aiokafka raises."""
    await producer.begin_transaction()
    sent = [
        await producer.send(OUTPUT, transform(m.value), partition=m.partition) for m in messages
    ]
    async with asyncio.timeout(WAIT_S):
        await asyncio.gather(*sent)  # the records are on the partitions before `between`
    offsets = {aiokafka.TopicPartition(m.topic, m.partition): m.offset + 1 for m in messages}
    async with asyncio.timeout(WAIT_S):
        await producer.send_offsets_to_transaction(offsets, GROUP)
    journal.event("offsets sent", transaction=transaction, offsets=by_partition(offsets))
    # In a thread: a pause blocks, and the event loop goes on heartbeating meanwhile.
    await asyncio.to_thread(between, transaction, producer)
    async with asyncio.timeout(WAIT_S):
        await producer.commit_transaction()
    return offsets


def by_partition(offsets: dict[Any, Any]) -> dict[int, int]:
    return {tp.partition: getattr(offset, "offset", offset) for tp, offset in offsets.items()}


async def aiokafka_loop(bootstrap: str, expected: int, between: Between, journal: Journal) -> int:
    consumer = aiokafka.AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=GROUP,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
    )
    producer = aiokafka.AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=TRANSACTIONAL_ID
    )
    rebalances = Rebalances()
    try:
        async with asyncio.timeout(RUN_S):
            await consumer.start()
            await producer.start()  # InitProducerId
            journal.event("initialized")
            consumer.subscribe([INPUT], listener=rebalances)
            done = transactions = 0
            while done < expected:
                batches = await consumer.getmany(timeout_ms=500, max_records=BATCH)
                messages = [m for records in batches.values() for m in records]
                if not messages:
                    continue
                journal.batch(transactions, [(m.partition, m.offset) for m in messages])
                assigned = rebalances.assigned
                try:
                    offsets = await aiokafka_transaction(
                        producer, messages, between, transactions, journal
                    )
                except AIOKAFKA_FATAL:
                    raise
                except aiokafka.errors.KafkaError as exc:
                    journal.error("transaction", exc)
                    async with asyncio.timeout(WAIT_S):
                        await producer.abort_transaction()
                    journal.event("aborted")
                    await aiokafka_rewind(consumer, journal)
                    continue
                journal.event("committed", transaction=transactions, records=len(messages))
                if rebalances.assigned != assigned:
                    journal.event("reassigned during the transaction: seek to its offsets")
                    for tp, offset in offsets.items():
                        if tp in consumer.assignment():
                            consumer.seek(tp, offset)
                done += len(messages)
                transactions += 1
            return transactions
    finally:
        await producer.stop()
        await stop_aiokafka(consumer)


def run_aiokafka(spec: LoopSpec, journal: Journal) -> int:
    between = pausing(spec, journal)
    return asyncio.run(aiokafka_loop(spec.bootstrap, spec.expected, between, journal))


# -- kafka-python --------------------------------------------------------------------------------

# What kafka-python's transaction manager treats as fatal (TransactionManager._FATAL_ERRORS, and
# a sequence error the broker's version could not recover from); any other is abortable.
KAFKA_PYTHON_FATAL: Final = (
    kafka.errors.ProducerFencedError,
    kafka.errors.TransactionalIdAuthorizationFailedError,
    kafka.errors.ClusterAuthorizationFailedError,
    kafka.errors.InvalidTxnStateError,
    kafka.errors.OutOfOrderSequenceNumberError,
)


def kafka_python_rewind(consumer: Any, journal: Journal) -> None:
    """After an aborted transaction: back to the group's committed offsets."""
    rewound = {}
    for tp in consumer.assignment():
        committed = consumer.committed(tp, timeout_ms=int(WAIT_S * 1000))
        consumer.seek(tp, 0 if committed is None else committed)
        rewound[tp.partition] = committed
    journal.event("rewound", committed=rewound)


def kafka_python_transaction(
    producer: Any,
    consumer: Any,
    messages: list[Any],
    between: Between,
    transaction: int,
    journal: Journal,
) -> None:
    """Transaction number `transaction`: its records and offsets, then `between`, then its
    commit. Raises what kafka-python raises."""
    producer.begin_transaction()
    for m in messages:
        producer.send(OUTPUT, transform(m.value), partition=m.partition)
    producer.flush(WAIT_S)  # the records are on the partitions before `between`
    offsets = {
        kafka.TopicPartition(m.topic, m.partition): kafka.OffsetAndMetadata(m.offset + 1, "", -1)
        for m in messages
    }
    producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
    journal.event("offsets sent", transaction=transaction, offsets=by_partition(offsets))
    between(transaction, producer)
    producer.commit_transaction()


def kafka_python_loop(bootstrap: str, expected: int, between: Between, journal: Journal) -> int:
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap.split(","),
        group_id=GROUP,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=SESSION_TIMEOUT_MS,
    )
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap.split(","), transactional_id=TRANSACTIONAL_ID
    )
    try:
        producer.init_transactions()  # bounded by max_block_ms
        journal.event("initialized")
        consumer.subscribe([INPUT])
        done = transactions = 0
        deadline = time.monotonic() + RUN_S
        while done < expected:
            assert time.monotonic() < deadline, f"only {done} of {expected} records processed"
            batches = consumer.poll(timeout_ms=500, max_records=BATCH)
            messages = [m for records in batches.values() for m in records]
            if not messages:
                continue
            journal.batch(transactions, [(m.partition, m.offset) for m in messages])
            try:
                kafka_python_transaction(
                    producer, consumer, messages, between, transactions, journal
                )
            except KAFKA_PYTHON_FATAL:
                raise
            except kafka.errors.KafkaError as exc:
                journal.error("transaction", exc)
                producer.abort_transaction()
                journal.event("aborted")
                kafka_python_rewind(consumer, journal)
                continue
            journal.event("committed", transaction=transactions, records=len(messages))
            done += len(messages)
            transactions += 1
        return transactions
    finally:
        producer.close(timeout=5)
        consumer.close()


def run_kafka_python(spec: LoopSpec, journal: Journal) -> int:
    return kafka_python_loop(spec.bootstrap, spec.expected, pausing(spec, journal), journal)


# A client's run in the child process (`main`).
RUNS: Final[dict[str, Callable[[LoopSpec, Journal], int]]] = {
    "aiokafka": run_aiokafka,
    "kafka-python": run_kafka_python,
}


# -- the test ------------------------------------------------------------------------------------

MIN_ISR: Final = {"min.insync.replicas": "2"}
MODULE: Final = "tests.integration.test_transactions_eos_clients"  # run as the application


async def group_coordinator_of(cluster: ProcessCluster, group: str) -> int:
    client = cluster.client()
    request = FindCoordinatorRequest(key_type=COORDINATOR_GROUP, coordinator_keys=[group])
    try:
        found = -1

        async def answered() -> bool:
            nonlocal found
            response = await ask_any(client, cluster.addresses.values(), request)
            assert isinstance(response, FindCoordinatorResponse | None), response
            if response is not None and response.coordinators[0].error_code == 0:
                found = response.coordinators[0].node_id
            return found >= 0

        await wait_until(answered, f"a coordinator for group {group}", timeout_s=WAIT_S)
        return found
    finally:
        await client.close()


def create_output(bootstrap: str, leader: int, brokers: int) -> None:
    """The output topic, both partitions led by `leader` (the first replica of each). (This
    librdkafka wants the partition count with an assignment, and sends -1 for it.)"""
    followers = [b for b in range(brokers) if b != leader]
    assignment = [[leader, *followers], [leader, *reversed(followers)]]
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(OUTPUT, len(assignment), replica_assignment=assignment, config=MIN_ISR)]
    )
    futures[OUTPUT].result(WAIT_S)


async def output_leader_alone(cluster: ProcessCluster) -> int:
    """The leader of the output's partition 0, which coordinates neither the transactions nor
    the group: its death costs the transaction an output partition's leader, nothing else."""
    leader = await output_leader(cluster)
    transaction = await coordinator_of(cluster, TRANSACTIONAL_ID)
    group = await group_coordinator_of(cluster, GROUP)
    assert leader not in (transaction, group), (leader, transaction, group)
    return leader


async def transaction_coordinator(cluster: ProcessCluster) -> int:
    return await coordinator_of(cluster, TRANSACTIONAL_ID)


# The brokers each client's runs lose, one a run. kafka-python 3.0.12 cannot lose a coordinator:
# when the connection to its transaction (or group) coordinator is refused as it sends a
# transactional request (EndTxn, AddPartitionsToTxn, TxnOffsetCommit), its Sender
# (_maybe_send_pending_request) looks the coordinator up again but never re-enqueues the
# request (`await_ready` raises instead of returning False, and `target_node` is still set), so
# `commit_transaction()`, which waits without a timeout, never returns.
KILLS: Final[dict[str, tuple[Callable[[ProcessCluster], Awaitable[int]], ...]]] = {
    "aiokafka": (output_leader_alone, transaction_coordinator),
    "kafka-python": (output_leader_alone,),
}


@pytest.mark.parametrize("client", sorted(RUNS))
async def test_consume_transform_produce_exactly_once_across_kills(
    tmp_path: Path, client: str
) -> None:
    app = [MODULE, client]
    async with running_cluster(tmp_path, dict(CLUSTER_PROPERTIES), kafka=True) as cluster:
        await cluster.wait_running(range(3), timeout_s=WAIT_S)
        bootstrap = cluster.kafka_bootstrap()
        await ConfluentDriver(bootstrap).create_topic(INPUT, PARTITIONS, 3, MIN_ISR)
        # The output is led by the broker that coordinates nothing of this application's, so
        # that killing an output leader and killing a coordinator are separate runs.
        coordinators = {
            await coordinator_of(cluster, TRANSACTIONAL_ID),
            await group_coordinator_of(cluster, GROUP),
        }
        alone = min(set(range(3)) - coordinators)
        await in_daemon_thread(lambda: create_output(bootstrap, alone, 3), WAIT_S + EXIT_S)

        inputs = await filled(bootstrap, 1)
        committed = await run_app(app, spec(bootstrap, tmp_path / "run-1.journal"))
        assert committed >= RECORDS_PER_RUN // BATCH
        offsets, ends = await offsets_and_ends(bootstrap)
        assert offsets == ends, (offsets, ends)

        for run, victim_of in enumerate(KILLS[client], start=2):
            inputs += await filled(bootstrap, run)
            victim = functools.partial(victim_of, cluster)
            journal = tmp_path / f"run-{run}.journal"
            committed = await run_with_kill(
                cluster, app, spec(bootstrap, journal, KILL_AT_TRANSACTION), victim
            )
            assert committed > KILL_AT_TRANSACTION, victim_of

        # The last run's application dies inside its first transaction (both loops wait for
        # their records' acknowledgement before a pause), its next instance takes over.
        last = len(KILLS[client]) + 2
        inputs += await filled(bootstrap, last)
        await kill_mid_transaction(app, spec(bootstrap, tmp_path / f"run-{last}-killed.journal", 0))
        committed = await run_app(app, spec(bootstrap, tmp_path / f"run-{last}.journal"))
        assert committed >= RECORDS_PER_RUN // BATCH

        output = await output_of(bootstrap, len(inputs))
        offsets, ends = await offsets_and_ends(bootstrap)
    assert output == sorted(transform(value) for value in inputs), "every input exactly once"
    assert offsets == ends, (offsets, ends)
    assert sum(ends.values()) == len(inputs)


def main(argv: list[str]) -> None:
    """`python -m tests.integration.test_transactions_eos_clients CLIENT SPEC`: the client's
    loop as the application's process (eos_app.py's protocol)."""
    client, *spec_argv = argv
    child_main(RUNS[client], spec_argv)


if __name__ == "__main__":
    main(sys.argv[1:])
