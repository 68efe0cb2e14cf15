"""The exactly-once consume-transform-produce loop of test_transactions_eos.py, importable by
that test and runnable as a process of its own (`python -m tests.integration.eos_loop`), which
the test kills with kill -9 in the middle of a transaction: the application dying, not a broker.

The loop: a consumer in group "eos" reads the input with read_committed; a transactional
producer writes each batch's transformed records and sends the consumer's positions with
`send_offsets_to_transaction` (AddOffsetsToTxn, then TxnOffsetCommit to the group coordinator)
before committing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, Final

import confluent_kafka

INPUT: Final = "eos-in"
OUTPUT: Final = "eos-out"
GROUP: Final = "eos"
TRANSACTIONAL_ID: Final = "eos-app"
BATCH: Final = 8  # records per transaction, at most
WAIT_S: Final = 30.0
RUN_S: Final = 120.0  # one run's bound, failover included
# The group's smallest session timeout (group.min.session.timeout.ms): a member killed with
# kill -9 leaves the group this long after its last heartbeat, and the next instance's join
# waits for that (librdkafka's default is 45 s).
SESSION_TIMEOUT_MS: Final = 6_000
# What the process prints once its transaction is open and holds records and offsets.
MID_TRANSACTION: Final = "mid-transaction"


def transform(value: bytes) -> bytes:
    return b"out:" + value


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
    bootstrap: str, expected: int, between: Callable[[int, Any], None] = lambda _t, _p: None
) -> int:
    """The loop, until `expected` input records were committed (bounded); the number of
    transactions committed. `between(i, producer)` runs in transaction i before its commit."""
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_TIMEOUT_MS,
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
            between(transactions, producer)
            if commit(producer, consumer):
                done += len(messages)
                transactions += 1
        return transactions
    finally:
        consumer.close()


def _hang_in_first_transaction(transaction: int, producer: Any) -> None:
    """Make the first transaction's records reach the brokers, say so, and wait to be killed
    (bounded: a test that never kills this process fails on its output)."""
    if transaction != 0:
        return
    assert producer.flush(WAIT_S) == 0, "the transaction's records not acknowledged"
    print(MID_TRANSACTION, flush=True)
    time.sleep(RUN_S)
    raise SystemExit("never killed")


def main(argv: list[str]) -> None:
    """`python -m tests.integration.eos_loop BOOTSTRAP EXPECTED`: run the loop and hang inside
    its first transaction."""
    bootstrap, expected = argv
    consume_transform_produce(bootstrap, int(expected), _hang_in_first_transaction)


if __name__ == "__main__":
    main(sys.argv[1:])
