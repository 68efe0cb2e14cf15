"""Writing cleaned segments: filter each batch of the planned segments, write new segment files.

Shared by the offline Spark job (`offline.compact`) and the brokers' live cleaner
(`runtime.log.cleaner.cleaner`). Input: a partition's source segments (planned by
`offline.compact_plan`, or by the live `runtime.log.cleaner.manager`) and the ascending offsets
of the records that survive (for each key, the one with the highest offset in the cleanable
range, computed by the Spark job or by `runtime.log.cleaner.offset_map`). Output: new segments
with fresh ``.index``/``.timeindex`` in a staging directory (offline), or in the partition
directory itself with every file named ``<name>.cleaned`` (live: ``suffix=".cleaned"``,
ready for the swap of `runtime.log.cleaner.swap`), written through the storage engine's own
`LogSegment.append`, so their indexes are exactly what the broker would build and pass its
`sanity_check()` at load.

Per batch, in file order (all batches were validated, CRC included, while reading):

* Batches of aborted transactions (the plan's ``aborted_batches``, `runtime.log.cleaner.txn`) are
  dropped whole, as Kafka's cleaner drops them; the survivor list never names their records.
* Transaction markers (COMMIT/ABORT control batches of a producer): see "Markers" below. Other
  control batches and batches with no records are copied byte for byte.
* A record survives when its offset is in the survivor list. A surviving tombstone (null
  value) survives only until its batch's delete horizon has passed (below).
* No record survives: the batch is dropped (decided from its offset range alone, without
  decoding, when no survivor offset falls in it). All survive and nothing about tombstones
  changes: the original bytes are copied (no re-encoding, CRC and compression untouched).
* Otherwise the batch is rebuilt from its surviving records with the source batch's base
  offset, lastOffsetDelta, partition leader epoch, producer id/epoch, base sequence,
  transactional flag, timestamp type and compression codec, and each record's original offset
  as its offset delta. Keeping base offset and lastOffsetDelta keeps the batch's offset range,
  so sequence numbers still line up with offsets and the segment's end offset never moves.

Delete horizon (KIP-534). When a batch keeps a tombstone and has no horizon yet, this pass
rebuilds it with one: attribute bit 6 (``0x40``, "delete horizon set") is set and the
batch's baseTimestamp field holds ``horizon = now_ms + delete.retention.ms``; each record's
timestampDelta is then relative to that horizon (it may be negative), so every record keeps its
original absolute timestamp for readers, and maxTimestamp stays the largest record timestamp. A
batch that already has a horizon keeps it. A later pass with ``now_ms >= horizon`` drops the
tombstones of that batch. Exception: the very last batch of the cleaned range is never dropped
(neither its tombstones, nor the batch when it is a marker or an aborted transaction's, whose
ABORT marker then lies after the range, where its index entry stays), so the range's end offset
always survives; the install's swap recovery derives the replaced range from it (see
`offline.compact_install`).

Markers (Kafka's rule, KIP-534 for control batches). A marker is kept while its transaction
still has data: it is copied byte for byte when this pass writes at least one batch of the
transaction it ends (the producer's transactional batches since its previous marker; they all
lie before the marker in the cleaned range, which starts at the log start). When the pass
writes none (an ABORT marker's data was just dropped, or a committed transaction's records were
all superseded, now or in an earlier pass), the marker gets a delete horizon as a tombstone's
batch does (rebuilt with bit 6 and ``now_ms + delete.retention.ms`` as baseTimestamp, the
record's timestamp kept), and a later pass with ``now_ms >= horizon`` drops it. So a marker goes
only when every batch of its transaction has been removed and ``delete.retention.ms`` has passed
since the pass that found it so: long enough for a consumer that read the transaction's data
before to read its end.

Transaction index. Each output segment's ``.txnindex`` holds the original entries (all four
fields as they were) of the ABORT markers it keeps, appended as the markers are written; a
dropped marker takes its entry along. `runtime.log.cleaner.txn.index_entry_for` says which entry
belongs to a marker.

Output segments group consecutive source segments, as Kafka's cleaner does, decided while
writing: an output segment takes the next source while it is still empty, or while its bytes so
far plus the source's size (an upper bound of what the source cleans to) fit in
``segment.bytes`` and the offsets fit an index's 32-bit relative offsets. Sources that clean to
nothing thus merge into the next output, and an output segment's base offset is the base offset
of its first source: the first output starts where the old range started, and the last one ends
where it ended (its last batch always survives, see above), which `write_cleaned_partition`
asserts.

Everything here runs in one thread (a Spark task, the driver, or the broker's cleaner thread)
over files it alone writes; the source files are only read.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from crc32c import crc32c

from runtime.clock import ManualClock
from runtime.log.cleaner.source import CompactError, SourceSegment
from runtime.log.cleaner.txn import (
    MARKER_TYPES,
    control_type,
    index_entry_for,
    source_index_entries,
)
from runtime.log.config import LogConfig
from runtime.log.errors import CorruptIndexError
from runtime.log.file_batches import FileBatches
from runtime.log.index_file import INT32_MAX
from runtime.log.segment import LOG_SUFFIX, LogSegment, file_name_prefix
from wire.batch_builder import build_records_batch
from wire.record_reader import iter_records
from wire.records import BatchHeader, Record, read_header

DELETE_HORIZON_BIT: Final = 0x40
_ATTRIBUTES_AT: Final = 21
_CRC_AT: Final = 17


def set_delete_horizon(batch: bytes) -> bytes:
    """The batch with attribute bit 6 set and its CRC recomputed (baseTimestamp must already
    hold the horizon)."""
    out = bytearray(batch)
    out[_ATTRIBUTES_AT + 1] |= DELETE_HORIZON_BIT  # the int16's low byte (big-endian)
    out[_CRC_AT:_ATTRIBUTES_AT] = crc32c(memoryview(out)[_ATTRIBUTES_AT:]).to_bytes(4, "big")
    return bytes(out)


@dataclass(slots=True)
class CleanStats:
    batches_in: int = 0
    batches_out: int = 0
    batches_rebuilt: int = 0
    records_in: int = 0
    records_out: int = 0
    tombstones_dropped: int = 0
    horizons_set: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    aborted_batches_dropped: int = 0
    markers_dropped: int = 0
    marker_horizons_set: int = 0
    txn_index_entries: int = 0  # entries written to the cleaned segments' .txnindex files

    def add(self, other: CleanStats) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class BatchCleaner:
    """Filters batches against an ascending survivor list, walked once with a cursor (the
    batches arrive in offset order), so memory stays at the list itself. `aborted_batches`: the
    base offsets of aborted transactions' batches (dropped)."""

    def __init__(
        self,
        survivors: Sequence[int],
        now_ms: int,
        delete_retention_ms: int,
        aborted_batches: AbstractSet[int] = frozenset(),
    ) -> None:
        self._survivors = survivors
        self._cursor = 0
        self._now_ms = now_ms
        self._retention_ms = delete_retention_ms
        self._aborted = aborted_batches
        # Producers whose open transaction has a batch in the output: their next marker stays.
        self._with_data: set[int] = set()
        self.stats = CleanStats()

    def _survives(self, offset: int) -> bool:
        survivors, i = self._survivors, self._cursor
        while i < len(survivors) and survivors[i] < offset:
            i += 1
        self._cursor = i
        return i < len(survivors) and survivors[i] == offset

    def _survives_in(self, first: int, last: int) -> bool:
        """Whether a survivor lies in ``[first, last]``; moves the cursor to the first >= first."""
        self._survives(first)
        return self._cursor < len(self._survivors) and self._survivors[self._cursor] <= last

    def clean(self, batch: memoryview, header: BatchHeader, *, last_in_range: bool) -> bytes | None:
        """The cleaned batch (the original bytes when unchanged), or None when nothing stays."""
        stats = self.stats
        stats.batches_in += 1
        stats.bytes_in += len(batch)
        stats.records_in += header.records_count
        if header.is_control:
            self._survives(header.next_offset)  # moves the cursor past this batch
            return self._clean_control(bytes(batch), header, last_in_range)
        if header.records_count == 0:
            self._survives(header.next_offset)
            return self._emit_data(bytes(batch), header, 0)
        if header.base_offset in self._aborted:
            self._survives(header.next_offset)
            if not last_in_range:
                stats.aborted_batches_dropped += 1
                return None
            return self._emit_data(bytes(batch), header, header.records_count)
        if not self._survives_in(header.base_offset, header.last_offset):
            # Nothing of it survives: dropped without decoding (after a few passes over a busy
            # key space that is most batches, and decoding is most of the writer's cost).
            return None
        records = list(iter_records(batch, verify_crc=False))  # CRC checked while reading
        horizon_passed = header.has_delete_horizon and self._now_ms >= header.base_timestamp
        kept: list[Record] = []
        for record in records:
            if record.key is None:
                raise CompactError(
                    f"record at offset {record.offset} has no key; a compacted topic needs one"
                )
            if not self._survives(record.offset):
                continue
            if record.value is None and horizon_passed and not last_in_range:
                stats.tombstones_dropped += 1
                continue
            kept.append(record)
        if not kept:
            return None
        keeps_tombstone = any(record.value is None for record in kept)
        if len(kept) == len(records) and (header.has_delete_horizon or not keeps_tombstone):
            return self._emit_data(bytes(batch), header, len(kept))
        horizon: int | None = None
        if keeps_tombstone:
            horizon = (
                header.base_timestamp
                if header.has_delete_horizon
                else self._now_ms + self._retention_ms
            )
        if horizon is not None and not header.has_delete_horizon:
            stats.horizons_set += 1
        stats.batches_rebuilt += 1
        return self._emit_data(_rebuilt(kept, header, horizon), header, len(kept))

    def _clean_control(
        self, batch: bytes, header: BatchHeader, last_in_range: bool
    ) -> bytes | None:
        """A control batch: a marker by the rule of the module docstring, others copied."""
        producer_id = header.producer_id
        if producer_id < 0 or control_type(batch) not in MARKER_TYPES:
            return self._emit(batch, header.records_count)
        if producer_id in self._with_data:
            self._with_data.discard(producer_id)  # the marker ends that transaction
            return self._emit(batch, header.records_count)
        if not header.has_delete_horizon:
            records = list(iter_records(batch, verify_crc=False))
            rebuilt = _rebuilt(records, header, self._now_ms + self._retention_ms)
            self.stats.marker_horizons_set += 1
            self.stats.batches_rebuilt += 1
            return self._emit(rebuilt, header.records_count)
        if self._now_ms >= header.base_timestamp and not last_in_range:
            self.stats.markers_dropped += 1
            return None
        return self._emit(batch, header.records_count)

    def _emit_data(self, data: bytes, header: BatchHeader, records: int) -> bytes:
        if header.is_transactional and header.producer_id >= 0:
            self._with_data.add(header.producer_id)
        return self._emit(data, records)

    def _emit(self, data: bytes, records: int) -> bytes:
        self.stats.batches_out += 1
        self.stats.records_out += records
        self.stats.bytes_out += len(data)
        return data


def _rebuilt(records: Sequence[Record], header: BatchHeader, horizon: int | None) -> bytes:
    """`records` in a batch with `header`'s identity (offset range, producer fields, flags,
    codec, epoch); with a delete horizon when `horizon` is given."""
    rebuilt = build_records_batch(
        records,
        base_offset=header.base_offset,
        last_offset_delta=header.last_offset_delta,
        partition_leader_epoch=header.partition_leader_epoch,
        compression=header.compression,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        is_control=header.is_control,
        timestamp_type=header.timestamp_type,
        base_timestamp=horizon,
        # Log-append time: every record reads as the batch's maxTimestamp, so keep it.
        max_timestamp=header.max_timestamp if header.timestamp_type == 1 else None,
    )
    return rebuilt if horizon is None else set_delete_horizon(rebuilt)


@dataclass(frozen=True, slots=True)
class CleanedSegment:
    """One output segment: its base offset, the sources it replaces, size and offset range."""

    base_offset: int
    source_base_offsets: tuple[int, ...]
    size_bytes: int
    next_offset: int  # one past its last batch's last offset


@dataclass(slots=True)
class CleanedPartition:
    staging_dir: Path
    segments: list[CleanedSegment] = field(default_factory=list)
    stats: CleanStats = field(default_factory=CleanStats)


def write_cleaned_partition(
    source_dir: Path,
    sources: Sequence[SourceSegment],
    survivors: Sequence[int],
    staging_dir: Path,
    *,
    now_ms: int,
    delete_retention_ms: int,
    log_config: LogConfig,
    aborted_batches: AbstractSet[int] = frozenset(),
    suffix: str = "",
) -> CleanedPartition:
    """Clean `sources` of the partition in `source_dir` into new segments in `staging_dir`;
    `aborted_batches` are the plan's (`PartitionPlan.aborted_batches`).

    Without `suffix`, `staging_dir` must be empty or absent. With one (the live cleaner's
    ``.cleaned``), `staging_dir` may be the partition directory itself, and must hold no file
    with that suffix. Sizes: the grouping uses the source sizes; the index files are trimmed to
    their entries when each output segment is closed.
    """
    if suffix:
        # No mkdir: a partition directory that is gone (the partition was deleted meanwhile)
        # must fail the pass, not come back holding nothing but cleaned files.
        if any(p.name.endswith(suffix) for p in staging_dir.iterdir()):
            raise CompactError(f"{staging_dir} already holds {suffix} files")
    else:
        staging_dir.mkdir(parents=True, exist_ok=True)
        if any(staging_dir.iterdir()):
            raise CompactError(f"staging directory {staging_dir} is not empty")
    try:
        entries = source_index_entries(source_dir, [s.base_offset for s in sources])
    except CorruptIndexError as exc:
        raise CompactError(
            f"{exc}; start and stop the broker once (its log loading rebuilds the index) "
            "before compacting"
        ) from None
    cleaner = BatchCleaner(survivors, now_ms, delete_retention_ms, aborted_batches)
    result = CleanedPartition(staging_dir)
    # LogSegment reads the clock only for files without record timestamps; pin it to now_ms.
    clock = ManualClock(0, wall_offset_ms=now_ms)
    out: LogSegment | None = None
    group: list[SourceSegment] = []
    try:
        for i, source in enumerate(sources):
            if out is not None and out.size > 0 and not _fits(out, group[0], source, log_config):
                result.segments.append(_finish(out, group))
                out = None
            if out is None:
                out = LogSegment(staging_dir, source.base_offset, log_config, clock, suffix=suffix)
                group = []
            elif source.next_offset - 1 - group[0].base_offset > INT32_MAX:
                raise CompactError(
                    f"segments {group[0].base_offset}..{source.base_offset} clean to nothing "
                    "and span more offsets than one segment may hold"
                )
            group.append(source)
            last_source = i == len(sources) - 1
            for data, _ in _cleaned_batches(source_dir, source, cleaner, last_source):
                # The cleaned batch's own header: a rebuilt batch may have a smaller max
                # timestamp than its source, and the time index must name what is there.
                header = read_header(data)
                out.append(
                    header.last_offset, header.max_timestamp, header.last_offset, [data], len(data)
                )
                entry = index_entry_for(entries, data, header) if entries else None
                if entry is not None:
                    out.txn_index.append(entry)
                    cleaner.stats.txn_index_entries += 1
        if out is not None:
            result.segments.append(_finish(out, group))
            out = None
    finally:
        if out is not None:
            out.close()
    if result.segments:
        # The install's swap range is [first base, last next offset): it must be exactly the
        # replaced range, or recovery after a crash could keep an old segment beside new ones.
        assert result.segments[0].base_offset == sources[0].base_offset, result.segments
        assert result.segments[-1].next_offset == sources[-1].next_offset, (
            result.segments[-1],
            sources[-1],
        )
    result.stats = cleaner.stats
    return result


def _fits(out: LogSegment, first: SourceSegment, source: SourceSegment, config: LogConfig) -> bool:
    """Whether `source` may join the output segment `out` that starts with `first`."""
    return (
        out.size + source.size_bytes <= config.segment_bytes
        and source.next_offset - 1 - first.base_offset <= INT32_MAX
    )


def _finish(out: LogSegment, group: Sequence[SourceSegment]) -> CleanedSegment:
    """fsync and close an output segment (closing trims both indexes to their entries)."""
    out.flush()
    next_offset = out.read_next_offset()
    segment = CleanedSegment(
        out.base_offset, tuple(s.base_offset for s in group), out.size, next_offset
    )
    out.close()
    return segment


def _cleaned_batches(
    source_dir: Path, source: SourceSegment, cleaner: BatchCleaner, last_source: bool
) -> Iterator[tuple[bytes, BatchHeader]]:
    """The cleaned batches of one source segment with their (source) headers."""
    path = source_dir / f"{file_name_prefix(source.base_offset)}{LOG_SUFFIX}"
    fd = os.open(path, os.O_RDONLY)
    try:
        scan = FileBatches(fd, 0, source.size_bytes, validate=True)
        for _, header, batch in scan:
            assert batch is not None  # validate=True yields the bytes
            last = last_source and header.next_offset == source.next_offset
            cleaned = cleaner.clean(batch, header, last_in_range=last)
            if cleaned is not None:
                yield cleaned, header
        if scan.error is not None:
            raise CompactError(f"{path}: {scan.error} at byte {scan.error_position}")
    finally:
        os.close(fd)


def survivors_by_scan(
    source_dir: Path,
    sources: Sequence[SourceSegment],
    aborted_batches: AbstractSet[int] = frozenset(),
) -> list[int]:
    """The survivor offsets computed in one process (for each key, its highest offset in the
    sources; control records and the batches `aborted_batches` excluded): the reference the
    Spark job is tested against, and a Spark-free path for small logs. Raises CompactError for
    a record without a key."""
    latest: dict[bytes, int] = {}
    for source in sources:
        path = source_dir / f"{file_name_prefix(source.base_offset)}{LOG_SUFFIX}"
        fd = os.open(path, os.O_RDONLY)
        try:
            scan = FileBatches(fd, 0, source.size_bytes, validate=True)
            for _, header, batch in scan:
                assert batch is not None
                if header.is_control or header.base_offset in aborted_batches:
                    continue
                for record in iter_records(batch, verify_crc=False):
                    if record.key is None:
                        raise CompactError(
                            f"{path}: record at offset {record.offset} has no key; a compacted "
                            "topic needs one on every record"
                        )
                    latest[record.key] = record.offset
            if scan.error is not None:
                raise CompactError(f"{path}: {scan.error} at byte {scan.error_position}")
        finally:
            os.close(fd)
    return sorted(latest.values())
