"""A partition's fetched bytes as `ConsumerRecord`s: `decode_fetched` — sans-IO.

A partition's records bytes are concatenated RecordBatch v2 batches; each batch is decoded with
`wire.record_reader.iter_records`. Records below the position (a batch that starts before it)
are skipped; control batches are skipped whole; the position moves past the last offset of
every complete batch, so offsets removed by compaction are stepped over. A batch cut short at
the end of the answer (partition_max_bytes reached mid-batch) is not an error: it is fetched
again, whole, next time — unless it is the first batch, which means it alone exceeds the limit;
then RecordTooLargeError, as Kafka's consumer does.

Pure functions: no state.
"""

from __future__ import annotations

from dataclasses import dataclass

from client.errors import ClientError
from wire.record_reader import iter_records
from wire.records import (
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
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


def decode_fetched(
    tp: TopicPartition, position: int, data: bytes, *, limit: int
) -> tuple[list[ConsumerRecord], int]:
    """The records at or after `position` in one partition's fetched bytes, and the position
    after them.

    Skips records below `position` and control batches; steps over offsets missing inside a
    batch (compaction). Stops without error at a batch cut short by the fetch size, unless it is
    the first one (then it alone exceeds `limit`: RecordTooLargeError). A batch that fails its
    header or CRC checks raises CorruptRecordError.
    """
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
        if next_offset > position and not header.is_control:
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
