"""The exactly-once consume-transform-produce loop of test_transactions_eos.py with librdkafka
(confluent-kafka), run by that test as a process of its own (`python -m
tests.integration.eos_loop SPEC`, eos_app.py's protocol): killed by PID at its deadline, with
kill -9 in the middle of a transaction when the test plays the application dying.

The loop: a consumer in group "eos" reads the input with read_committed; a transactional
producer writes each batch's transformed records and sends the consumer's positions with
`send_offsets_to_transaction` (AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator)
before committing. It journals what it does (eos_app.Journal); librdkafka's own account of the
transactions (debug "eos") and of the group (debug "cgrp") goes to the process's stderr log.

A librdkafka bug the loop works around: since 2.10 librdkafka decommissions a broker that leaves
the cluster's metadata (a killed one does, in Kafka as in ketch), but the producer's coordinator
cache keeps it as the group's coordinator; the TxnOffsetCommit of the next
`send_offsets_to_transaction` then waits for that handle to come up, which it never does, and
only another broker's connection going up or down wakes it (librdkafka issue #5511); the call's
own timeout is not enforced on that wait (#5456), so it blocks for good. A run that kills the
group coordinator's broker hits this when its next transaction starts after librdkafka dropped
that broker and no other connection changes state afterwards: seen in CI (the hang of this
test), and every time when a `list_topics` forces that metadata refresh before the call. The
loop bounds the call in a thread of its own; past the bound it abandons that producer, as an
application restarting it would: a new one with the same transactional.id fences it and aborts
its transaction (InitProducerId), the consumer goes back to the committed offsets, and the loop
goes on. The journal says so.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Final

import confluent_kafka

from tests.integration.eos_app import (
    RUN_S,
    WAIT_S,
    Between,
    Journal,
    LoopSpec,
    child_main,
    pause,
)

INPUT: Final = "eos-in"
OUTPUT: Final = "eos-out"
GROUP: Final = "eos"
TRANSACTIONAL_ID: Final = "eos-app"
BATCH: Final = 8  # records per transaction, at most
# The group's smallest session timeout (group.min.session.timeout.ms): a member killed with
# kill -9 leaves the group this long after its last heartbeat, and the next instance's join
# waits for that (librdkafka's default is 45 s).
SESSION_TIMEOUT_MS: Final = 6_000
SEND_OFFSETS_S: Final = 10.0  # send_offsets_to_transaction's timeout (a failover takes ~2 s)
WEDGED_S: Final = 5.0  # past its timeout by this much, the call is stuck in librdkafka


def transform(value: bytes) -> bytes:
    return b"out:" + value


def positions(partitions: list[Any]) -> dict[int, int]:
    return {tp.partition: tp.offset for tp in partitions}


def where(message: Any) -> tuple[int, int]:
    """A consumed record's partition and offset."""
    partition, offset = message.partition(), message.offset()
    assert partition is not None, message
    assert offset is not None, message
    return partition, offset


def rewind(consumer: Any, journal: Journal) -> None:
    """After an aborted transaction: back to the group's committed offsets."""
    committed = consumer.committed(consumer.assignment(), timeout=WAIT_S)
    for tp in committed:
        if tp.offset >= 0:
            consumer.seek(tp)
        else:
            consumer.seek(confluent_kafka.TopicPartition(tp.topic, tp.partition, 0))
    journal.event("rewound", committed=positions(committed))


def commit(producer: Any, consumer: Any, journal: Journal) -> bool:
    """Commit the open transaction, retrying what librdkafka calls retriable (a coordinator
    moving); an abortable error aborts it and rewinds the consumer. Whether it committed."""
    for _ in range(5):
        try:
            producer.commit_transaction(WAIT_S)
            return True
        except confluent_kafka.KafkaException as exc:
            error = exc.args[0]
            journal.error("commit_transaction", error)
            if error.retriable():
                continue
            if error.txn_requires_abort():
                producer.abort_transaction(WAIT_S)
                journal.event("aborted")
                rewind(consumer, journal)
                return False
            raise
    raise AssertionError("the commit never succeeded")


class Wedged(Exception):
    """A librdkafka call still blocked WEDGED_S past its own timeout."""


def send_offsets(producer: Any, offsets: list[Any], metadata: Any) -> None:
    """`producer.send_offsets_to_transaction`, in a daemon thread awaited for its timeout and
    WEDGED_S more: raises what it raises, or Wedged (the thread stays blocked inside the
    producer, which the caller must then abandon)."""
    finished = threading.Event()
    failures: list[BaseException] = []

    def call() -> None:
        try:
            producer.send_offsets_to_transaction(offsets, metadata, SEND_OFFSETS_S)
        except BaseException as exc:  # handed to the waiting loop
            failures.append(exc)
        finally:
            finished.set()

    threading.Thread(target=call, name="send-offsets", daemon=True).start()
    if not finished.wait(SEND_OFFSETS_S + WEDGED_S):
        raise Wedged(f"send_offsets_to_transaction still blocked after {SEND_OFFSETS_S} s")
    if failures:
        raise failures[0]


def transactional_producer(bootstrap: str) -> Any:
    """A producer with the application's transactional.id, initialized: InitProducerId fences
    any earlier one and aborts its open transaction."""
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": TRANSACTIONAL_ID, "debug": "eos"}
    )
    producer.init_transactions(WAIT_S)
    return producer


class Application:
    """One instance of the application: its consumer in the group, its transactional producer
    (a new one when librdkafka wedges the current one) and its journal."""

    def __init__(self, bootstrap: str, journal: Journal) -> None:
        self.bootstrap = bootstrap
        self.journal = journal
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": GROUP,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": SESSION_TIMEOUT_MS,
                "debug": "cgrp",
            }
        )
        self.producer: Any = None
        self.abandoned: list[Any] = []  # wedged producers: never destroyed, a thread is inside

    def start(self) -> None:
        self.producer = transactional_producer(self.bootstrap)
        self.journal.event("initialized")
        self.consumer.subscribe([INPUT])

    def transaction(self, number: int, messages: list[Any], between: Between) -> bool:
        """Transaction `number`: the transformed records and the consumer's positions after
        them, `between`, the commit. Whether it committed (if not, it was aborted and the
        consumer rewound)."""
        self.journal.batch(number, [where(m) for m in messages])
        self.producer.begin_transaction()
        for message in messages:
            value, partition = message.value(), message.partition()
            assert value is not None, message
            assert partition is not None, message
            self.producer.produce(OUTPUT, value=transform(value), partition=partition)
        if not self._send_offsets(number):
            return False
        between(number, self.producer)
        return commit(self.producer, self.consumer, self.journal)

    def _send_offsets(self, number: int) -> bool:
        """The consumer's positions into the transaction; whether it is still open (an abortable
        error aborts it; a wedged producer is replaced by a new one, which aborts it)."""
        sent = self.consumer.position(self.consumer.assignment())
        try:
            send_offsets(self.producer, sent, self.consumer.consumer_group_metadata())
        except Wedged as exc:
            self.journal.error("send_offsets_to_transaction (librdkafka #5511)", exc)
            self.abandoned.append(self.producer)
            self.producer = transactional_producer(self.bootstrap)
            self.journal.event("initialized", abandoned=len(self.abandoned))
            rewind(self.consumer, self.journal)
            return False
        except confluent_kafka.KafkaException as exc:
            self.journal.error("send_offsets_to_transaction", exc.args[0])
            if not exc.args[0].txn_requires_abort():
                raise
            self.producer.abort_transaction(WAIT_S)
            self.journal.event("aborted")
            rewind(self.consumer, self.journal)
            return False
        self.journal.event("offsets sent", transaction=number, offsets=positions(sent))
        return True


def consume_transform_produce(
    bootstrap: str, expected: int, between: Between, journal: Journal
) -> int:
    """The loop, until `expected` input records were committed (bounded by RUN_S); the number
    of transactions committed. `between(i, producer)` runs in transaction i before its commit."""
    application = Application(bootstrap, journal)
    try:
        application.start()
        done = transactions = 0
        deadline = time.monotonic() + RUN_S
        while done < expected:
            assert time.monotonic() < deadline, f"only {done} of {expected} records processed"
            messages = [
                m
                for m in application.consumer.consume(num_messages=BATCH, timeout=0.5)
                if m.error() is None
            ]
            if messages and application.transaction(transactions, messages, between):
                journal.event("committed", transaction=transactions, records=len(messages))
                done += len(messages)
                transactions += 1
        return transactions
    finally:
        application.consumer.close()


def run(spec: LoopSpec, journal: Journal) -> int:
    """The spec's run; a librdkafka run that pauses first waits for its records when told."""

    def between(transaction: int, producer: Any) -> None:
        if transaction != spec.pause_at:
            return
        if spec.flush_at_pause:
            assert producer.flush(WAIT_S) == 0, "the transaction's records not acknowledged"
        pause(journal, transaction)

    return consume_transform_produce(spec.bootstrap, spec.expected, between, journal)


if __name__ == "__main__":
    child_main(run, sys.argv[1:])
