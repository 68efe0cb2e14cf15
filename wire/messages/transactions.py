"""Transactions, version 0 of ketch's native protocol: AddPartitionsToTxn (24), AddOffsetsToTxn
(25), EndTxn (26), WriteTxnMarkers (27), TxnOffsetCommit (28), DescribeProducers (61),
DescribeTransactions (65), ListTransactions (66).

The transactional producer's conversation (KIP-98), each request sent to the transaction
coordinator of its transactional id unless noted:

    AddPartitionsToTxn  the partitions the producer is about to write join its open transaction.
                        The native message is Kafka's v4 batched shape (KIP-890: several
                        transactions, each possibly `verify_only`, which a partition leader sends
                        to check that a transactional write belongs to an ongoing transaction);
                        the Kafka listener maps a client's v0-3 request onto one transaction.
    AddOffsetsToTxn     the group's __consumer_offsets partition joins the transaction.
    TxnOffsetCommit     sent to the *group* coordinator: offsets committed as part of the
                        transaction, visible once its COMMIT marker is written.
    EndTxn              commit (`committed` True) or abort.
    WriteTxnMarkers     (control plane) the transaction coordinator asks each partition leader
                        to end a producer's transaction there, below.

and the admin side (KIP-664): DescribeTransactions and ListTransactions ask transaction
coordinators about their transactional ids, DescribeProducers asks partition leaders about the
producers writing to a partition (a hanging transaction shows as an old
`current_txn_start_offset`).

WriteTxnMarkers (KIP-98, control plane): the transaction coordinator asks each partition leader
to end a producer's transaction there, by appending a COMMIT or ABORT control batch (a
"marker"). The leader answers once the marker is replicated to the ISR, as for an acks=all
produce, with an error code per partition: NOT_LEADER_OR_FOLLOWER and UNKNOWN_TOPIC_OR_PARTITION
as for a produce, INVALID_PRODUCER_EPOCH for a marker of an older producer epoch than the
partition has seen, TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch than the last
marker's. Only cluster members may send it (it needs the cluster credential); Kafka clients
never do. The other APIs here are clients' (no credential needed).

Field names are Kafka's JSON message-spec names in snake_case, as of the newest version the
Kafka listener serves; durations and times are `*_ms` integers (but ListTransactions'
`duration_filter`, so named in Kafka's schema). Where Kafka gives a nested struct a generic name
(`TransactionState`, `TopicData`, `ProducerState`, `TopicRequest`, ...), the native name says
which API it belongs to (`DescribedTransaction`, `ListedTransaction`, `DescribedProducer`,
`DescribeProducersTopic`, ...), named like the groups' `DescribedGroup` and `ListedGroup`.
"""

# No `from __future__ import annotations`: the codec reads each field's type at class creation.

from dataclasses import dataclass, field

from wire.messages.base import ApiKey, Request, Response
from wire.messages.fields import Int16, Int32

# -- AddPartitionsToTxn (24) -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AddPartitionsToTxnTopic:
    name: str
    partitions: list[Int32]


@dataclass(frozen=True, slots=True, kw_only=True)
class AddPartitionsToTxnTransaction:
    """`verify_only`: only check that the partitions are already in the transaction (a partition
    leader verifying a transactional produce, KIP-890), adding none."""

    transactional_id: str
    producer_id: int
    producer_epoch: Int16
    verify_only: bool = False
    topics: list[AddPartitionsToTxnTopic]


@dataclass(frozen=True, slots=True, kw_only=True)
class AddPartitionsToTxnPartitionResult:
    partition_index: Int32
    partition_error_code: Int16 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AddPartitionsToTxnTopicResult:
    name: str
    results_by_partition: list[AddPartitionsToTxnPartitionResult]


@dataclass(frozen=True, slots=True, kw_only=True)
class AddPartitionsToTxnResult:
    transactional_id: str
    topic_results: list[AddPartitionsToTxnTopicResult]


@dataclass(frozen=True, slots=True, kw_only=True)
class AddPartitionsToTxnResponse(Response):
    """One result per requested transaction, each with a code per partition (a failed check on
    one partition fails the transaction's others with OPERATION_NOT_ATTEMPTED, as in Kafka)."""

    API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
    API_VERSION = 0
    results_by_transaction: list[AddPartitionsToTxnResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class AddPartitionsToTxnRequest(Request):
    API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
    API_VERSION = 0
    RESPONSE = AddPartitionsToTxnResponse
    transactions: list[AddPartitionsToTxnTransaction]


# -- AddOffsetsToTxn (25) --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class AddOffsetsToTxnResponse(Response):
    API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
    API_VERSION = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AddOffsetsToTxnRequest(Request):
    API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
    API_VERSION = 0
    RESPONSE = AddOffsetsToTxnResponse
    transactional_id: str
    producer_id: int
    producer_epoch: Int16
    group_id: str


# -- EndTxn (26) -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnResponse(Response):
    API_KEY = ApiKey.END_TXN
    API_VERSION = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class EndTxnRequest(Request):
    """`committed`: True commits the transaction, False aborts it."""

    API_KEY = ApiKey.END_TXN
    API_VERSION = 0
    RESPONSE = EndTxnResponse
    transactional_id: str
    producer_id: int
    producer_epoch: Int16
    committed: bool


# -- WriteTxnMarkers (27) --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarkerTopic:
    name: str
    partition_indexes: list[Int32]


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarker:
    """`transaction_result`: True commits, False aborts."""

    producer_id: int
    producer_epoch: Int16
    transaction_result: bool
    topics: list[WritableTxnMarkerTopic]
    coordinator_epoch: Int32


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarkerPartitionResult:
    partition_index: Int32
    error_code: Int16 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarkerTopicResult:
    name: str
    partitions: list[WritableTxnMarkerPartitionResult]


@dataclass(frozen=True, slots=True, kw_only=True)
class WritableTxnMarkerResult:
    producer_id: int
    topics: list[WritableTxnMarkerTopicResult]


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteTxnMarkersResponse(Response):
    API_KEY = ApiKey.WRITE_TXN_MARKERS
    API_VERSION = 0
    markers: list[WritableTxnMarkerResult] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteTxnMarkersRequest(Request):
    API_KEY = ApiKey.WRITE_TXN_MARKERS
    API_VERSION = 0
    RESPONSE = WriteTxnMarkersResponse
    markers: list[WritableTxnMarker]


# -- TxnOffsetCommit (28) --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitRequestPartition:
    partition_index: Int32
    committed_offset: int
    committed_leader_epoch: Int32 = -1
    committed_metadata: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitRequestTopic:
    name: str
    partitions: list[TxnOffsetCommitRequestPartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitResponsePartition:
    partition_index: Int32
    error_code: Int16 = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitResponseTopic:
    name: str
    partitions: list[TxnOffsetCommitResponsePartition]


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitResponse(Response):
    API_KEY = ApiKey.TXN_OFFSET_COMMIT
    API_VERSION = 0
    topics: list[TxnOffsetCommitResponseTopic] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnOffsetCommitRequest(Request):
    """generation_id -1, member_id "" and no group_instance_id: the producer does not say which
    group member it consumed as (Kafka's v0-2 cannot; v3 adds them, KIP-447, so a zombie
    member's commit can be fenced), and the group coordinator checks no membership."""

    API_KEY = ApiKey.TXN_OFFSET_COMMIT
    API_VERSION = 0
    RESPONSE = TxnOffsetCommitResponse
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: Int16
    generation_id: Int32 = -1
    member_id: str = ""
    group_instance_id: str | None = None
    topics: list[TxnOffsetCommitRequestTopic]


# -- DescribeProducers (61) ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeProducersTopic:
    """Kafka's `TopicRequest`."""

    name: str
    partition_indexes: list[Int32]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedProducer:
    """Kafka's `ProducerState`: one producer the partition leader keeps state for. The epoch is
    an int32 here in Kafka's schema (an int16 everywhere else); `last_timestamp` is the last
    batch's max timestamp (ms); `current_txn_start_offset` -1: no open transaction."""

    producer_id: int
    producer_epoch: Int32
    last_sequence: Int32 = -1
    last_timestamp: int = -1
    coordinator_epoch: Int32
    current_txn_start_offset: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeProducersPartitionResponse:
    partition_index: Int32
    error_code: Int16 = 0
    error_message: str | None = None
    active_producers: list[DescribedProducer] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeProducersTopicResponse:
    name: str
    partitions: list[DescribeProducersPartitionResponse]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeProducersResponse(Response):
    API_KEY = ApiKey.DESCRIBE_PRODUCERS
    API_VERSION = 0
    topics: list[DescribeProducersTopicResponse] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeProducersRequest(Request):
    """Answered by each partition's leader (NOT_LEADER_OR_FOLLOWER elsewhere)."""

    API_KEY = ApiKey.DESCRIBE_PRODUCERS
    API_VERSION = 0
    RESPONSE = DescribeProducersResponse
    topics: list[DescribeProducersTopic]


# -- DescribeTransactions (65) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedTransactionTopic:
    """Kafka's `TopicData`: the transaction's partitions of one topic."""

    topic: str
    partitions: list[Int32]


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribedTransaction:
    """Kafka's `TransactionState` (of DescribeTransactions). `transaction_state` is Kafka's
    name of the coordinator's state (Empty, Ongoing, PrepareCommit, PrepareAbort,
    CompleteCommit, CompleteAbort, Dead, PrepareEpochFence); `transaction_start_time_ms` -1: no
    transaction open; `topics`: the transaction's partitions (once it is being ended, only those
    still without a marker)."""

    error_code: Int16 = 0
    transactional_id: str
    transaction_state: str = ""
    transaction_timeout_ms: Int32 = 0
    transaction_start_time_ms: int = -1
    producer_id: int = -1
    producer_epoch: Int16 = -1
    topics: list[DescribedTransactionTopic] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactionsResponse(Response):
    API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
    API_VERSION = 0
    transaction_states: list[DescribedTransaction] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactionsRequest(Request):
    API_KEY = ApiKey.DESCRIBE_TRANSACTIONS
    API_VERSION = 0
    RESPONSE = DescribeTransactionsResponse
    transactional_ids: list[str]


# -- ListTransactions (66) -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ListedTransaction:
    """Kafka's `TransactionState` (of ListTransactions)."""

    transactional_id: str
    producer_id: int
    transaction_state: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ListTransactionsResponse(Response):
    """`unknown_state_filters`: the requested states the coordinator does not know."""

    API_KEY = ApiKey.LIST_TRANSACTIONS
    API_VERSION = 0
    unknown_state_filters: list[str] = field(default_factory=list)
    transaction_states: list[ListedTransaction] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class ListTransactionsRequest(Request):
    """Each filter empty (or `duration_filter` negative): no filtering on it. `duration_filter`
    (ms, Kafka's v1 field, named without the unit as in Kafka's schema): only transactions open
    longer than this."""

    API_KEY = ApiKey.LIST_TRANSACTIONS
    API_VERSION = 0
    RESPONSE = ListTransactionsResponse
    state_filters: list[str] = field(default_factory=list)
    producer_id_filters: list[int] = field(default_factory=list)
    duration_filter: int = -1
