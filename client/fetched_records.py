"""A partition's fetched bytes as `ConsumerRecord`s: `decode_fetched` — sans-IO.

A partition's records bytes are concatenated RecordBatch v2 batches; each batch is decoded with
`wire.record_reader.iter_records`. Records below the position (a batch that starts before it)
are skipped; control batches are skipped whole; the position moves past the last offset of
every complete batch, so offsets removed by compaction are stepped over. A batch cut short at
the end of the answer (partition_max_bytes reached mid-batch) is not an error: it is fetched
again, whole, next time — unless it is the first batch, which means it alone exceeds the limit;
then RecordTooLargeError, as Kafka's consumer does.

read_committed (`aborted_transactions` given: the fetch answer's list, possibly empty). The
broker stops at the last stable offset and names the aborted transactions whose records the
answer may hold, each by producer id and first offset. As Kafka's consumer does, the aborted
transactions are taken in first-offset order: once a batch reaches a transaction's first offset
its producer id is *aborted*, and that producer's transactional batches are dropped until its
ABORT marker (a control batch) ends it. A COMMIT marker changes nothing: the committed records
were returned as they came. Positions still move past the dropped batches.

Pure functions: no state (the aborted producers are tracked per call, i.e. per fetch answer,
since each answer lists every aborted transaction overlapping it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from client.errors import ClientError
from runtime.log.producer_replay import control_marker
from runtime.log.producer_state import CONTROL_TYPE_ABORT
from wire.messages import FetchAbortedTransaction
from wire.record_reader import iter_records
from wire.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    BatchHeader,
    CorruptRecordError,
    validate_batch,
)
from wire.topic import TopicPartition


class RecordTooLargeError(ClientError):
    """A batch is bigger than max.partition.fetch.bytes, so it can never be fetched whole."""


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """One record as `Consumer.poll` returns it, with its topic and partition."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


class _AbortedTransactions:
    """A read_committed answer's aborted transactions, consumed in first-offset order."""

    def __init__(self, aborted: Sequence[FetchAbortedTransaction]) -> None:
        self._upcoming = sorted(aborted, key=lambda txn: txn.first_offset)
        self._next = 0
        self._producers: dict[int, None] = {}  # producers whose open transaction aborted

    def skip(self, header: BatchHeader, data: bytes | memoryview, pos: int) -> bool:
        """Whether the batch at `pos` belongs to an aborted transaction; folds in an ABORT
        marker."""
        if header.producer_id < 0:
            return False
        while (
            self._next < len(self._upcoming)
            and self._upcoming[self._next].first_offset <= header.last_offset
        ):
            self._producers[self._upcoming[self._next].producer_id] = None
            self._next += 1
        if header.is_control:
            control_type, _ = control_marker(memoryview(data)[pos : pos + header.size_bytes])
            if control_type == CONTROL_TYPE_ABORT:
                self._producers.pop(header.producer_id, None)
            return False
        return header.is_transactional and header.producer_id in self._producers


def decode_fetched(
    tp: TopicPartition,
    position: int,
    data: bytes | memoryview,
    *,
    limit: int,
    aborted_transactions: Sequence[FetchAbortedTransaction] | None = None,
) -> tuple[list[ConsumerRecord], int]:
    """The records at or after `position` in one partition's fetched bytes, and the position
    after them.

    Skips records below `position` and control batches; steps over offsets missing inside a
    batch (compaction). Stops without error at a batch cut short by the fetch size, unless it is
    the first one (then it alone exceeds `limit`: RecordTooLargeError). A batch that fails its
    header or CRC checks raises CorruptRecordError. With `aborted_transactions` (read_committed)
    the records of aborted transactions are skipped too (module docstring).
    """
    aborted = None if aborted_transactions is None else _AbortedTransactions(aborted_transactions)
    records: list[ConsumerRecord] = []
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            break  # a partial batch at the end: fetched whole next time
        size = LOG_OVERHEAD + int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
        if size < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(f"batch of {size} bytes in a fetch of {tp}", pos)
        if pos + size > end:
            if pos == 0:
                raise RecordTooLargeError(
                    f"{tp}: the batch at offset {position} ({size} bytes) exceeds "
                    f"max.partition.fetch.bytes={limit}"
                )
            break
        header = validate_batch(data, pos)
        next_offset = header.base_offset + header.last_offset_delta + 1
        dropped = aborted is not None and aborted.skip(header, data, pos)
        if not dropped and next_offset > position and not header.is_control:
            records += [
                ConsumerRecord(
                    tp.topic,
                    tp.partition,
                    record.offset,
                    record.timestamp,
                    record.key,
                    record.value,
                    record.headers,
                )
                for record in iter_records(data, pos, verify_crc=False)  # checked above
                if record.offset >= position
            ]
        position = max(position, next_offset)
        pos += size
    return records, position
