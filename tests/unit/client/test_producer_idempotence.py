"""The idempotent producer (enable.idempotence) against scripted brokers, under a manual clock.

The scripted brokers hand out producer ids as node/broker/producer_ids.py does and, where a test
sets `check_sequences`, answer as a broker's per-partition producer state does (duplicates,
gaps, epochs). `cluster.produced` holds every batch as it arrived, retries included.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import pytest

from client.accumulator import PendingRecord, ProducerBatch
from client.config import ACKS_ALL, ClientConfig, ProducerConfig
from client.errors import DeliveryTimeoutError, RequestTimeoutError
from client.idempotence import (
    SEQUENCE_MODULUS,
    TRANSACTION_TIMEOUT_MS,
    IdempotenceManager,
    ProducerIdAndEpoch,
    increment_sequence,
)
from client.producer import Producer
from runtime.clock import ManualClock
from runtime.net.backoff import ExponentialBackoff
from runtime.net.dialect import RequestContext
from tests.unit.client.lossy_run import CLIENT, lossy_cluster, send_all
from tests.unit.client.scripted_cluster import (
    FIRST_PRODUCER_ID,
    ScriptedCluster,
    advance_until,
    batch_headers,
    settle,
)
from wire.errors import ErrorCode, KafkaError
from wire.messages import (
    ApiKey,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from wire.record_reader import iter_records
from wire.records import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, iter_batches
from wire.topic import TopicPartition

SEED = 360
P0 = TopicPartition("t", 0)
P1 = TopicPartition("t", 1)


def make_producer(cluster: ScriptedCluster, **settings: Any) -> Producer:
    client = cluster.client(config=ClientConfig(retry_backoff_ms=100), seed=SEED)
    return Producer(client, config=ProducerConfig(**settings), owns_client=True)


def sequences(cluster: ScriptedCluster, tp: TopicPartition) -> list[tuple[int, int, int]]:
    """(producer id, epoch, base sequence) of every batch produced to `tp`, retries included."""
    return [(h.producer_id, h.producer_epoch, h.base_sequence) for h in batch_headers(cluster, tp)]


def logged_batches(cluster: ScriptedCluster, tp: TopicPartition) -> list[int]:
    """The base offset of each batch in `tp`'s log."""
    return [offset for offset, _ in cluster.logs[tp].batches]


# -- configuration -------------------------------------------------------------------------------


def test_idempotence_defaults_follow_acks() -> None:
    assert ProducerConfig().enable_idempotence is None
    assert ProducerConfig().idempotent
    assert not ProducerConfig(acks=1).idempotent  # not given: silently off, as Kafka 3.x
    assert not ProducerConfig(acks=0).idempotent
    assert not ProducerConfig(enable_idempotence=False).idempotent
    assert ProducerConfig(acks=ACKS_ALL, enable_idempotence=True).idempotent


def test_explicit_idempotence_needs_acks_all() -> None:
    for acks in (0, 1):
        with pytest.raises(ValueError, match=r"enable\.idempotence=true requires acks=all"):
            ProducerConfig(acks=acks, enable_idempotence=True)
    with pytest.raises(ValueError, match=r"requires acks=all"):
        ProducerConfig.from_properties({"acks": "1", "enable.idempotence": "true"})


def test_from_properties_tells_given_from_default() -> None:
    assert ProducerConfig.from_properties({}).enable_idempotence is None
    assert ProducerConfig.from_properties({"acks": "all"}).idempotent
    assert not ProducerConfig.from_properties({"acks": "1"}).idempotent
    off = ProducerConfig.from_properties({"acks": "all", "enable.idempotence": "false"})
    assert (off.enable_idempotence, off.idempotent) == (False, False)
    on = ProducerConfig.from_properties({"enable.idempotence": True})
    assert (on.enable_idempotence, on.idempotent) == (True, True)
    with pytest.raises(ValueError, match=r"enable\.idempotence"):
        ProducerConfig.from_properties({"enable.idempotence": "yes"})


def test_sequences_wrap_to_zero_after_int32_max() -> None:
    assert SEQUENCE_MODULUS == 2**31
    assert increment_sequence(2**31 - 1, 1) == 0
    assert increment_sequence(2**31 - 2, 5) == 3
    assert increment_sequence(7, 3) == 10


# -- producer id -----------------------------------------------------------------------------------


async def test_producer_id_is_fetched_once_before_the_first_batch(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    producer = make_producer(cluster, linger_ms=0)
    for i in range(4):
        await producer.send_and_wait("t", None, b"v%d" % i, partition=i % 2)
    assert cluster.count(ApiKey.INIT_PRODUCER_ID) == 1
    (request,) = cluster.init_producer_id_requests
    assert request.transactional_id is None
    assert (request.producer_id, request.producer_epoch) == (NO_PRODUCER_ID, NO_PRODUCER_EPOCH)
    assert request.transaction_timeout_ms == TRANSACTION_TIMEOUT_MS
    keys = [key for _, key in cluster.requests]
    assert keys.index(ApiKey.INIT_PRODUCER_ID) < keys.index(ApiKey.PRODUCE)
    for tp in (P0, P1):
        assert {(pid, epoch) for pid, epoch, _ in sequences(cluster, tp)} == {
            (FIRST_PRODUCER_ID, 0)
        }
    await producer.close()


async def test_init_producer_id_retriable_errors_are_retried_with_backoff(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    cluster.init_producer_id_errors = [
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    ]
    producer = make_producer(cluster, linger_ms=0, retry_backoff_ms=100)
    future = await producer.send("t", None, b"x", partition=0)
    attempts_at_ms: list[float] = []
    for _ in range(2000):
        await settle()
        while len(attempts_at_ms) < cluster.count(ApiKey.INIT_PRODUCER_ID):
            attempts_at_ms.append(clock.monotonic_ms())
        if future.done():
            break
        clock.advance(1)
    assert future.result().offset == 0
    assert len(attempts_at_ms) == 4
    # retry.backoff.ms doubling from 100 ms, with +/-20% jitter, on the injected clock.
    gaps = [b - a for a, b in itertools.pairwise(attempts_at_ms)]
    for gap, base in zip(gaps, (100, 200, 400), strict=True):
        assert 0.8 * base <= gap <= 1.2 * base + 1, (gaps, SEED)
    assert cluster.count(ApiKey.PRODUCE) == 1  # nothing was sent before the id arrived
    await producer.close()


async def test_a_producer_without_an_id_fails_its_sends_at_the_delivery_timeout(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    cluster.init_producer_id_errors = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 1000
    producer = make_producer(cluster, linger_ms=0, delivery_timeout_ms=3000)
    future = await producer.send("t", None, b"x", partition=0)
    await advance_until(clock, future.done, step_ms=50, max_steps=100)
    with pytest.raises(DeliveryTimeoutError, match="no producer id") as info:
        await future
    assert isinstance(info.value.__cause__, KafkaError)
    assert info.value.__cause__.code is ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert clock.monotonic_ms() <= 3050
    assert cluster.count(ApiKey.PRODUCE) == 0
    # Idle (nothing waits to be sent): no more InitProducerId requests.
    asked = cluster.count(ApiKey.INIT_PRODUCER_ID)
    for _ in range(30):
        clock.advance(100)
        await settle()
    assert cluster.count(ApiKey.INIT_PRODUCER_ID) == asked
    await producer.close()


async def test_a_fatal_init_producer_id_error_fails_every_send(
    cluster: ScriptedCluster,
) -> None:
    cluster.init_producer_id_errors = [ErrorCode.CLUSTER_AUTHORIZATION_FAILED]
    producer = make_producer(cluster, linger_ms=0)
    future = await producer.send("t", None, b"x", partition=0)
    with pytest.raises(KafkaError) as info:
        await future
    assert info.value.code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    later = await producer.send("t", None, b"y", partition=1)
    with pytest.raises(KafkaError) as info:
        await later
    assert info.value.code is ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert cluster.count(ApiKey.INIT_PRODUCER_ID) == 1
    assert cluster.count(ApiKey.PRODUCE) == 0
    await producer.close()


# -- sequences -------------------------------------------------------------------------------------


async def test_sequences_start_at_zero_per_partition_and_advance_by_record_count(
    cluster: ScriptedCluster,
) -> None:
    cluster.check_sequences = True
    producer = make_producer(cluster, linger_ms=60_000)
    plan = [(P0, 3), (P1, 1), (P0, 2), (P1, 4), (P0, 1)]
    for tp, count in plan:
        futures = [
            await producer.send("t", None, b"v", partition=tp.partition) for _ in range(count)
        ]
        await producer.flush()  # one batch of `count` records
        assert all(f.done() and f.exception() is None for f in futures)
    assert [seq for _, _, seq in sequences(cluster, P0)] == [0, 3, 5]
    assert [seq for _, _, seq in sequences(cluster, P1)] == [0, 1]
    assert cluster.logs[P0].end_offset == 6
    assert cluster.logs[P1].end_offset == 5
    await producer.close()


async def test_a_retried_batch_is_byte_identical(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    cluster.check_sequences = True
    producer = make_producer(cluster, linger_ms=0)
    assert (await producer.send_and_wait("t", None, b"first", partition=0)).offset == 0
    cluster.produce_errors[P0] = [ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.REQUEST_TIMED_OUT]
    future = await producer.send("t", None, b"second", partition=0)
    await advance_until(clock, future.done, step_ms=10, max_steps=100)
    assert future.result().offset == 1
    sent = [data for tp, data in cluster.produced if tp == P0]
    assert len(sent) == 4
    assert sent[1] == sent[2] == sent[3], "a retry must resend the same bytes"
    assert [seq for _, _, seq in sequences(cluster, P0)] == [0, 1, 1, 1]
    await producer.close()


async def test_a_duplicate_is_answered_with_the_original_offset_and_logged_once(
    cluster: ScriptedCluster, clock: ManualClock
) -> None:
    """The broker appends, but its answer says to retry (as when acks=all times out after the
    append): the resend is recognised by its sequence, not appended a second time."""
    cluster.check_sequences = True
    answered_with_error = False

    async def append_then_fail(broker: int, request: ProduceRequest, ctx: RequestContext) -> Any:
        nonlocal answered_with_error
        response = await cluster.produce(broker, request, ctx)
        if answered_with_error:
            return response
        answered_with_error = True
        return ProduceResponse(
            responses=[
                TopicProduceResponse(
                    name=t.name,
                    partition_responses=[
                        PartitionProduceResponse(
                            index=p.index, error_code=ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
                        )
                        for p in t.partition_responses
                    ],
                )
                for t in response.responses
            ]
        )

    producer = make_producer(cluster, linger_ms=0)
    assert (await producer.send_and_wait("t", None, b"a", partition=0)).offset == 0
    cluster.overrides[ApiKey.PRODUCE] = append_then_fail
    future = await producer.send("t", None, b"b", partition=0)
    await advance_until(clock, future.done, step_ms=10, max_steps=100)
    assert future.result().offset == 1
    assert logged_batches(cluster, P0) == [0, 1]  # appended once, though sent twice
    assert cluster.count(ApiKey.PRODUCE) == 3
    await producer.close()


@pytest.mark.parametrize(
    "code", [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID]
)
async def test_sequence_errors_bump_the_epoch_and_restart_at_zero(
    cluster: ScriptedCluster, clock: ManualClock, code: ErrorCode
) -> None:
    cluster.check_sequences = True
    producer = make_producer(cluster, linger_ms=0)
    await producer.send_and_wait("t", None, b"a", partition=0)
    await producer.send_and_wait("t", None, b"b", partition=1)
    await producer.send_and_wait("t", None, b"c", partition=1)
    cluster.produce_errors[P0] = [code]
    future = await producer.send("t", None, b"d", partition=0)
    await advance_until(clock, future.done, step_ms=10, max_steps=100)
    assert future.result().offset == 1
    bump = cluster.init_producer_id_requests[1]
    assert (bump.producer_id, bump.producer_epoch) == (FIRST_PRODUCER_ID, 0)
    # The refused batch is resent as the first of epoch 1, and the partition goes on from it.
    await producer.send_and_wait("t", None, b"e", partition=0)
    pid = FIRST_PRODUCER_ID
    assert sequences(cluster, P0) == [(pid, 0, 0), (pid, 0, 1), (pid, 1, 0), (pid, 1, 1)]
    # The other partition restarts at 0 under the new epoch with its next batch.
    await producer.send_and_wait("t", None, b"f", partition=1)
    assert sequences(cluster, P1) == [(pid, 0, 0), (pid, 0, 1), (pid, 1, 0)]
    assert cluster.count(ApiKey.INIT_PRODUCER_ID) == 2
    await producer.close()


async def test_a_rejected_batch_restarts_the_partition_under_a_new_epoch(
    cluster: ScriptedCluster,
) -> None:
    cluster.check_sequences = True
    producer = make_producer(cluster, linger_ms=0)
    await producer.send_and_wait("t", None, b"a", partition=0)
    cluster.produce_errors[P0] = [ErrorCode.INVALID_RECORD]
    with pytest.raises(KafkaError):
        await producer.send_and_wait("t", None, b"bad", partition=0)
    # Sequence 1 was never written: going on at 2 would be a gap, so the epoch is bumped first.
    assert (await producer.send_and_wait("t", None, b"c", partition=0)).offset == 1
    pid = FIRST_PRODUCER_ID
    assert sequences(cluster, P0) == [(pid, 0, 0), (pid, 0, 1), (pid, 1, 0)]
    assert cluster.count(ApiKey.PRODUCE) == 3  # no OUT_OF_ORDER round trip was needed
    await producer.close()


@pytest.mark.parametrize("code", [ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH])
async def test_fencing_fails_every_pending_send(
    cluster: ScriptedCluster, clock: ManualClock, code: ErrorCode
) -> None:
    # Both partitions on broker 0, so their first batches travel in one request. One request
    # in flight per connection, so the later batches are still queued when the fenced answer
    # comes (test_fencing_settles_batches_in_flight_by_their_answers has more in flight).
    cluster.create_topic("u", [0, 0])
    client = cluster.client(
        config=ClientConfig(retry_backoff_ms=100, max_in_flight_requests_per_connection=1),
        seed=SEED,
    )
    config = ProducerConfig(linger_ms=0, batch_size=100)
    producer = Producer(client, config=config, owns_client=True)
    first = await producer.send("u", None, bytes(50), partition=0)
    await settle()
    assert first.done()
    cluster.produce_errors[TopicPartition("u", 0)] = [code]
    # One record per batch: several batches queue behind each partition's first.
    futures = [await producer.send("u", None, bytes(50), partition=i % 2) for i in range(6)]
    await advance_until(clock, lambda: all(f.done() for f in futures), step_ms=10, max_steps=10)
    fenced = [f for f in futures if f.exception() is not None]
    # Partition 1's first batch was in the fenced request's company and was written.
    assert [f.result().offset for f in futures if f.exception() is None] == [0]
    assert len(fenced) == 5
    for f in fenced:
        error = f.exception()
        assert isinstance(error, KafkaError)
        assert error.code is code
    assert cluster.count(ApiKey.PRODUCE) == 2
    late = await producer.send("u", None, b"late", partition=1)
    with pytest.raises(KafkaError) as info:
        await late
    assert info.value.code is code
    assert cluster.count(ApiKey.PRODUCE) == 2
    await producer.close()


# -- idempotence off -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings", [{"acks": 1}, {"acks": ACKS_ALL, "enable_idempotence": False}, {"acks": 0}]
)
async def test_a_non_idempotent_producer_sends_no_producer_id(
    cluster: ScriptedCluster, settings: dict[str, Any]
) -> None:
    producer = make_producer(cluster, linger_ms=0, **settings)
    for i in range(3):
        await producer.send_and_wait("t", None, b"v%d" % i, partition=0)
    await producer.close()
    assert cluster.count(ApiKey.INIT_PRODUCER_ID) == 0
    assert sequences(cluster, P0) == [(NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE)] * 3


# -- lossy network ---------------------------------------------------------------------------------


# Seeds whose runs lose an answer (the last assertion); seed 3's no longer does since batches
# are pipelined (the same drops hit other chunks).
@pytest.mark.parametrize("seed", [1, 2, 4, 5])
async def test_no_record_is_logged_twice_over_a_lossy_network(seed: int) -> None:
    """Answers lost with their connections make the producer resend batches the brokers already
    appended; with sequences checked each record is in the log at most once, acknowledged ones
    exactly once at the offset their acknowledgement names, in send() order per partition."""
    clock = ManualClock()
    cluster = lossy_cluster(clock, seed)
    cluster.check_sequences = True
    await cluster.start()
    producer = Producer(
        cluster.client(config=CLIENT, seed=seed),
        config=ProducerConfig(
            linger_ms=3, batch_size=300, request_timeout_ms=500, retry_backoff_ms=20
        ),
        owns_client=True,
    )
    sent = await send_all(producer, clock, seed)
    await producer.close()
    await cluster.stop()

    logged: dict[bytes | None, list[tuple[int, int]]] = {}
    for tp in (P0, P1):
        for _, data in cluster.logs[tp].batches:
            for pos, _header in iter_batches(data):
                for record in iter_records(data, pos):
                    logged.setdefault(record.value, []).append((tp.partition, record.offset))
    assert all(len(places) == 1 for places in logged.values()), f"seed={seed}: duplicates"
    acked = [(value, f.result()) for value, f in sent if f.exception() is None]
    assert len(acked) >= 190, f"seed={seed}: only {len(acked)} of 200 acknowledged"
    last: dict[int, int] = {}
    for value, meta in acked:
        assert logged[value] == [(meta.partition, meta.offset)], f"seed={seed} {meta}"
        assert meta.offset > last.get(meta.partition, -1), f"seed={seed}: reordered at {meta}"
        last[meta.partition] = meta.offset
    # The network really lost answers: some batch was sent more than once.
    sent_batches = len(cluster.produced)
    logged_count = sum(len(cluster.logs[tp].batches) for tp in (P0, P1))
    assert sent_batches > logged_count, f"seed={seed}: the run saw no resend"


# -- the bookkeeping alone -------------------------------------------------------------------------


def manager(cluster: ScriptedCluster) -> IdempotenceManager:
    return IdempotenceManager(
        cluster.client(seed=SEED),
        request_timeout_ms=1000,
        retry_backoff=ExponentialBackoff(initial_ms=100, max_ms=1000),
        rng=random.Random(SEED),
        wakeup=lambda: None,
    )


def batch(tp: TopicPartition, records: int) -> ProducerBatch:
    loop = asyncio.get_running_loop()
    pending = [PendingRecord(None, b"v", 0, (), loop.create_future()) for _ in range(records)]
    return ProducerBatch(tp, created_ms=0, records=pending)


def state(b: ProducerBatch) -> tuple[int, int, int]:
    return (b.producer_id, b.producer_epoch, b.base_sequence)


def encoded(b: ProducerBatch) -> bytes | None:
    return b.encoded  # read through a call: the state changes behind mypy's narrowing


def fatal_error(idempotence: IdempotenceManager) -> Exception | None:
    return idempotence.fatal_error


async def test_a_batch_sent_under_an_older_epoch_is_rewritten_without_another_bump(
    cluster: ScriptedCluster,
) -> None:
    idempotence = manager(cluster)
    idempotence.init_completed(ProducerIdAndEpoch(7, 0))
    a, b = batch(P0, 2), batch(P1, 3)
    idempotence.set_producer_state(a)
    idempotence.set_producer_state(b)
    a.encoded = b.encoded = b"built"
    assert (state(a), state(b)) == ((7, 0, 0), (7, 0, 0))
    idempotence.handle_sequence_error(a)
    assert not idempotence.can_send()
    request = idempotence.init_producer_id_request()
    assert (request.producer_id, request.producer_epoch) == (7, 0)
    idempotence.init_completed(ProducerIdAndEpoch(7, 1))
    assert idempotence.can_send()
    assert (state(a), encoded(a)) == ((7, 1, 0), None)  # rewritten: to be built again
    assert idempotence.next_sequence(P0) == 2
    # b was in flight under epoch 0 during the bump: epoch 1 already exists, so no new bump.
    idempotence.handle_sequence_error(b)
    assert idempotence.can_send()
    assert (state(b), encoded(b)) == ((7, 1, 0), None)
    c = batch(P1, 1)
    idempotence.set_producer_state(c)
    assert state(c) == (7, 1, 3)
    # A retried batch keeps its state.
    idempotence.set_producer_state(a)
    assert state(a) == (7, 1, 0)


async def test_only_a_rejection_under_the_current_epoch_asks_for_a_bump(
    cluster: ScriptedCluster,
) -> None:
    idempotence = manager(cluster)
    idempotence.init_completed(ProducerIdAndEpoch(7, 0))
    timed_out, rejected = batch(P0, 1), batch(P1, 1)
    idempotence.set_producer_state(timed_out)
    idempotence.set_producer_state(rejected)
    idempotence.batch_failed(timed_out, rejected=False)
    assert idempotence.can_send()
    assert idempotence.next_sequence(P0) == 1  # the outcome is unknown: go on
    idempotence.batch_failed(rejected, rejected=True)
    assert idempotence.bump_requested
    idempotence.init_completed(ProducerIdAndEpoch(7, 1))
    old = batch(P0, 1)
    old.set_producer_state(7, 0, 1)
    idempotence.batch_failed(old, rejected=True)  # an older epoch's: nothing to do
    assert idempotence.can_send()
    assert (idempotence.next_sequence(P0), idempotence.next_sequence(P1)) == (0, 0)


async def test_init_producer_id_failures_back_off_or_are_fatal(cluster: ScriptedCluster) -> None:
    idempotence = manager(cluster)
    idempotence.init_failed(KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE), now_ms=1000)
    first = idempotence.init_retry_at_ms
    assert first is not None
    assert 1080 <= first <= 1120
    idempotence.init_failed(RequestTimeoutError("lost"), now_ms=2000)
    assert idempotence.init_retry_at_ms is not None
    assert 2160 <= idempotence.init_retry_at_ms <= 2240
    assert fatal_error(idempotence) is None
    idempotence.init_failed(KafkaError(ErrorCode.INVALID_REQUEST), now_ms=3000)
    error = fatal_error(idempotence)
    assert isinstance(error, KafkaError)
    assert error.code is ErrorCode.INVALID_REQUEST
    assert not idempotence.can_send()
