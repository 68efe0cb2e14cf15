"""`TransactionCoordinator`: a broker's transaction coordinator, one `TransactionShard` per led
`__transaction_state` partition (Kafka's TransactionCoordinator).

Routing, the leadership hook and the moves are the shared `PartitionRouter`'s
(actors/partition_router.py): a transactional id belongs to partition `partition_for(id, n)`
(Java's String.hashCode, as Kafka), and this broker coordinates it while it leads that
partition. A request for an id led elsewhere is answered NOT_COORDINATOR; one whose partition is
loading, COORDINATOR_LOAD_IN_PROGRESS. The request methods turn Kafka's requests into the shard's
messages and its answers back into responses; the rules live in the shard and rules.py.

The admin side (KIP-664): DescribeTransactions is routed per id like the producer's requests;
ListTransactions asks every shard here (Kafka lists per broker, the admin client asks them all),
and answers only COORDINATOR_LOAD_IN_PROGRESS while any partition led here is still loading, as
Kafka does, so a listing never silently misses the ids of a loading partition.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Final

from actors.partition_log import InternalTopicLog
from actors.partition_router import PartitionRouter
from actors.transactions.config import TransactionConfig
from actors.transactions.shard import (
    AddPartitions,
    DescribeTransaction,
    EndTxn,
    InitProducerId,
    ListTransactionStates,
    MarkerSender,
    TransactionDescription,
    TransactionShard,
)
from runtime.actor import MailboxError
from runtime.clock import Clock
from wire.errors import ErrorCode
from wire.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopicResult,
    AddPartitionsToTxnTransaction,
    DescribedTransaction,
    DescribedTransactionTopic,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from wire.topic import TopicPartition
from wire.transaction_log import TRANSACTION_STATE_TOPIC, TransactionState, partition_for

log = logging.getLogger(__name__)

# Kafka's TransactionState.fromName: the names ListTransactions' state filters may use.
_STATES_BY_NAME: Final = {state.kafka_name: state for state in TransactionState}


class TransactionCoordinator(PartitionRouter[TransactionShard]):
    def __init__(
        self,
        log_: InternalTopicLog,
        markers: MarkerSender,
        config: TransactionConfig,
        *,
        clock: Clock,
        new_producer_id: Callable[[], Awaitable[int | ErrorCode]],
        coordinator_epoch: Callable[[int], int],
        state_partitions: Callable[[], int | None],
    ) -> None:
        """`coordinator_epoch(p)`: the leader epoch of `__transaction_state` partition p here;
        `state_partitions()`: its partition count in the broker's metadata, None while it does
        not exist."""
        super().__init__("txn-coordinator", TRANSACTION_STATE_TOPIC, clock=clock)
        self._log = log_
        self._markers = markers
        self.config = config
        self._new_producer_id = new_producer_id
        self._coordinator_epoch = coordinator_epoch
        self._state_partitions = state_partitions

    def _new_shard(self, partition: int) -> TransactionShard:
        return TransactionShard(
            partition,
            self._log,
            self._markers,
            self.config,
            new_producer_id=self._new_producer_id,
            coordinator_epoch=self._coordinator_epoch,
            clock=self.clock,
        )

    def partition_of(self, transactional_id: str) -> int:
        partitions = self._state_partitions() or self.config.num_partitions
        return partition_for(transactional_id, partitions)

    # -- requests ------------------------------------------------------------------------------

    async def init_producer_id(self, request: InitProducerIdRequest) -> InitProducerIdResponse:
        transactional_id = request.transactional_id or ""
        shard = self.shard_for(transactional_id)
        if isinstance(shard, ErrorCode):
            return InitProducerIdResponse(error_code=shard)
        try:
            answer = await shard.ask(
                InitProducerId(
                    transactional_id,
                    request.transaction_timeout_ms,
                    request.producer_id,
                    request.producer_epoch,
                )
            )
        except MailboxError:
            return InitProducerIdResponse(error_code=ErrorCode.NOT_COORDINATOR)
        return InitProducerIdResponse(
            error_code=answer.error,
            producer_id=answer.producer_id,
            producer_epoch=answer.producer_epoch,
        )

    async def add_partitions_to_txn(
        self, request: AddPartitionsToTxnRequest
    ) -> AddPartitionsToTxnResponse:
        results = [await self._add_partitions(txn) for txn in request.transactions]
        return AddPartitionsToTxnResponse(results_by_transaction=results)

    async def _add_partitions(self, txn: AddPartitionsToTxnTransaction) -> AddPartitionsToTxnResult:
        partitions = frozenset(
            TopicPartition(topic.name, p) for topic in txn.topics for p in topic.partitions
        )
        error: ErrorCode
        if txn.verify_only:
            # KIP-890's verification is not built: nothing is ever verified here.
            error = ErrorCode.UNSUPPORTED_VERSION
        else:
            error = await self._ask_add(
                AddPartitions(txn.transactional_id, txn.producer_id, txn.producer_epoch, partitions)
            )
        return AddPartitionsToTxnResult(
            transactional_id=txn.transactional_id,
            topic_results=[
                AddPartitionsToTxnTopicResult(
                    name=topic.name,
                    results_by_partition=[
                        AddPartitionsToTxnPartitionResult(
                            partition_index=p, partition_error_code=error
                        )
                        for p in topic.partitions
                    ],
                )
                for topic in txn.topics
            ],
        )

    async def _ask_add(self, message: AddPartitions) -> ErrorCode:
        shard = self.shard_for(message.transactional_id)
        if isinstance(shard, ErrorCode):
            return shard
        try:
            return await shard.ask(message)
        except MailboxError:
            return ErrorCode.NOT_COORDINATOR

    async def add_offsets_to_txn(
        self, request: AddOffsetsToTxnRequest, offsets_partition: TopicPartition
    ) -> AddOffsetsToTxnResponse:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition (`offsets_partition`, by
        the group coordinator's partitioning) joins the transaction, exactly as an
        AddPartitionsToTxn of that one partition (Kafka's handleAddOffsetsToTxnRequest)."""
        error = await self._ask_add(
            AddPartitions(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                frozenset({offsets_partition}),
            )
        )
        return AddOffsetsToTxnResponse(error_code=error)

    async def end_txn(self, request: EndTxnRequest) -> EndTxnResponse:
        shard = self.shard_for(request.transactional_id)
        if isinstance(shard, ErrorCode):
            return EndTxnResponse(error_code=shard)
        try:
            error = await shard.ask(
                EndTxn(
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    request.committed,
                )
            )
        except MailboxError:
            error = ErrorCode.NOT_COORDINATOR
        return EndTxnResponse(error_code=error)

    # -- admin (KIP-664) -----------------------------------------------------------------------

    async def describe_transactions(
        self, request: DescribeTransactionsRequest
    ) -> DescribeTransactionsResponse:
        return DescribeTransactionsResponse(
            transaction_states=[await self._describe(tid) for tid in request.transactional_ids]
        )

    async def _describe(self, transactional_id: str) -> DescribedTransaction:
        if not transactional_id:
            return DescribedTransaction(
                error_code=ErrorCode.INVALID_REQUEST, transactional_id=transactional_id
            )
        shard = self.shard_for(transactional_id)
        found: TransactionDescription | ErrorCode | None
        if isinstance(shard, ErrorCode):
            found = shard
        else:
            try:
                found = await shard.ask(DescribeTransaction(transactional_id))
            except MailboxError:
                found = ErrorCode.NOT_COORDINATOR
        if found is None:
            found = ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        if isinstance(found, ErrorCode):
            return DescribedTransaction(error_code=found, transactional_id=transactional_id)
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(found.topic_partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        return DescribedTransaction(
            transactional_id=transactional_id,
            transaction_state=found.state.kafka_name,
            transaction_timeout_ms=found.txn_timeout_ms,
            transaction_start_time_ms=found.txn_start_timestamp,
            producer_id=found.producer_id,
            producer_epoch=found.producer_epoch,
            topics=[
                DescribedTransactionTopic(topic=topic, partitions=partitions)
                for topic, partitions in by_topic.items()
            ],
        )

    async def list_transactions(self, request: ListTransactionsRequest) -> ListTransactionsResponse:
        """The ids of every `__transaction_state` partition this broker leads that match the
        request's filters (Kafka's listTransactionStates); state names Kafka does not know are
        answered in `unknown_state_filters` and match nothing."""
        unknown = [name for name in request.state_filters if name not in _STATES_BY_NAME]
        named = frozenset(_STATES_BY_NAME[n] for n in request.state_filters if n not in unknown)
        query = ListTransactionStates(
            states=named if request.state_filters else None,
            producer_ids=frozenset(request.producer_id_filters),
            duration_filter_ms=request.duration_filter,
        )
        # A shard not running failed (a bug, logged): it lists nothing, as one led elsewhere.
        shards = [shard for shard in self.shards.values() if shard.running]
        # A partition led here whose shard has not started yet is loading too (shard_for's rule).
        if any(self._pending.moves.values()) or any(shard.loading for shard in shards):
            return ListTransactionsResponse(error_code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
        listed: list[TransactionDescription] = []
        for shard in shards:
            try:
                found = await shard.ask(query)
            except MailboxError:
                continue  # unloaded meanwhile: its ids are another broker's to list
            listed.extend(found)
        return ListTransactionsResponse(
            unknown_state_filters=unknown,
            transaction_states=[
                ListedTransaction(
                    transactional_id=found.transactional_id,
                    producer_id=found.producer_id,
                    transaction_state=found.state.kafka_name,
                )
                for found in listed
            ],
        )
