"""The broker's data path: Produce, Fetch, ListOffsets and OffsetForLeaderEpoch (and
DescribeProducers, which reads a partition's producer state the same way).

These requests do not go through the ReplicaManager's mailbox: that would serialise every
request of the broker behind one actor. `RequestPath` is a plain object the request handlers call
concurrently. For each partition it looks the `PartitionActor` up in the routing snapshot the
ReplicaManager publishes (an immutable mapping, replaced whole on change), asks that actor
directly, and parks acks=all produces and fetches short of min_bytes in the broker's
`DelayedOperations`.

The broker has two: the clients' (every API handler's), and one with `AppendOrigin.COORDINATOR`
over the same partitions and purgatories for the coordinators' own writes to their internal
topics (Kafka's appends with AppendOrigin.COORDINATOR): a transactional offset commit carries
its producer's id and epoch but not its sequence numbers, so its leader checks the epoch only.

Ownership and why no lock: `RequestPath` owns no mutable broker state. It reads published
snapshots (routing table, `PartitionView`s), sends messages to partition actors, and hands
delayed operations to the purgatories, whose methods never await. Each request's own state lives
in its coroutine.

Answers follow Kafka's ReplicaManager: acks 0/1 answer after the leader append; acks=all waits
for the high watermark (REQUEST_TIMED_OUT at the request's timeout); a fetch answers at once when
it has min_bytes, when max_wait is 0, or when a partition errored, otherwise it waits in the
fetch purgatory and re-reads when woken. Unknown partitions are UNKNOWN_TOPIC_OR_PARTITION; a
stopped partition actor is NOT_LEADER_OR_FOLLOWER (KAFKA_STORAGE_ERROR if its log failed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Set
from typing import Any, Final, TypeVar

from actors.replication.delayed import DelayedOperations
from actors.replication.delayed_fetch import DelayedFetch, FetchParams, FetchPartitionStatus
from actors.replication.delayed_produce import (
    DelayedProduce,
    ProducePartitionStatus,
    ProduceResults,
    build_produce_response,
)
from actors.replication.partition import PartitionActor
from actors.replication.partition_messages import (
    ACKS_ALL,
    ACKS_LEADER,
    ACKS_NONE,
    READ_COMMITTED,
    ActiveProducerState,
    AppendAsLeader,
    AppendTxnMarker,
    FetchOffsetForTimestamp,
    GetActiveProducers,
    LastOffsetForEpoch,
    LeaderAppendResult,
    OffsetForTimestampResult,
    ReadRecords,
    ReadResult,
)
from actors.views import PartitionView
from runtime.actor import Actor, ActorFatalError, Ask, MailboxClosed
from runtime.log.producer_state import AppendOrigin
from wire.errors import ErrorCode
from wire.messages import (
    DescribedProducer,
    DescribeProducersPartitionResponse,
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeProducersTopicResponse,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchAbortedTransaction,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchResponsePartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderTopicResult,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    WritableTxnMarker,
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from wire.messages.data import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
)
from wire.messages.fields import RecordSet
from wire.topic import TopicPartition

R = TypeVar("R")
T = TypeVar("T")

DEBUGGING_REPLICA_ID: Final = (
    -2
)  # Kafka's replica id for requests that may be served by any replica
DEFAULT_MESSAGE_MAX_BYTES: Final = 1024 * 1024 + 12  # Kafka's message.max.bytes
# How long a transaction marker waits for the ISR (Kafka's coordinator uses its request timeout,
# request.timeout.ms, 30 s by default); the coordinator retries a marker that timed out.
MARKER_TIMEOUT_MS: Final = 30_000

PartitionLookup = Callable[[TopicPartition], PartitionActor | None]


# -- asking a partition ----------------------------------------------------------------------------


async def _all(*awaitables: Coroutine[Any, Any, T]) -> list[T]:
    """`asyncio.gather`, except that a lone coroutine is awaited in place. gather wraps each one
    in a task, and its answer then takes two more loop turns (the task's, and gather's callback)
    to come back, in which other ready work runs first: for a one-partition produce, the very
    follower fetches its append woke. Requests name one partition more often than not."""
    if len(awaitables) == 1:
        return [await awaitables[0]]
    return list(await asyncio.gather(*awaitables))


async def ask_partition(actor: Actor, message: Ask[R]) -> R | ErrorCode:
    """Ask a partition actor; a stopped or failed actor becomes a Kafka error code.

    A stopped actor was stopped by StopReplica (kept routed while its log stays on disk) or is
    being replaced: the client must refresh its metadata, NOT_LEADER_OR_FOLLOWER. An actor
    stopped by a log failure is Kafka's offline partition: KAFKA_STORAGE_ERROR. Other exceptions
    are bugs and propagate.
    """
    try:
        return await actor.ask(message)
    except ActorFatalError:
        return ErrorCode.KAFKA_STORAGE_ERROR
    except MailboxClosed:
        if actor.failure is not None:
            return ErrorCode.KAFKA_STORAGE_ERROR
        return ErrorCode.NOT_LEADER_OR_FOLLOWER


# -- the data path ---------------------------------------------------------------------------------


class RequestPath:
    """Serves the data-plane requests of one broker; safe to call from many tasks at once."""

    def __init__(
        self,
        partitions: PartitionLookup,
        delayed: DelayedOperations,
        *,
        message_max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES,
        min_insync_replicas: Callable[[str], int] = lambda topic: 1,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> None:
        """`origin` COORDINATOR: a path for the coordinators' own writes to their internal
        topics, never for a client's request (the appends skip the producer's sequence rules)."""
        self._partitions = partitions
        self._delayed = delayed
        self._message_max_bytes = message_max_bytes
        self._min_insync_replicas = min_insync_replicas
        self._origin = origin

    def view_of(self, tp: TopicPartition) -> PartitionView | None:
        """The partition's latest published view (the lookup delayed operations use)."""
        actor = self._partitions(tp)
        return None if actor is None else actor.view

    # -- Produce ----------------------------------------------------------------------------

    async def produce(self, request: ProduceRequest) -> ProduceResponse:
        """The answer to a produce. With acks=0 the caller sends nothing back, but the appends
        happen and their outcome is returned all the same (for logs and tests)."""
        entries = [
            (TopicPartition(topic.name, data.index), data.records)
            for topic in request.topic_data
            for data in topic.partition_data
        ]
        if request.acks not in (ACKS_NONE, ACKS_LEADER, ACKS_ALL):
            return build_produce_response(
                (
                    tp,
                    PartitionProduceResponse(
                        index=tp.partition, error_code=ErrorCode.INVALID_REQUIRED_ACKS
                    ),
                )
                for tp, _ in entries
            )
        # A partition named twice is ambiguous (which batch goes first?) and would make two
        # waits on one purgatory key: neither copy is appended.
        duplicated = _duplicated(tp for tp, _ in entries)
        appended = await _all(
            *(
                self._append(tp, records, request.acks, duplicated=tp in duplicated)
                for tp, records in entries
            )
        )
        if request.acks != ACKS_ALL:
            return build_produce_response(
                (tp, _produce_answer(tp, result))
                for (tp, _), result in zip(entries, appended, strict=True)
            )
        statuses = [
            self._produce_status(tp, result)
            for (tp, _), result in zip(entries, appended, strict=True)
            if tp not in duplicated
        ]
        results = await self._wait_for_acks(request.timeout_ms, statuses)
        return build_produce_response(
            (
                tp,
                _produce_answer(tp, ErrorCode.INVALID_REQUEST) if tp in duplicated else results[tp],
            )
            for tp, _ in entries
        )

    async def _append(
        self, tp: TopicPartition, records: RecordSet, acks: int, *, duplicated: bool
    ) -> LeaderAppendResult | ErrorCode:
        if duplicated:
            return ErrorCode.INVALID_REQUEST
        if len(records) > self._message_max_bytes:
            return ErrorCode.MESSAGE_TOO_LARGE
        actor = self._partitions(tp)
        if actor is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        result = await ask_partition(
            actor,
            AppendAsLeader(records, acks, self._min_insync_replicas(tp.topic), self._origin),
        )
        if isinstance(result, LeaderAppendResult) and result.error is not ErrorCode.NONE:
            return result.error
        return result

    def _produce_status(
        self, tp: TopicPartition, result: LeaderAppendResult | ErrorCode
    ) -> ProducePartitionStatus:
        if isinstance(result, ErrorCode):
            return ProducePartitionStatus(tp, error=result)
        info = result.info
        assert info is not None, result  # a successful append always reports its offsets
        return ProducePartitionStatus(
            tp,
            required_offset=info.last_offset + 1,
            leadership=result.leadership,
            min_insync_replicas=self._min_insync_replicas(tp.topic),
            base_offset=info.first_offset,
            log_start_offset=result.log_start_offset,
        )

    async def _wait_for_acks(
        self, timeout_ms: int, statuses: list[ProducePartitionStatus]
    ) -> ProduceResults:
        answered: asyncio.Future[ProduceResults] = asyncio.get_running_loop().create_future()

        def respond(results: ProduceResults) -> None:
            # The request's task may have been cancelled (its connection closed) meanwhile.
            if not answered.done():
                answered.set_result(results)

        self._delayed.watch_produce(DelayedProduce(timeout_ms, statuses, self.view_of, respond))
        return await answered

    # -- WriteTxnMarkers ---------------------------------------------------------------------

    async def write_txn_markers(self, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        """Each marker's partitions appended here, then waited for as an acks=all produce; one
        marker after another, so that a partition named by two markers is never two waits on
        one purgatory key."""
        results = []
        for marker in request.markers:
            wanted = [
                TopicPartition(topic.name, p)
                for topic in marker.topics
                for p in topic.partition_indexes
            ]
            duplicated = _duplicated(wanted)
            appended = await _all(
                *(self._append_marker(tp, marker, duplicated=tp in duplicated) for tp in wanted)
            )
            statuses = [
                self._produce_status(tp, result)
                for tp, result in zip(wanted, appended, strict=True)
                if tp not in duplicated
            ]
            acked = await self._wait_for_acks(MARKER_TIMEOUT_MS, statuses)
            by_topic: dict[str, list[WritableTxnMarkerPartitionResult]] = {}
            for tp in wanted:
                code = ErrorCode.INVALID_REQUEST if tp in duplicated else acked[tp].error_code
                by_topic.setdefault(tp.topic, []).append(
                    WritableTxnMarkerPartitionResult(partition_index=tp.partition, error_code=code)
                )
            results.append(
                WritableTxnMarkerResult(
                    producer_id=marker.producer_id,
                    topics=[
                        WritableTxnMarkerTopicResult(name=name, partitions=partitions)
                        for name, partitions in by_topic.items()
                    ],
                )
            )
        return WriteTxnMarkersResponse(markers=results)

    async def _append_marker(
        self, tp: TopicPartition, marker: WritableTxnMarker, *, duplicated: bool
    ) -> LeaderAppendResult | ErrorCode:
        if duplicated:
            return ErrorCode.INVALID_REQUEST
        actor = self._partitions(tp)
        if actor is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        result = await ask_partition(
            actor,
            AppendTxnMarker(
                marker.producer_id,
                marker.producer_epoch,
                marker.coordinator_epoch,
                marker.transaction_result,
                self._min_insync_replicas(tp.topic),
            ),
        )
        if isinstance(result, LeaderAppendResult) and result.error is not ErrorCode.NONE:
            return result.error
        return result

    # -- Fetch ------------------------------------------------------------------------------

    async def fetch(self, request: FetchRequest) -> FetchResponse:
        params = FetchParams(
            request.replica_id,
            request.max_wait_ms,
            request.min_bytes,
            request.max_bytes,
            isolation_level=request.isolation_level,
        )
        wanted = [
            (TopicPartition(topic.topic, part.partition), part)
            for topic in request.topics
            for part in topic.partitions
        ]
        duplicated = _duplicated(tp for tp, _ in wanted)
        first = await self._read_all(params, wanted, duplicated)
        if not wanted or params.max_wait_ms <= 0 or self._answer_now(params, first):
            return _fetch_response(wanted, first)
        statuses = []
        for (tp, part), result in zip(wanted, first, strict=True):
            assert result.fetch_offset_metadata is not None, result  # no error: a position
            statuses.append(
                FetchPartitionStatus(
                    tp,
                    result.fetch_offset_metadata,
                    part.partition_max_bytes,
                    read_leader_epoch=result.leader_epoch,
                    current_leader_epoch=part.current_leader_epoch,
                    read_committed=params.isolation_level == READ_COMMITTED,
                )
            )
        # The purgatory decides from views only; the final read is a message to each actor and
        # so cannot run inside on_complete. on_ready just releases this coroutine, which reads:
        # the request's own task does the read, so nothing outlives a cancelled request.
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def on_ready(_: DelayedFetch) -> None:
            if not ready.done():
                ready.set_result(None)

        self._delayed.watch_fetch(DelayedFetch(params, statuses, self.view_of, on_ready))
        await ready
        return _fetch_response(wanted, await self._read_all(params, wanted, duplicated))

    @staticmethod
    def _answer_now(params: FetchParams, results: list[ReadResult]) -> bool:
        if any(result.error is not ErrorCode.NONE for result in results):
            return True
        return sum(len(result.records) for result in results) >= params.min_bytes

    async def _read_all(
        self,
        params: FetchParams,
        wanted: list[tuple[TopicPartition, FetchPartition]],
        duplicated: Set[TopicPartition],
    ) -> list[ReadResult]:
        # A partition named twice is refused (an error answers the fetch at once, so it never
        # waits on one purgatory key twice).
        results = await _all(
            *(
                _refused(ErrorCode.INVALID_REQUEST)
                if tp in duplicated
                else self._read(params, tp, part)
                for tp, part in wanted
            )
        )
        return _within_max_bytes(results, params.max_bytes)

    async def _read(
        self, params: FetchParams, tp: TopicPartition, part: FetchPartition
    ) -> ReadResult:
        actor = self._partitions(tp)
        if actor is None:
            return ReadResult(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        result = await ask_partition(
            actor,
            ReadRecords(
                part.fetch_offset,
                min(part.partition_max_bytes, params.max_bytes),
                current_leader_epoch=part.current_leader_epoch,
                replica_id=params.replica_id if params.is_from_follower else -1,
                isolation_level=params.isolation_level,
            ),
        )
        return ReadResult(result) if isinstance(result, ErrorCode) else result

    # -- ListOffsets ------------------------------------------------------------------------

    async def list_offsets(self, request: ListOffsetsRequest) -> ListOffsetsResponse:
        only_leader = request.replica_id != DEBUGGING_REPLICA_ID
        topics = []
        for topic in request.topics:
            answers = await _all(
                *(
                    self._list_offset(
                        TopicPartition(topic.name, part.partition_index),
                        FetchOffsetForTimestamp(
                            part.timestamp,
                            part.current_leader_epoch,
                            request.replica_id,
                            only_leader,
                            request.isolation_level,
                        ),
                    )
                    for part in topic.partitions
                )
            )
            topics.append(ListOffsetsTopicResponse(name=topic.name, partitions=list(answers)))
        return ListOffsetsResponse(topics=topics)

    async def _list_offset(
        self, tp: TopicPartition, message: FetchOffsetForTimestamp
    ) -> ListOffsetsPartitionResponse:
        actor = self._partitions(tp)
        result: OffsetForTimestampResult | ErrorCode
        if actor is None:
            result = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            result = await ask_partition(actor, message)
        if isinstance(result, ErrorCode):
            return ListOffsetsPartitionResponse(partition_index=tp.partition, error_code=result)
        return ListOffsetsPartitionResponse(
            partition_index=tp.partition,
            error_code=result.error,
            timestamp=result.timestamp,
            offset=result.offset,
            leader_epoch=result.leader_epoch,
        )

    # -- OffsetForLeaderEpoch ---------------------------------------------------------------

    async def offset_for_leader_epoch(
        self, request: OffsetForLeaderEpochRequest
    ) -> OffsetForLeaderEpochResponse:
        only_leader = request.replica_id != DEBUGGING_REPLICA_ID
        topics = []
        for topic in request.topics:
            answers = await _all(
                *(
                    self._epoch_end(
                        TopicPartition(topic.topic, part.partition),
                        LastOffsetForEpoch(
                            part.leader_epoch, part.current_leader_epoch, only_leader
                        ),
                    )
                    for part in topic.partitions
                )
            )
            topics.append(OffsetForLeaderTopicResult(topic=topic.topic, partitions=list(answers)))
        return OffsetForLeaderEpochResponse(topics=topics)

    async def _epoch_end(self, tp: TopicPartition, message: LastOffsetForEpoch) -> EpochEndOffset:
        actor = self._partitions(tp)
        if actor is None:
            return EpochEndOffset(
                partition=tp.partition, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
        result = await ask_partition(actor, message)
        if isinstance(result, ErrorCode):
            return EpochEndOffset(partition=tp.partition, error_code=result)
        return EpochEndOffset(
            partition=tp.partition,
            error_code=result.error,
            leader_epoch=result.leader_epoch,
            end_offset=result.end_offset,
        )

    # -- DescribeProducers ------------------------------------------------------------------

    async def describe_producers(
        self, request: DescribeProducersRequest, *, known: Callable[[TopicPartition], bool]
    ) -> DescribeProducersResponse:
        """Each partition's active producers, from the replica hosted here. A partition not
        hosted here is NOT_LEADER_OR_FOLLOWER when `known` (the cluster has it: the admin client
        asks its leader instead), else UNKNOWN_TOPIC_OR_PARTITION, as Kafka's
        getPartitionOrError answers."""
        topics = []
        for topic in request.topics:
            answers = await _all(
                *(
                    self._active_producers(TopicPartition(topic.name, p), known)
                    for p in topic.partition_indexes
                )
            )
            topics.append(DescribeProducersTopicResponse(name=topic.name, partitions=list(answers)))
        return DescribeProducersResponse(topics=topics)

    async def _active_producers(
        self, tp: TopicPartition, known: Callable[[TopicPartition], bool]
    ) -> DescribeProducersPartitionResponse:
        actor = self._partitions(tp)
        result: ActiveProducerState | ErrorCode
        if actor is None:
            unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            result = ErrorCode.NOT_LEADER_OR_FOLLOWER if known(tp) else unknown
        else:
            result = await ask_partition(actor, GetActiveProducers())
        if isinstance(result, ErrorCode):
            return DescribeProducersPartitionResponse(
                partition_index=tp.partition, error_code=result
            )
        return DescribeProducersPartitionResponse(
            partition_index=tp.partition,
            error_code=result.error,
            active_producers=[
                DescribedProducer(
                    producer_id=p.producer_id,
                    producer_epoch=p.producer_epoch,
                    last_sequence=p.last_sequence,
                    last_timestamp=p.last_timestamp,
                    coordinator_epoch=p.coordinator_epoch,
                    current_txn_start_offset=p.current_txn_start_offset,
                )
                for p in result.producers
            ],
        )


async def _refused(error: ErrorCode) -> ReadResult:
    return ReadResult(error)


def _duplicated(tps: Iterable[TopicPartition]) -> frozenset[TopicPartition]:
    seen: set[TopicPartition] = set()
    twice: set[TopicPartition] = set()
    for tp in tps:
        (twice if tp in seen else seen).add(tp)
    return frozenset(twice)


# -- building answers ------------------------------------------------------------------------------


def _produce_answer(
    tp: TopicPartition, result: LeaderAppendResult | ErrorCode
) -> PartitionProduceResponse:
    if isinstance(result, ErrorCode):
        return PartitionProduceResponse(index=tp.partition, error_code=result)
    assert result.info is not None, result
    return PartitionProduceResponse(
        index=tp.partition,
        base_offset=result.info.first_offset,
        log_start_offset=result.log_start_offset,
    )


def _within_max_bytes(results: Iterable[ReadResult], max_bytes: int) -> list[ReadResult]:
    """Keep each partition's data in request order while the request's max_bytes lasts. The
    first data is always kept, however large, so that a batch bigger than max_bytes cannot stall
    a consumer for ever (Kafka's "min one message"); later data that does not fit is dropped and
    fetched again next time (a read changes nothing but a follower's fetch position, which is
    the fetch offset and not the data)."""
    kept: list[ReadResult] = []
    budget = max_bytes
    sent_any = False
    for result in results:
        size = len(result.records)
        if size and sent_any and size > budget:
            result = _without_records(result)
        elif size:
            budget -= size
            sent_any = True
        kept.append(result)
    return kept


def _without_records(result: ReadResult) -> ReadResult:
    return ReadResult(
        result.error,
        b"",
        result.fetch_offset_metadata,
        result.high_watermark,
        result.log_start_offset,
        result.log_end_offset,
        result.leader_epoch,
    )


def _fetch_response(
    wanted: list[tuple[TopicPartition, FetchPartition]], results: list[ReadResult]
) -> FetchResponse:
    by_topic: dict[str, list[FetchResponsePartition]] = {}
    for (tp, _), result in zip(wanted, results, strict=True):
        by_topic.setdefault(tp.topic, []).append(
            FetchResponsePartition(
                partition_index=tp.partition,
                error_code=result.error,
                high_watermark=result.high_watermark,
                last_stable_offset=result.last_stable_offset,
                log_start_offset=result.log_start_offset,
                aborted_transactions=(
                    None
                    if result.aborted_transactions is None
                    else [
                        FetchAbortedTransaction(
                            producer_id=txn.producer_id, first_offset=txn.first_offset
                        )
                        for txn in result.aborted_transactions
                    ]
                ),
                records=result.records,
            )
        )
    return FetchResponse(
        responses=[
            FetchableTopicResponse(topic=topic, partitions=partitions)
            for topic, partitions in by_topic.items()
        ]
    )


__all__ = [
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "FetchOffsetForTimestamp",
    "OffsetForTimestampResult",
    "RequestPath",
    "ask_partition",
]
