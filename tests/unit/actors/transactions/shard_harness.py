"""Helpers for the TransactionShard tests (test_shard) and its router's (test_coordinator): an
in-memory `__transaction_state` that keeps real record batches per partition (so a new shard
loads exactly what an old one wrote), a marker sender that records each call and can hold it, a
producer-id source counting up, and a shard started on a manual clock (runtime.clock's
ManualClock: its wall time moves with `advance()`, so record timestamps and transaction
timeouts follow the test's time)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from actors.partition_log import LogChunk
from actors.transactions.config import TransactionConfig
from actors.transactions.shard import (
    AddPartitions,
    EndTxn,
    InitAnswer,
    InitProducerId,
    TransactionShard,
)
from actors.transactions.state import NO_TIMESTAMP
from runtime.clock import ManualClock
from wire.errors import ErrorCode
from wire.records import iter_batches, patch_batch, read_header
from wire.topic import TopicPartition
from wire.transaction_log import (
    TransactionLogValue,
    TransactionState,
    TxnPartitions,
    build_transaction_batch,
    iter_transaction_records,
)

TP_A: Final = TopicPartition("orders", 0)
TP_B: Final = TopicPartition("orders", 1)
TP_C: Final = TopicPartition("payments", 3)
TIMEOUT_MS: Final = 10_000  # the producers' transaction.timeout.ms
CLEANUP_INTERVAL_MS: Final = 1_000
CONFIG: Final = TransactionConfig(
    num_partitions=4,
    transaction_max_timeout_ms=60_000,
    abort_timed_out_transaction_cleanup_interval_ms=CLEANUP_INTERVAL_MS,
    # One batch per read: a load takes one read per record written, so paging is exercised.
    load_buffer_size=1,
)
FIRST_PRODUCER_ID: Final = 1_000
COORDINATOR_EPOCH_BASE: Final = 7
# The shard's load retry backoff (shard.py's LOAD_RETRY_BACKOFF_MS).
FIRST_LOAD_RETRY_MS: Final = 100


def coordinator_epoch(partition: int) -> int:
    """The leader epoch of each `__transaction_state` partition here: distinct per partition,
    so a test sees that the shard asked for its own."""
    return COORDINATOR_EPOCH_BASE + partition


class MemoryTransactionLog:
    """`InternalTopicLog` in memory: each partition's batches get offsets on append and every
    append is committed at once (the high watermark is the log end).

    Scripted faults: `fail_with` (every append answers it, until set back to NONE),
    `append_gate` (every append waits for it, as one waiting for the ISR does),
    `committed_errors` (the next `wait_committed` calls answer these, in order, as a new leader
    whose HW is still behind gives up) and `committed_gate` (`wait_committed` waits for it)."""

    def __init__(self) -> None:
        self.logs: dict[int, bytearray] = {}
        self.log_ends: dict[int, int] = {}
        self.fail_with = ErrorCode.NONE
        self.append_gate: asyncio.Event | None = None
        self.held_appends = 0  # appends waiting at the gate right now
        self.committed_errors: list[ErrorCode] = []
        self.committed_gate: asyncio.Event | None = None
        self.committed_waits = 0  # one per load attempt
        self.appends = 0  # successful ones

    async def append(self, partition: int, records: bytes) -> ErrorCode:
        await asyncio.sleep(0)  # replication takes a loop turn at least
        if self.append_gate is not None:
            self.held_appends += 1
            try:
                await self.append_gate.wait()
            finally:
                self.held_appends -= 1
        if self.fail_with is not ErrorCode.NONE:
            return self.fail_with
        batch = bytearray(records)
        header = read_header(batch)
        base_offset = self.log_ends.get(partition, 0)
        patch_batch(batch, 0, base_offset=base_offset, partition_leader_epoch=0)
        self.logs.setdefault(partition, bytearray()).extend(batch)
        self.log_ends[partition] = base_offset + header.last_offset_delta + 1
        self.appends += 1
        return ErrorCode.NONE

    async def wait_committed(self, partition: int) -> ErrorCode:
        self.committed_waits += 1
        if self.committed_gate is not None:
            await self.committed_gate.wait()
        return self.committed_errors.pop(0) if self.committed_errors else ErrorCode.NONE

    async def read(self, partition: int, offset: int, max_bytes: int) -> LogChunk | ErrorCode:
        data = bytes(self.logs.get(partition, b""))
        high_watermark = self.log_ends.get(partition, 0)
        chunk = bytearray()
        next_offset = offset
        # Not validated: a corrupt batch is handed to the reader as a real log's fetch would.
        for position, header in iter_batches(data, validate=False):
            if header.last_offset < offset:
                continue
            if chunk and len(chunk) + header.size_bytes > max_bytes:
                break
            chunk += data[position : position + header.size_bytes]
            next_offset = header.last_offset + 1
        return LogChunk(bytes(chunk), next_offset, high_watermark, 0)

    # -- for the tests ------------------------------------------------------------------------

    async def preload(
        self,
        partition: int,
        entries: list[tuple[str, TransactionLogValue | None]],
        timestamp_ms: int = 0,
    ) -> None:
        """Records written before the shard starts (a previous coordinator's), one batch."""
        batch = build_transaction_batch(entries, timestamp_ms=timestamp_ms)
        assert await self.append(partition, batch) is ErrorCode.NONE

    def corrupt_last_byte(self, partition: int) -> None:
        """Flip a bit of the last batch's records, which its CRC covers."""
        self.logs[partition][-1] ^= 0x01

    def records(self, partition: int = 0) -> list[tuple[str, TransactionLogValue | None]]:
        data = bytes(self.logs.get(partition, b""))
        return [(tid, value) for _, tid, value in iter_transaction_records(data)]

    def values(self, transactional_id: str, partition: int = 0) -> list[TransactionLogValue]:
        """Every value written for the id, in log order (tombstones left out)."""
        return [
            value
            for tid, value in self.records(partition)
            if tid == transactional_id and value is not None
        ]

    def states(self, transactional_id: str, partition: int = 0) -> list[TransactionState]:
        return [value.transaction_status for value in self.values(transactional_id, partition)]


def log_value(
    state: TransactionState,
    producer_id: int,
    producer_epoch: int,
    partitions: frozenset[TopicPartition] = frozenset(),
    *,
    start_ms: int = 0,
    update_ms: int = 0,
) -> TransactionLogValue:
    """A record value as a coordinator writes it (Empty: null partitions, no start)."""
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    empty = state is TransactionState.EMPTY
    return TransactionLogValue(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_timeout_ms=TIMEOUT_MS,
        transaction_status=state,
        transaction_partitions=None
        if empty
        else tuple(TxnPartitions(t, tuple(ids)) for t, ids in by_topic.items()),
        transaction_last_update_timestamp_ms=update_ms,
        transaction_start_timestamp_ms=NO_TIMESTAMP if empty else start_ms,
    )


@dataclass(frozen=True, slots=True)
class MarkerCall:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: frozenset[TopicPartition]


class FakeMarkerSender:
    """`MarkerSender` that records every call. While `hold` is set, each send waits until
    `release()` (the markers are still being written); otherwise it returns at once."""

    def __init__(self) -> None:
        self.calls: list[MarkerCall] = []
        self.hold = False
        self.cancelled = 0  # sends cancelled while held (the shard unloaded)
        self._gates: list[asyncio.Event] = []

    @property
    def held(self) -> int:
        return len(self._gates)

    async def send(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        commit: bool,
        partitions: frozenset[TopicPartition],
    ) -> None:
        self.calls.append(
            MarkerCall(producer_id, producer_epoch, coordinator_epoch, commit, partitions)
        )
        if not self.hold:
            return
        gate = asyncio.Event()
        self._gates.append(gate)
        try:
            await gate.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            if gate in self._gates:
                self._gates.remove(gate)

    def release(self) -> None:
        """Let every held send return (later ones are held again while `hold` is set)."""
        for gate in self._gates:
            gate.set()
        self._gates.clear()


class ProducerIdSource:
    """`new_producer_id`: ids counting up from FIRST_PRODUCER_ID, or `error` while it is set
    (the controller's next block is late)."""

    def __init__(self) -> None:
        self.issued: list[int] = []
        self.error: ErrorCode | None = None

    async def __call__(self) -> int | ErrorCode:
        await asyncio.sleep(0)  # an allocation may be a round trip to the controller
        if self.error is not None:
            return self.error
        producer_id = FIRST_PRODUCER_ID + len(self.issued)
        self.issued.append(producer_id)
        return producer_id


async def until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(2_000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


async def turns(count: int = 100) -> None:
    """Let the loop run `count` turns: for asserting that something did NOT happen."""
    for _ in range(count):
        await asyncio.sleep(0)


@dataclass(slots=True)
class ShardHarness:
    """One shard of partition `shard.partition` with its fakes, and the requests a producer
    sends, under short names."""

    clock: ManualClock
    log: MemoryTransactionLog
    markers: FakeMarkerSender
    producer_ids: ProducerIdSource
    shard: TransactionShard

    async def init(
        self,
        transactional_id: str = "t",
        timeout_ms: int = TIMEOUT_MS,
        producer_id: int = -1,
        producer_epoch: int = -1,
    ) -> InitAnswer:
        return await self.shard.ask(
            InitProducerId(transactional_id, timeout_ms, producer_id, producer_epoch)
        )

    async def add(
        self, producer_id: int, producer_epoch: int, *tps: TopicPartition, tid: str = "t"
    ) -> ErrorCode:
        return await self.shard.ask(AddPartitions(tid, producer_id, producer_epoch, frozenset(tps)))

    async def end(
        self, producer_id: int, producer_epoch: int, *, commit: bool, tid: str = "t"
    ) -> ErrorCode:
        return await self.shard.ask(EndTxn(tid, producer_id, producer_epoch, commit))

    def states(self, transactional_id: str = "t") -> list[TransactionState]:
        return self.log.states(transactional_id, self.shard.partition)

    async def until_written(self, state: TransactionState, tid: str = "t") -> None:
        await until(lambda: self.states(tid)[-1:] == [state], f"{tid} {state.kafka_name} written")


def new_shard(
    clock: ManualClock,
    log: MemoryTransactionLog,
    markers: FakeMarkerSender,
    producer_ids: ProducerIdSource,
    partition: int = 0,
    config: TransactionConfig = CONFIG,
) -> ShardHarness:
    shard = TransactionShard(
        partition,
        log,
        markers,
        config,
        new_producer_id=producer_ids,
        coordinator_epoch=coordinator_epoch,
        clock=clock,
    )
    return ShardHarness(clock, log, markers, producer_ids, shard)


async def start_loaded(harness: ShardHarness) -> ShardHarness:
    await harness.shard.start()
    await until(lambda: not harness.shard.loading, "loaded")
    return harness
