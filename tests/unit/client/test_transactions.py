"""The transactional producer (client/transactions.py and its hooks in the producer) against
scripted brokers under a manual clock: the state table, the error classification, and the
conversation with a scripted transaction coordinator and group coordinator.

`TxnCluster` adds the transactional APIs to the scripted brokers (tests/unit/client/
scripted_cluster.py): FindCoordinator names `txn_coordinator` / `group_coordinator`, a request at
another broker is answered NOT_COORDINATOR, the coordinator keeps one transactional id's producer
id and epoch (InitProducerId bumps the epoch, a stale epoch is PRODUCER_FENCED), and
`txn_errors[api]` holds error codes to answer, in order, before answering normally.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable
from typing import Any, TypeVar

import pytest

from client.config import ClientConfig, ProducerConfig
from client.errors import (
    DeliveryTimeoutError,
    ProducerFencedError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionStateError,
)
from client.producer import Producer
from client.transactions import ErrorClass, TransactionState, classify, transition
from runtime.clock import ManualClock
from runtime.net.dialect import Handler, RequestContext
from tests.unit.client.scripted_cluster import ScriptedCluster, advance_until, batch_headers
from wire.errors import ErrorCode
from wire.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
    ApiKey,
    Coordinator,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from wire.messages.base import Request
from wire.messages.groups import COORDINATOR_TRANSACTION
from wire.topic import TopicPartition

SEED = 98
TXN_ID = "txn-1"
P0 = TopicPartition("t", 0)
P1 = TopicPartition("t", 1)
S = TransactionState
C = ErrorClass
T = TypeVar("T")

_TXN_APIS = (
    ApiKey.FIND_COORDINATOR,
    ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.ADD_OFFSETS_TO_TXN,
    ApiKey.END_TXN,
    ApiKey.TXN_OFFSET_COMMIT,
)


class TxnCluster(ScriptedCluster):
    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock, brokers=2, seed=SEED)
        self.txn_coordinator = 0
        self.group_coordinator = 1
        self.producer_id = 7_000
        self.epoch = -1  # no InitProducerId yet
        self.txn_errors: dict[int, list[int]] = {}
        self.txn_requests: list[tuple[int, Request]] = []  # (broker, request), in order
        self.overrides.update(
            {
                ApiKey.FIND_COORDINATOR: self.find_coordinator,
                ApiKey.INIT_PRODUCER_ID: self.init_txn_producer_id,
                ApiKey.ADD_PARTITIONS_TO_TXN: self.add_partitions,
                ApiKey.ADD_OFFSETS_TO_TXN: self.add_offsets,
                ApiKey.END_TXN: self.end_txn,
                ApiKey.TXN_OFFSET_COMMIT: self.txn_offset_commit,
            }
        )

    def handlers(self, broker: int) -> dict[int, Handler]:
        handlers = super().handlers(broker)
        handlers.update({key: self._dispatcher(broker, key) for key in _TXN_APIS})
        return handlers

    def sent(self, request_type: type[T]) -> list[T]:
        return [r for _, r in self.txn_requests if isinstance(r, request_type)]

    def _answer(self, broker: int, request: Request, coordinator: int) -> ErrorCode:
        """The scripted error, NOT_COORDINATOR at the wrong broker, or NONE."""
        self.txn_requests.append((broker, request))
        scripted = self.txn_errors.get(request.API_KEY)
        if scripted:
            return ErrorCode.from_code(scripted.pop(0))
        if broker != coordinator:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    def _check_epoch(self, producer_id: int, epoch: int) -> ErrorCode:
        if producer_id != self.producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        return ErrorCode.NONE if epoch == self.epoch else ErrorCode.PRODUCER_FENCED

    async def find_coordinator(
        self, broker: int, request: FindCoordinatorRequest, ctx: RequestContext
    ) -> FindCoordinatorResponse:
        self.txn_requests.append((broker, request))
        node = (
            self.txn_coordinator
            if request.key_type == COORDINATOR_TRANSACTION
            else self.group_coordinator
        )
        address = self.addresses[node]
        return FindCoordinatorResponse(
            coordinators=[
                Coordinator(key=key, node_id=node, host=address.host, port=address.port)
                for key in request.coordinator_keys
            ]
        )

    async def init_txn_producer_id(
        self, broker: int, request: InitProducerIdRequest, ctx: RequestContext
    ) -> InitProducerIdResponse:
        assert request.transactional_id == TXN_ID, request
        code = self._answer(broker, request, self.txn_coordinator)
        if code == ErrorCode.NONE and request.producer_id >= 0:
            code = self._check_epoch(request.producer_id, request.producer_epoch)
        if code != ErrorCode.NONE:
            return InitProducerIdResponse(error_code=code)
        self.epoch += 1
        return InitProducerIdResponse(producer_id=self.producer_id, producer_epoch=self.epoch)

    async def add_partitions(
        self, broker: int, request: AddPartitionsToTxnRequest, ctx: RequestContext
    ) -> AddPartitionsToTxnResponse:
        (txn,) = request.transactions
        code = self._answer(broker, request, self.txn_coordinator)
        if code == ErrorCode.NONE:
            code = self._check_epoch(txn.producer_id, txn.producer_epoch)
        return AddPartitionsToTxnResponse(
            results_by_transaction=[
                AddPartitionsToTxnResult(
                    transactional_id=txn.transactional_id,
                    topic_results=[
                        AddPartitionsToTxnTopicResult(
                            name=topic.name,
                            results_by_partition=[
                                AddPartitionsToTxnPartitionResult(
                                    partition_index=p, partition_error_code=code
                                )
                                for p in topic.partitions
                            ],
                        )
                        for topic in txn.topics
                    ],
                )
            ]
        )

    async def add_offsets(
        self, broker: int, request: AddOffsetsToTxnRequest, ctx: RequestContext
    ) -> AddOffsetsToTxnResponse:
        code = self._answer(broker, request, self.txn_coordinator)
        if code == ErrorCode.NONE:
            code = self._check_epoch(request.producer_id, request.producer_epoch)
        return AddOffsetsToTxnResponse(error_code=code)

    async def end_txn(
        self, broker: int, request: EndTxnRequest, ctx: RequestContext
    ) -> EndTxnResponse:
        code = self._answer(broker, request, self.txn_coordinator)
        if code == ErrorCode.NONE:
            code = self._check_epoch(request.producer_id, request.producer_epoch)
        return EndTxnResponse(error_code=code)

    async def txn_offset_commit(
        self, broker: int, request: TxnOffsetCommitRequest, ctx: RequestContext
    ) -> TxnOffsetCommitResponse:
        code = self._answer(broker, request, self.group_coordinator)
        return TxnOffsetCommitResponse(
            topics=[
                TxnOffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=[
                        TxnOffsetCommitResponsePartition(
                            partition_index=p.partition_index, error_code=code
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in request.topics
            ]
        )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def cluster(clock: ManualClock) -> AsyncIterator[TxnCluster]:
    cluster = TxnCluster(clock)
    cluster.create_topic("t", [0, 1])
    await cluster.start()
    yield cluster
    await cluster.stop()


def make_producer(cluster: ScriptedCluster, **settings: Any) -> Producer:
    client = cluster.client(config=ClientConfig(retry_backoff_ms=100), seed=SEED)
    config = ProducerConfig(
        **{
            "transactional_id": TXN_ID,
            "linger_ms": 0,
            "request_timeout_ms": 1_000,
            "delivery_timeout_ms": 5_000,
            "retry_backoff_ms": 100,
            **settings,
        }
    )
    return Producer(client, config=config, owns_client=True)


async def run(clock: ManualClock, awaitable: Awaitable[T], *, max_steps: int = 1_000) -> T:
    """Await `awaitable` while the manual clock advances 10 ms at a time."""
    task = asyncio.ensure_future(awaitable)
    await advance_until(clock, task.done, step_ms=10, max_steps=max_steps)
    return task.result()


async def ready_producer(cluster: TxnCluster, clock: ManualClock, **settings: Any) -> Producer:
    producer = make_producer(cluster, **settings)
    await run(clock, producer.init_transactions())
    return producer


async def send(
    producer: Producer, clock: ManualClock, tp: TopicPartition, value: bytes
) -> asyncio.Future[Any]:
    return await run(clock, producer.send(tp.topic, None, value, partition=tp.partition))


def state(producer: Producer) -> TransactionState:
    """The producer's transaction state (read through a call: it changes across awaits)."""
    assert producer.transactions is not None
    return producer.transactions.state


def api_order(cluster: ScriptedCluster, *keys: int) -> list[int]:
    """The API keys of the requests the brokers received, those of `keys` only, in order."""
    return [key for _, key in cluster.requests if key in keys]


# -- the state table -------------------------------------------------------------------------------

ALLOWED = {
    (S.UNINITIALIZED, S.INITIALIZING),
    (S.INITIALIZING, S.READY),
    (S.READY, S.IN_TRANSACTION),
    (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION),
    (S.IN_TRANSACTION, S.ABORTING_TRANSACTION),
    (S.IN_TRANSACTION, S.ABORTABLE_ERROR),
    (S.COMMITTING_TRANSACTION, S.READY),
    (S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR),
    (S.ABORTING_TRANSACTION, S.READY),
    (S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION),
    (S.ABORTABLE_ERROR, S.ABORTABLE_ERROR),
    *((state, S.FATAL_ERROR) for state in TransactionState),
}


@pytest.mark.parametrize(
    ("current", "target"), list(itertools.product(TransactionState, TransactionState))
)
def test_the_transition_table_is_kafkas(
    current: TransactionState, target: TransactionState
) -> None:
    if (current, target) in ALLOWED:
        assert transition(current, target) is target
    else:
        with pytest.raises(TransactionStateError, match="invalid transition"):
            transition(current, target)


# -- error classification --------------------------------------------------------------------------

TXN_REQUESTS = [
    ApiKey.INIT_PRODUCER_ID,
    ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.ADD_OFFSETS_TO_TXN,
    ApiKey.TXN_OFFSET_COMMIT,
    ApiKey.END_TXN,
]


@pytest.mark.parametrize("api", TXN_REQUESTS)
def test_every_request_shares_the_coordinator_and_fencing_rules(api: ApiKey) -> None:
    assert classify(api, ErrorCode.NONE) is C.NONE
    assert classify(api, ErrorCode.NOT_COORDINATOR) is C.FIND_COORDINATOR
    assert classify(api, ErrorCode.COORDINATOR_NOT_AVAILABLE) is C.FIND_COORDINATOR
    assert classify(api, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS) is C.RETRY
    assert classify(api, ErrorCode.CONCURRENT_TRANSACTIONS) is C.RETRY
    assert classify(api, ErrorCode.PRODUCER_FENCED) is C.FENCED
    assert classify(api, ErrorCode.INVALID_PRODUCER_EPOCH) is C.FENCED
    assert classify(api, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) is C.FATAL
    assert classify(api, ErrorCode.UNKNOWN_SERVER_ERROR) is C.FATAL


@pytest.mark.parametrize(
    ("api", "code", "expected"),
    [
        # FindCoordinator goes to any broker: nothing to look up again.
        (ApiKey.FIND_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE, C.RETRY),
        (ApiKey.FIND_COORDINATOR, ErrorCode.GROUP_AUTHORIZATION_FAILED, C.ABORTABLE),
        (ApiKey.FIND_COORDINATOR, ErrorCode.INVALID_REQUEST, C.FATAL),
        (ApiKey.ADD_PARTITIONS_TO_TXN, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, C.RETRY),
        (ApiKey.ADD_PARTITIONS_TO_TXN, ErrorCode.TOPIC_AUTHORIZATION_FAILED, C.ABORTABLE),
        (ApiKey.ADD_PARTITIONS_TO_TXN, ErrorCode.UNKNOWN_PRODUCER_ID, C.ABORTABLE),
        (ApiKey.ADD_PARTITIONS_TO_TXN, ErrorCode.INVALID_TXN_STATE, C.FATAL),
        (ApiKey.ADD_OFFSETS_TO_TXN, ErrorCode.GROUP_AUTHORIZATION_FAILED, C.ABORTABLE),
        (ApiKey.TXN_OFFSET_COMMIT, ErrorCode.REQUEST_TIMED_OUT, C.FIND_COORDINATOR),
        (ApiKey.TXN_OFFSET_COMMIT, ErrorCode.ILLEGAL_GENERATION, C.ABORTABLE),
        (ApiKey.TXN_OFFSET_COMMIT, ErrorCode.UNKNOWN_MEMBER_ID, C.ABORTABLE),
        (ApiKey.END_TXN, ErrorCode.INVALID_PRODUCER_ID_MAPPING, C.ABORTABLE),
        (ApiKey.END_TXN, ErrorCode.INVALID_TXN_STATE, C.FATAL),
        (ApiKey.END_TXN, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, C.FATAL),
        (ApiKey.INIT_PRODUCER_ID, ErrorCode.INVALID_TRANSACTION_TIMEOUT, C.FATAL),
    ],
)
def test_per_api_classification(api: ApiKey, code: ErrorCode, expected: ErrorClass) -> None:
    assert classify(api, code) is expected


# -- configuration ---------------------------------------------------------------------------------


def test_a_transactional_producer_is_idempotent_with_acks_all() -> None:
    config = ProducerConfig.from_properties(
        {"transactional.id": "a", "transaction.timeout.ms": "5000"}
    )
    assert (config.transactional_id, config.transaction_timeout_ms) == ("a", 5_000)
    assert config.idempotent
    assert config.transactional
    assert not ProducerConfig().transactional
    assert ProducerConfig().transaction_timeout_ms == 60_000
    with pytest.raises(ValueError, match=r"enable\.idempotence=false"):
        ProducerConfig(transactional_id="a", enable_idempotence=False)
    with pytest.raises(ValueError, match="acks=all"):
        ProducerConfig.from_properties({"transactional.id": "a", "acks": "1"})
    with pytest.raises(ValueError, match="empty"):
        ProducerConfig(transactional_id="")
    with pytest.raises(ValueError, match=r"transaction\.timeout\.ms"):
        ProducerConfig(transactional_id="a", transaction_timeout_ms=0)


# -- calls out of order ----------------------------------------------------------------------------


async def test_calls_out_of_order_raise_and_change_nothing(
    cluster: TxnCluster, clock: ManualClock
) -> None:
    producer = make_producer(cluster)
    with pytest.raises(TransactionStateError):
        producer.begin_transaction()
    with pytest.raises(TransactionStateError, match="send"):
        await run(clock, producer.send("t", None, b"v", partition=0))
    await run(clock, producer.init_transactions())
    with pytest.raises(TransactionStateError):
        await run(clock, producer.init_transactions())
    with pytest.raises(TransactionStateError):
        await run(clock, producer.commit_transaction())
    with pytest.raises(TransactionStateError):
        await run(clock, producer.abort_transaction())
    with pytest.raises(TransactionStateError):  # outside a transaction
        await run(clock, producer.send_offsets_to_transaction({P0: 1}, "g"))
    producer.begin_transaction()
    with pytest.raises(TransactionStateError):
        producer.begin_transaction()
    assert state(producer) is S.IN_TRANSACTION
    assert cluster.count(ApiKey.PRODUCE) == 0
    await run(clock, producer.close())


async def test_transactional_calls_need_a_transactional_id(
    cluster: TxnCluster, clock: ManualClock
) -> None:
    client = cluster.client(config=ClientConfig(), seed=SEED)
    producer = Producer(client, config=ProducerConfig(), owns_client=True)
    assert producer.transactions is None
    with pytest.raises(TransactionStateError, match=r"transactional\.id"):
        await producer.init_transactions()
    with pytest.raises(TransactionStateError, match=r"transactional\.id"):
        producer.begin_transaction()
    await producer.close()


async def test_one_call_at_a_time(cluster: TxnCluster, clock: ManualClock) -> None:
    producer = await ready_producer(cluster, clock)
    producer.begin_transaction()
    await send(producer, clock, P0, b"v")
    cluster.txn_errors[ApiKey.END_TXN] = [ErrorCode.CONCURRENT_TRANSACTIONS] * 3
    commit = asyncio.ensure_future(producer.commit_transaction())
    await advance_until(clock, lambda: bool(cluster.sent(EndTxnRequest)), step_ms=10, max_steps=50)
    with pytest.raises(TransactionStateError, match="under way"):
        await producer.abort_transaction()
    await run(clock, commit)
    assert state(producer) is S.READY
    await run(clock, producer.close())


# -- the conversation ------------------------------------------------------------------------------


async def test_a_transaction_adds_partitions_before_their_batches_and_commits_after_them(
    cluster: TxnCluster, clock: ManualClock
) -> None:
    producer = await ready_producer(cluster, clock)
    (init,) = cluster.sent(InitProducerIdRequest)
    assert (init.transactional_id, init.transaction_timeout_ms) == (TXN_ID, 60_000)
    assert (init.producer_id, init.producer_epoch) == (-1, -1)
    # Found the coordinator first, then asked it (broker 0).
    assert [b for b, r in cluster.txn_requests] == [0, cluster.txn_coordinator]
    producer.begin_transaction()
    # The first AddPartitionsToTxn is retried after a backoff: no batch may go before it.
    cluster.txn_errors[ApiKey.ADD_PARTITIONS_TO_TXN] = [ErrorCode.CONCURRENT_TRANSACTIONS]
    futures = [await send(producer, clock, tp, b"v") for tp in (P0, P1, P0)]
    await run(clock, producer.commit_transaction())
    assert all(f.result().offset >= 0 for f in futures)
    keys = (ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.PRODUCE, ApiKey.END_TXN)
    order = api_order(cluster, *keys)
    assert order[:2] == [ApiKey.ADD_PARTITIONS_TO_TXN] * 2, order
    assert order[-1] == ApiKey.END_TXN
    added = {
        TopicPartition(topic.name, p)
        for request in cluster.sent(AddPartitionsToTxnRequest)
        for topic in request.transactions[0].topics
        for p in topic.partitions
    }
    assert added == {P0, P1}
    (end,) = cluster.sent(EndTxnRequest)
    assert (end.producer_id, end.producer_epoch, end.committed) == (7_000, 0, True)
    # Every batch is transactional, numbered as an idempotent producer numbers them.
    headers = batch_headers(cluster, P0) + batch_headers(cluster, P1)
    assert all(h.is_transactional and h.producer_id == 7_000 for h in headers), headers
    assert [h.base_sequence for h in batch_headers(cluster, P1)] == [0]
    # The next transaction adds its partitions again; sequences go on under the same epoch.
    adds = len(cluster.sent(AddPartitionsToTxnRequest))
    producer.begin_transaction()
    await send(producer, clock, P0, b"w")
    await run(clock, producer.commit_transaction())
    assert len(cluster.sent(AddPartitionsToTxnRequest)) == adds + 1
    # P0 had two records (sequences 0 and 1) in the first transaction.
    assert batch_headers(cluster, P0)[-1].base_sequence == 2
    await run(clock, producer.close())


async def test_an_empty_transaction_ends_without_the_coordinator(
    cluster: TxnCluster, clock: ManualClock
) -> None:
    producer = await ready_producer(cluster, clock)
    producer.begin_transaction()
    await run(clock, producer.commit_transaction())
    producer.begin_transaction()
    await run(clock, producer.abort_transaction())
    assert cluster.sent(EndTxnRequest) == []
    assert cluster.sent(AddPartitionsToTxnRequest) == []
    assert state(producer) is S.READY
    await run(clock, producer.close())


async def test_coordinator_errors_are_retried_and_a_moved_coordinator_is_found_again(
    cluster: TxnCluster, clock: ManualClock
) -> None:
    cluster.txn_errors[ApiKey.INIT_PRODUCER_ID] = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS]
    producer = await ready_producer(cluster, clock)
    assert len(cluster.sent(InitProducerIdRequest)) == 2
    assert len(cluster.sent(FindCoordinatorRequest)) == 1  # a load is waited out, not re-found
    producer.begin_transaction()
    await send(producer, clock, P0, b"v")
    # The coordinator moves to broker 1: the old one answers NOT_COORDINATOR.
    cluster.txn_coordinator = 1
    cluster.txn_errors[ApiKey.END_TXN] = [ErrorCode.CONCURRENT_TRANSACTIONS]
    await run(clock, producer.commit_transaction())
    ends = [b for b, r in cluster.txn_requests if isinstance(r, EndTxnRequest)]
    assert ends == [0, 0, 1]  # CONCURRENT_TRANSACTIONS, NOT_COORDINATOR, then the new one
    assert len(cluster.sent(FindCoordinatorRequest)) == 2
    await run(clock, producer.close())


async def test_a_call_out_of_time_leaves_the_state_and_resumes(
    cluster: TxnCluster, clock: ManualClock
) -> None:
    producer = await ready_producer(cluster, clock, delivery_timeout_ms=1_000)
    producer.begin_transaction()
    await send(producer, clock, P0, b"v")
    cluster.txn_errors[ApiKey.END_TXN] = [ErrorCode.COORDINATOR_LOAD_IN_PROGRESS] * 30
    with pytest.raises(DeliveryTimeoutError, match="END_TXN"):
        await run(clock, producer.commit_transaction())
    assert state(producer) is S.COMMITTING_TRANSACTION
    attempts = len(cluster.sent(EndTxnRequest))
    assert 2 < attempts < 30, attempts  # retried with backoff within the delivery timeout
    cluster.txn_errors[ApiKey.END_TXN] = []
    await run(clock, producer.commit_transaction())  # resumes: EndTxn again
    assert state(producer) is S.READY
    assert cluster.sent(EndTxnRequest)[-1].committed
    await run(clock, producer.close())


# -- fencing ---------------------------------------------------------------------------------------


async def test_a_fenced_end_is_fatal_for_every_later_call(
    cluster: TxnCluster, clock: ManualClock
) -> None:
    producer = await ready_producer(cluster, clock)
    producer.begin_transaction()
    await send(producer, clock, P0, b"v")
    cluster.epoch += 1  # a newer instance called InitProducerId
    with pytest.raises(ProducerFencedError) as fenced:
        await run(clock, producer.commit_transaction())
    assert fenced.value.code is ErrorCode.PRODUCER_FENCED
    assert state(producer) is S.FATAL_ERROR
    for call in (producer.begin_transaction,):
        with pytest.raises(ProducerFencedError) as again:
            call()
        assert again.value is fenced.value
    with pytest.raises(ProducerFencedError):
        await run(clock, producer.send("t", None, b"late", partition=1))
    with pytest.raises(ProducerFencedError):
        await run(clock, producer.abort_transaction())
    with pytest.raises(ProducerFencedError):
        await run(clock, producer.commit_transaction())
    ends = len(cluster.sent(EndTxnRequest))
    await run(clock, producer.close())  # no abort attempted for a fatal producer
    assert len(cluster.sent(EndTxnRequest)) == ends


@pytest.mark.parametrize("code", [ErrorCode.INVALID_PRODUCER_EPOCH, ErrorCode.PRODUCER_FENCED])
async def test_a_fenced_record_is_fatal(
    cluster: TxnCluster, clock: ManualClock, code: ErrorCode
) -> None:
    producer = await ready_producer(cluster, clock)
    producer.begin_transaction()
    cluster.produce_errors[P0] = [code]
    future = await send(producer, clock, P0, b"v")
    await advance_until(clock, future.done, step_ms=10, max_steps=100)
    assert isinstance(future.exception(), ProducerFencedError)
    with pytest.raises(ProducerFencedError):
        await run(clock, producer.commit_transaction())
    assert cluster.sent(EndTxnRequest) == []
    await run(clock, producer.close())


# -- abortable errors ------------------------------------------------------------------------------


async def test_a_failed_record_makes_the_transaction_abortable_and_the_abort_bumps_the_epoch(
    cluster: TxnCluster, clock: ManualClock
) -> None:
    producer = await ready_producer(cluster, clock)
    producer.begin_transaction()
    ok = await send(producer, clock, P1, b"ok")
    await advance_until(clock, ok.done, step_ms=10, max_steps=100)
    cluster.produce_errors[P0] = [ErrorCode.MESSAGE_TOO_LARGE]
    failed = await send(producer, clock, P0, b"too large")
    await advance_until(clock, failed.done, step_ms=10, max_steps=100)
    assert state(producer) is S.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError, match="must be aborted"):
        await run(clock, producer.send("t", None, b"more", partition=1))
    with pytest.raises(TransactionAbortableError):
        await run(clock, producer.commit_transaction())
    assert cluster.sent(EndTxnRequest) == []
    await run(clock, producer.abort_transaction())
    (end,) = cluster.sent(EndTxnRequest)
    assert not end.committed
    # The failed batch took sequence 0 of P0: the epoch is bumped (KIP-360) with the current
    # id and epoch, and the next transaction starts P0 (and P1) at 0 under epoch 1.
    bump = cluster.sent(InitProducerIdRequest)[-1]
    assert (bump.producer_id, bump.producer_epoch) == (7_000, 0)
    assert state(producer) is S.READY
    producer.begin_transaction()
    for tp in (P0, P1):
        await send(producer, clock, tp, b"again")
    await run(clock, producer.commit_transaction())
    assert [(h.producer_epoch, h.base_sequence) for h in batch_headers(cluster, P0)] == [
        (0, 0),
        (1, 0),
    ]
    assert [(h.producer_epoch, h.base_sequence) for h in batch_headers(cluster, P1)] == [
        (0, 0),
        (1, 0),
    ]
    await run(clock, producer.close())


async def test_records_of_an_abortable_transaction_are_never_sent(
    cluster: TxnCluster, clock: ManualClock
) -> None:
    producer = await ready_producer(cluster, clock)
    producer.begin_transaction()
    # Retried once after a backoff, so all three records are queued when it fails for good.
    cluster.txn_errors[ApiKey.ADD_PARTITIONS_TO_TXN] = [
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ]
    futures = [await send(producer, clock, P0, b"v%d" % i) for i in range(3)]
    assert not any(f.done() for f in futures)
    await advance_until(clock, lambda: all(f.done() for f in futures), step_ms=10, max_steps=100)
    for future in futures:
        error = future.exception()
        assert isinstance(error, TransactionAbortedError)
        assert "TOPIC_AUTHORIZATION_FAILED" in str(error)
    assert cluster.count(ApiKey.PRODUCE) == 0
    with pytest.raises(TransactionAbortableError):
        await run(clock, producer.commit_transaction())
    await run(clock, producer.abort_transaction())
    # Nothing joined the transaction and no sequence was used: no EndTxn, no epoch bump.
    assert cluster.sent(EndTxnRequest) == []
    assert len(cluster.sent(InitProducerIdRequest)) == 1
    await run(clock, producer.close())


async def test_an_abort_drops_what_was_not_sent_and_waits_for_what_was(
    cluster: TxnCluster, clock: ManualClock
) -> None:
    producer = await ready_producer(cluster, clock, linger_ms=10_000, batch_size=200)
    producer.begin_transaction()
    first = await send(producer, clock, P0, bytes(150))  # fills a batch: sent at once
    queued = await send(producer, clock, P1, b"lingering")  # waits for linger.ms
    await advance_until(clock, first.done, step_ms=10, max_steps=100)
    await run(clock, producer.abort_transaction())
    assert first.result().offset == 0
    assert isinstance(queued.exception(), TransactionAbortedError)
    assert batch_headers(cluster, P1) == []
    (end,) = cluster.sent(EndTxnRequest)
    assert not end.committed
    assert len(cluster.sent(InitProducerIdRequest)) == 1  # nothing failed: no bump
    await run(clock, producer.close())


async def test_close_aborts_an_open_transaction(cluster: TxnCluster, clock: ManualClock) -> None:
    producer = await ready_producer(cluster, clock)
    producer.begin_transaction()
    future = await send(producer, clock, P0, b"v")
    await advance_until(clock, future.done, step_ms=10, max_steps=100)
    await run(clock, producer.close())
    (end,) = cluster.sent(EndTxnRequest)
    assert not end.committed


# -- offsets ---------------------------------------------------------------------------------------


async def test_offsets_go_to_the_transaction_then_to_the_group_coordinator(
    cluster: TxnCluster, clock: ManualClock
) -> None:
    producer = await ready_producer(cluster, clock)
    producer.begin_transaction()
    cluster.txn_errors[ApiKey.TXN_OFFSET_COMMIT] = [ErrorCode.NOT_COORDINATOR]
    await run(clock, producer.send_offsets_to_transaction({P0: 5, P1: 9}, "group-a"))
    (add,) = cluster.sent(AddOffsetsToTxnRequest)
    assert (add.transactional_id, add.group_id, add.producer_epoch) == (TXN_ID, "group-a", 0)
    commits = [(b, r) for b, r in cluster.txn_requests if isinstance(r, TxnOffsetCommitRequest)]
    assert [b for b, _ in commits] == [cluster.group_coordinator] * 2  # re-found, then retried
    request = commits[-1][1]
    assert (request.group_id, request.producer_id, request.producer_epoch) == ("group-a", 7_000, 0)
    offsets = {
        TopicPartition(topic.name, p.partition_index): p.committed_offset
        for topic in request.topics
        for p in topic.partitions
    }
    assert offsets == {P0: 5, P1: 9}
    # The group joined the transaction: even with no record, the commit ends it.
    await run(clock, producer.commit_transaction())
    (end,) = cluster.sent(EndTxnRequest)
    assert end.committed
    await run(clock, producer.close())


async def test_a_fenced_group_member_makes_the_offsets_abortable(
    cluster: TxnCluster, clock: ManualClock
) -> None:
    producer = await ready_producer(cluster, clock)
    producer.begin_transaction()
    cluster.txn_errors[ApiKey.TXN_OFFSET_COMMIT] = [ErrorCode.ILLEGAL_GENERATION]
    with pytest.raises(TransactionAbortableError, match="ILLEGAL_GENERATION"):
        await run(clock, producer.send_offsets_to_transaction({P0: 5}, "group-a"))
    assert state(producer) is S.ABORTABLE_ERROR
    await run(clock, producer.abort_transaction())
    (end,) = cluster.sent(EndTxnRequest)
    assert not end.committed
    assert state(producer) is S.READY
    await run(clock, producer.close())
